"""The ablation's two pictures as SVG (no plotting library): test score against steps per arm (mean
over kept cases and seeds, with its 95% band), and blame accuracy against test gain, one point per
case and blame arm (the relation the verdict tests). The report draws them from an ablation folder's
records, and ``bench ablation`` writes them beside its table
(:func:`agentgrad.benchmarks.ablation.figure.write_figures`)."""

from __future__ import annotations

import html
import math
from typing import Any

from agentgrad.core.stats import mean_ci

COLOURS = {"gbc": "#1f77b4", "paper": "#ff7f0e", "provenance": "#8c564b", "random": "#7f7f7f", "all": "#9467bd",
           "oracle": "#2ca02c", "random_line": "#d62728", "noop": "#bcbd22"}
W, H, PAD = 520, 340, 56


def _frame(title: str, xlabel: str, ylabel: str, xticks: list[tuple[float, str]], x0: float, x1: float,
           y0: float, y1: float) -> tuple[list[str], Any, Any]:
    sx = lambda x: PAD + (x - x0) / ((x1 - x0) or 1) * (W - 2 * PAD)  # noqa: E731
    sy = lambda y: H - PAD - (y - y0) / ((y1 - y0) or 1) * (H - 2 * PAD)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13">{html.escape(title)}</text>',
           f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="black"/>',
           f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="black"/>',
           f'<text x="{W / 2}" y="{H - 14}" text-anchor="middle">{html.escape(xlabel)}</text>',
           f'<text x="14" y="{H / 2}" text-anchor="middle" transform="rotate(-90 14 {H / 2})">{html.escape(ylabel)}</text>']
    for x, label in xticks:
        out.append(f'<text x="{sx(x):.1f}" y="{H - PAD + 16}" text-anchor="middle">{html.escape(label)}</text>')
    for i in range(6):
        y = y0 + (y1 - y0) * i / 5
        out.append(f'<text x="{PAD - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
        out.append(f'<line x1="{PAD}" y1="{sy(y):.1f}" x2="{W - PAD}" y2="{sy(y):.1f}" stroke="#eee"/>')
    return out, sx, sy


def curve_svg(rows: list[dict[str, Any]], kept: set[str]) -> str:
    """Test score after 0..steps steps, per method: mean line and 95% band over (case, seed) runs."""
    methods = [m for m in COLOURS if any(r["method"] == m for r in rows)]
    steps = max((len(r["test_curve"]) for r in rows), default=0)
    out, sx, sy = _frame("Test score against optimisation steps (mean, 95% band)", "step", "test score",
                         [(i, str(i)) for i in range(steps + 1)], 0, max(steps, 1), 0.0, 1.0)
    for k, m in enumerate(methods):
        rs = [r for r in rows if r["method"] == m and r["case"] in kept]
        pts = []
        for i in range(steps + 1):
            xs = [r["test_before"] if i == 0 else r["test_curve"][min(i, len(r["test_curve"])) - 1]
                  for r in rs if i == 0 or r["test_curve"]]
            if xs:
                pts.append((i, *mean_ci(xs)))
        if not pts:
            continue
        band = [(sx(i), sy(min(1.0, hi))) for i, _, _, hi in pts] + [(sx(i), sy(max(0.0, lo))) for i, _, lo, _ in pts[::-1]]
        c = COLOURS[m]
        out.append(f'<polygon points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in band)}" fill="{c}" opacity="0.12"/>')
        out.append(f'<polyline points="{" ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v, _, _ in pts)}" fill="none" '
                   f'stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{W - PAD + 4}" y="{PAD + 14 * k}" fill="{c}">{m}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"


def scatter_svg(by_case: dict[str, Any]) -> str:
    """Blame accuracy (x) against test gain (y): one point per kept case and blame arm."""
    pts = [(m, v["blame_accuracy"], v.get("gain", v.get("recovered"))) for c in by_case.values() for m, v in c.items()
           if v.get("blame_accuracy") is not None and v.get("gain", v.get("recovered")) is not None
           and not math.isnan(v["blame_accuracy"]) and not math.isnan(v.get("gain", v.get("recovered")))]
    lo = min([-0.1] + [p[2] for p in pts])
    hi = max([0.1] + [p[2] for p in pts])
    out, sx, sy = _frame("Blame accuracy against test gain (one point per case and blame arm)",
                         "blame accuracy (share of failures naming the bugged agent)", "test gain (after - bugged)",
                         [(x / 5, f"{x / 5:.1f}") for x in range(6)], 0.0, 1.0, math.floor(lo * 10) / 10,
                         math.ceil(hi * 10) / 10)
    for m, x, y in pts:
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{COLOURS.get(m, "black")}" opacity="0.8"/>')
    for k, m in enumerate(m for m in COLOURS if m not in ("noop", "random_line")):
        out.append(f'<text x="{W - PAD + 4}" y="{PAD + 14 * k}" fill="{COLOURS[m]}">{m}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"
