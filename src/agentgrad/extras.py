"""Optional extras: one way to import one, with a one-line error naming the install when it is missing."""

from __future__ import annotations

import importlib
from typing import Any

from agentgrad.errors import ConfigError


def require(module: str, extra: str, what: str) -> Any:
    """``import module``, or a :class:`ConfigError` saying that ``what`` needs ``pip install 'agentgrad[extra]'``."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        mod = None
    if mod is None:  # also when a test hides it (sys.modules[module] = None)
        raise ConfigError(f"{what} needs {module}, an optional extra: pip install 'agentgrad[{extra}]'")
    return mod
