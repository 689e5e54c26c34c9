"""String provenance, no model at all: the baselines every blame figure stands beside.

``provenance`` follows, from the loss target, the sources whose text contains the wrong string, and
blames where none does; ``provenance:key`` follows the key the wrong value is stated under (a fact
reader's key: :mod:`agentgrad.blame.facts`) and blames where that key's value first changed. A
method that does not beat them has found nothing the text did not say.
"""

from __future__ import annotations

from agentgrad.blame.context import Blame, BlameContext
from agentgrad.blame.facts import FactReader


def provenance(ctx: BlameContext, earliest: bool = False) -> list[Blame]:
    """String provenance, no model: walk back along the sources whose text holds the wrong string.

    From the loss target, among a call's sources (the nodes whose text its messages hold) those
    whose text contains the text the loss names as wrong (its span in the failing output) are the
    holders; the walk moves to one of them (calls and tools before inputs; the latest in the trace
    first, or with ``earliest`` the earliest: ``provenance:earliest``) and goes on. It stops at a
    call none of whose sources holds the string (the call introduced it: blamed), or at a tool
    (blamed itself); reaching an input (the string was in the task) blames the first call on the
    path. Without a loss span there is nothing to match and the failing call is blamed. The rest
    of the path follows, latest first, with falling scores.
    """
    wrong = ctx.wrong_text()
    node = ctx.target
    if wrong is None:
        return [ctx.blame(node, 1.0)]
    nodes, path = ctx.trace.nodes, [node]
    ctx.walked = {}
    while nodes[node].kind == "call":
        holders = [s for s in dict.fromkeys(sp.source for sp in nodes[node].spans)
                   if s not in path and wrong in nodes[s].text]
        if not holders:
            break
        node = max(holders, key=lambda s: (nodes[s].kind != "input", -s if earliest else s))
        ctx.walked[path[0]] = [node]
        path.insert(0, node)
    blamable = [n for n in path if nodes[n].kind in ("call", "tool")]
    first = blamable[0]
    return [ctx.blame(first, 1.0)] + [ctx.blame(n, 0.5 / (i + 1)) for i, n in enumerate(reversed(blamable[1:]))]


def key_provenance(ctx: BlameContext, root: bool = False, reader: FactReader | None = None) -> list[Blame]:
    """Key provenance, no model: follow the key of the wrong value's line, and blame where its value changed.

    The text the loss names as wrong (its span in the failing output) lies on a ``key: value`` line;
    from the loss target the walk moves to the source that states the same key (calls and tools
    before inputs, the latest in the trace first, as :func:`provenance`) and goes on to the roots,
    reading each node's value for the key. The earliest call on the path whose value differs from
    the value in the node it was followed to is blamed (where the key's value was first changed: a
    later change rewrote it); with no change, the root as :func:`provenance` blames it (a tool itself,
    else the first call on the path). It cannot tell a faithful rewrite (``14:30`` -> ``2:30 pm``)
    from a wrong value, so on a log where the value is rewritten it blames the earliest rewrite.
    Where the wrong text is on no ``key: value`` line it is :func:`provenance`. This is how far a
    string method goes on the planted-fault benchmark's logs, whose messages are ``key: value``
    lines; on free text it has no key to follow. ``root`` (``provenance:key:root``): a call at the
    root of the path (it states the key, and none of its sources does) introduced the value, and
    counts as its first change (a manager routing a key, ``drink: ask B``, to a worker that answers
    ``unknown``: the manager is blamed, not the worker). ``reader``: where a key and its value are
    (:mod:`agentgrad.blame.facts`; default: detected from the trace).
    """
    wrong = ctx.wrong_text()
    node = ctx.target
    if wrong is None:
        return [ctx.blame(node, 1.0)]
    nodes = ctx.trace.nodes
    reader = reader or ctx.reader
    a, text = ctx.loss.spans[node][0][0], nodes[node].text
    key = reader.key_at(text, ((a, a),))
    if key is None:
        return provenance(ctx)
    path, values = [node], {node: reader.key_value(text, key)}
    ctx.walked = {}
    while nodes[node].kind == "call":
        holders = [s for s in dict.fromkeys(sp.source for sp in nodes[node].spans)
                   if s not in path and reader.key_value(nodes[s].text, key) is not None]
        if not holders:
            break
        node = max(holders, key=lambda s: (nodes[s].kind != "input", s))
        values[node] = reader.key_value(nodes[node].text, key)
        ctx.walked[path[0]] = [node]
        path.insert(0, node)
    changed = [n for prev, n in zip(path, path[1:]) if values[n] != values[prev] and nodes[n].kind == "call"]
    if root and nodes[path[0]].kind == "call":
        changed.insert(0, path[0])
    blamable = [n for n in path if nodes[n].kind in ("call", "tool")]
    first = changed[0] if changed else blamable[0]
    return [ctx.blame(first, 1.0)] + [ctx.blame(n, 0.5 / (i + 1))
                                      for i, n in enumerate(n for n in reversed(blamable) if n != first)]
