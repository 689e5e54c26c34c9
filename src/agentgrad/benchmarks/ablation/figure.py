"""The ablation's two pictures (:mod:`agentgrad.report.ablation_figures`), written beside its table:
``steps.svg`` (test score against steps per arm) and ``blame-vs-gain.svg`` (blame accuracy against
test gain, one point per case and blame arm)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgrad.report.ablation_figures import curve_svg, scatter_svg


def write_figures(summary: dict[str, Any], rows: list[dict[str, Any]], out: Path) -> list[Path]:
    kept = {c["case"] for c in summary["cases"] if c["kept"]}
    paths = [out / "steps.svg", out / "blame-vs-gain.svg"]
    paths[0].write_text(curve_svg(rows, kept), encoding="utf-8")
    paths[1].write_text(scatter_svg(summary["by_case"]), encoding="utf-8")
    return paths
