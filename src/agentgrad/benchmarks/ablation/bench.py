"""``agentgrad bench ablation``: does better blame give better prompts? The same loop, different blame.

For every case of :mod:`agentgrad.benchmarks.ablation.cases` (one agent's prompt carries a planted
defect), the clean and the bugged system are scored on the test split; a case whose defect does not
lower the test score is dropped (and counted). For each kept case, blame method and seed, the
optimisation loop (:class:`~agentgrad.optim.trainer.Trainer`: the same optimizer, samples per step,
steps and validation gate for every method) runs from the bugged prompts; the methods differ only in
which agents each failure blames:

- ``gbc``: the best GBC rule of the blame benchmarks (``gbc:max_l1:targeted:carry``);
- ``paper``: the paper's rule (``gbc:mean_l1:whole:path``: whole-output objective, top-1 path);
- ``random``: one upstream call at random; ``all``: every upstream call (the textual-gradient style);
- ``oracle``: the bugged agent (``agent:NAME``).

Per run: blame accuracy per step (the share of the step's failed samples whose blamed agents include
the bugged one, and ``precision``: that share divided by how many agents were blamed), the test
score after every step, the share of the defect's damage recovered ``(after - bugged) / (clean -
bugged)``, the prompts' growth in characters, which agents were edited, and the cost (model calls
asked, generated, seconds).

Two caches make the grid affordable without changing any result: greedy replies are memoised by
their request (the same prompts on the same input give the same reply, so a validation set scored
again under unchanged prompts costs nothing), and attributions by the trace's content. Every run is a
run directory under ``OUT/runs/CASE/METHOD/seed-N`` (checkpointed by the trainer), every finished run a
line of ``OUT/results.jsonl``: a killed benchmark resumes with ``--resume`` and completes the same table.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from agentgrad.attribution.scorer import Scorer
from agentgrad.benchmarks.ablation.cases import DEFECTS, SYSTEMS, Case, cases, make_splits
from agentgrad.benchmarks.ablation.figure import write_figures
from agentgrad.blame.methods import DEFAULT_METHOD
from agentgrad.core.config import model_spec_from_value, validate
from agentgrad.core.trace import Trace, write_json_atomic
from agentgrad.errors import AgentgradError, ConfigError
from agentgrad.core.model import ThreadedAsyncMixin
from agentgrad.models.hf import HFModel
from agentgrad.models.registry import create_model
from agentgrad.optim.config import TrainerConfig
from agentgrad.optim.targets import optimizer_for
from agentgrad.optim.tasks import LookupTask
from agentgrad.optim.trainer import Trainer, set_prompts
from agentgrad.runs.rundir import RunDir
from agentgrad.runs.runner import read_jsonl

METHODS = {"gbc": DEFAULT_METHOD, "paper": "gbc:mean_l1:whole:path", "random": "random", "all": "all",
           "oracle": "agent:{bugged}"}
OPTIMIZERS = ("edit", "deterministic", "llm")


class MemoModel(ThreadedAsyncMixin):
    """A model whose greedy replies are memoised by request (messages, tools, settings); sampled
    calls pass through. Counts the calls asked and the calls generated."""

    def __init__(self, inner: Any):
        self.inner, self.name = inner, getattr(inner, "name", "model")
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.asked = self.generated = 0

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def generate(self, messages, tools, settings):  # type: ignore[no-untyped-def]
        with self._lock:
            self.asked += 1
        if settings.temperature != 0:
            with self._lock:
                self.generated += 1
            return self.inner.generate(messages, tools, settings)
        key = json.dumps([messages, tools, settings.model_dump(mode="json")], sort_keys=True, default=str)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return dataclasses.replace(hit)
        out = self.inner.generate(messages, tools, settings)
        with self._lock:
            self._cache[key] = out
            self.generated += 1
        return dataclasses.replace(out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


_MEMOS: dict[int, MemoModel] = {}


def memo_model(inner: Any) -> MemoModel:
    """The process's one memo of ``inner`` (replies are a function of the request, so every
    benchmark run in a process may share them)."""
    return _MEMOS.setdefault(id(inner), MemoModel(inner))


def trace_key(trace: Trace) -> str:
    """What an attribution of ``trace`` depends on: every node's kind, name, text, parents, messages, spans."""
    return hashlib.sha256(json.dumps(
        [[n.kind, n.name, n.text, n.parents, n.messages, [s.to_dict() for s in n.spans]] for n in trace.nodes],
        sort_keys=True, default=str).encode()).hexdigest()


class MemoScorer:
    """A scorer whose attributions are memoised by the trace's content (``attribute``, and
    ``attribute_node`` with its objective); everything else is the scorer's."""

    def __init__(self, inner: Scorer):
        self.inner = inner
        self._memo: dict[Any, Any] = {}

    def attribute(self, trace: Trace, on_node: Callable | None = None, batch_tokens: int | None = None):  # type: ignore[no-untyped-def]
        key = ("trace", trace_key(trace))
        if key not in self._memo:
            self._memo[key] = self.inner.attribute(trace, on_node, batch_tokens)
        return copy.deepcopy(self._memo[key])

    def attribute_node(self, trace: Trace, node: Any, target_chars: list[tuple[int, int]] | None = None,
                       keep: bool = False):  # type: ignore[no-untyped-def]
        key = ("node", trace_key(trace), node.id, json.dumps(target_chars))
        if key not in self._memo:
            self._memo[key] = self.inner.attribute_node(trace, node, target_chars, keep=keep)
        return copy.deepcopy(self._memo[key])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def mean_ci(xs: list[float]) -> tuple[float, float, float]:
    """Mean and a 95% t interval (normal beyond 30 values); one value: the value, twice."""
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan
    m = sum(xs) / n
    if n == 1:
        return m, m, m
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}.get(n, 2.09 if n <= 20 else
                                                                                             2.04 if n <= 30 else 1.96)
    h = t * sd / math.sqrt(n)
    return m, m - h, m + h


class Ablation:
    """The benchmark's state: the model, the shared caches, the output folder (see the module docstring)."""

    def __init__(self, out: Path, model: str = "smollm2", optimizer: str = "edit", optimizer_model: str | None = None,
                 steps: int = 2, step_every: int = 4, val_size: int = 12, concurrency: int = 8,
                 test_size: int | None = None, log: Callable[[str], None] = print):
        if optimizer not in OPTIMIZERS:
            raise ConfigError(f"--optimizer takes {', '.join(OPTIMIZERS)}, got {optimizer!r}")
        self.out, self.optimizer_kind, self.steps, self.step_every = Path(out), optimizer, steps, step_every
        self.val_size, self.concurrency, self.log = val_size, concurrency, log
        self.model_value = model
        spec = model_spec_from_value(model)
        self.model_spec = spec.model_dump(mode="json", exclude_none=True)
        self.splits = make_splits()
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
        self.model = memo_model(inner)
        self.scorer = MemoScorer(Scorer.from_model(inner, mode="cached", on_too_long="skip", prompt_weights=True))
        self.optimizer_model = self.model
        if optimizer_model and optimizer_model != model:
            ospec = model_spec_from_value(optimizer_model)
            self.optimizer_model = create_model("optimizer", ospec.backend, **ospec.options())
        self._scores: dict[str, float] = {}

    def task(self, case: Case) -> LookupTask:
        return LookupTask(case.config(self.model_spec), self.data, {"default": self.model})

    def score(self, case: Case, prompts: dict[str, str] | None, split: str) -> float:
        """Mean test metric of ``case``'s system with ``prompts`` (None: its own) on ``split``."""
        key = json.dumps([case.name, prompts, split], sort_keys=True)
        if key not in self._scores:
            task = self.task(case)
            system = task.build_system()
            if prompts:
                set_prompts(system, prompts)
            examples = self.splits[split]

            def one(ex: dict[str, Any]) -> float:
                try:
                    ep = system.run(ex, id=ex["id"])
                except AgentgradError:
                    return 0.0
                return task.metric(ex, ep.output, ep.trace).value

            with ThreadPoolExecutor(self.concurrency) as pool:
                self._scores[key] = sum(pool.map(one, examples)) / len(examples)
        return self._scores[key]

    def optimizer(self) -> Any:
        if self.optimizer_kind == "edit":
            return optimizer_for("edit", None)
        return optimizer_for("verbal", self.optimizer_model if self.optimizer_kind == "llm" else None,
                             max_new_tokens=256)

    # --- one case ----------------------------------------------------------------------------------
    def baseline(self, case: Case) -> dict[str, Any]:
        clean = Case(case.system, None)
        t0 = time.perf_counter()
        row = {"case": case.name, "system": case.system, "defect": case.defect, "bugged_agent": case.bugged_agent,
               "defect_line": case.defect_line, "clean_test": self.score(clean, None, "test"),
               "bugged_test": self.score(case, None, "test")}
        row["kept"] = row["bugged_test"] < row["clean_test"]
        row["seconds"] = round(time.perf_counter() - t0, 1)
        return row

    def run_one(self, case: Case, base: dict[str, Any], key: str, seed: int) -> dict[str, Any]:
        path = self.out / "runs" / case.name / key / f"seed-{seed}"
        resume = (path / "checkpoint.json").exists()
        if path.exists() and not resume:
            shutil.rmtree(path)  # a run killed before its first checkpoint starts again
        method = METHODS[key].format(bugged=case.bugged_agent)
        task = self.task(case)
        tcfg = validate(TrainerConfig, {"samples": self.steps * self.step_every, "step_every": self.step_every,
                                        "seed": seed, "concurrency": self.concurrency,
                                        "validate": {"size": self.val_size}}, "ablation trainer")
        digest = hashlib.sha256(json.dumps([case.name, method, seed, self.steps, self.step_every, self.val_size,
                                            self.optimizer_kind, self.model_value]).encode()).hexdigest()[:16]
        asked, generated, t0 = self.model.asked, self.model.generated, time.perf_counter()
        trainer = Trainer(task, self.scorer, self.optimizer(), tcfg, RunDir(path, resume=resume), method,
                          config_digest=digest)
        initial = {n: a.prompt.text for n, a in trainer.system.agents().items()}  # type: ignore[union-attr]
        final = trainer.fit()
        per_step, named, precise, curve, prompts = [], [], [], [], dict(initial)
        failed: list[list[str]] = []
        for e in read_jsonl(path / "events.jsonl"):
            if e["event"] == "sample" and not e["passed"]:
                failed.append(e.get("blamed") or [])
            elif e["event"] == "step":
                hits = [case.bugged_agent in b for b in failed]
                per_step.append(sum(hits) / len(hits) if hits else None)
                named += hits
                precise += [1 / len(b) if case.bugged_agent in b else 0.0 for b in failed]
                failed = []
                if e.get("accepted"):
                    step_file = path / "prompts" / f"step-{e['step']:04d}.json"
                    prompts = json.loads(step_file.read_text(encoding="utf-8"))
                curve.append(self.score(case, prompts, "test"))
        after = self.score(case, final["prompts"], "test")
        damage = base["clean_test"] - base["bugged_test"]
        return {
            "case": case.name, "system": case.system, "defect": case.defect, "bugged_agent": case.bugged_agent,
            "method": key, "blame": method, "seed": seed, "optimizer": self.optimizer_kind,
            "blame_accuracy": sum(named) / len(named) if named else None,
            "blame_precision": sum(precise) / len(precise) if precise else None,
            "blame_accuracy_per_step": per_step, "failures": len(named),
            "test_before": base["bugged_test"], "test_curve": curve, "test_after": after,
            "recovered": (after - base["bugged_test"]) / damage if damage > 0 else None,
            "defect_removed": case.defect_line not in final["prompts"][case.bugged_agent],
            "edited": sorted(n for n in initial if final["prompts"][n] != initial[n]),
            "prompt_growth": sum(len(final["prompts"][n]) - len(initial[n]) for n in initial),
            "steps": final["steps"], "accepted": final["accepted"], "rejected": final["rejected"],
            "calls": self.model.asked - asked, "generated": self.model.generated - generated,
            "seconds": round(time.perf_counter() - t0, 1),
        }


def run_ablation(out: str | Path, *, model: str = "smollm2", systems: list[str] | None = None,
                 defects: list[str] | None = None, methods: list[str] | None = None, seeds: int = 5,
                 optimizer: str = "edit", optimizer_model: str | None = None, steps: int = 2, step_every: int = 4,
                 val_size: int = 12, test_size: int | None = None, concurrency: int = 8, resume: bool = False,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the grid (cases x methods x seeds) into ``out``; returns the summary (also ``summary.json``)."""
    out = Path(out)
    methods = methods or list(METHODS)
    for name, value, valid in (("system", systems, SYSTEMS), ("defect", defects, DEFECTS), ("method", methods, METHODS)):
        bad = [v for v in value or [] if v not in valid]
        if bad:
            raise ConfigError(f"unknown {name} {bad[0]!r}; valid: {', '.join(valid)}")
    if min(seeds, steps, step_every, val_size, test_size or 1, concurrency) < 1:
        raise ConfigError("--seeds, --steps, --step-every, --val-size, --test-size and --concurrency must be at least 1")
    options = {"model": model, "optimizer": optimizer, "optimizer_model": optimizer_model, "steps": steps,
               "step_every": step_every, "val_size": val_size, "test_size": test_size}
    opt_file = out / "options.json"
    if out.exists() and any(out.iterdir()):
        if not resume:
            raise ConfigError(f"{out} is not empty: pass --resume to continue the benchmark there, or another --out")
        if opt_file.exists() and json.loads(opt_file.read_text(encoding="utf-8")) != options:
            raise ConfigError(f"{out} was run with other options ({opt_file}); resume with the same ones")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(opt_file, options)
    t_start = time.perf_counter()
    bench = Ablation(out, model, optimizer, optimizer_model, steps, step_every, val_size, concurrency, test_size, log)
    results_path, cases_path = out / "results.jsonl", out / "cases.jsonl"
    done = {(r["case"], r["method"], r["seed"]) for r in (read_jsonl(results_path) if results_path.exists() else [])}
    bases = {r["case"]: r for r in (read_jsonl(cases_path) if cases_path.exists() else [])}
    for case in cases(systems, defects):
        if case.name not in bases:
            bases[case.name] = bench.baseline(case)
            with cases_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(bases[case.name]) + "\n")
        base = bases[case.name]
        log(f"{case.name}: clean {base['clean_test']:.2f}, bugged {base['bugged_test']:.2f} on test"
            + ("" if base["kept"] else " -> dropped (the defect does not hurt)"))
        if not base["kept"]:
            continue
        for seed in range(seeds):
            for key in methods:
                if (case.name, key, seed) in done:
                    continue
                row = bench.run_one(case, base, key, seed)
                with results_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                log(f"  {key:<7} seed {seed}: blame acc {_fmt(row['blame_accuracy'])}, test {row['test_before']:.2f}"
                    f" -> {row['test_after']:.2f}, edited {','.join(row['edited']) or '-'}, {row['seconds']} s")
    summary = summarize(read_jsonl(cases_path), read_jsonl(results_path) if results_path.exists() else [], methods)
    summary["seconds_this_run"] = round(time.perf_counter() - t_start, 1)
    # the whole grid's time over every invocation (a resumed run's earlier work included): the cases'
    # screening plus every run's own seconds; a run killed before its row was written is not counted
    summary["seconds_total"] = round(sum(c.get("seconds", 0) for c in read_jsonl(cases_path))
                                     + sum(r["seconds"] for r in (read_jsonl(results_path) if results_path.exists() else [])), 1)
    summary["options"] = options
    write_json_atomic(out / "summary.json", summary)
    (out / "table.md").write_text(markdown_table(summary), encoding="utf-8")
    write_figures(summary, read_jsonl(results_path) if results_path.exists() else [], out)
    return summary


def _fmt(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def summarize(case_rows: list[dict[str, Any]], rows: list[dict[str, Any]], methods: list[str]) -> dict[str, Any]:
    """Per method over the kept cases and seeds: mean and 95% interval of blame accuracy, test after,
    recovered damage; prompt growth; cost. Plus the cases (kept and dropped)."""
    kept = {c["case"] for c in case_rows if c["kept"]}
    per_method: dict[str, Any] = {}
    for m in methods:
        rs = [r for r in rows if r["method"] == m and r["case"] in kept]
        if not rs:
            continue
        col = lambda k: [r[k] for r in rs if r[k] is not None]  # noqa: E731
        per_method[m] = {
            "runs": len(rs),
            "blame_accuracy": mean_ci(col("blame_accuracy")), "blame_precision": mean_ci(col("blame_precision")),
            "test_before": mean_ci(col("test_before")), "test_after": mean_ci(col("test_after")),
            "recovered": mean_ci(col("recovered")),
            "defect_removed": sum(r["defect_removed"] for r in rs) / len(rs),
            "only_bugged_edited": sum(r["edited"] == [r["bugged_agent"]] for r in rs) / len(rs),
            "prompt_growth": mean_ci(col("prompt_growth")),
            "calls": sum(r["calls"] for r in rs) / len(rs), "generated": sum(r["generated"] for r in rs) / len(rs),
            "seconds": sum(r["seconds"] for r in rs) / len(rs),
        }
    by_case = {}
    for c in sorted(kept):
        by_case[c] = {m: {"blame_accuracy": mean_ci([r["blame_accuracy"] for r in rows if r["case"] == c and
                                                     r["method"] == m and r["blame_accuracy"] is not None])[0],
                          "recovered": mean_ci([r["recovered"] for r in rows if r["case"] == c and r["method"] == m
                                                and r["recovered"] is not None])[0]}
                      for m in methods}
    return {"cases": case_rows, "kept": len(kept), "dropped": len(case_rows) - len(kept), "methods": per_method,
            "by_case": by_case, "runs": len(rows)}


def markdown_table(summary: dict[str, Any]) -> str:
    ci = lambda t: f"{t[0]:.2f} [{t[1]:.2f}, {t[2]:.2f}]" if not math.isnan(t[0]) else "-"  # noqa: E731
    lines = ["| case | bugged agent | clean test | bugged test | kept |", "|---|---|---|---|---|"]
    for c in summary["cases"]:
        lines.append(f"| {c['case']} | {c['bugged_agent']} | {c['clean_test']:.2f} | {c['bugged_test']:.2f} | "
                     f"{'yes' if c['kept'] else 'no'} |")
    lines += ["", "| blame | runs | blame accuracy | blame precision | test after | recovered damage | defect removed | "
                  "only bugged agent edited | prompt growth (chars) | calls asked / generated | s per run |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m, s in summary["methods"].items():
        lines.append(f"| {m} | {s['runs']} | {ci(s['blame_accuracy'])} | {ci(s['blame_precision'])} | "
                     f"{ci(s['test_after'])} | {ci(s['recovered'])} | "
                     f"{s['defect_removed']:.2f} | {s['only_bugged_edited']:.2f} | {s['prompt_growth'][0]:.0f} | "
                     f"{s['calls']:.0f} / {s['generated']:.0f} | {s['seconds']:.0f} |")
    return "\n".join(lines) + "\n"
