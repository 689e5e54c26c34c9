"""Spans read from a running Arize Phoenix server, through Phoenix's own client (``pip install
'agentgrad[phoenix]'``): ``agentgrad blame --phoenix URL --project NAME``.

:func:`fetch_phoenix` asks the server for a project's spans (``Client(base_url=URL).spans.get_spans``:
each span a ``{name, context: {trace_id, span_id}, parent_id, span_kind, start_time, status_code,
attributes, events}`` object, the shape of Phoenix's span export) and writes them, one span a line, to a
JSONL file: what was blamed stays on disk beside the verdict, and it is read by the same span-row reader
as an exported file (:mod:`agentgrad.importers.rows`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgrad.errors import ConfigError, ModelError

FETCHED = "phoenix-spans.jsonl"  # the file ``agentgrad blame --phoenix`` writes into its run directory
EXTRA = "reading from a Phoenix server needs Phoenix's client: pip install 'agentgrad[phoenix]'"


def phoenix_spans(url: str, project: str, limit: int = 100_000, timeout: int = 60) -> list[dict[str, Any]]:
    """Every span of ``project`` on the Phoenix server at ``url`` (at most ``limit``), oldest first."""
    try:
        import httpx
        from phoenix.client import Client
    except ImportError:
        raise ConfigError(EXTRA) from None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--phoenix {url!r} is not a server address: give its URL, such as http://127.0.0.1:6006")
    client = Client(base_url=url.rstrip("/"))
    try:
        spans = client.spans.get_spans(project_identifier=project, limit=limit, timeout=timeout)
    except httpx.HTTPStatusError as e:
        if e.response.status_code == 404:
            names = _projects(client)
            raise ConfigError(f"the Phoenix server at {url} has no project {project!r}"
                              + (f"; its projects: {', '.join(names)}" if names else "")) from None
        raise ModelError(f"the Phoenix server at {url} answered {e.response.status_code} for project {project!r}: "
                         f"{e.response.text[:200]}") from None
    except httpx.HTTPError as e:
        raise ModelError(f"cannot reach a Phoenix server at {url} ({type(e).__name__}: {e}); is `phoenix serve` "
                         f"running there?") from None
    if not spans:
        raise ConfigError(f"project {project!r} on the Phoenix server at {url} holds no spans")
    return sorted((dict(s) for s in spans), key=lambda s: str(s.get("start_time") or ""))


def _projects(client: Any) -> list[str]:
    """The server's project names, for an error message (none if it cannot say)."""
    import httpx

    try:
        return [str(p["name"]) for p in client.projects.list() if isinstance(p, dict) and "name" in p]
    except httpx.HTTPError:
        return []


def fetch_phoenix(url: str, project: str, out: str | Path, limit: int = 100_000) -> Path:
    """``project``'s spans from the Phoenix server at ``url``, written to the JSONL file ``out`` (one span a
    line, as Phoenix's client returns it); returns ``out``."""
    spans = phoenix_spans(url, project, limit)
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".part")
    with open(tmp, "w", encoding="utf-8") as f:
        for s in spans:
            f.write(json.dumps(s, ensure_ascii=False, default=str) + "\n")
    tmp.replace(p)
    return p
