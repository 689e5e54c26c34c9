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

The line may also be chosen without the gradient (``line``, for the factorial ablation: one
operator, the choice of line varied): ``string``, the line sharing most content words with the
step's wrong outputs (a random line where none shares any), or ``random_line``, a random line. The
rules for what may go, and the fallback, are the same for every choice.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from agentgrad.core.text import content_words
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


def remove_part(text: str, at: int, end: int, replacement: str = "") -> str:
    """``text`` without its part ``text[at:end]`` (a whole line, or a sentence inside a line), or with
    ``replacement`` in its place."""
    if (at == 0 or text[at - 1] == "\n") and text[end:end + 1] in ("\n", ""):  # a whole line
        new = text[:at] + (replacement + "\n" if replacement else "") + text[end + 1:]
    else:  # a sentence inside a line
        new = text[:at].rstrip(" ") + " " + (replacement + " " if replacement else "") + text[end:].lstrip(" ")
    return re.sub(r"[ \t]+\n", "\n", new).strip() + "\n"


@dataclass
class Edit:
    agent: str
    removed: str
    share: float  # the removed sentence's score over the sum of all sentences' scores
    how: str = "gradient"  # the rule that chose it: gradient, string (words shared with the wrong outputs), random

    def key(self) -> str:
        return f"{self.agent}: removed {self.removed!r}"

    def describe(self) -> str:
        return f"{self.key()} ({'random line' if self.how == 'random' else f'{self.how} share {self.share:.2f}'})"


LINE_RULES = ("grad", "string", "random_line")  # how EditOptimizer chooses the line (module docstring)


def string_scores(text: str, outputs: list[str]) -> list[int]:
    """Per part of ``text`` (:func:`sentences`): the content words it shares with each of ``outputs``, summed."""
    words = [content_words(o) for o in outputs]
    return [sum(len(content_words(text[a:b]) & w) for w in words) for a, b in sentences(text)]


class EditOptimizer:
    """Removes, from each blamed agent's prompt, the sentence its failures' gradients point at most
    (``line="grad"``, the default), or the one another rule of :data:`LINE_RULES` picks."""

    def __init__(self, max_chars: int = 8000, line: str = "grad", seed: int = 0):
        if line not in LINE_RULES:
            raise ValueError(f"line rule {line!r}; valid: {', '.join(LINE_RULES)}")
        self.fallback = DeterministicOptimizer(max_chars=max_chars)
        self.line, self.seed = line, seed

    def edit(self, agent: str, inp: StepInput) -> Edit | None:
        prompt = inp.prompts[agent]
        text = prompt.text
        sents = sentences(text)
        scores = sentence_scores(text, inp.prompt_scores.get(agent, [])) if self.line == "grad" else []
        if len(sents) < 2 or (self.line == "grad" and not any(scores)):
            return None
        protected = [(text.find(p), text.find(p) + len(p)) for p in prompt.protected if p in text]
        free = [j for j, (a, b) in enumerate(sents) if not any(a < pb and b > pa for pa, pb in protected)]
        rejected = {n for h in inp.history if h.get("accepted") is False for n in h.get("notes", [])}
        free = [j for j in free if Edit(agent, text[sents[j][0]:sents[j][1]], 0.0).key() not in
                {n.split(" (")[0] for n in rejected}]
        if not free:
            return None
        if self.line == "grad":
            j = max(free, key=lambda k: (scores[k], -k))
            a, b = sents[j]
            return Edit(agent, text[a:b], scores[j] / sum(scores))
        shared = string_scores(text, [str(f.loss.details.get("produced", "")) for f in inp.failures]) \
            if self.line == "string" else []
        if shared and any(shared[k] for k in free):
            j, how = max(free, key=lambda k: (shared[k], -k)), "string"
        else:  # a random line: the choice a function of (seed, agent, prompt, step), so a resumed run repeats it
            rng = random.Random(json.dumps([self.seed, agent, text, [h.get("step") for h in inp.history]]))
            j, how = rng.choice(free), "random"
        a, b = sents[j]
        return Edit(agent, text[a:b], shared[j] / sum(shared) if how == "string" else 0.0, how)

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
            out[agent] = remove_part(text, text.index(e.removed), text.index(e.removed) + len(e.removed))
            notes.append(e.describe())
        if rest:
            res = self.fallback.step(StepInput(**{**inp.__dict__, "blamed": rest}))
            out.update(res.prompts)
            notes += [f"{a}: Warning bullets (no sentence to remove)" for a in res.prompts]
        return StepResult(out, notes=notes)


# lines that ask nothing harmful: what the random_line null arm writes in place of a line (and what
# the ablation's noise floor plants)
NEUTRAL_LINES = ["Read the input carefully.", "Be brief.", "Use plain words.", "Check your reply before you send it.",
                 "Write in English.", "Keep a friendly tone."]


class NoopOptimizer:
    """The ``noop`` null arm: the loop runs as usual (samples, blame, gate) and no step edits anything.
    With greedy decoding its test score is the starting one: what a gain of zero looks like."""

    def step(self, inp: StepInput) -> StepResult:
        return StepResult({}, notes=["noop: no edit"])


class RandomLineOptimizer:
    """The ``random_line`` null arm: blame ignored, one random line of one random agent's prompt
    removed or rewritten (a neutral line in its place), with the edit optimizer's rules for what may
    go (no protected text; a prompt's last part is only rewritten). The gate then decides as for any
    other arm, so its gain is the loop's noise floor: what an edit that knows nothing earns.

    The choice is a function of (seed, the current prompts, the step): a resumed run repeats it."""

    def __init__(self, seed: int = 0, lines: list[str] | None = None):
        self.seed, self.lines = seed, lines or NEUTRAL_LINES

    def step(self, inp: StepInput) -> StepResult:
        state = [self.seed, sorted((n, p.text) for n, p in inp.prompts.items()), [h.get("step") for h in inp.history]]
        rng = random.Random(json.dumps(state))
        options = {}
        for agent in sorted(inp.prompts):
            text, prompt = inp.prompts[agent].text, inp.prompts[agent]
            protected = [(text.find(q), text.find(q) + len(q)) for q in prompt.protected if q in text]
            parts = sentences(text)
            free = [(a, b) for a, b in parts if not any(a < pb and b > pa for pa, pb in protected)]
            if free:
                options[agent] = (free, len(parts))
        if not options:
            return StepResult({}, notes=["random_line: no line may change"])
        agent = rng.choice(sorted(options))
        free, n_parts = options[agent]
        a, b = rng.choice(free)
        text = inp.prompts[agent].text
        if n_parts > 1 and rng.random() < 0.5:
            return StepResult({agent: remove_part(text, a, b)}, notes=[f"{agent}: removed {text[a:b]!r} (random line)"])
        line = rng.choice([x for x in self.lines if x != text[a:b]])
        return StepResult({agent: remove_part(text, a, b, line)},
                          notes=[f"{agent}: rewrote {text[a:b]!r} as {line!r} (random line)"])
