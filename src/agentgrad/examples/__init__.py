"""Example systems shipped with agentgrad (also under ``examples/`` in the repository)."""

from pathlib import Path

PIPELINE = Path(__file__).parent / "pipeline"
LOOKUP = Path(__file__).parent / "lookup"
