"""How the report writes a value in a cell."""

from __future__ import annotations

import json
from typing import Any


def fmt(v: Any) -> str:
    """A value for a table cell: floats to 4 significant digits, booleans as yes/no, None as '-'."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v):
        return ", ".join(fmt(x) for x in v)[:300]
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)[:300]
    return str(v)
