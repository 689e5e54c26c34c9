"""The team verdict on five real apps, recorded: the LangGraph supervisor app (also as ``langgraph-routed``,
its supervisor's routing replies kept in the messages; reported, not checked), the OpenAI Agents SDK app,
the smolagents team (a CodeAgent manager and its managed ToolCallingAgent), the AutoGen AgentChat team
(a SelectorGroupChat of three agents) and an AG2 group chat of the same three (read from its messages: AG2
has no OpenInference instrumentor) of :mod:`agentgrad.testing.framework_apps` and
:mod:`agentgrad.testing.group_chat_apps`, each run live on its 20
inputs with a defect planted in one agent (its tool reads the next row of its table, so every answer it
gives is another input's), and the set blamed from the user's expected answers under provenance and under
the default method (SmolLM2-135M-Instruct as the scorer).

    python benchmarks/team_verdict_apps.py --out records/team-verdict-apps

For each app, ``OUT/<app>/`` gets ``spans.jsonl`` (the OTLP JSON file the app's OpenInference
instrumentor wrote, one trace per input, compacted: one line a trace, and without the attributes
agentgrad's import does not read, checked by importing the same traces, see :func:`compact`), ``expected.jsonl`` (``{"input": QUESTION, "expected":
ANSWER}``, the right answers) and the blame of the set as ``agentgrad blame SPANS --expected FILE``
writes it in ``blame.json`` (its ``seconds`` dropped): ``blame-provenance.json`` (``--method
provenance``) and ``blame-default.json`` (no method named: the default method and provenance). AutoGen's
app also writes ``messages.jsonl`` (its ``TaskResult.messages`` as AutoGen returns them, one run a line),
blamed the same way into ``blame-messages-provenance.json`` and ``blame-messages-default.json``. An app
whose files are there is not run again (``--resume``). The tests replay these files
(``tests/integrations/test_team_verdict_apps.py``); the shares, as docs/blame-set.md quotes them:

    python benchmarks/team_verdict_apps.py --table --out records/team-verdict-apps

The apps call SmolLM2 on a llama.cpp server started here (llama-cpp-python's, the embedded GGUF, one
thread, function calling). Exits 1 if a check of the tests fails: the planted value in every tool
result, every trace blamed, and for both methods the planted agent named with the largest share, its
interval's lower bound above every other agent's upper bound.

``--control`` runs the same apps with nothing planted (the tool reads each input's own row) into
``OUT/<app>-control/``, blamed the same way: what the team verdict says where nothing was planted (how
many answers failed, and whether it names one agent with its interval above every other's: a false
alarm), printed, not checked; the runs are checked to hold each input's own value.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

APPS = {"langgraph": ("CITIES", "researcher", ("supervisor", "researcher", "analyst")),
        "langgraph-routed": ("CITIES", "researcher", ("supervisor", "researcher", "analyst")),
        "agents-sdk": ("INVOICES", "billing", ("triage", "billing")),
        "smolagents": ("CITIES", "searcher", ("manager", "searcher")),
        "autogen": ("CITIES", "researcher", ("planner", "researcher", "writer")),
        "ag2": ("CITIES", "researcher", ("planner", "researcher", "writer"))}  # table, planted agent, every agent
# reported, not checked: the supervisor's routing replies, kept in the history, make faults of their own
# (docs/blame-set.md), so the planted agent need not be named apart
UNCHECKED = {"langgraph-routed"}
RUNNERS = {"langgraph": "framework_apps:langgraph_set", "langgraph-routed": "framework_apps:langgraph_routed_set",
           "agents-sdk": "framework_apps:agents_set", "smolagents": "framework_apps:smolagents_set",
           "autogen": "group_chat_apps:autogen_set", "ag2": "group_chat_apps:ag2_set"}  # module:function


def run_app(app: str, url: str, d: Path, plant: bool = True) -> list[dict[str, Any]]:
    """The app live on its 20 inputs, its defect planted (or, ``plant`` False, nothing planted: the
    control set): ``d/spans.jsonl`` and ``d/expected.jsonl``; what it did."""
    from agentgrad.testing import framework_apps as apps

    rows = getattr(apps, APPS[app][0])
    cases = apps.planted(rows, plant)
    module, name = RUNNERS[app].split(":")
    run = getattr(importlib.import_module(f"agentgrad.testing.{module}"), name)
    tmp = d / "spans.jsonl.part"
    tmp.unlink(missing_ok=True)
    runs = run(url, tmp, cases)
    if any("messages" in did for did in runs):  # AutoGen: the team's messages as it returns them, a log a line
        with open(d / "messages.jsonl", "w", encoding="utf-8") as f:
            for did in runs:
                f.write(json.dumps({"messages": did["messages"]}, ensure_ascii=False, separators=(",", ":")) + "\n")
    right = dict(rows)
    with open(d / "expected.jsonl", "w", encoding="utf-8") as f:  # the user's dataset: questions, right answers
        for (key, _), did in zip(cases, runs):
            f.write(json.dumps({"input": did["question"], "expected": right[key]}) + "\n")
    if tmp.exists():  # AG2 writes no spans (no OpenInference instrumentor): its messages are the record
        before, after = compact(tmp)
        print(f"{app}: spans compacted, {before:,} -> {after:,} bytes", flush=True)
        tmp.rename(d / "spans.jsonl")
    return runs


def _imported(path: Path) -> list[dict[str, Any]] | None:
    """The traces agentgrad imports from ``path``, without the raw span attributes each node keeps in
    its ``meta`` (nothing reads them but a person); None if a record of it is broken."""
    from agentgrad.importers import import_otel

    res = import_otel(path)
    if res.broken:
        return None
    traces = [t.to_dict() for t in res.traces]
    for t in traces:
        for n in t["nodes"]:
            n["meta"].pop("attributes", None)
    return traces


def import_otel_broken(path: Path) -> list[str]:
    from agentgrad.importers import import_otel

    return import_otel(path).broken[:3]


def _export(groups: dict[str, dict[tuple[str, str], list[dict[str, Any]]]], drop: set[tuple[str, str]]) -> str:
    lines = []
    for by_scope in groups.values():
        by_resource: dict[str, list[dict[str, Any]]] = {}
        for (res, scope), spans in by_scope.items():
            kept = [{**sp, "attributes": [a for a in sp.get("attributes", []) if (_kind(sp), _pattern(a["key"]))
                                          not in drop]} for sp in spans]
            by_resource.setdefault(res, []).append({"scope": json.loads(scope), "spans": kept})
        lines.append(json.dumps({"resourceSpans": [{"resource": json.loads(r), "scopeSpans": ss}
                                                   for r, ss in by_resource.items()]}, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def _kind(sp: dict[str, Any]) -> str:
    return next((a["value"].get("stringValue", "") for a in sp.get("attributes", [])
                 if a["key"] == "openinference.span.kind"), "")


def _pattern(key: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", key)


def compact(path: Path) -> tuple[int, int]:
    """Rewrite the OTLP file compactly, importing the same traces: one line per trace (each resource and
    scope once, not once per span), and without every attribute (by span kind and key, list indices
    aside) whose removal leaves the imported traces as they were (their raw attributes aside), tried
    largest first. Returns the sizes before and after."""
    before = path.read_text(encoding="utf-8")
    want = _imported(path)
    if want is None:
        sys.exit(f"error: {path}: broken records: {import_otel_broken(path)}")
    groups: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {}
    sizes: dict[tuple[str, str], int] = {}
    for line in before.splitlines():
        for rs in json.loads(line)["resourceSpans"] if line.strip() else []:
            for ss in rs["scopeSpans"]:
                key = (json.dumps(rs["resource"], sort_keys=True), json.dumps(ss["scope"], sort_keys=True))
                for sp in ss["spans"]:
                    groups.setdefault(sp["traceId"], {}).setdefault(key, []).append(sp)
                    for a in sp.get("attributes", []):
                        k = (_kind(sp), _pattern(a["key"]))
                        sizes[k] = sizes.get(k, 0) + len(json.dumps(a))
    trial = path.with_name(path.name + ".trial")
    drop: set[tuple[str, str]] = set()
    for k in sorted(sizes, key=lambda k: (-sizes[k], k)):
        trial.write_text(_export(groups, drop | {k}), encoding="utf-8")
        if _imported(trial) == want:
            drop.add(k)
    text = _export(groups, drop)
    trial.write_text(text, encoding="utf-8")
    if _imported(trial) != want:
        sys.exit(f"error: the compact copy of {path} imports other traces")
    trial.replace(path)
    return len(before.encode()), len(text.encode())


def record(res: Any) -> dict[str, Any]:
    """``blame.json`` as ``agentgrad blame`` writes it, without its wall time and with the source relative."""
    d = res.to_dict()
    d.pop("seconds")
    return d


def check_runs(app: str, runs: list[dict[str, Any]], plant: bool = True) -> list[str]:
    """The defect is real: every tool result for the input's own key holds the next row's value, never its
    own (in the control set, ``plant`` False: its own value). A run whose agent asked its tool for another key (SmolLM2 writing another city's name: the tool
    answers ``unknown``) is the agent's own slip, printed and not a failed check; every run must have called
    the tool, and at least 15 of the 20 for their own key."""
    from agentgrad.testing import framework_apps as apps

    cases = apps.planted(getattr(apps, APPS[app][0]), plant)
    bad, slips = [], []
    for (key, wrong), did in zip(cases, runs):
        own = [t for _, t in did["tools"] if key in t]
        if not did["tools"]:
            bad.append(f"{app}: {key}: the tool was never called")
        elif not own:
            slips.append(f"{key}: {did['tools'][0][1]}")
        elif not all(wrong in t for t in own):
            bad.append(f"{app}: {key}'s tool results {did['tools']} do not hold {wrong}")
    if slips:
        print(f"{app}: {len(slips)} run(s) asked the tool about another key (the agent's own slip): "
              + "; ".join(slips), flush=True)
    if len(runs) - len(slips) < 15:
        bad.append(f"{app}: only {len(runs) - len(slips)} of {len(runs)} runs asked the tool about their own key")
    return bad


def check_blame(app: str, d: dict[str, Any], method: str) -> list[str]:
    """Every trace blamed; ``method`` names the planted agent largest, its interval above every other's."""
    _, agent, agents = APPS[app]
    bad = []
    counts = d["team"]["counts"]
    if counts != {"blamed": 20, "succeeded": 0, "malformed": 0, "unblamed": 0} or d["warnings"]:
        bad.append(f"{app}: not every trace blamed: {counts}, {d['warnings']}")
    shares = d["team"]["methods"][method]["shares"]
    top = shares[0]
    highs = {a: 0.0 for a in agents if a != agent} | {s["agent"]: s["high"] for s in shares if s["agent"] != agent}
    if top["agent"] != agent or not all(top["low"] > h for h in highs.values()):
        bad.append(f"{app}, {method}: {agent} not named above every other agent: {shares}")
    return bad


def method_team(d: dict[str, Any], method: str) -> Any:
    """One method's shares with their intervals, recomputed from a blame file's per-trace verdicts
    (:func:`agentgrad.blame.team.shares`), not read from the team verdict stored beside them."""
    from agentgrad.blame.team import TraceVerdict, shares

    verdicts = [TraceVerdict.from_dict({**t, "status": "blamed"}) for t in d["blamed"]]
    return shares([t.methods[method] for t in verdicts if method in t.methods], method=method)


def separated(d: dict[str, Any], method: str) -> str | None:
    """The agent the team verdict names with its interval above every other agent's, or None."""
    got = method_team(d, method).shares
    if not got:
        return None
    return got[0].agent if all(got[0].low > s.high for s in got[1:]) else None


def control_line(d: dict[str, Any], method: str) -> str:
    """What the team verdict says of a control set (nothing planted): how many answers failed, and
    whether it names one agent apart from the others (a false alarm where nothing was planted)."""
    c = d["team"]["counts"]
    sep = separated(d, method)
    return (f"{method}: {c['blamed']} failed and blamed, {c['succeeded']} succeeded; "
            + (f"names {sep} with its interval above every other agent's" if sep
               else "no agent apart (intervals overlap)" if c["blamed"] else "nothing to blame"))


def expected_of(t: dict[str, Any]) -> str:
    """The expected answer a blamed trace's loss names (``the answer should be "X"; ...``)."""
    head = t["loss"].split(";", 1)[0]
    return head.split('"')[1] if head.count('"') >= 2 else "?"


def shares_line(d: dict[str, Any], method: str) -> str:
    mt = method_team(d, method)
    return f"{method}: {mt.traces} blamed; " + ", ".join(
        f"{s.agent} {s.share:.2f} [{s.low:.2f}, {s.high:.2f}]" for s in mt.shares)


# each blame file: (the app's file it blames, the methods named: None for the default method and provenance)
BLAME_FILES = {"blame-provenance.json": ("spans.jsonl", ["provenance"]), "blame-default.json": ("spans.jsonl", None),
               "blame-messages-provenance.json": ("messages.jsonl", ["provenance"]),
               "blame-messages-default.json": ("messages.jsonl", None)}


@lru_cache(maxsize=None)
def imported(path: Path) -> tuple[Any, ...]:
    """The traces agentgrad imports from a recorded file (read once for every line of the table)."""
    from agentgrad.importers.spans import import_file

    return tuple(import_file(path).traces)


def reach_line(path: Path) -> str:
    """How many of the calls of ``path``'s traces their final outputs reach back to, over all its traces."""
    from agentgrad.runs.blame import reach

    got = [reach(t) for t in imported(path)]
    k, n = sum(r[0] for r in got), sum(r[1] for r in got)
    return f"the final outputs reach back to {k} of {n} calls ({k / n:.2f}) over {len(got)} traces"


def differ_line(a: dict[str, Any], b: dict[str, Any], method: str) -> str:
    """Where two blames of the same runs (AutoGen's spans and its messages) name another call, per trace
    (traces matched by their loss, which holds the run's expected and produced answers)."""
    by_loss = {t["loss"]: t for t in b["blamed"]}
    pairs = [(t, by_loss[t["loss"]]) for t in a["blamed"] if t["loss"] in by_loss]
    named = lambda t: (t["methods"][method]["agent"], t["methods"][method]["node"])  # noqa: E731
    differ = [f"{named(x)} vs {named(y)}" for x, y in pairs if named(x) != named(y)]
    return (f"{method}: the same blamed call (agent, node) in {len(pairs) - len(differ)} of {len(pairs)} traces"
            + (f"; differs: {', '.join(differ)}" if differ else ""))


def own_words_line(app: str, d: dict[str, Any], spans: Path) -> str:
    """Where both methods of a blame file name the same agent other than the planted one (a tool's result
    aside): in how many of those traces the final answer's wrong words first appear in that agent's own
    output (before any tool result holds them): failures that agent made itself."""
    _, planted, agents = APPS[app.removesuffix("-control")]
    traces = {t.id: t for t in imported(spans)}
    named: dict[str, list[bool]] = {}
    for t in d["blamed"]:
        names = {m["agent"] for m in t["methods"].values()}  # an agent, or a tool's name where a tool is blamed
        if len(names) != 1 or planted in names or not names <= set(agents):
            continue
        agent = names.pop()
        holders = [n for n in traces[t["trace"]].nodes if n.kind in ("call", "tool") and t["wrong"] in n.text]
        named.setdefault(agent, []).append(bool(holders) and holders[0].kind == "call" and holders[0].name == agent)
    return f"{app}: " + ("; ".join(f"both methods name {a} in {len(v)} traces, its own words first in {sum(v)}"
                                    for a, v in sorted(named.items())) or "both methods name no other agent")


def table(out: Path) -> str:
    """Every recorded method's shares, one line each, and the reach of each recorded file (``--table``)."""
    lines = []
    for app in [x for n in APPS for x in (n, f"{n}-control")]:
        for source in ("spans.jsonl", "messages.jsonl"):
            if (out / app / source).exists():
                lines.append(f"{app}, {source}: {reach_line(out / app / source)}")
        for name in BLAME_FILES:
            if (out / app / name).exists():
                d = json.loads((out / app / name).read_text(encoding="utf-8"))
                lines += [f"{app}, {name}: {shares_line(d, m)}" for m in d["methods"]]
                source = out / app / BLAME_FILES[name][0]
                if name.endswith("-default.json") and source.exists():
                    lines.append(own_words_line(app, d, source))
                if app.endswith("-control"):
                    lines += [f"{app}, {name}: {control_line(d, m)}" for m in d["methods"]]
                    lines += [f"{app}, {name}: failed: expected {expected_of(t)}, the answer says {t['wrong']}"
                              for t in d["blamed"]]
        for name in ("blame-provenance.json", "blame-default.json"):
            other = out / app / name.replace("blame-", "blame-messages-")
            if (out / app / name).exists() and other.exists():
                a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (out / app / name, other))
                lines += [f"{app}, spans vs messages, {name}: {differ_line(a, b, m)}" for m in a["methods"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("records/team-verdict-apps"), help="folder of the apps' records")
    p.add_argument("--apps", default=",".join(APPS), help=f"comma-separated, of {', '.join(APPS)}")
    p.add_argument("--resume", action="store_true", help="keep the files already written; make the rest")
    p.add_argument("--table", action="store_true", help="print the recorded shares of --out and stop")
    p.add_argument("--control", action="store_true",
                   help="the control set: the apps with nothing planted, in OUT/<app>-control/ (reported, not checked)")
    a = p.parse_args(argv)
    if a.table:
        printed = table(a.out)
        if not printed:
            sys.exit(f"error: {a.out} holds no blame records of {', '.join(APPS)} (made by this script without --table)")
        print(printed)
        return
    names = [n.strip() for n in a.apps.split(",") if n.strip()]
    if not names or any(n not in APPS for n in names):
        sys.exit(f"error: --apps takes a comma-separated list of {', '.join(APPS)}, not {a.apps!r}")
    if a.out.exists() and not a.out.is_dir():
        sys.exit(f"error: --out {a.out} is a file; give a folder (new, or this script's own with --resume)")
    folder = {n: f"{n}-control" if a.control else n for n in names}
    for n in names:
        if (a.out / folder[n]).exists() and any((a.out / folder[n]).iterdir()) and not a.resume:
            sys.exit(f"error: {a.out / folder[n]} is not empty; pass --resume to keep its files, or another --out")
    import agentgrad as ag
    from agentgrad.blame.methods import DEFAULT_METHOD

    bad: list[str] = []
    todo = [n for n in names if not any((a.out / folder[n] / f).exists() for f in ("spans.jsonl", "messages.jsonl"))]
    if todo:
        from agentgrad.testing.llama_server import LlamaServer

        try:  # function calling, one thread: llama.cpp's threads spin-wait on a shared machine
            srv = LlamaServer(n_ctx=4096, chat_format="chatml-function-calling", n_threads=1, wait=300)
        except RuntimeError as e:
            sys.exit(f"error: {e}")
        with srv:
            url = srv.base_url
            for n in todo:
                (a.out / folder[n]).mkdir(parents=True, exist_ok=True)
                t0 = time.time()
                print(f"{folder[n]}: 20 live runs", flush=True)
                runs = run_app(n, url, a.out / folder[n], plant=not a.control)
                print(f"{folder[n]}: 20 runs in {time.time() - t0:.0f} s", flush=True)
                bad += check_runs(n, runs, plant=not a.control)
    scorer = None
    for n in names:
        d = a.out / folder[n]
        for name, (source, methods) in BLAME_FILES.items():
            if not (d / source).exists():
                continue
            if (d / name).exists():
                data = json.loads((d / name).read_text(encoding="utf-8"))
            else:
                if methods is None and scorer is None:
                    from agentgrad.attribution.scorer import Scorer
                    from agentgrad.models.hf import HFModel

                    smol = HFModel.shared(name="default", path="smollm2")
                    scorer = Scorer(tokenizer=smol.tokenizer, model=smol.model, path="smollm2")
                t0 = time.time()
                res = ag.blame_set(d / source, expected=d / "expected.jsonl", methods=methods,
                                   scorer=scorer if methods is None else None)
                print(f"{folder[n]}: {name} in {time.time() - t0:.0f} s", flush=True)
                data = record(res)
                (d / name).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            for m in (["provenance"] if methods else [DEFAULT_METHOD, "provenance"]):
                print(f"{folder[n]}, {name}: {shares_line(data, m)}", flush=True)
                if a.control:
                    print(f"{folder[n]}, {name}: {control_line(data, m)}", flush=True)
                elif n not in UNCHECKED:
                    bad += check_blame(n, data, m)
    for b in bad:
        print(f"FAILED: {b}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
