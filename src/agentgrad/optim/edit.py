"""The gradient-guided edit optimizer: delete the part of a blamed agent's prompt that the
gradient of its failing outputs points at most.

GBC names the agent; the same gradients, taken with respect to the agent's own prompt (the scorer's
``prompt_weights``), name the part. The parts are the prompt's lines (its sentences when it has a
single line). For a blamed agent, each failing episode gives the L1 norm of the gradient at every
token of its prompt; a part scores the largest of its tokens, divided by the largest of the whole
prompt in that episode (so that every episode counts alike), summed over the agent's failing
episodes. The top part is removed, unless it overlaps a protected span, is the prompt's last
part, or its removal was rejected by the validation gate at an earlier step (then the next one);
an agent with nothing to remove gets Warning bullets (the deterministic optimizer's edit) instead.
No LLM: with a small model as the only model, it is the edit such a model cannot write for itself.
The trainer's validation gate decides whether it stays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgrad.optim.optimizer import DeterministicOptimizer, StepInput, StepResult

_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)", re.M)


def sentences(text: str) -> list[tuple[int, int]]:
    """Character ranges of the parts of ``text``: its lines when it has several, else its sentences
    (split at . ! ?); blanks left out."""
    lines = [(m.start(), m.end()) for m in re.finditer(r"[^\n]*\S[^\n]*", text)]
    if len(lines) > 1:
        return [(a + len(text[a:b]) - len(text[a:b].lstrip()), a + len(text[a:b].rstrip())) for a, b in lines]
    out = []
    for m in _SENTENCE.finditer(text):
        a, b = m.start(), m.end()
        while a < b and text[a].isspace():
            a += 1
        if a < b:
            out.append((a, b))
    return out


def sentence_scores(text: str, episodes: list[list[tuple[int, int, float]]]) -> list[float]:
    """Per sentence of ``text``: the sum over episodes of its largest token score over the prompt's largest.

    ``episodes``: per failing episode, ``(start, end, l1)`` of every prompt token (characters of ``text``).
    """
    sents = sentences(text)
    total = [0.0] * len(sents)
    for tokens in episodes:
        top = max((v for _, _, v in tokens), default=0.0)
        if top <= 0:
            continue
        best = [0.0] * len(sents)
        for a, b, v in tokens:
            for j, (sa, sb) in enumerate(sents):
                if a < sb and b > sa:
                    best[j] = max(best[j], v / top)
        total = [t + x for t, x in zip(total, best)]
    return total


@dataclass
class Edit:
    agent: str
    removed: str
    share: float  # the removed sentence's score over the sum of all sentences' scores

    def key(self) -> str:
        return f"{self.agent}: removed {self.removed!r}"

    def describe(self) -> str:
        return f"{self.key()} (gradient share {self.share:.2f})"


class EditOptimizer:
    """Removes, from each blamed agent's prompt, the sentence its failures' gradients point at most."""

    def __init__(self, max_chars: int = 8000):
        self.fallback = DeterministicOptimizer(max_chars=max_chars)

    def edit(self, agent: str, inp: StepInput) -> Edit | None:
        prompt = inp.prompts[agent]
        text = prompt.text
        scores = sentence_scores(text, inp.prompt_scores.get(agent, []))
        sents = sentences(text)
        if len(sents) < 2 or not any(scores):
            return None
        protected = [(text.find(p), text.find(p) + len(p)) for p in prompt.protected if p in text]
        free = [j for j, (a, b) in enumerate(sents) if not any(a < pb and b > pa for pa, pb in protected)]
        rejected = {n for h in inp.history if h.get("accepted") is False for n in h.get("notes", [])}
        free = [j for j in free if Edit(agent, text[sents[j][0]:sents[j][1]], 0.0).key() not in
                {n.split(" (")[0] for n in rejected}]
        if not free:
            return None
        j = max(free, key=lambda k: (scores[k], -k))
        a, b = sents[j]
        return Edit(agent, text[a:b], scores[j] / sum(scores))

    def step(self, inp: StepInput) -> StepResult:
        out: dict[str, str] = {}
        notes: list[str] = []
        rest = []
        for agent in inp.blamed:
            e = self.edit(agent, inp)
            if e is None:
                rest.append(agent)
                continue
            text = inp.prompts[agent].text
            at, end = text.index(e.removed), text.index(e.removed) + len(e.removed)
            if (at == 0 or text[at - 1] == "\n") and text[end:end + 1] in ("\n", ""):  # a whole line
                new = text[:at] + text[end + 1:]
            else:  # a sentence inside a line
                new = text[:at].rstrip(" ") + " " + text[end:].lstrip(" ")
            out[agent] = re.sub(r"[ \t]+\n", "\n", new).strip() + "\n"
            notes.append(e.describe())
        if rest:
            res = self.fallback.step(StepInput(**{**inp.__dict__, "blamed": rest}))
            out.update(res.prompts)
            notes += [f"{a}: Warning bullets (no sentence to remove)" for a in res.prompts]
        return StepResult(out, notes=notes)
