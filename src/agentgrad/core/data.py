"""The benchmark data directory.

In order: ``--data-dir``; ``$AGENTGRAD_DATA_DIR``; ``./data`` when it exists; ``../shared/data`` when
it exists (a checkout beside the team's shared data); else ``./data`` (and a one-line error saying
how to point at the data when a benchmark needs it).
"""

from __future__ import annotations

import os
from pathlib import Path

from agentgrad.errors import ConfigError


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    if explicit or os.environ.get("AGENTGRAD_DATA_DIR"):
        return Path(explicit or os.environ["AGENTGRAD_DATA_DIR"])
    for candidate in (Path("data"), Path("..") / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return Path("data")


def benchmark_dir(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """``<data dir>/<name>``, or a one-line error saying how to point at it."""
    path = data_dir(explicit) / name
    if not path.is_dir():
        raise ConfigError(
            f"benchmark data {path} not found; set AGENTGRAD_DATA_DIR (or --data-dir) to the folder holding {name}/"
        )
    return path
