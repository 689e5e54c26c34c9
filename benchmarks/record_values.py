"""Print every value a committed JSON record holds, one ``path = value`` line each, so that the figures a page
quotes from a measurement's record are read back from the record itself (``records/index.json`` checks them).

    python benchmarks/record_values.py records/loop-cost-cpu-2core.json
    python benchmarks/record_values.py records/contention-cpu-2core/demo-auto.json records/...  # several files

A JSON-lines file prints each line's values under its line number (``3.seed = 2``). Lists are indexed
(``cases.0.wall_s = 12.3``). Floats print as stored, so a page's rounding is checked against the full value.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterator


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted path, value)`` for every scalar of ``value``, in the record's order."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}.{i}" if path else str(i))
    else:
        yield path, value


def read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    return json.loads(text)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", type=Path, nargs="+", help="JSON or JSON-lines records")
    a = p.parse_args(argv)
    for f in a.files:
        try:
            record = read(f)
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: {f} is not a readable JSON record ({e})")
        prefix = f"{f.name}: " if len(a.files) > 1 else ""
        for path, v in leaves(record):
            print(f"{prefix}{path} = {json.dumps(v)}")


if __name__ == "__main__":
    main()
