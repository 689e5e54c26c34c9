"""One episode as the report draws it: the graph laid out by depth, the weights of every edge, the
kept edges and trajectories, and per node the data the page's call view needs (messages, spans,
per-token gradient scores).

Layout: a node's column is its depth (0 for nodes with no parents, else one more than its deepest
parent); within a column nodes keep their trace order. The loss, when there is one, gets a column
after its deepest target.
"""

from __future__ import annotations

from typing import Any

from agentgrad.attribution.weights import WEIGHT_NAMES as WEIGHTS
from agentgrad.core.trace import Trace

COL_W, ROW_H, NODE_W, NODE_H, PAD = 170, 54, 128, 34, 16


def _round(x: Any) -> Any:
    return float(f"{x:.4g}") if isinstance(x, float) else x


def _depths(trace: Trace, parents: dict[int, list[int]]) -> dict[int, int]:
    """Columns: one more than the deepest parent; a node with no parents (a user turn, a task) sits
    just before its first reader, so that turn k's input stands beside turn k, not at the far left."""
    depth: dict[int, int] = {}
    for n in trace:  # parents always precede their children in a trace
        ps = [p for p in parents.get(n.id, []) if p in depth]
        depth[n.id] = 1 + max(depth[p] for p in ps) if ps else 0
    readers: dict[int, list[int]] = {}
    for child, ps in parents.items():
        for p in ps:
            readers.setdefault(p, []).append(child)
    for n in trace:
        if not parents.get(n.id) and readers.get(n.id):
            depth[n.id] = max(0, min(depth[c] for c in readers[n.id] if c in depth) - 1)
    return depth


def _label(node: Any) -> str:
    if node.kind == "call":
        return node.name or "call"
    if node.kind == "tool":
        return f"tool {node.name}"
    return node.name or node.kind


def episode_view(trace: Trace, attribution: dict[str, Any] | None, loss: dict[str, Any] | None = None,
                 max_chars: int = 20000) -> dict[str, Any]:
    """The graph and the per-node data of one episode.

    ``loss`` is used when the attribution has none (the blame benchmark keeps it in its record).
    Texts longer than ``max_chars`` are cut in the middle (said so in the text), spans and token
    positions beyond the cut are dropped.
    """
    att = attribution or {}
    loss = att.get("loss") or loss
    graph = att.get("graph") or {}
    kept = {(e["source"], e["target"]) for e in att.get("kept_edges") or []}
    traj_edges: set[tuple[int, int]] = set()
    traj_nodes: set[int] = set()
    for t in att.get("trajectories") or []:
        ns = [n for n in t.get("nodes", []) if isinstance(n, int)]
        traj_nodes.update(ns)
        traj_edges.update(zip(ns, ns[1:]))
    ids = {n.id for n in trace}
    edges: list[dict[str, Any]] = []
    if graph.get("edges"):
        for e in graph["edges"]:
            if e.get("source") in ids and e.get("target") in ids:
                edges.append({"s": e["source"], "t": e["target"], "w": {k: e.get("weights", {}).get(k) for k in WEIGHTS},
                              "structural": bool(e.get("structural")), "kept": (e["source"], e["target"]) in kept,
                              "traj": (e["source"], e["target"]) in traj_edges})
    else:
        for n in trace:
            for p in n.parents:
                if p in ids:
                    edges.append({"s": p, "t": n.id, "w": {}, "structural": True, "kept": False, "traj": False})
    parents: dict[int, list[int]] = {}
    for e in edges:
        parents.setdefault(e["t"], []).append(e["s"])
    for n in trace:  # parents the attribution has no edge for (e.g. a skipped call) still place the node
        parents.setdefault(n.id, []).extend(p for p in n.parents if p not in parents.get(n.id, []))
    depth = _depths(trace, parents)
    loss_targets = [t for t in (loss or {}).get("targets", []) if t in ids]
    # widths: per weight, |w| scaled by the largest |w| of the episode, 1 to 9 px
    widths: dict[str, float] = {}
    for k in WEIGHTS:
        top = max((abs(e["w"][k]) for e in edges if isinstance(e["w"].get(k), (int, float))), default=0.0)
        for e in edges:
            v = e["w"].get(k)
            e.setdefault("px", {})[k] = round(1 + 8 * abs(v) / top, 2) if top > 0 and isinstance(v, (int, float)) else 1.0
            e.setdefault("neg", {})[k] = isinstance(v, (int, float)) and v < 0
        widths[k] = top
    columns: dict[int, list[int]] = {}
    for n in trace:
        if n.kind != "loss":
            columns.setdefault(depth[n.id], []).append(n.id)
    pos: dict[int, tuple[float, float]] = {}
    for c, members in columns.items():
        for r, nid in enumerate(members):
            pos[nid] = (PAD + c * COL_W, PAD + r * ROW_H)
    nodes = []
    for n in trace:
        if n.id not in pos:
            continue
        x, y = pos[n.id]
        nodes.append({"id": n.id, "kind": n.kind, "name": n.name, "agent": n.agent, "label": _label(n),
                      "x": x, "y": y, "traj": n.id in traj_nodes, "target": n.id in loss_targets,
                      "has_target": str(n.id) in (att.get("targets") or {})})
    loss_node = None
    if loss_targets:
        c = 1 + max(depth[t] for t in loss_targets)
        used = len(columns.get(c, []))
        loss_node = {"x": PAD + c * COL_W, "y": PAD + used * ROW_H, "targets": loss_targets,
                     "text": str(loss.get("text", ""))}
    for e in edges:
        (x1, y1), (x2, y2) = pos.get(e["s"], (0, 0)), pos.get(e["t"], (0, 0))
        e["d"] = _curve(x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2)
    loss_edges = [{"d": _curve(pos[t][0] + NODE_W, pos[t][1] + NODE_H / 2, loss_node["x"], loss_node["y"] + NODE_H / 2)}
                  for t in loss_targets] if loss_node else []
    width = PAD * 2 + NODE_W + COL_W * max([*columns.keys(), (loss_node["x"] - PAD) // COL_W if loss_node else 0])
    height = PAD * 2 + NODE_H + ROW_H * max([len(m) - 1 for m in columns.values()] + [0, (loss_node["y"] - PAD) // ROW_H
                                                                                       if loss_node else 0])
    return {
        "id": trace.id, "nodes": nodes, "edges": edges, "loss": loss, "loss_node": loss_node, "loss_edges": loss_edges,
        "width": width, "height": height, "node_w": NODE_W, "node_h": NODE_H, "max_weight": widths,
        "trajectories": [{"nodes": t.get("nodes", []), "agents": t.get("agents", [])}
                         for t in att.get("trajectories") or []],
        "method": att.get("method"), "weight": att.get("weight") or att.get("method"), "top_k": att.get("top_k"),
        "scorer": att.get("scorer"),
        "targets": att.get("targets"), "meta": trace.meta,
        "data": _node_data(trace, att, max_chars),  # (per-node data, string table)
    }


def _curve(x1: float, y1: float, x2: float, y2: float) -> str:
    mid = (x1 + x2) / 2
    return f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"


def _cut(text: str, max_chars: int) -> tuple[str, int]:
    """(text kept, length kept from the start): the first ``max_chars`` characters and a note."""
    if max_chars and len(text) > max_chars:
        return text[:max_chars] + f"\n… [{len(text) - max_chars:,} more characters not shown]", max_chars
    return text, len(text)


class _Strings:
    """A per-episode string table: the history that every call of a turn reads is written once."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


Q = 1000  # per-token scores are written as integers, a share of the call's largest |score| times Q


def encode_tokens(tokens: list[tuple[int, int, int, float, float]]) -> dict[str, Any]:
    """Scored tokens ``(message, start, end, l1, gxi)`` in a compact form the page decodes.

    ``scale`` holds the call's largest ``l1`` and ``|gxi|``; ``runs`` are maximal stretches of
    adjacent tokens of one message: ``[message, start, lengths, l1 * Q / scale, gxi * Q / scale]``
    (rounded to integers: three significant digits of the largest score, enough for a heat map and
    for the value shown on hover).
    """
    top_l1 = max((abs(t[3]) for t in tokens), default=0.0) or 1.0
    top_gx = max((abs(t[4]) for t in tokens), default=0.0) or 1.0
    runs: list[list[Any]] = []
    for m, a, b, v1, v2 in sorted(tokens):
        if not runs or runs[-1][0] != m or runs[-1][1] + sum(runs[-1][2]) != a:
            runs.append([m, a, [], [], []])
        runs[-1][2].append(b - a)
        runs[-1][3].append(round(v1 / top_l1 * Q))
        runs[-1][4].append(round(v2 / top_gx * Q))
    return {"scale": [float(f"{top_l1:.6g}"), float(f"{top_gx:.6g}")], "q": Q, "runs": runs}


def decode_tokens(enc: dict[str, Any]) -> list[tuple[int, int, int, float, float]]:
    """The inverse of :func:`encode_tokens` (up to its rounding); the page's script does the same."""
    out = []
    s1, s2 = enc["scale"]
    for m, a, lens, q1, q2 in enc["runs"]:
        for n, v1, v2 in zip(lens, q1, q2):
            out.append((m, a, a + n, v1 * s1 / enc["q"], v2 * s2 / enc["q"]))
            a += n
    return out


def _node_data(trace: Trace, att: dict[str, Any], max_chars: int) -> tuple[dict[str, Any], list[str]]:
    """Per node, what clicking it shows; per call, every span and every scored token of its sources.

    Texts are indices into the returned string table.
    """
    by_node = {n.get("node_id"): n for n in att.get("nodes") or [] if isinstance(n, dict)}
    targets = att.get("targets") if isinstance(att.get("targets"), dict) else {}
    strings = _Strings()
    out: dict[str, Any] = {}
    for n in trace:
        d: dict[str, Any] = {"id": n.id, "kind": n.kind, "name": n.name, "agent": n.agent}
        out_text, _ = _cut(n.text or "", max_chars)
        d["output"] = strings(out_text)
        if n.tool_calls:
            d["tool_calls"] = [c.to_dict() for c in n.tool_calls]
        if isinstance(targets.get(str(n.id)), str):
            d["target"] = strings(_cut(targets[str(n.id)], max_chars)[0])
        if n.kind == "tool":
            d["arguments"] = n.meta.get("arguments")
        if n.kind == "call":
            d["model"] = n.model.get("ref") or n.model.get("path") or n.model.get("model")
            msgs, kept_len = [], []
            for m in n.messages:
                text, k = _cut(m.get("content") or "", max_chars)
                kept_len.append(k)
                mm = {"role": m.get("role"), "content": strings(text)}
                if m.get("tool_calls"):
                    mm["tool_calls"] = m["tool_calls"]
                msgs.append(mm)
            d["messages"] = msgs
            d["spans"] = [[s.source, s.message, s.start, min(s.end, kept_len[s.message])] for s in n.spans
                          if s.message < len(kept_len) and s.start < kept_len[s.message]]
            a = by_node.get(n.id)
            if a:
                d["skipped"] = a.get("skipped")
                d["weights"] = {str(s["source"]): {k: _round(v) for k, v in s.get("weights", {}).items()}
                                for s in a.get("sources", [])}
                tokens: list[tuple[int, int, int, float, float]] = []
                no_chars = 0
                own = a.get("prompt")  # the call's own prompt scored like a source (prompt weights)
                if isinstance(own, dict):
                    d["weights"]["prompt"] = {k: _round(v) for k, v in own.get("weights", {}).items()}
                    chars = [c for c in (own.get("token_scores") or {}).get("chars") or [] if c]
                    if chars:
                        m = chars[0][0]
                        d["spans"].append([n.id, m, min(c[1] for c in chars), min(max(c[2] for c in chars), kept_len[m])])
                for s in [*a.get("sources", []), *([own] if isinstance(own, dict) else [])]:
                    ts = s.get("token_scores") or {}
                    chars, l1, gxi = ts.get("chars") or [], ts.get("l1") or [], ts.get("gxi") or []
                    if l1 and not chars:
                        no_chars += len(l1)
                    for c, v1, v2 in zip(chars, l1, gxi):
                        if c and c[0] < len(kept_len) and c[2] <= kept_len[c[0]]:
                            tokens.append((c[0], c[1], c[2], float(v1), float(v2)))
                if tokens:
                    d["tokens"] = encode_tokens(tokens)
                if no_chars:
                    d["note"] = (f"{no_chars} scored tokens have no character positions (attribution written by an "
                                 "older agentgrad); run agentgrad attribute again for the heat map")
        out[str(n.id)] = d
    return out, strings.items
