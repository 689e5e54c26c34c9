"""The curated top level: ``import agentgrad as ag`` gives the verbs and their typed results, plainly
(no attribute resolved lazily)."""

from __future__ import annotations

import inspect

import agentgrad as ag


def test_the_verbs_and_their_typed_results_are_exported():
    for name in ("Blame", "BlameSet", "OptimizeResult", "TeamVerdict", "TraceVerdict", "Verdict", "blame", "blame_set",
                 "list_blame_methods", "load_model", "load_scorer", "load_system", "optimize", "verbal_loss"):
        assert name in ag.__all__ and hasattr(ag, name), name
    assert not hasattr(ag, "__getattr__")  # every export is a plain attribute
    hints = {f: inspect.signature(getattr(ag, f)).return_annotation for f in ("blame", "optimize", "load_system")}
    assert hints == {"blame": "list[Blame]", "optimize": "OptimizeResult", "load_system": "'GraphSystem'"}, hints
    assert "gbc:max_l1:targeted:blend" in ag.list_blame_methods()
