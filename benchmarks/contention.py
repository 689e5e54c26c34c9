"""Does a run share the machine fairly? The same command alone and beside a fixed neighbour, in one run.

The neighbour is a separate process running a two-thread PyTorch job (square matrix products in a
loop, ``torch.set_num_threads(2)``): what a user's other work looks like on a laptop. The command
runs first alone, then with the neighbour started a second before it and killed when it ends; each
is timed by wall clock and by the CPU time of the command's own processes (user + system, from
``getrusage`` of the children), and the figures are the two ratios, with-neighbour / alone, measured
in the same run so that the machine is the same. On N cores a fair share of a machine shared with
one job of N threads is about 2x the wall time; CPU time that grows well above 1x means threads
that spin while they wait (4.8x wall and 2.5x CPU before the thread layout was chosen).

    python benchmarks/contention.py                          # the demo: agentgrad demo --out TMP
    python benchmarks/contention.py --command bench-blame    # agentgrad bench blame, model-free + SmolLM2
    python benchmarks/contention.py --json FILE --env OMP_WAIT_POLICY=ACTIVE   # the old layout, to compare
    python benchmarks/contention.py --env AGENTGRAD_THREADS=auto --baseline AGENTGRAD_THREADS=torch --json FILE
    python benchmarks/contention.py --late 15 --json FILE    # the neighbour starts 15 s into the command
    python benchmarks/contention.py --neighbour-session --json FILE   # the neighbour as a job of another terminal
    python benchmarks/contention.py --table FILE [FILE ...]   # the table of docs/scale.md, from the records

``--baseline KEY=VALUE`` also runs the command alone under a baseline setting (PyTorch's defaults), in
the same run and first, and prints the alone / baseline ratio (the target of the run-time layout: within
1.15x of PyTorch's defaults alone, and within 1.6x of its own alone time beside the neighbour).

Prints one line per phase and the two ratios, e.g. ``demo: wall 2.21x, CPU 1.08x beside the
neighbour``; ``--json FILE`` writes them. By default the neighbour is in the command's own session, where
Linux shares the cores per thread (3 busy threads on 2 cores: two thirds of a core each); a job started
from another terminal or login is in a session of its own, and where the kernel groups tasks by session
(``/proc/sys/kernel/sched_autogroup_enabled`` is 1, as on the machine of the records) two sessions share
the cores half and half, whatever their thread counts: ``--neighbour-session`` measures that. Never run
it beside another CPU-heavy job: the neighbour is the only one it should meet.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NEIGHBOUR = """
import sys, torch
torch.set_num_threads(2)
a = torch.randn(512, 512); b = torch.randn(512, 512)
print("ready", flush=True)
while True:
    for _ in range(50):
        a = (a @ b).tanh_()
"""


def commands(name: str, out: Path) -> list[str]:
    exe = [sys.executable, "-m", "agentgrad.cli"]
    if name == "demo":
        return exe + ["demo", "--out", str(out)]
    if name == "bench-blame":
        return exe + ["bench", "blame", "--scorer", "smollm2", "--seed", "10", "--episodes", "8",
                      "--faults", "wrong_value", "--topology", "chain", "--methods", "gbc:max_l1:targeted:blend,provenance",
                      "--out", str(out)]
    raise SystemExit(f"error: --command takes demo or bench-blame, not {name!r}")


def outcome(out: Path) -> dict[str, Any]:
    """What the run found (the demo's final.json: held-out test before -> after, steps kept), so that a
    thread layout is seen to leave the result alone (bench blame: every method's top-1)."""
    try:
        final = json.loads((out / "final.json").read_text(encoding="utf-8"))
        return {k: final.get(k) for k in ("test_before", "test_after", "val_score", "steps", "accepted")}
    except (OSError, ValueError):
        pass
    try:  # bench blame: every method's agent and node top-1 over the episodes
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {m: {k: v["value"] for k, v in figs.items() if k in ("agent_top1", "node_top1")}
            for m, figs in metrics["groups"]["all"].items()}


def timed(cmd: list[str], env: dict[str, str], late: float | None = None,
          own_session: bool = False) -> dict[str, float]:
    """Wall and CPU seconds of ``cmd`` (its own process tree), which must succeed; with ``late``, the
    neighbour starts that many seconds after the command and is killed when it ends (its CPU time is
    not the command's: it is this process's child only after it is reaped, and is taken out)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    neighbour = None
    if late is not None:
        try:
            proc.wait(timeout=late)
        except subprocess.TimeoutExpired:
            neighbour = start_neighbour(own_session)
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # before the neighbour is reaped: the command's alone
    if neighbour is not None:
        neighbour.kill()
        neighbour.wait()
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


def start_neighbour(own_session: bool = False) -> subprocess.Popen:
    """The two-thread PyTorch job, started and computing (its first line read); ``own_session``: in a
    session of its own (``setsid``), as a job started from another terminal is."""
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=subprocess.PIPE, text=True,
                                 start_new_session=own_session,
                                 env={k: v for k, v in os.environ.items()
                                      if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")})
    assert neighbour.stdout is not None and neighbour.stdout.readline().strip() == "ready"
    return neighbour


def with_env(pairs: list[str], flag: str, p: argparse.ArgumentParser) -> dict[str, str]:
    env = dict(os.environ)
    for kv in pairs:
        if "=" not in kv:
            p.error(f"{flag} takes KEY=VALUE, not {kv!r}")
        k, v = kv.split("=", 1)
        env[k] = v
    return env


def autogroup() -> bool | None:
    """Whether the kernel shares the cores per session (sched_autogroup), None where it does not say."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


def table(files: list[Path]) -> None:
    """The records as docs/scale.md prints them: one row per record file."""
    records = []
    for f in files:  # every file read before a row is printed: a bad one is the only line
        try:
            r = json.loads(f.read_text(encoding="utf-8"))
            records.append((f, r, r["alone"], r["shared"], r["ratios"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"error: {f} is not a record of benchmarks/contention.py ({e})")
    print("| record | layout | alone: wall / CPU | beside the neighbour: wall / CPU | ratios | alone / baseline |")
    print("|---|---|---|---|---|---|")
    results = set()
    for f, r, alone, shared, ratios in records:
        for o in [alone.get("outcome"), shared.get("outcome"), (r.get("baseline") or {}).get("outcome")]:
            if o and "test_after" in o:
                results.add(f"held-out test {o['test_before']:.2f} -> {o['test_after']:.3f}, "
                            f"{o['accepted']} of {o['steps']} steps kept")
        base = r.get("baseline")
        vs = (f"{alone['wall_s'] / base['wall_s']:.2f}x of {base['wall_s']} s ({' '.join(base['env'])})"
              if base else "-")
        layout = r.get("label") or " ".join(r["env"]) or "sleep while waiting (the default then)"
        if r.get("late_s") is not None:
            layout += f"; the neighbour from {r['late_s']:g} s on"
        if r.get("neighbour_session"):
            layout += "; the neighbour in a session of its own"
        print(f"| {f.name} | {layout} | {alone['wall_s']} s / {alone['cpu_s']} s | "
              f"{shared['wall_s']} s / {shared['cpu_s']} s | {ratios['wall']:.2f}x / {ratios['cpu']:.2f}x | {vs} |")
    if results:
        print("\nthe demo's result in every run: " + "; ".join(sorted(results)))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--command", default="demo", help="demo (default) or bench-blame")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE set for the measured command")
    p.add_argument("--baseline", action="append", default=[],
                   help="KEY=VALUE: also run the command alone with this setting first, and compare")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--table", type=Path, nargs="+", help="print the table from these records and stop")
    p.add_argument("--late", type=float, help="start the neighbour this many seconds after the command, "
                                             "not before it (a job that starts while a run computes)")
    p.add_argument("--neighbour-session", action="store_true",
                   help="start the neighbour in a session of its own, as a job started from another terminal is")
    p.add_argument("--label", help="the layout's name in the record (default: the --env settings)")
    a = p.parse_args(argv)
    if a.table:
        return table(a.table)
    if a.late is not None and a.late < 0:
        p.error(f"--late takes seconds, 0 or more, not {a.late:g}")
    env = with_env(a.env, "--env", p)
    base_env = with_env(a.baseline, "--baseline", p) if a.baseline else None
    work = Path(tempfile.mkdtemp(prefix="agentgrad-contention-"))
    try:
        baseline = None
        if base_env is not None:
            baseline = {"env": a.baseline} | timed(commands(a.command, work / "baseline"), base_env) | \
                {"outcome": outcome(work / "baseline")}
            print(f"{a.command} alone, baseline {' '.join(a.baseline)}: {baseline['wall_s']} s wall, "
                  f"{baseline['cpu_s']} s CPU {baseline['outcome']}", flush=True)
        alone = timed(commands(a.command, work / "alone"), env) | {"outcome": outcome(work / "alone")}
        print(f"{a.command} alone: {alone['wall_s']} s wall, {alone['cpu_s']} s CPU {alone['outcome']}", flush=True)
        if a.late is not None:  # the neighbour starts while the command runs
            shared = timed(commands(a.command, work / "shared"), env, a.late, a.neighbour_session) | \
                {"outcome": outcome(work / "shared")}
        else:
            neighbour = start_neighbour(a.neighbour_session)
            try:
                time.sleep(1.0)
                shared = timed(commands(a.command, work / "shared"), env) | {"outcome": outcome(work / "shared")}
            finally:
                neighbour.kill()
                neighbour.wait()
        when = (f" from {a.late:g} s on" if a.late is not None else "") + \
            (" in a session of its own" if a.neighbour_session else "")
        print(f"{a.command} beside a two-thread PyTorch neighbour{when}: {shared['wall_s']} s wall, "
              f"{shared['cpu_s']} s CPU {shared['outcome']}", flush=True)
        ratios = {"wall": round(shared["wall_s"] / alone["wall_s"], 2),
                  "cpu": round(shared["cpu_s"] / alone["cpu_s"], 2)}
        print(f"{a.command}: wall {ratios['wall']}x, CPU {ratios['cpu']}x beside the neighbour "
              f"(targets: wall <= 2.5x, CPU <= 1.3x)")
        if baseline is not None:
            print(f"{a.command} alone: {alone['wall_s'] / baseline['wall_s']:.2f}x the baseline's wall time")
        if a.json:
            record = {"command": a.command, "env": a.env, "cores": os.cpu_count(), "machine": platform.machine(),
                      "alone": alone, "shared": shared, "ratios": ratios}
            if a.late is not None:
                record["late_s"] = a.late
            if a.neighbour_session:
                record["neighbour_session"], record["autogroup"] = True, autogroup()
            if a.label:
                record["label"] = a.label
            if baseline is not None:
                record["baseline"] = baseline
            a.json.write_text(json.dumps(record, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
