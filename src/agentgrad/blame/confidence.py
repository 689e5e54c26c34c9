"""How far to trust one trace's blame verdict: agreement between methods, with its measured meaning.

A verdict names an agent; whether it is right differs by family. The signals here need nothing but
the verdicts of one trace (which agents each method puts at the top):

- ``agree``: the scorer method (the default, ``gbc:max_l1:targeted:blend``) and ``provenance`` (the
  string walk, no model) name the same agents;
- ``model-free`` (no scorer ran): ``provenance`` and ``last`` (the final agent) name the same agents.

Each comes with what it was measured to mean: the verdict's accuracy when the methods agree and when
they disagree, on the report parts of the planted-fault, injected-fault and Who&When benchmarks
(docs/confidence.md, where the signals were pre-registered). The figures are read from the package
file ``confidence.json``, written by ``python benchmarks/confidence_table.py --write-package`` from
the committed records; nothing here is asserted by hand.

    c = confidence({"gbc:max_l1:targeted:blend": ["reader"], "provenance": ["reader"]})
    c.signal, c.value                      # ('agree', True)
    print(confidence_line(trace_verdict.methods))  # one line for a printed verdict
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentgrad.errors import ConfigError, RegistryError

PACKAGE_FILE = Path(__file__).with_name("confidence.json")
PARTNERS = {"agree": "provenance", "model-free": "last"}


@dataclass(frozen=True)
class Confidence:
    """One trace's confidence signal.

    Attributes:
        signal: ``agree`` (a scorer method against ``provenance``), ``model-free`` (``provenance``
            against ``last``), or ``none`` (the verdicts hold neither pair).
        value: True where the two methods name the same agents, False where not, None for ``none``.
        method: the method whose verdict the signal qualifies.
        partner: the method it is compared with.
        meaning: the measured meaning, as a sentence (accuracy when agreeing and disagreeing, per
            benchmark, with the counts).
        measured: the figures the meaning quotes, per benchmark (``agree`` / ``disagree``: n,
            accuracy, 95% interval), from the package file.
    """

    signal: str
    value: bool | None
    method: str | None
    partner: str | None
    meaning: str
    measured: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"signal": self.signal, "value": self.value, "method": self.method, "partner": self.partner,
                "meaning": self.meaning, "measured": self.measured}


def top_agents(verdict: Any) -> list[str]:
    """The agents a verdict puts at the top: a :class:`~agentgrad.blame.verdict.Verdict` (its blamed
    entries' agents), a row (its ``agent``), an agent's name, or a list of names."""
    if verdict is None:
        return []
    if isinstance(verdict, str):
        return [verdict]
    if isinstance(verdict, Mapping):
        a = verdict.get("agent")
        return top_agents(a)
    blamed = getattr(verdict, "blamed", None)
    if blamed is not None:
        return list(dict.fromkeys(b.agent for b in blamed))
    if isinstance(verdict, Iterable):
        return list(dict.fromkeys(str(a) for a in verdict))
    raise ConfigError(f"a verdict is an outcome, a row with an 'agent', or agent names, not {type(verdict).__name__}")


def agrees(a: Iterable[str], b: Iterable[str]) -> bool:
    """Whether two verdicts name the same agents (the same set at the top; an empty verdict agrees with none)."""
    a, b = set(a), set(b)
    return bool(a) and a == b


def by_method(verdicts: Any) -> dict[str, list[str]]:
    """{method: top agents} of a mapping {method: verdict}, or of rows / outcomes that name their method."""
    if isinstance(verdicts, Mapping):
        return {str(m): top_agents(v) for m, v in verdicts.items()}
    out = {}
    for v in verdicts:
        m = v.get("method") if isinstance(v, Mapping) else getattr(v, "method", None)
        if not m:
            raise ConfigError("a verdict row without its method: pass {method: verdict} or rows with a 'method'")
        out[str(m)] = top_agents(v)
    return out


@lru_cache(maxsize=4)
def measured(path: Path = PACKAGE_FILE) -> dict[str, Any]:
    """The measured figures (the package file written by ``benchmarks/confidence_table.py --write-package``)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not the confidence figures ({e.__class__.__name__}); "
                          "python benchmarks/confidence_table.py ... --write-package writes them") from None


def _scorer_method(names: list[str]) -> str | None:
    """The first of ``names`` that reads a scorer (a name outside the registry reads none)."""
    from agentgrad.blame.methods import needs_scorer

    def reads(m: str) -> bool:
        try:
            return needs_scorer(m)
        except RegistryError:
            return False

    return next((m for m in names if reads(m)), None)


def figure(bench: Mapping[str, Any], side: str) -> str:
    """One benchmark's accuracy on one side, as a range where the records leave episodes unresolved
    (both methods wrong: the same agent or not, the records cannot say): from the registered counting
    (every unresolved episode an agreement) to the other extreme (every one a disagreement)."""
    a = bench[side]["accuracy"]
    other = (bench.get("bound") or {}).get(side) if bench.get("unresolved") else None
    lo, hi = sorted((a, a if other is None else other))
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def meaning(signal: str, value: bool, figures: dict[str, Any], method: str | None = None) -> str:
    """The sentence that says what ``value`` of ``signal`` was measured to mean."""
    side, other = ("agree", "disagree") if value else ("disagree", "agree")
    benches = figures.get("benchmarks", {})

    def say(s: str) -> str:  # a benchmark measured with another method than the verdict's says which
        return ", ".join(f"{figure(b, s)} of {name} (n={b[s]['n']}"
                         f"{'' if not method or b['method'] == method else ', with ' + b['method']})"
                         for name, b in benches.items() if b[s]["n"]) or "never measured"

    pair = "methods agree" if value else "methods disagree"
    return f"{pair}: right in {say(side)}; when they {other}: {say(other)}"


# which measured benchmarks speak for a trace, by where it came from (trace_kind): agentgrad's own runs
# (the planted and injected faults) and Who&When's logs; a trace of any other kind was never measured
MEASURED_KINDS = {"agentgrad": ("planted", "injected"), "whowhen": ("Who&When",)}


def trace_kind(trace: Any) -> str:
    """Where a trace came from: ``agentgrad`` (run by agentgrad), else what imported it (``whowhen``,
    ``taubench``, ``groupchat``, ``chat``, ``openinference``, ...)."""
    return str(trace.meta.get("imported") or "agentgrad")


def confidence(verdicts: Any, method: str | None = None, *, figures: Mapping[str, Any] | None = None,
               kind: str | None = None) -> Confidence:
    """The confidence signal of one trace's verdicts, with its measured meaning.

    Args:
        verdicts: {method: verdict} (a verdict: a :class:`~agentgrad.blame.verdict.Verdict`, a row
            with an ``agent``, agent names), or a list of rows or verdicts that name their method.
        method: the verdict to qualify; by default the first method that reads a scorer, else
            ``provenance``.
        figures: the measured figures (default: the package file).
        kind: where the trace came from (:func:`trace_kind`): only the benchmarks measured on traces
            of that kind are quoted; for a kind never measured the meaning says so. None: all of them.

    Returns:
        ``agree`` where a scorer method and ``provenance`` are both there, else ``model-free`` where
        ``provenance`` and ``last`` are, else ``none`` (value None).
    """
    tops = by_method(verdicts)
    figs = measured() if figures is None else figures
    scorer = method if method and method != "provenance" else _scorer_method(list(tops))
    if scorer and scorer in tops and "provenance" in tops:
        signal, mine, partner = "agree", scorer, "provenance"
    elif "provenance" in tops and "last" in tops and (method in (None, "provenance")):
        signal, mine, partner = "model-free", "provenance", "last"
    else:
        return Confidence("none", None, method or scorer, None,
                          "no confidence: it needs a scorer method and provenance, or provenance and last")
    if not tops[mine]:
        return Confidence("none", None, mine, partner, f"no confidence: {mine} named no agent")
    value = agrees(tops[mine], tops[partner])
    f = dict(figs.get("signals", {}).get(signal, {}))
    if kind is not None:
        prefixes = MEASURED_KINDS.get(kind, ())
        f["benchmarks"] = {n: b for n, b in (f.get("benchmarks") or {}).items() if n.startswith(prefixes)}
        if not f["benchmarks"]:
            pair = "methods agree" if value else "methods disagree"
            return Confidence(signal, value, mine, partner, f"{pair}: not measured for traces like this "
                              f"({kind} traces)", {})
    return Confidence(signal, value, mine, partner, meaning(signal, value, f, mine), f.get("benchmarks", {}))


def confidence_line(verdicts: Any, method: str | None = None) -> str:
    """One printable line: ``confidence: <the measured meaning>`` (or why there is none)."""
    c = confidence(verdicts, method)
    if c.value is None:
        return f"confidence: {c.meaning}"
    names = f"{c.method} and {c.partner}"
    return f"confidence ({names}): {c.meaning} (docs/confidence.md)"


def short_line(c: Confidence) -> str:
    """``c`` in one line a person reads beside a verdict: whether the two methods agree, then per
    benchmark how often such a verdict was right, against the other side in brackets."""
    if c.value is None:
        return f"confidence: {c.meaning}"
    side, other = ("agree", "disagree") if c.value else ("disagree", "agree")
    def named(name: str, b: Mapping[str, Any]) -> str:  # a benchmark measured with another method says which
        m = b.get("method")
        return f"{name} [measured with {m.rsplit(':', 1)[-1]}]" if m and c.method and m != c.method else name

    parts = [f"{named(name, b)} {figure(b, side)} (when they {other}: {figure(b, other)})"
             for name, b in c.measured.items() if b[side]["n"] and b[other]["n"]]
    if not c.measured and "not measured" in c.meaning:
        return f"confidence: {c.method} and {c.partner} {side}; {c.meaning.split(': ', 1)[1]}"
    said = "; ".join(parts) or "never measured"
    return (f"confidence: {c.method} and {c.partner} {side}; where they {side} the verdict was right in: {said} "
            f"(docs/confidence.md)")

