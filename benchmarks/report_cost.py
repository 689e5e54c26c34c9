"""What a report of a large run costs: file size, time to write, time to open in headless Chromium.

By default it builds a 1,000-dialogue MultiWOZ evaluation of the multi-agent system (manager, domain
workers with tools, responder) against the project's OpenAI-compatible test server answering with a
scripted model (fast and deterministic; the traces have the real shape: every turn's manager,
workers with tool rounds, responder, the growing history), attributes the 20 worst dialogues with the
tiny scorer (as ``agentgrad attribute`` does), and writes the report. ``--run DIR`` measures an
existing run directory instead.

    python benchmarks/report_cost.py [--n 1000] [--episodes 20] [--keep DIR] [--json FILE]
    python benchmarks/report_cost.py --table FILE     # the same lines, printed from a --json record

Prints one line per figure, e.g. ``report size: 6.1 MB``. Targets: under 20 MB, opens in
under 3 s. Needs the MultiWOZ data (AGENTGRAD_DATA_DIR), playwright and a Chromium for the last figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path


def scripted(messages, tools):
    """Manager: two domains; worker: one search, then a one-line report; responder: a reply."""
    system = (messages[0].get("content") or "") if messages else ""
    last = messages[-1]
    if "manager" in system:
        return "DOMAINS: restaurant, hotel\nNOTE: the user wants a cheap restaurant in the centre and a hotel with parking."
    if tools:
        if last.get("role") == "tool":
            return "I found several options; the first is listed above with its address and phone number."
        name = next(t["function"]["name"] if "function" in t else t["name"] for t in tools)
        return {"text": "", "tool_calls": [{"name": name, "arguments": {"area": "centre"}}]}
    return ("I have found [restaurant_name] in the [value_area] for you, and [hotel_name] has free parking. "
            "Would you like me to book a table or a room?")


def build_run(out: Path, n: int, episodes: int) -> None:
    from agentgrad.attribution import Scorer
    from agentgrad.attribution.io import attribute_trace_file
    from agentgrad.cli import main
    from agentgrad.models.fake import FakeModel
    from agentgrad.report.collect import collect, worst_episodes
    from agentgrad.models.tiny import build_tiny_model
    from agentgrad.models.serve import OpenAICompatServer

    t0 = time.time()
    with OpenAICompatServer(FakeModel(responder=scripted)) as srv:
        code = main(["bench", "multiwoz", "evaluate", "--system", "multi", "--n", str(n), "--concurrency", "8",
                     "--model", f"openai:fake@{srv.base_url}", "--out", str(out)])
    if code != 0:
        sys.exit(f"the evaluation failed (exit {code})")
    print(f"run of {n} dialogues built in: {time.time() - t0:.1f} s", flush=True)
    t0 = time.time()
    tiny = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", arch="llama")
    scorer = Scorer(str(tiny), on_too_long="skip")
    chosen = worst_episodes(collect(out), episodes)
    (out / "attribution").mkdir(exist_ok=True)
    calls = 0
    for e in chosen:
        rec = attribute_trace_file(scorer, e["trace_path"], out / "attribution" / e["file"], "mean_l1")
        calls += len(rec["nodes"])
    print(f"attributed {len(chosen)} dialogues ({calls} calls) in: {time.time() - t0:.1f} s", flush=True)


def open_time(path: Path) -> tuple[float, float] | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("open time: not measured (pip install playwright)")
        return None
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("open time: not measured (no chromium)")
        return None
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        times = []
        for _ in range(3):
            pg = b.new_page()
            t0 = time.time()
            pg.goto(path.resolve().as_uri())
            pg.wait_for_selector("body[data-ready='1']", timeout=60_000)
            times.append(time.time() - t0)
            pg.close()
        b.close()
    return times[0], max(times)


def print_figures(f: dict) -> None:
    print(f"episodes in the run: {f['episodes']}, shown in full: {f['shown']}")
    print(f"report size: {f['report_mb']:.2f} MB (target: under 20 MB)")
    print(f"report written in: {f['write_seconds']:.2f} s")
    if "open_seconds_first" in f:
        print(f"opens in headless Chromium in: {f['open_seconds_first']:.2f} s the first time, "
              f"{f['open_seconds_worst']:.2f} s at worst of 3 (until the page's script has run; target: under 3 s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, help="measure this run directory instead of building one")
    ap.add_argument("--n", type=int, default=1000, help="dialogues in the run built")
    ap.add_argument("--episodes", type=int, default=20, help="episodes shown in full")
    ap.add_argument("--keep", type=Path, help="build the run here and keep it")
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    ap.add_argument("--table", type=Path, help="print the figures of this --json record and stop")
    a = ap.parse_args()
    if a.table:
        try:
            f = json.loads(a.table.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: {a.table} is not a readable JSON record ({e})")
        need = ("episodes", "shown", "report_mb", "write_seconds")
        if not isinstance(f, dict) or any(k not in f for k in need):
            raise SystemExit(f"error: {a.table} is not a record of benchmarks/report_cost.py (it needs {', '.join(need)})")
        print_figures(f)
        return
    from agentgrad.report.html import write_report

    tmp = None
    run = a.run
    if run is None:
        run = a.keep or Path(tmp := tempfile.mkdtemp()) / "mw"
        build_run(run, a.n, a.episodes)
    res = write_report(run, run / "report.html", episodes=a.episodes, overwrite=True)
    figures = {"episodes": res.episodes, "shown": res.shown, "report_mb": round(res.bytes / 1e6, 2),
               "write_seconds": round(res.seconds, 2)}
    t = open_time(res.path)
    if t is not None:
        figures["open_seconds_first"], figures["open_seconds_worst"] = round(t[0], 2), round(t[1], 2)
    print_figures(figures)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1))
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
