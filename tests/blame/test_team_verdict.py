"""The team-level verdict (agentgrad.blame.team) on hand-worked sets: shares, intervals, trajectories, order."""

from __future__ import annotations

import math
import random

import pytest

from agentgrad.core.stats import percentile_interval
from agentgrad.blame.team import (NOBODY, TraceVerdict, bootstrap_draws, common_trajectories,
                                  shares, team_verdict)
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
    team = team_verdict(_set(), ["gbc", "provenance"], "provenance", resamples=500)
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
    team = shares(vs, resamples=200)
    assert [(s.agent, s.failures) for s in team.shares] == [("a", 2), (NOBODY, 1)]
    tv = team_verdict([TraceVerdict(str(i), "blamed", {"m": v}) for i, v in enumerate(vs)], resamples=200)
    assert tv.repair == ["a"]


def test_trajectory_ties_keep_first_seen_and_each_trace_counts_once():
    vs = [Verdict("m", agent="a", paths=[["x", "y"], ["x", "y"]]), Verdict("m", agent="a", paths=[["z"]]),
          Verdict("m", agent="a", paths=[["z"], ["x", "y"]])]
    assert [(t.agents, t.traces) for t in common_trajectories(vs)] == [(["x", "y"], 2), (["z"], 2)]


def test_interval_is_seeded_contains_the_share_and_narrows_with_n():
    def team(n, seed=0):
        k = round(0.3 * n)
        return shares([_mv("a") for _ in range(k)] + [_mv("b") for _ in range(n - k)], seed=seed).share("a")

    a, b = team(20), team(20)
    assert (a.low, a.high) == (b.low, b.high)  # seeded
    small, big = team(20), team(400)
    assert small.low <= small.share <= small.high and big.low <= big.share <= big.high
    assert big.high - big.low < (small.high - small.low) / 2  # ~ 1/sqrt(n): 20x the traces, ~4.5x narrower
    assert 0.0 <= small.low < 0.3 < small.high <= 1.0


def _binomial_quantile(n, p, q):
    """The smallest k with P(X <= k) >= q for X ~ Binomial(n, p), and how far the CDF stands from q
    on either side (the bootstrap's order statistic lands on k unless its count falls across)."""
    cdf = 0.0
    for k in range(n + 1):
        prev = cdf
        cdf += math.comb(n, k) * p ** k * (1 - p) ** (n - k)
        if cdf >= q:
            return k, q - prev, cdf - q
    return n, 0.0, 0.0


def test_the_interval_is_the_binomials_percentiles():
    """An independent computation: resampling n traces of which k blame agent a, the resampled count
    is Binomial(n, k/n), so the percentile interval is that binomial's 2.5% and 97.5% quantiles
    (over n), wherever the order statistic is far (in standard errors of 2000 draws) from a jump."""
    n, k, r = 10, 5, 2000  # Binomial(10, 0.5): 2 and 8 are its 2.5% and 97.5% quantiles
    v = shares([_mv("a") for _ in range(k)] + [_mv("b") for _ in range(n - k)], resamples=r, seed=3).share("a")
    for q, got in ((0.025, v.low), (0.975, v.high)):
        want, below, above = _binomial_quantile(n, k / n, q)
        se = math.sqrt(q * (1 - q) / r)
        assert min(below, above) > 3.5 * se, "the case must sit well inside a step of the CDF"
        assert got == pytest.approx(want / n)
    assert (v.low, v.high) == (0.2, 0.8)


def test_draws_and_percentiles_follow_the_documented_convention():
    rng = random.Random(7)
    want = [rng.choices(range(5), k=5) for _ in range(3)]
    assert bootstrap_draws(5, 3, 7) == want
    vals = list(range(100))
    assert percentile_interval([float(x) for x in vals]) == (2.0, 96.0)  # int(0.025*100), int(0.975*100)-1
    assert percentile_interval([]) == (0.0, 0.0)


def test_methods_missing_on_some_traces_get_their_own_draws():
    vs = [TraceVerdict("a", "blamed", {"m": _mv("x"), "n": _mv("y")}), TraceVerdict("b", "blamed", {"m": _mv("x")})]
    tv = team_verdict(vs, resamples=100)
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
    team = team_verdict(rows, resamples=50)
    assert team.agreement.to_dict()["agree"] == 1 and team.to_dict()["agreement"]["disagree"] == 4
    # methods that carry no signal (no provenance): no agreement at all
    assert agreement([TraceVerdict("x", "blamed", {"last": _mv("writer")})]) is None
