"""A fuzz harness for the ``agentgrad`` command (needs ``hypothesis``, in the ``test`` extra).

Generated argument lists for every command, over a pool of generated files (YAML systems and
optimisation configs, inputs files, traces and attribution files: valid, truncated, wrong types,
binary). The property: the exit code is 0, or it is non-zero with a one-line message on stderr;
never a traceback; never a file written outside the folder given as ``--out`` (or ``--dump-db``; for ``report`` without
``--out``, its default page beside the run or trace).
Used by ``tests/cli/test_fuzz_cli.py`` (a bounded number of examples) and ``benchmarks/fuzz_cli.py``
(many more).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import yaml

COMMANDS = [
    ["run"], ["attribute"], ["trace", "show"], ["optimize"], ["testing", "tiny-model"], ["backends"],
    ["bench", "taubench", "replay-gold"], ["bench", "taubench", "evaluate"], ["bench", "multiwoz", "evaluate"],
    ["bench", "multiwoz", "optimize"], ["bench", "taubench", "optimize"], ["bench"], ["report"], [],
]  # not ``data download``: it writes into the data directory by design, and needs the network
OPTIONS = ["--inputs", "--out", "--model", "--concurrency", "--resume", "--scorer", "--method", "--top-k", "--seed",
           "--on-too-long", "--overwrite", "--max-chars", "--tasks", "--split", "--n", "--trials", "--system",
           "--dump-db", "--data-dir", "--arch", "--layers", "--hidden", "--samples", "--debug-not", "--help",
           "--attribution", "--episodes"]
VALUES = ["0", "-1", "1", "2", "999999999999", "nan", "", "x", "../escape", "/", "tiny", "default=tiny", "mean_l1", "random", "skip", "5-2", "0-1", "all",
          "dev", "test", "gold", "multi"]


def make_files(root: Path, tiny_model: str | None = None) -> dict[str, Path]:
    """The pool of input files: valid ones and every kind of broken one."""
    root.mkdir(parents=True, exist_ok=True)
    system = {"name": "s", "inputs": ["question"],
              "models": {"default": {"backend": "fake", "replies": ["ok"], "cycle": True}},
              "agents": {"a": {"prompt": "Answer.", "inputs": ["question"]},
                         "b": {"prompt": "Check.", "inputs": ["a", "question"]}}}
    trace = {"schema": "agentgrad.trace", "schema_version": 1, "id": "t", "meta": {}, "nodes": [
        {"id": 0, "kind": "input", "name": "question", "output": {"text": "What is 2+2?"}, "parents": []},
        {"id": 1, "kind": "call", "name": "a", "output": {"text": "4"}, "parents": [0],
         "messages": [{"role": "system", "content": "Answer."}, {"role": "user", "content": "What is 2+2?"}],
         "spans": [{"source": 0, "message": 1, "start": 0, "end": 12}]}]}
    texts: dict[str, str | bytes] = {
        "system.yaml": yaml.safe_dump(system),
        "system_cycle.yaml": yaml.safe_dump({**system, "agents": {"a": {"prompt": "x", "inputs": ["b"]},
                                                                  "b": {"prompt": "y", "inputs": ["a"]}}}),
        "system_types.yaml": yaml.safe_dump({**system, "agents": {"a": {"prompt": 3, "inputs": "question"}}}),
        "system_empty.yaml": "agents: {}\n",
        "system_list.yaml": "- 1\n- 2\n",
        "system_trunc.yaml": yaml.safe_dump(system)[:57],
        "inputs.jsonl": "".join(json.dumps({"id": f"q{i}", "question": f"q {i}"}) + "\n" for i in range(3)),
        "inputs_hostile.jsonl": "".join(json.dumps({"id": i, "question": "q"}) + "\n"
                                        for i in ("../../evil", "/tmp/abs", "a/b")),
        "inputs_dup.jsonl": '{"id": 1, "question": "a"}\n{"id": "1", "question": "b"}\n',
        "inputs_trunc.jsonl": '{"id": 1, "question": "a"}\n{"id": 2, "quest',
        "inputs_types.jsonl": "[1, 2]\n\"x\"\n",
        "trace.json": json.dumps(trace),
        "trace_trunc.json": json.dumps(trace)[:80],
        "trace_types.json": json.dumps({**trace, "nodes": "oops"}),
        "trace_badspan.json": json.dumps({**trace, "nodes": [trace["nodes"][0], {
            **trace["nodes"][1], "spans": [{"source": 5, "message": 9, "start": -1, "end": 99}]}]}),
        "attribution.json": json.dumps({"schema": "agentgrad.attribution", "nodes": [], "graph": {"nodes": 3}}),
        "optimize.yaml": yaml.safe_dump({"task": "pipeline", "system": "system.yaml", "data": {"train": "inputs.jsonl"},
                                         "models": {"default": {"backend": "fake"}},
                                         "scorer": {"model": "default"}, "trainer": {"samples": "x"}}),
        "optimize_types.yaml": "task: [1]\nsystem: 3\n",
    }
    for name, text in texts.items():
        (root / name).write_text(text, encoding="utf-8")
    for name in ("binary.yaml", "binary.jsonl", "binary.json"):
        (root / name).write_bytes(b"\xff\xfe\x00\x80garbage\xc3\x28" * 8)
    files = {p.name: p for p in root.iterdir()}
    if tiny_model:  # a real model folder, for the scorer and models
        shutil.copytree(tiny_model, root / "tiny_model", dirs_exist_ok=True)
        files["tiny_model"] = root / "tiny_model"
    return files


def snapshot(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def run_cli(args: list[str]) -> tuple[int, str, str]:
    from agentgrad.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def check(args: list[str], sandbox: Path) -> None:
    """Run ``args`` with ``sandbox`` as the working directory and assert the property."""
    outs = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--out", "--dump-db")]
    if args[:2] == ["testing", "tiny-model"] and len(args) > 2 and not args[2].startswith("-"):
        outs.append(args[2])  # its positional argument is where it writes
    if args[:1] == ["report"] and "--out" not in args and len(args) > 1 and not args[1].startswith("-"):
        target = sandbox / args[1]  # the default: RUN_DIR/report.html, or TRACE.html beside the trace
        outs.append(str(target / "report.html" if target.is_dir() else target.with_suffix(".html")))
    before = snapshot(sandbox)
    cwd, data = os.getcwd(), os.environ.pop("AGENTGRAD_DATA_DIR", None)  # benchmarks: only their error paths
    os.chdir(sandbox)
    try:
        rc, _, err = run_cli(args)
    except Exception as e:  # noqa: BLE001 - an exception escaping main() is the failure we look for
        import traceback

        raise AssertionError(f"traceback for {args}:\n{traceback.format_exc()}") from e
    finally:
        os.chdir(cwd)
        if data is not None:
            os.environ["AGENTGRAD_DATA_DIR"] = data
    assert "Traceback" not in err, f"traceback for {args}:\n{err}"
    if rc != 0:
        lines = [l for l in err.strip().splitlines() if l.strip()]
        assert len(lines) == 1, f"{args} exited {rc} with {len(lines)} lines on stderr:\n{err}"
        assert "SECRET" not in err, f"{args} printed a secret: {err}"
    allowed = [(sandbox / o).resolve() for o in outs if o]
    for path, mtime in snapshot(sandbox).items():
        if before.get(path) == mtime:
            continue
        p = Path(path).resolve()
        assert any(p == a or a in p.parents for a in allowed), f"{args} wrote {path} outside --out ({outs})"


# Per command: how many positional file arguments, and the options it needs (so that most
# generated lists get past argument parsing and reach the code that reads the files).
SPECS: dict[tuple[str, ...], tuple[int, list[str]]] = {
    ("run",): (1, ["--inputs", "--out"]),
    ("attribute",): (1, ["--scorer", "--out"]),
    ("trace", "show"): (1, []),
    ("optimize",): (1, ["--out"]),
    ("testing", "tiny-model"): (1, []),
    ("bench", "taubench", "replay-gold"): (0, ["--split"]),
    ("bench", "taubench", "evaluate"): (0, ["--out"]),
    ("bench", "multiwoz", "evaluate"): (0, ["--out"]),
    ("report",): (1, []),
}


def argument_lists() -> Any:
    """A Hypothesis strategy of argument lists over the file pool (names relative to the sandbox).

    Half are structured (a command, file arguments, its required options with pool files or
    values, then extra options); half are free-form.
    """
    from hypothesis import strategies as st

    files = sorted(make_files(Path(tempfile.mkdtemp())).keys()) + ["tiny_model"]
    value = st.one_of(st.sampled_from(VALUES), st.sampled_from(files), st.sampled_from([f"out/{f}" for f in files]),
                      st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                              max_size=12))
    option = st.tuples(st.sampled_from(OPTIONS), value).map(list)
    extra = st.lists(option, max_size=3).map(lambda ps: [x for p in ps for x in p])
    free = st.tuples(st.sampled_from(COMMANDS), st.lists(value, max_size=2), extra).map(lambda t: t[0] + t[1] + t[2])

    @st.composite
    def structured(draw: Any) -> list[str]:
        cmd = draw(st.sampled_from(sorted(SPECS)))
        n_pos, needed = SPECS[cmd]
        args = list(cmd) + [draw(st.sampled_from(files)) for _ in range(n_pos)]
        for opt in needed:
            if opt == "--out":
                args += [opt, draw(st.sampled_from(["out/r", "out", "o", "../escape", "trace.json", "."]))]
            else:
                args += [opt, draw(st.one_of(st.sampled_from(files), value))]
        return args + draw(extra)

    return st.one_of(structured(), free)


def fresh_sandbox(base: Path, pool: Path) -> Path:
    """A new working directory holding a copy of the file pool (the model folder linked, not copied)."""
    d = Path(tempfile.mkdtemp(dir=base))
    for p in pool.iterdir():
        if p.is_file():
            shutil.copy(p, d / p.name)
        elif p.is_dir():
            (d / p.name).symlink_to(p.resolve(), target_is_directory=True)
    return d
