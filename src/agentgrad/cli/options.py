"""The command line's option types and their parsing, in one place: model and scorer values, comma
lists, device and dtype, ranges, files that must exist and folders to write.

A command declares its options from here (``device: str = DEVICE``) and parses their values with
the functions below; what a value means is the library's business, which raises the one-line
:class:`~agentgrad.errors.ConfigError` for a wrong one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from agentgrad.blame.methods import DEFAULT_METHOD, registry_grammar
from agentgrad.errors import ConfigError

TRACE_FILE = "an agentgrad trace (the JSON that agentgrad run, import or blame writes under traces/)"
DEVICES = re.compile(r"cpu|mps|(cuda|xpu)(:\d+)?")
DTYPES = ("float32", "bfloat16", "float16")


# --- parsing ------------------------------------------------------------------------------------

def names(value: str, every: tuple[str, ...] | list[str] | dict) -> list[str]:
    """A comma list (``a,b``), or ``all``: every name of ``every``, in its order. Unknown names are
    kept: the library that reads them says which are valid."""
    return list(every) if value.strip() == "all" else [x.strip() for x in value.split(",") if x.strip()]


def method_names(value: str, judge: bool = False, replay: bool = False, exact: bool = False) -> list[str]:
    """``--methods``: ``all`` or a comma list of blame method names, aliases and prefixes, in the order
    given (:func:`agentgrad.blame.methods.select_methods`: ``all`` takes the judge methods with a
    judge, ``replay`` where runs can be replayed; an unknown name is a one-line error listing the
    valid ones)."""
    from agentgrad.blame.methods import select_methods

    return select_methods(value, judge=judge, replay=replay, exact=exact)


def scorer_value(value: Optional[str]) -> Optional[str]:
    """``--scorer``: a scorer value (:func:`agentgrad.attribution.factory.make_scorer`), or None for
    ``none`` or an empty value (model-free methods only)."""
    return None if value is None or value.strip() in ("", "none") else value


def check_device(value: str) -> str:
    """``--device``: cpu, cuda, cuda:N (also mps, xpu, xpu:N), else a one-line error."""
    if not DEVICES.fullmatch(value):
        raise ConfigError(f"--device takes cpu, cuda or cuda:N (also mps, xpu), got {value!r}")
    return value


def check_dtype(value: str) -> str:
    """``--dtype``: float32, bfloat16 or float16, else a one-line error."""
    if value not in DTYPES:
        raise ConfigError(f"--dtype takes {', '.join(DTYPES)}, got {value!r}")
    return value


def wording_range(value: str) -> int | tuple[int, int] | None:
    """``--wordings``: N (the first N; 0 all) or A-B (the wordings A to B), else a one-line error."""
    lo, dash, hi = value.strip().partition("-")
    try:
        if dash:
            return int(lo), int(hi)
        return int(lo) or None
    except ValueError:
        raise ConfigError(f"--wordings takes N (the first N wordings) or A-B (wordings A to B), got {value!r}") from None


def check_optimizer_kind(kind: str) -> None:
    """``--optimizer``: one of the optimizer kinds (verbal, target)."""
    from agentgrad.optim.targets import OPTIMIZER_KINDS

    if kind not in OPTIMIZER_KINDS:
        raise ConfigError(f"--optimizer takes {' or '.join(OPTIMIZER_KINDS)}, got {kind!r}")


# --- files read and folders written ----------------------------------------------------------------

def check_user_file(path: Optional[Path], expected: str) -> None:
    """A file the user named, looked at before anything loads: an empty, binary or non-UTF-8 file is one
    line that says what the file is and what was ``expected`` ("a system YAML", ...). A missing file
    or a folder is left to the reader, whose error already says so."""
    if path is None or not Path(path).is_file():
        return
    from agentgrad.importers.base import read_user_text

    read_user_text(path, expected)


def check_new_folder(path: Path, overwrite: bool, name: str) -> None:
    """A folder to write that is not ``--out`` (``name``: the option or argument, e.g. ``--dump-db``, ``OUT_DIR``):
    new or empty, unless ``overwrite``; the hint names what the command takes."""
    from agentgrad.errors import RunError

    if path.exists() and not path.is_dir():
        raise RunError(f"{name} {path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise RunError(f"{name} {path} is not empty; pass --overwrite to write into it, or choose another {name}")


def check_new_run(out: Path, resume: bool) -> None:
    """A benchmark optimisation writes train/, eval/ and result.json: never into a folder holding anything else."""
    from agentgrad.runs.rundir import check_run_dir

    check_run_dir(out, resume, logs=("train/events.jsonl", "eval/events.jsonl"))


def tau_options(system: str, prompts: Optional[Path], model: list[str], user_model: Optional[str],
                user_temperature: Optional[float], split: str, tasks: Optional[str], trials: int, max_steps: int,
                data_dir: Optional[Path]):
    """The tau-bench commands' options as the library takes them (the prompts file checked first)."""
    from agentgrad.benchmarks.taubench.run import TauOptions

    check_user_file(prompts, "a prompts YAML (each agent's prompt, as the packaged prompts file)")
    return TauOptions(system, str(prompts) if prompts else None, list(model), user_model, user_temperature, split,
                      tasks, trials, max_steps, str(data_dir) if data_dir else None)


# --- option declarations shared by several commands -------------------------------------------------

DEVICE = typer.Option("cpu", "--device", callback=check_device, help="cpu, cuda or cuda:N (the scorer).")
DTYPE = typer.Option("float32", "--dtype", callback=check_dtype, help="float32 (default), bfloat16 or float16.")
JUDGE = typer.Option("", "--judge", help="A model for the judge methods: smollm2, gguf:FILE, a HF folder, "
                                         "openai:MODEL@URL (any OpenAI-compatible server).")
TAU_SYSTEM = typer.Option("multi", "--system", help="multi (the paper's system) or single (baseline).")
TAU_PROMPTS = typer.Option(None, "--prompts", help="A prompts YAML replacing the packaged one.")
TAU_MODEL = typer.Option([], "--model", help="NAME=PATH_OR_ID (hf folder/hub id, openai:MODEL@URL, tiny); "
                                             "a bare value sets 'default', the agents' model.")
TAU_USER = typer.Option(None, "--user-model", help="The simulated customer's model (same forms as --model).")
TAU_SPLIT = typer.Option("test", "--split", help="train, dev or test.")
TAU_MAX_STEPS = typer.Option(30, "--max-steps", min=1, help="tau-bench's limit of agent steps (tool calls and "
                                                            "replies) per conversation; reaching it scores 0.")
TAU_TASKS = typer.Option(None, "--tasks", help="Task indices, e.g. 0-9,12 (default: all).")
DATA_DIR = typer.Option(None, "--data-dir", help="Benchmark data (default: $AGENTGRAD_DATA_DIR).")
CONCURRENCY = typer.Option(1, "--concurrency", min=1, help="Episodes evaluated at once (for servers).")
METHOD = typer.Option(DEFAULT_METHOD, "--method", help=f"Blame method: a name of the registry ({registry_grammar()}), "
                                                       "or an alias (mean_l1, ...; docs/blame.md).")
SCORER = typer.Option(None, "--scorer", help="White-box scorer folder or hub id (default: the agents' own model, "
                                             "when local).")
OPTIMIZER = typer.Option(None, "--optimizer-model", help="LLM that rewrites prompts (same forms as --model; "
                                                         "default: deterministic).")
OPTIMIZER_KIND = typer.Option("verbal", "--optimizer", help="verbal (the paper's: the loss walked back) or target "
                                                           "(target back-propagation).")
RESUME_RUN = typer.Option(False, "--resume", help="Continue an interrupted run.")
WOZ_SYSTEM = typer.Option("multi", "--system", help="multi (the paper's system), single (baseline) or gold.")
WOZ_N = typer.Option(100, "--n", min=1, help="Dialogues sampled from the split (the paper: 100).")
WOZ_SEED = typer.Option(42, "--seed", help="Seed of the dialogue sample (the paper: 42).")
