"""Where the time of the optimisation loop goes, and what concurrency buys, against a remote-like model.

Every model call goes to the project's OpenAI-compatible test server answering after a fixed latency
(default 300 ms, standing in for a remote model; the answers are scripted, so the figures measure the
loop, not a model), the scorer is the tiny offline model, the optimizer an LLM on the same server.

- one optimisation step of the pipeline task and of tau-bench retail (a step over ``--step-episodes``
  episodes): wall time at concurrency 1, 4, 16, 32, and the time spent waiting for the server
  (requests x latency, summed over requests), scoring (attribution) and optimizing;
- one step of 3 episodes of each task at concurrency 1 and 3 (after a warm-up step, the median of 3);
  the optimizer's request cannot overlap the episodes it learns from, so with E requests per episode
  the speed-up is at most (3E + 1) / (E + 1): 2.5x for the pipeline (E = 3), 2.6x for tau-bench's
  scripted customer (E = 4);
- episodes per second of ``bench taubench evaluate`` and ``bench multiwoz evaluate`` at concurrency 1
  and 32 (16 and 160 episodes by default: at concurrency 32 a few long dialogues would otherwise set
  the time; data and models loaded beforehand).

The server runs in its own process, as a remote model does: its work takes none of this process's CPU.

    python benchmarks/loop_cost.py [--latency 0.3] [--step-episodes 32] [--json FILE]

One line per figure, e.g. ``episodes speed-up at concurrency 32 (taubench evaluate): 27.1x``.
Needs the benchmark data (AGENTGRAD_DATA_DIR) for the tau-bench and MultiWOZ parts.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

FIGURES: dict[str, Any] = {}


def say(key: str, text: str, value: Any) -> None:
    FIGURES[key] = value
    print(text, flush=True)


def responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    """Scripted answers: the optimizer keeps each prompt and adds a rule; the simulated customer asks
    once and stops; every agent answers in one line."""
    system = (messages[0].get("content") or "") if messages else ""
    last = messages[-1].get("content") or ""
    if system.startswith("You improve the prompts"):
        names = [n.strip() for n in re.search(r"these agents only: (.+?)\.\n", last).group(1).split(",")]
        prompts = {n: re.search(rf"## {re.escape(n)}\nTools: .*?\nPrompt:\n<<<\n(.*?)\n>>>", last, re.S).group(1)
                   + "\n## Warning\n- Be exact." for n in names}
        return json.dumps({"prompts": prompts})
    if system.startswith("You are a user interacting with an agent"):
        spoke = sum(m["role"] == "assistant" for m in messages)
        return "I would like to return an item of my last order." if spoke == 0 else "Thank you. ###STOP###"
    if "DOMAINS" in system:
        return "DOMAINS: none\nNOTE: nothing to look up."
    return "The answer is 42."


class Server:
    """The test server in its own process, as a remote model is: its work does not take this
    process's CPU (or its interpreter lock)."""

    def __init__(self, latency: float, tmp: Path):
        port_file = tmp / "port"
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file), "--latency", str(latency)])
        deadline = time.time() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if time.time() > deadline or self.proc.poll() is not None:
                raise SystemExit("the test server did not start")
            time.sleep(0.05)
        self.base_url = port_file.read_text().strip()

    @property
    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.base_url + "/stats") as r:
            return json.loads(r.read())

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        self.proc.wait()


def serve(port_file: Path, latency: float) -> None:
    from agentgrad.models.fake import FakeModel
    from agentgrad.models.serve import OpenAICompatServer

    srv = OpenAICompatServer(FakeModel(responder=responder), latency=latency).start()
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(srv.base_url)
    tmp.rename(port_file)
    while True:
        time.sleep(3600)


class Timed:
    """Wraps a method of an object, adding the seconds it takes to ``self.seconds``."""

    def __init__(self, obj: Any, name: str):
        self.seconds = 0.0
        inner = getattr(obj, name)

        def wrapped(*a: Any, **k: Any) -> Any:
            t0 = time.time()
            try:
                return inner(*a, **k)
            finally:
                self.seconds += time.time() - t0

        setattr(obj, name, wrapped)


def one_step(name: str, task: Any, scorer: Any, optimizer: Any, n: int, concurrency: int, srv: Any,
             latency: float, tmp: Path, record: bool = True) -> float:
    from agentgrad.optim.config import TrainerConfig
    from agentgrad.optim.trainer import Trainer
    from agentgrad.runs.rundir import RunDir

    out = Path(tempfile.mkdtemp(prefix=f"{name}-{n}-{concurrency}-", dir=tmp))
    trainer = Trainer(task, scorer, optimizer, TrainerConfig(samples=n, step_every=n, seed=0, concurrency=concurrency,
                                                             history=0), RunDir(out), concurrency=concurrency)
    scoring, optimizing = Timed(trainer.scorer, "attribute"), Timed(trainer.optimizer, "step")
    before = srv.stats["answered"]
    t0 = time.time()
    trainer.fit()
    wall = time.time() - t0
    del trainer.scorer.attribute, trainer.optimizer.step  # the instance wrappers; the methods stay
    requests = srv.stats["answered"] - before
    waited = requests * latency
    if not record:
        return wall
    say(f"{name}_step_{n}_c{concurrency}", f"{name}: one step of {n} episodes at concurrency {concurrency}: {wall:.1f} s "
        f"(server {waited:.1f} s over {requests} requests, scoring {scoring.seconds:.1f} s, "
        f"optimizing {optimizing.seconds:.1f} s)",
        {"wall": round(wall, 2), "server": round(waited, 2), "scoring": round(scoring.seconds, 2),
         "optimizing": round(optimizing.seconds, 2), "requests": requests})
    return wall


def step_of_three(name: str, task: Any, scorer: Any, optimizer: Any, srv: Any, latency: float, tmp: Path,
                  reps: int = 3) -> None:
    """One step of 3 episodes at concurrency 1 and 3: a warm-up step first (the first episode's one-off
    setup, e.g. loading a database, is not the loop's cost), then the median of ``reps`` steps each."""
    one_step(name, task, scorer, optimizer, 3, 1, srv, latency, tmp, record=False)
    walls = {}
    for c in (1, 3):
        runs = sorted(one_step(name, task, scorer, optimizer, 3, c, srv, latency, tmp, record=False) for _ in range(reps))
        walls[c] = runs[len(runs) // 2]
        say(f"{name}_step_3_c{c}", f"{name}: one step of 3 episodes at concurrency {c}: {walls[c]:.2f} s "
            f"(median of {reps}: {', '.join(f'{w:.2f}' for w in runs)})", {"median": round(walls[c], 3),
                                                                           "runs": [round(w, 3) for w in runs]})
    say(f"{name}_step3_speedup", f"{name}: step of 3 episodes, speed-up at concurrency 3: {walls[1] / walls[3]:.2f}x "
        "(target: 2.5x)", round(walls[1] / walls[3], 2))


def episodes_per_second(kind: str, url: str, n: int, concurrency: int, tmp: Path) -> float:
    """Throughput of ``bench KIND evaluate``'s loop (the library call the command makes), data and
    models loaded beforehand: ``n`` episodes at ``concurrency``."""
    from agentgrad.runs.rundir import RunDir

    model = f"openai:fake@{url}"
    if kind == "taubench":
        from agentgrad.benchmarks.taubench.run import TauOptions, TauSetup, evaluate

        trials = max(1, -(-n // 115))
        setup = TauSetup(TauOptions("multi", None, [f"default={model}"], model, None, "test",
                                    f"0-{min(n, 115) - 1}", trials, 30, None))
        n = min(n, 115) * trials
    else:
        from agentgrad.benchmarks.multiwoz.run import WozOptions, WozSetup, evaluate

        setup = WozSetup(WozOptions("multi", None, [f"default={model}"], "test", n, 42, None))
        setup.dialogues()  # parsed once, as the command does before it starts
    run_dir = RunDir(tmp / f"{kind}-eval-{concurrency}")
    t0 = time.time()
    evaluate(setup, run_dir, None, None, concurrency)
    dt = time.time() - t0
    eps = n / dt
    say(f"{kind}_eval_c{concurrency}", f"{kind} evaluate at concurrency {concurrency}: {eps:.2f} episodes/s "
        f"({n} episodes in {dt:.1f} s)", round(eps, 3))
    return eps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument("--step-episodes", type=int, default=32)
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--eval-episodes", default="16,160", help="episodes measured at concurrency 1 and 32")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: pipeline, taubench, evaluate")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.serve, a.latency)
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.core.config import apply_model_override, load_system_config
    from agentgrad.examples import PIPELINE
    from agentgrad.models.registry import create_model
    from agentgrad.optim.targets import optimizer_for
    from agentgrad.optim.tasks import get_task
    from agentgrad.models.tiny import build_tiny_model

    skip = set(a.skip.split(",")) - {""}
    tmp = Path(tempfile.mkdtemp())
    levels = [int(c) for c in a.concurrency.split(",")]
    try:
        tiny = build_tiny_model(tmp / "tiny", arch="llama")
        scorer = Scorer(str(tiny), on_too_long="skip")
        with Server(a.latency, tmp) as srv:
            url = srv.base_url
            optimizer = optimizer_for("verbal", create_model("optimizer", "openai", model="fake", base_url=url,
                                                             api_key="unused"))
            if "pipeline" not in skip:
                cfg = load_system_config(PIPELINE / "system.yaml")
                apply_model_override(cfg, f"default=openai:fake@{url}")
                models = {n: create_model(n, s.backend, **s.options(), api_key="unused") for n, s in cfg.models.items()}
                task = get_task("pipeline")(cfg, {"train": PIPELINE / "train.jsonl", "val": PIPELINE / "val.jsonl"}, models)
                big = [{**ex, "id": f"{ex['id']}-{i}"} for i in range(8) for ex in task.examples("train")]
                task.examples = lambda split, big=big: big  # more training questions than the example has
                one_step("pipeline", task, scorer, optimizer, 3, 1, srv, a.latency, tmp, record=False)  # warm-up
                walls = {c: one_step("pipeline", task, scorer, optimizer, a.step_episodes, c, srv, a.latency, tmp)
                         for c in levels}
                say("pipeline_step_speedup", f"pipeline step speed-up at concurrency {levels[-1]}: "
                    f"{walls[levels[0]] / walls[levels[-1]]:.1f}x", round(walls[levels[0]] / walls[levels[-1]], 2))
                step_of_three("pipeline", task, scorer, optimizer, srv, a.latency, tmp)
            if "taubench" not in skip:
                from agentgrad.benchmarks.taubench.run import TauOptions, TauSetup, TauTask

                model = f"openai:fake@{url}"
                setup = TauSetup(TauOptions("multi", None, [f"default={model}"], model, None, "test", None, 1, 30, None))
                one_step("taubench", TauTask(setup), scorer, optimizer, 3, 1, srv, a.latency, tmp, record=False)
                walls = {c: one_step("taubench", TauTask(setup), scorer, optimizer, a.step_episodes, c, srv, a.latency, tmp)
                         for c in levels}
                say("taubench_step_speedup", f"taubench step speed-up at concurrency {levels[-1]}: "
                    f"{walls[levels[0]] / walls[levels[-1]]:.1f}x", round(walls[levels[0]] / walls[levels[-1]], 2))
                step_of_three("taubench", TauTask(setup), scorer, optimizer, srv, a.latency, tmp)
            if "evaluate" not in skip:
                n1, n32 = (int(x) for x in a.eval_episodes.split(","))
                for kind in ("taubench", "multiwoz"):
                    e1 = episodes_per_second(kind, url, n1, 1, tmp)
                    e32 = episodes_per_second(kind, url, n32, 32, tmp)
                    say(f"{kind}_eval_speedup", f"episodes speed-up at concurrency 32 ({kind} evaluate): {e32 / e1:.1f}x "
                        "(target: 25x)", round(e32 / e1, 2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps(FIGURES, indent=1))


if __name__ == "__main__":
    main()
