"""The benchmark data directory: ``--data-dir``, else ``$AGENTGRAD_DATA_DIR``, else ``./data``."""

from __future__ import annotations

import os
from pathlib import Path

from agentgrad.errors import ConfigError


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    return Path(explicit or os.environ.get("AGENTGRAD_DATA_DIR") or "data")


def benchmark_dir(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """``<data dir>/<name>``, or a one-line error saying how to point at it."""
    path = data_dir(explicit) / name
    if not path.is_dir():
        raise ConfigError(
            f"benchmark data {path} not found; set AGENTGRAD_DATA_DIR (or --data-dir) to the folder holding {name}/"
        )
    return path
