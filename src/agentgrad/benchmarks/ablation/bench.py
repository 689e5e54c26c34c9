"""``agentgrad bench ablation``: does better blame give better prompts? The same loop, different blame.

Every case of :mod:`agentgrad.benchmarks.ablation.cases` is a system with one defect instance
planted in one agent's prompt. The benchmark runs in three stages, each on its own split, so that no
figure is reported on the data that chose it:

1. **Noise floor** (``screen`` split): per system, neutral lines (``NEUTRAL_LINES``) planted the way
   a defect is, in random agents and positions; the mean absolute score change they cause is what an
   arbitrary one-line change does.
2. **Screening** (``screen`` split): a case is kept when its defect's damage (clean - bugged) is at
   least ``keep_factor`` (5) times its system's noise floor (and one question, the split's
   resolution). Kept cases' clean and bugged systems are then scored once on the ``test`` split.
3. **The grid** (``train``, ``val``; reported on ``test`` only): for each kept case, arm and seed the
   optimisation loop (:class:`~agentgrad.optim.trainer.Trainer`: the same optimizer, samples per
   step, steps and validation gate for every arm) runs from the bugged prompts. Arms (``ARMS``)
   differ only in which agents each failure blames, or in the null arms, in the edit:

   - ``noop``: no edit (the loop as is); ``random_line``: a random line of a random agent removed or
     rewritten, blame ignored (:mod:`agentgrad.optim.edit`): the loop's noise floor;
   - ``gbc`` (``gbc:max_l1:targeted:carry``), ``paper`` (``gbc:mean_l1:whole:path``),
     ``provenance`` (string provenance, no model), ``random`` (one upstream call), ``all`` (every
     upstream call), ``oracle`` (``agent:NAME``, the bugged agent).
   - the factorial cells (``CELLS``, docs/ablation-factorial.md; ``--methods factorial``: the 12 cells and ``noop``):
     ``AGENT/LINE``, one operator (:class:`~agentgrad.optim.edit.EditOptimizer`: remove one line of
     each blamed agent's prompt, whatever ``--optimizer`` says), two choices crossed: which agent
     (``gbc``, ``provenance``, ``random``, ``oracle``: the blame method) and which of its lines
     (``grad``: the one its prompt-token gradients point at; ``string``: the one sharing most words
     with the wrong outputs, random where none does; ``random_line``: a random one).

Per run (``OUT/results.jsonl``): blame accuracy and precision, every test question's result after
the budget (``test_q``, the per-question deltas against the bugged system are computed from it),
the test curve per step, the edits, the gate's verdicts and the cost. :mod:`.summary` turns the rows
into the statistics; :mod:`.memo` keeps replies on disk, so a grid run in chunks (``--resume``,
``stop_after``) scores each clean and bugged system once. Work runs seed by seed (every kept case
and arm for seed 0, then seed 1, ...): a grid stopped early has whole seeds, the dimension to cut.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from agentgrad.attribution.factory import make_scorer
from agentgrad.benchmarks.ablation.cases import ABLATION_SPLITS, Case, make_splits
from agentgrad.benchmarks.ablation.defects import POSITIONS, plant
from agentgrad.benchmarks.ablation.memo import MemoScorer, append_row, memo_model, read_rows
from agentgrad.blame.methods import DEFAULT_METHOD
from agentgrad.core.config import model_spec_from_value, validate
from agentgrad.errors import AgentgradError, ConfigError
from agentgrad.models.hf import HFModel
from agentgrad.models.registry import create_model
from agentgrad.optim.config import TrainerConfig
from agentgrad.optim.edit import LINE_RULES, NEUTRAL_LINES, EditOptimizer, NoopOptimizer, RandomLineOptimizer
from agentgrad.optim.targets import optimizer_for
from agentgrad.optim.tasks import LookupTask
from agentgrad.optim.trainer import Trainer, set_prompts
from agentgrad.runs.rundir import RunDir

ARMS = {"noop": "random", "random_line": "random", "gbc": DEFAULT_METHOD, "paper": "gbc:mean_l1:whole:path",
        "provenance": "provenance", "random": "random", "all": "all", "oracle": "agent:{bugged}"}
NULL_ARMS = ("noop", "random_line")  # their edit ignores the blame (its accuracy is not reported)
METHODS = ARMS
OPTIMIZERS = ("edit", "deterministic", "llm")
# the factorial (docs/ablation-factorial.md): which agent (the blame method) x which of its lines (the edit optimizer's line rule)
CELL_AGENTS = {"gbc": DEFAULT_METHOD, "provenance": "provenance", "random": "random", "oracle": "agent:{bugged}"}
CELLS = {f"{a}/{line}": (m, line) for a, m in CELL_AGENTS.items() for line in LINE_RULES}
FACTORIAL = [*CELLS, "noop"]  # what --methods factorial runs


def blame_of(arm: str, bugged: str | None) -> str:
    """The blame method of an arm or a factorial cell."""
    return (CELLS[arm][0] if arm in CELLS else ARMS[arm]).format(bugged=bugged)


class _GatedTrainer(Trainer):
    """The trainer with its validation gate scored through ``gate`` (the benchmark's memo of scores
    by prompts): greedy decoding makes the gate's score a function of the prompts."""

    def __init__(self, *args: Any, gate: Callable[[dict[str, str]], float], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._gate = gate

    def evaluate(self, examples: list[dict[str, Any]], phase: str | None = None,
                 prompts: dict[str, str] | None = None) -> float:
        if examples and examples is self.val:
            return self._gate({**self.prompts(), **(prompts or {})})
        return super().evaluate(examples, phase, prompts)


def _bits(values: list[float]) -> str:
    """Per-question results as a string of 0/1 (the look-up metric is pass or fail)."""
    if any(v not in (0.0, 1.0) for v in values):
        raise ValueError("the ablation's metric is pass/fail; got a fractional score")
    return "".join("1" if v else "0" for v in values)


class Ablation:
    """The benchmark's state: the model, the shared caches, the output folder (see the module docstring)."""

    def __init__(self, out: Path, model: str = "smollm2", optimizer: str = "edit", optimizer_model: str | None = None,
                 steps: int = 2, step_every: int = 4, val_size: int = 50, concurrency: int = 16,
                 test_size: int | None = None, log: Callable[[str], None] = print,
                 sizes: dict[str, int] | None = None, prompts: str = "short"):
        if optimizer not in OPTIMIZERS:
            raise ConfigError(f"--optimizer takes {', '.join(OPTIMIZERS)}, got {optimizer!r}")
        self.out, self.optimizer_kind, self.steps, self.step_every = Path(out), optimizer, steps, step_every
        self.val_size, self.concurrency, self.log = val_size, concurrency, log
        self.prompt_set = prompts
        self.model_value = model
        spec = model_spec_from_value(model)
        self.model_spec = spec.model_dump(mode="json", exclude_none=True)
        self.splits = make_splits(sizes or ABLATION_SPLITS)
        if test_size:
            self.splits["test"] = self.splits["test"][:test_size]
        data = self.out / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Path] = {}
        for split, rows in self.splits.items():  # the splits, written where a reader of the results finds them
            p = data / f"{split}.jsonl"
            p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            self.data[split] = p
        inner = create_model("default", spec.backend, **spec.options())
        if not isinstance(inner, HFModel):
            raise ConfigError(f"--model {model!r} must be a local (hf, gguf: or embedded) model: it is also the "
                              f"white-box scorer")
        self.model = memo_model(inner, self.out / "memo.jsonl")
        self.scorer = MemoScorer(make_scorer(inner, mode="cached", on_too_long="skip", prompt_weights=True))
        self.optimizer_model = self.model
        if optimizer_model and optimizer_model != model:
            ospec = model_spec_from_value(optimizer_model)
            self.optimizer_model = create_model("optimizer", ospec.backend, **ospec.options())
        self._scores = {r["k"]: r["v"] for r in read_rows(self.out / "scores.jsonl") if "k" in r and "v" in r}

    def task(self, case: Case) -> LookupTask:
        return LookupTask(case.config(self.model_spec), self.data, {"default": self.model})

    def prompts_of(self, case: Case, prompts: dict[str, str] | None = None) -> dict[str, str]:
        """Every agent's prompt: the case's own, with ``prompts`` in place of some."""
        return {**{n: a.prompt for n, a in case.config(self.model_spec).agents.items()}, **(prompts or {})}

    def vector(self, case: Case, prompts: dict[str, str] | None, split: str, limit: int | None = None) -> str:
        """Per question of ``split`` (its first ``limit``), whether ``case``'s system with ``prompts``
        (None: its own) passes (a 0/1 string). Scored once per (system, prompts, questions), kept in
        ``OUT/scores.jsonl``."""
        full = self.prompts_of(case, prompts)
        examples = self.splits[split][:limit]
        key = hashlib.sha256(json.dumps([case.system, full, split, [e["id"] for e in examples]],
                                        sort_keys=True).encode()).hexdigest()
        if key not in self._scores:
            task = self.task(case)
            system = task.build_system()
            set_prompts(system, full)

            def one(ex: dict[str, Any]) -> float:
                try:
                    ep = system.run(ex, id=ex["id"])
                except AgentgradError:
                    return 0.0
                return task.metric(ex, ep.output, ep.trace).value

            with ThreadPoolExecutor(self.concurrency) as pool:
                self._scores[key] = _bits(list(pool.map(one, examples)))
            append_row(self.out / "scores.jsonl", {"k": key, "v": self._scores[key]})
        return self._scores[key]

    def score(self, case: Case, prompts: dict[str, str] | None, split: str, limit: int | None = None) -> float:
        """Mean metric of ``case``'s system with ``prompts`` (None: its own) on ``split`` (its first ``limit``)."""
        v = self.vector(case, prompts, split, limit)
        return v.count("1") / len(v)

    def optimizer(self, arm: str, seed: int) -> Any:
        if arm == "noop":
            return NoopOptimizer()
        if arm == "random_line":
            return RandomLineOptimizer(seed)
        if arm in CELLS:  # one operator for every cell: the edit optimizer, its line rule the cell's
            return EditOptimizer(line=CELLS[arm][1], seed=seed)
        if self.optimizer_kind == "edit":
            return optimizer_for("edit", None)
        return optimizer_for("verbal", self.optimizer_model if self.optimizer_kind == "llm" else None,
                             max_new_tokens=256)

    # --- stages 1 and 2: the noise floor and the screen --------------------------------------
    def noise_edits(self, system: str, k: int) -> list[dict[str, Any]]:
        """The first ``k`` neutral edits of ``system`` (agent, position, line), in a fixed random order."""
        import random

        agents = list(Case(system, None, prompts=self.prompt_set).config(self.model_spec).agents)
        combos = [(a, p, line) for a in agents for p in POSITIONS for line in NEUTRAL_LINES]
        random.Random(f"noise:{system}").shuffle(combos)
        return [{"system": system, "agent": a, "position": p, "line": line} for a, p, line in combos[:k]]

    def noise_row(self, edit: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        clean = Case(edit["system"], None, prompts=self.prompt_set)
        base = self.prompts_of(clean)
        prompts = {edit["agent"]: plant(base[edit["agent"]], edit["line"], edit["position"])}
        screen = self.score(clean, prompts, "screen")
        return {**edit, "screen": screen, "delta": screen - self.score(clean, None, "screen"),
                "n_screen": len(self.splits["screen"]), "seconds": round(time.perf_counter() - t0, 1)}

    def screen(self, case: Case, noise_floor: float, keep_factor: float, first: int = 40) -> dict[str, Any]:
        """The case's screening row: its damage on the screening split against the noise floor; a
        kept case's clean and bugged test results too.

        Sequential, a rule fixed in advance: the first ``first`` screening questions are scored; a
        case whose damage there is under half the threshold is dropped (it would need more than the
        whole threshold on the rest); the others are scored on the whole split, which decides."""
        t0 = time.perf_counter()
        clean = Case(case.system, None, prompts=case.prompts)
        n = len(self.splits["screen"])
        threshold = keep_factor * max(noise_floor, 1 / n)
        row = {"case": case.name, "system": case.system, "defect": case.defect, "wording": case.wording,
               "position": case.position, "bugged_agent": case.bugged_agent, "defect_line": case.defect_line,
               "noise_floor": noise_floor, "threshold": threshold, "clean_test": None, "bugged_test": None}
        if first < n:
            early = self.score(clean, None, "screen", first) - self.score(case, None, "screen", first)
            row["damage_first"] = early
            if early < threshold / 2:
                sc, sb = self.score(clean, None, "screen", first), self.score(case, None, "screen", first)
                row.update(screen_clean=sc, screen_bugged=sb, damage_screen=sc - sb, n_screen=first, kept=False,
                           seconds=round(time.perf_counter() - t0, 1))
                return row
        sc, sb = self.score(clean, None, "screen"), self.score(case, None, "screen")
        row.update(screen_clean=sc, screen_bugged=sb, damage_screen=sc - sb, n_screen=n,
                   kept=sc - sb >= threshold - 1e-9)
        if row["kept"]:
            qc, qb = self.vector(clean, None, "test"), self.vector(case, None, "test")
            row.update(clean_test=qc.count("1") / len(qc), bugged_test=qb.count("1") / len(qb), n_test=len(qc),
                       test_clean_q=qc, test_bugged_q=qb)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        return row

    # --- stage 3: one run of the grid ----------------------------------------------------------
    def run_one(self, case: Case, base: dict[str, Any], arm: str, seed: int) -> dict[str, Any]:
        path = self.out / "runs" / case.name / arm.replace("/", "+") / f"seed-{seed}"
        resume = (path / "checkpoint.json").exists()
        if path.exists() and not resume:
            shutil.rmtree(path)  # a run killed before its first checkpoint starts again
        method = blame_of(arm, case.bugged_agent)
        task = self.task(case)
        tcfg = validate(TrainerConfig, {"samples": self.steps * self.step_every, "step_every": self.step_every,
                                        "seed": seed, "concurrency": self.concurrency,
                                        "validate": {"size": self.val_size}}, "ablation trainer")
        digest = hashlib.sha256(json.dumps([case.name, arm, method, seed, self.steps, self.step_every, self.val_size,
                                            self.optimizer_kind, self.model_value]).encode()).hexdigest()[:16]
        asked, generated, t0 = self.model.asked, self.model.generated, time.perf_counter()
        trainer = _GatedTrainer(task, self.scorer, self.optimizer(arm, seed), tcfg, RunDir(path, resume=resume),
                                method, config_digest=digest,
                                gate=lambda prompts: self.score(case, prompts, "val", self.val_size))
        initial = trainer.prompts()
        final = trainer.fit()
        per_step, named, precise, curve, notes = [], [], [], [], []
        prompts, failed, val = dict(initial), [], []
        for e in read_rows(path / "events.jsonl"):
            if e["event"] == "train_started":
                val.append(e.get("val_score"))
            elif e["event"] == "sample" and not e["passed"]:
                failed.append(e.get("blamed") or [])
            elif e["event"] == "step":
                hits = [case.bugged_agent in b for b in failed]
                per_step.append(sum(hits) / len(hits) if hits else None)
                named += hits
                precise += [1 / len(b) if case.bugged_agent in b else 0.0 for b in failed]
                failed = []
                notes.append({"step": e["step"], "accepted": e.get("accepted"), "notes": e.get("notes", []),
                              "val_before": e.get("val_before"), "val_after": e.get("val_after")})
                if e.get("accepted"):
                    prompts = trainer.store.prompts(e["step"])
                curve.append(self.score(case, prompts, "test"))
        after = self.vector(case, final["prompts"], "test")
        blind = arm in NULL_ARMS
        return {
            "case": case.name, "system": case.system, "defect": case.defect, "bugged_agent": case.bugged_agent,
            "method": arm, "blame": method, "seed": seed, "optimizer": "edit" if arm in CELLS else self.optimizer_kind,
            "prompts": self.prompt_set,
            "blame_accuracy": None if blind or not named else sum(named) / len(named),
            "blame_precision": None if blind or not precise else sum(precise) / len(precise),
            "blame_accuracy_per_step": [] if blind else per_step, "failures": len(named),
            "test_before": base["bugged_test"], "test_curve": curve, "test_after": after.count("1") / len(after),
            "test_q": after, "val_before": val[0] if val else None, "val_after": final["val_score"],
            "gain": after.count("1") / len(after) - base["bugged_test"],
            # one run's share of its case's damage; summary.py pools it over cases and questions instead
            "recovered": ((after.count("1") / len(after) - base["bugged_test"]) / (base["clean_test"] - base["bugged_test"])
                          if base["clean_test"] > base["bugged_test"] else None),
            "defect_removed": case.defect_line not in final["prompts"][case.bugged_agent],
            "edited": sorted(n for n in initial if final["prompts"][n] != initial[n]),
            "prompt_growth": sum(len(final["prompts"][n]) - len(initial[n]) for n in initial),
            "steps": final["steps"], "accepted": final["accepted"], "rejected": final["rejected"], "step_notes": notes,
            "accepted_edits": [x for n in notes if n["accepted"] for x in n["notes"]],
            "calls": self.model.asked - asked, "generated": self.model.generated - generated,
            "seconds": round(time.perf_counter() - t0, 1),
        }
