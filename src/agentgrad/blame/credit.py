"""Credit: an episode's score (or loss) split over the nodes that produced it, conserved.

The attribution graph says, for every call, how much each of its sources (and, when the scorer
recorded it, its own prompt) mattered to its output. Credit flows that backward from the loss:

1. The total (the episode's score, or its loss ``1 - score``) starts on the call(s) the loss
   attaches to, split equally among them.
2. Calls are visited from the last to the first (a trace lists every node after its sources). A call
   holding credit ``c`` keeps the share carried by its own prompt and passes the rest to its sources
   in proportion to their connection weights::

       keep = c * w_prompt / (w_prompt + sum_s w_s)        to source s: c * w_s / (w_prompt + sum_s w_s)

   ``w_prompt`` is the weight of the call's system prompt, scored like a source (``Scorer(...,
   prompt_weights=True)``, ``agentgrad attribute --prompt-weights``, ``scorer: {prompt_weights:
   true}``). Without it, the call keeps ``self_share`` of ``c`` and passes ``1 - self_share`` by the
   sources' weights. A call that was not attributed (skipped), or has no sources, keeps all of ``c``;
   when every weight is zero, ``c`` is split equally among the prompt (when recorded) and the sources.
3. A tool result's credit goes to the call that asked for it (``tools="pass"``, the default: the
   arguments were that call's choice), or stays on the tool (``tools="keep"``: the environment's share).
4. Inputs keep what reaches them.

So the shares held by all nodes (calls, tools, inputs) sum to the total (to rounding: the tests check
1e-9). Options: which of the four weights, all incoming edges or only the kept top-k (the attribution
graph's pruning, ties broken by the same seeded rule), and unsigned (``|w|``) or signed weights. With
signed weights (``g.e``) a source that pushed against the output gets a negative share and the others
more than their part; the shares still sum to the total (when the signed weights of a call sum to
zero, its credit is split by ``|w|`` instead).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

from agentgrad.attribution.graph import AttributionGraph
from agentgrad.attribution.weights import WEIGHT_NAMES
from agentgrad.blame.walk import kept_incoming
from agentgrad.errors import ConfigError


@dataclass
class Credit:
    """The shares of one episode: ``shares[node] `` sums to ``total``."""

    total: float
    quantity: str  # "score" or "loss"
    shares: dict[int, float]
    kinds: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    kept: dict[int, float] = field(default_factory=dict)  # what each call kept for its own prompt

    def by_agent(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for n, v in self.shares.items():
            if self.kinds.get(n) == "call":
                out[self.names.get(n, "")] = out.get(self.names.get(n, ""), 0.0) + v
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "quantity": self.quantity,
                "shares": {str(n): v for n, v in sorted(self.shares.items())},
                "by_agent": self.by_agent()}


def split_credit(att: dict[str, Any], total: float, *, quantity: str = "score", weight: str = "mean_l1",
                 top_k: int | None = None, signed: bool = False, self_share: float = 0.0,
                 tools: Literal["pass", "keep"] = "pass", seed: int | None = None) -> Credit:
    """The credit of one attributed episode (an attribution record, as ``attribute`` writes it).

    ``top_k`` None uses every edge; an int, the kept top-k of each call (ties broken with ``seed``,
    default the record's own). See the module docstring for the rule.
    """
    if weight not in WEIGHT_NAMES:
        raise ConfigError(f"unknown weight {weight!r}; valid: {', '.join(WEIGHT_NAMES)}")
    if not 0.0 <= self_share <= 1.0:
        raise ConfigError(f"self_share must be between 0 and 1, got {self_share}")
    if tools not in ("pass", "keep"):
        raise ConfigError(f"tools must be 'pass' or 'keep', got {tools!r}")
    graph = AttributionGraph.from_dict(att.get("graph") or {"nodes": [], "edges": []})
    kinds = {n: d.get("kind", "") for n, d in graph.nodes.items()}
    names = {n: d.get("name", "") for n, d in graph.nodes.items()}
    parents: dict[int, list[int]] = {}  # tool -> the call(s) that asked for it
    for e in graph.edges:
        if e.structural:
            parents.setdefault(e.target, []).append(e.source)
    kept = kept_incoming(graph, top_k, weight, att.get("seed", 0) if seed is None else seed)
    incoming = {t: {e.source: float(e.weights.get(weight, 0.0)) for e in es if not e.structural}
                for t, es in kept.items()}  # call -> source -> weight (weighted edges, all or the kept top-k)
    scored = {n["node_id"]: n for n in att.get("nodes") or [] if isinstance(n, dict) and not n.get("skipped")}
    targets = [t for t in (att.get("loss") or {}).get("targets", []) if t in graph.nodes]
    if not targets:
        raise ConfigError(f"attribution of {att.get('trace_id', '?')} has no loss target to start from")
    credit = {n: 0.0 for n in graph.nodes if kinds[n] != "loss"}
    for t in targets:
        credit[t] += total / len(targets)
    kept: dict[int, float] = {}
    for n in sorted(credit, reverse=True):
        c = credit[n]
        if c == 0.0:
            continue
        if kinds[n] == "tool" and tools == "pass" and parents.get(n):
            for p in parents[n]:
                credit[p] += c / len(parents[n])
            credit[n] = 0.0
            continue
        if kinds[n] != "call" or n not in scored or not incoming.get(n):
            continue
        ws = dict(incoming[n])
        prompt = (scored[n].get("prompt") or {}).get("weights", {}).get(weight)
        if not signed:
            ws = {s: abs(w) for s, w in ws.items()}
            prompt = abs(prompt) if prompt is not None else None
        passed = c * (1.0 - self_share) if prompt is None else c
        denom = sum(ws.values()) + (prompt or 0.0)
        if signed and abs(denom) <= 1e-12 * (sum(abs(w) for w in ws.values()) + abs(prompt or 0.0)):
            ws = {s: abs(w) for s, w in ws.items()}  # signed weights that cancel: split by magnitude
            prompt = abs(prompt) if prompt is not None else None
            denom = sum(ws.values()) + (prompt or 0.0)
        if denom == 0.0:  # every weight zero: equal parts
            ws = {s: 1.0 for s in ws}
            prompt = 1.0 if prompt is not None else None
            denom = len(ws) + (prompt or 0.0)
        given = 0.0
        for s, w in ws.items():
            share = passed * w / denom
            credit[s] += share
            given += share
        credit[n] = c - given  # what the prompt carried (or self_share), exactly the rest: conserved
        kept[n] = credit[n]
    return Credit(total, quantity, credit, kinds, names, kept)


def credit_records(run_dir: Any, *, quantity: Literal["score", "loss"] = "score", **options: Any) -> Iterator[dict[str, Any]]:
    """One record per node holding credit, over every attributed episode of a run directory, streamed.

    The episode's score is the one its attribution file records (older runs: the ``sample`` event of
    ``events.jsonl``, read only then); ``loss`` splits ``1 - score``. Memory: one episode at a time,
    plus the list of file names. See :mod:`agentgrad.blame.credit` for the rule.
    """
    import json
    from pathlib import Path

    from agentgrad.core.trace import Trace
    from agentgrad.core.files import safe_name

    run = Path(run_dir)
    att_dir = run / "attribution"
    if not att_dir.is_dir():
        raise ConfigError(f"{run} has no attribution/ folder: credit needs an attributed run "
                          "(optimize, demo, or the traces attributed with agentgrad attribute --out RUN_DIR/attribution)")
    scores: dict[str, float] | None = None

    def event_scores() -> dict[str, float]:
        out: dict[str, float] = {}
        events = run / "events.jsonl"
        if events.exists():
            with open(events, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(e, dict) and e.get("event") == "sample" and isinstance(e.get("score"), (int, float)):
                        out[safe_name(e.get("sample")) + ".json"] = float(e["score"])
        return out

    import os

    for name in sorted(e.name for e in os.scandir(att_dir) if e.name.endswith(".json")):  # names only in memory
        f = att_dir / name
        try:
            att = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(att, dict) or not (att.get("loss") or {}).get("targets"):
            continue
        score = att.get("score")
        if not isinstance(score, (int, float)):
            scores = event_scores() if scores is None else scores
            score = scores.get(f.name, 0.0)
        total = score if quantity == "score" else 1.0 - score
        cr = split_credit(att, total, quantity=quantity, **options)
        trace_path = run / (att.get("trace") or f"traces/{f.name}")
        if not trace_path.exists():
            trace_path = run / "traces" / f.name
        trace = Trace.load(trace_path)
        for n, share in sorted(cr.shares.items()):
            node = trace.nodes[n] if n < len(trace) else None
            if node is None or (share == 0.0 and cr.kinds.get(n) != "call"):
                continue
            rec: dict[str, Any] = {"episode": trace.id or f.stem, "node": n, "kind": node.kind, "agent": node.agent,
                                   "name": node.name, "output": node.text, "quantity": quantity, "total": total,
                                   "credit": share}
            if node.kind == "call":
                rec["messages"] = node.messages
                if node.tool_calls:
                    rec["tool_calls"] = [c.to_dict() for c in node.tool_calls]
            yield rec


FORMATS = ("jsonl", "trl")


def export_credit(run_dir: Any, out: Any, *, fmt: str = "jsonl", quantity: str = "score", overwrite: bool = False,
                  **options: Any) -> dict[str, int]:
    """Write :func:`credit_records` of ``run_dir`` to ``out`` (JSONL), streaming: one episode in memory
    at a time. ``trl``: call nodes only, as TRL's conversational prompt-completion rows with a reward
    column (``prompt``: the messages, ``completion``: the assistant's output, ``reward``: the call's
    share of the score, or minus its share of the loss). The file appears complete or not at all.
    """
    import json
    import os
    from pathlib import Path

    from agentgrad.core.files import check_new_output

    if fmt not in FORMATS:
        raise ConfigError(f"--format takes {' or '.join(FORMATS)}, got {fmt!r}")
    if quantity not in ("score", "loss"):
        raise ConfigError(f"--quantity takes score or loss, got {quantity!r}")
    run, out = Path(run_dir), Path(out)
    if not run.is_dir():
        raise ConfigError(f"{run} is not a run directory")
    check_new_output(out, overwrite, "file", [run / "attribution", run / "traces"])
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    records, episodes, last = 0, 0, None
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for rec in credit_records(run, quantity=quantity, **options):  # type: ignore[arg-type]
                if rec["episode"] != last:
                    episodes, last = episodes + 1, rec["episode"]
                if fmt == "trl":
                    if rec["kind"] != "call":
                        continue
                    completion: dict[str, Any] = {"role": "assistant", "content": rec["output"]}
                    if rec.get("tool_calls"):
                        completion["tool_calls"] = rec["tool_calls"]
                    row = {"prompt": rec["messages"], "completion": [completion],
                           "reward": rec["credit"] if quantity == "score" else -rec["credit"],
                           "episode": rec["episode"], "agent": rec["agent"], "node": rec["node"]}
                else:
                    row = rec
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                records += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return {"records": records, "episodes": episodes}
