"""``testing``: offline helpers (tiny models, a local OpenAI-compatible server)."""

from __future__ import annotations

from pathlib import Path

import typer

from agentgrad.benchmarks.planted.model import BlameModelConfig
from agentgrad.cli._common import console
from agentgrad.cli.options import check_new_folder

testing_app = typer.Typer(help="Offline helpers: tiny models and a local OpenAI-compatible server.", no_args_is_help=True)


@testing_app.command("tiny-model")
def tiny_model(
    out_dir: Path = typer.Argument(..., help="Folder to write the model to."),
    arch: str = typer.Option("llama", "--arch", help="llama, qwen3, mistral or gemma."),
    seed: int = typer.Option(0, "--seed"),
    layers: int = typer.Option(2, "--layers", min=1),
    hidden: int = typer.Option(64, "--hidden", min=8),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty folder."),
) -> None:
    """Build a tiny random model with a locally trained tokenizer (offline, seconds)."""
    from agentgrad.models.tiny import build_tiny_model

    check_new_folder(out_dir, overwrite, "folder")

    path = build_tiny_model(out_dir, arch=arch, seed=seed, layers=layers, hidden=hidden)
    console.print(f"tiny {arch} model written to {path} (random weights: for tests and demos only)")


@testing_app.command("serve")
def serve(
    model_dir: Path = typer.Argument(..., help="A Hugging Face model folder to answer from."),
    port: int = typer.Option(8000, "--port"),
    fail_rate: float = typer.Option(0.0, "--fail-rate", min=0.0, max=1.0, help="Fraction answered 500/429."),
) -> None:
    """Serve a local model as an OpenAI-compatible endpoint on 127.0.0.1 (for tests)."""
    from agentgrad.models.hf import HFModel
    from agentgrad.models.serve import OpenAICompatServer

    srv = OpenAICompatServer(HFModel(path=str(model_dir)), fail_rate=fail_rate, port=port)
    console.print(f"serving {model_dir} at {srv.base_url} (Ctrl-C to stop)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        srv.stop()


@testing_app.command("blame-model")
def blame_model(
    out_dir: Path = typer.Argument(..., help="Folder to write the trained scorer to (new or empty)."),
    steps: int = typer.Option(BlameModelConfig.steps, "--steps", min=1,
                              help="Training steps (stops earlier at --max-seconds)."),
    max_seconds: float = typer.Option(BlameModelConfig.max_seconds, "--max-seconds", min=0.0,
                                      help="Training time budget (0: none, steps only: the same result on any "
                                           "machine)."),
    seed: int = typer.Option(0, "--seed"),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into a non-empty folder."),
) -> None:
    """Train the blame benchmark's scorer offline (a mechanism test, not a model of real LLMs)."""
    from agentgrad.benchmarks.planted.model import train_blame_model

    check_new_folder(out_dir, overwrite, "folder")
    cfg = BlameModelConfig(steps=steps, max_seconds=max_seconds or None, seed=seed)
    with console.status("training"):
        rep = train_blame_model(out_dir, cfg)
    console.print(f"trained scorer written to {out_dir}: held-out token accuracy {rep['heldout_token_accuracy']:.4f} "
                  f"after {rep['steps']} steps in {rep['seconds']} s (a mechanism test, not a model of real LLMs)")
