"""The team-level verdict (agentgrad.blame.team) on hand-worked sets: shares, Wilson intervals, trajectories, order."""

from __future__ import annotations

import math

import pytest

from agentgrad.blame.team import NOBODY, TraceVerdict, common_trajectories, shares, team_verdict
from agentgrad.core.stats import percentile_interval, wilson
from agentgrad.blame.verdict import Verdict


def _mv(agent, repair=None, path=None, scores=(1.0, 0.5)):
    return Verdict("m", repair=list(repair if repair is not None else [agent]), agent=agent, node=1, kind="call",
                   scores=list(scores), paths=[path] if path else [])


def _set():
    """Five failures and one success, by hand: the default blames planner 3x, researcher 2x;
    provenance blames the researcher's tool (repair: researcher) 3x, planner once, and one tie
    planner+writer (half each)."""
    default = ["planner", "planner", "researcher", "planner", "researcher"]
    prov = [_mv("search", ["researcher"], ["researcher", "writer"]), _mv("planner", None, ["planner", "writer"]),
            _mv("search", ["researcher"], ["researcher", "writer"]), _mv("search", ["researcher"], ["researcher", "writer"]),
            _mv("planner", ["planner", "writer"], ["planner", "writer"])]
    out = [TraceVerdict(f"t{i}", "blamed", {"gbc": _mv(a), "provenance": p}) for i, (a, p) in enumerate(zip(default, prov))]
    out.append(TraceVerdict("ok", "succeeded", reason="gives the answer"))
    out.append(TraceVerdict("bad", "malformed", reason="not JSON"))
    return out


def test_shares_counts_and_order_by_hand():
    team = team_verdict(_set(), ["gbc", "provenance"], "provenance")
    assert team.counts == {"blamed": 5, "succeeded": 1, "malformed": 1, "unblamed": 0}
    g = team.methods["gbc"]
    assert g.traces == 5 and [(s.agent, s.failures, s.share) for s in g.shares] == [("planner", 3, 0.6), ("researcher", 2, 0.4)]
    p = team.methods["provenance"]
    assert [(s.agent, s.failures) for s in p.shares] == [("researcher", 3), ("planner", 1.5), ("writer", 0.5)]
    assert sum(s.share for s in p.shares) == pytest.approx(1.0)
    assert team.repair == ["researcher", "planner", "writer"]  # the primary method's order
    # trajectories of the primary method, counted once per trace
    assert [(t.agents, t.traces) for t in team.trajectories] == [(["researcher", "writer"], 3), (["planner", "writer"], 2)]
    for s in [*g.shares, *p.shares]:
        assert s.low <= s.share <= s.high


def test_round_trip_and_unknown_status():
    v = _set()[4]
    assert TraceVerdict.from_dict(v.to_dict()) == v
    assert v.methods["gbc"].scores == [1.0, 0.5] and v.methods["gbc"].score == 1.0
    with pytest.raises(ValueError):
        TraceVerdict("x", "maybe")


def test_a_method_that_names_nothing_is_its_own_row_and_no_prompt_to_repair():
    vs = [_mv(None, []), _mv("a"), _mv("a")]
    team = shares(vs)
    assert [(s.agent, s.failures) for s in team.shares] == [("a", 2), (NOBODY, 1)]
    tv = team_verdict([TraceVerdict(str(i), "blamed", {"m": v}) for i, v in enumerate(vs)])
    assert tv.repair == ["a"]


def test_trajectory_ties_keep_first_seen_and_each_trace_counts_once():
    vs = [Verdict("m", agent="a", paths=[["x", "y"], ["x", "y"]]), Verdict("m", agent="a", paths=[["z"]]),
          Verdict("m", agent="a", paths=[["z"], ["x", "y"]])]
    assert [(t.agents, t.traces) for t in common_trajectories(vs)] == [(["x", "y"], 2), (["z"], 2)]


def test_the_interval_is_wilsons_by_hand_and_wide_on_few_traces():
    """3 of 5 traces: p = 0.6, z = 1.96: centre (0.6 + z^2/10) / (1 + z^2/5) = 0.5566, half-width
    z sqrt(0.6 * 0.4 / 5 + z^2/100) / (1 + z^2/5) = 0.3258: [0.2307, 0.8824] (the textbook figure).
    2 of 2 is [0.3424, 1], 20 of 20 [0.8389, 1]: a bootstrap over traces that agree would say [1, 1]."""
    def share(k, n):
        return shares([_mv("a") for _ in range(k)] + [_mv("b") for _ in range(n - k)]).share("a")

    s = share(3, 5)
    assert (s.share, round(s.low, 4), round(s.high, 4)) == (0.6, 0.2307, 0.8824)
    two = shares([_mv("a"), _mv("a")]).share("a")
    assert (round(two.low, 4), two.high) == (0.3424, 1.0)
    assert (round(share(20, 20).low, 4), share(20, 20).high) == (0.8389, 1.0)
    small, big = share(6, 20), share(120, 400)
    assert big.high - big.low < (small.high - small.low) / 2  # ~ 1/sqrt(n): 20x the traces, ~4.5x narrower


def test_each_bound_is_where_the_score_test_stops_rejecting():
    """An independent property: the Wilson bounds L, H of k/n solve |k/n - q| = z sqrt(q (1 - q) / n)."""
    z = 1.959963984540054
    for k, n in ((1, 7), (5, 10), (9, 11), (2.5, 6)):  # a tie's half credit too
        lo, hi = wilson(k, n, z)
        for q in (lo, hi):
            assert abs(k / n - q) == pytest.approx(z * math.sqrt(q * (1 - q) / n), abs=1e-12)
    assert wilson(0, 0) == (0.0, 0.0) and wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0


def test_percentiles_follow_the_documented_convention():
    vals = list(range(100))
    assert percentile_interval([float(x) for x in vals]) == (2.0, 96.0)  # int(0.025*100), int(0.975*100)-1
    assert percentile_interval([]) == (0.0, 0.0)


def test_methods_missing_on_some_traces_count_only_their_own():
    vs = [TraceVerdict("a", "blamed", {"m": _mv("x"), "n": _mv("y")}), TraceVerdict("b", "blamed", {"m": _mv("x")})]
    tv = team_verdict(vs)
    assert tv.methods["m"].traces == 2 and tv.methods["n"].traces == 1
    assert tv.methods["n"].shares[0].share == 1.0 and tv.primary == "m"


def test_agreement_counts_the_blamed_traces_where_the_signals_methods_agree_by_hand():
    """_set(): the scorer method ``gbc:max_l1:targeted:blend`` against ``provenance`` (top agents):
    t0 planner/search, t1 planner/planner, t2 researcher/search, t3 planner/search, t4 researcher/planner:
    one agreement (t1) of five; the succeeded and malformed traces are not counted."""
    from agentgrad.blame.team import agreement, trace_confidence

    rows = [TraceVerdict(t.trace, t.status, {("gbc:max_l1:targeted:blend" if m == "gbc" else m): v
                                             for m, v in t.methods.items()}) for t in _set()]
    a = agreement(rows)
    assert (a.signal, a.method, a.partner, a.agree, a.disagree) == ("agree", "gbc:max_l1:targeted:blend", "provenance", 1, 4)
    assert a.meaning[True].startswith("methods agree: right in") and a.meaning[False].startswith("methods disagree")
    assert trace_confidence(rows[1].methods).value is True and trace_confidence(rows[0].methods).value is False
    team = team_verdict(rows)
    assert team.agreement.to_dict()["agree"] == 1 and team.to_dict()["agreement"]["disagree"] == 4
    # methods that carry no signal (no provenance): no agreement at all
    assert agreement([TraceVerdict("x", "blamed", {"last": _mv("writer")})]) is None
