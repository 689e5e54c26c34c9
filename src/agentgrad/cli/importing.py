"""``import``: logs not written with agentgrad, as traces (chat JSONL, OTLP spans, Who&When)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agentgrad.cli._common import app, console, err_console


@app.command("import")
def import_command(
    fmt: str = typer.Argument(..., metavar="FORMAT", help="chat (JSONL, one conversation per line), otel (OTLP JSON "
                                                           "spans: OpenInference or OTel GenAI, detected), openinference "
                                                           "(OTLP JSON, OpenInference spans only) or whowhen."),
    src: Optional[Path] = typer.Argument(None, help="The file to read (whowhen: default the data directory's "
                                                    "who_and_when.tar.gz)."),
    out: Path = typer.Option(..., "--out", help="Run directory for traces/ and import.json (new or empty)."),
    subset: str = typer.Option("all", "--subset", help="whowhen: hand, algorithm or all."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty --out."),
) -> None:
    """Import multi-agent logs as traces that attribute and the blame methods read unchanged."""
    from agentgrad.errors import ConfigError
    from agentgrad.core.files import NameRegistry, RunFiles, check_new_output
    from agentgrad.importers import import_logs

    if src is not None and not src.is_file():
        raise ConfigError(f"import {fmt}: {src} is {'a directory' if src.is_dir() else 'missing'}; give a file")
    check_new_output(out, overwrite, "dir", protect=[src] if src else None)
    with console.status(f"importing {fmt}"):
        result = import_logs(fmt, src, subset)
    if not result.traces:  # one line: the first reason, and how many more
        first = result.broken[0] if result.broken else "no record in it"
        more = f" (and {len(result.broken) - 1} more broken record(s))" if len(result.broken) > 1 else ""
        raise ConfigError(f"nothing imported from {src or fmt}: {first}{more}")
    for line in result.broken:
        err_console.print(f"not imported: {line}", markup=False, highlight=False)
    files, names = RunFiles(out), NameRegistry()
    written = []
    for tr in result.traces:
        name = names.claim(tr.id)
        files.write_json("traces", f"{name}.json", data=tr.to_dict())
        written.append(f"traces/{name}.json")
    files.write_json("import.json", data={"format": fmt, "source": str(src) if src else None, "subset": subset,
                                          "traces": written, "broken": result.broken})
    console.print(f"imported {len(result.traces)} trace(s) into {out}/traces/; {len(result.broken)} broken "
                  f"record(s) not imported (listed in import.json)")
