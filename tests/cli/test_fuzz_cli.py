"""Fuzzing the CLI: generated argument lists and files never give a traceback or a stray file.

A bounded number of examples here; ``python benchmarks/fuzz_cli.py --examples 2000`` runs many more.
"""

import pytest

from agentgrad.testing.fuzz import argument_lists, check, fresh_sandbox, make_files

try:
    from hypothesis import HealthCheck, given, settings
except ImportError:  # the generated cases are skipped, and counted, with the reason; the corpus still runs
    given = None


@pytest.fixture(scope="module")
def pool(tmp_path_factory, tiny_llama):
    root = tmp_path_factory.mktemp("fuzz")
    make_files(root / "pool", tiny_model=str(tiny_llama))
    return root, root / "pool"


@pytest.mark.skipif(given is None, reason="hypothesis is not installed (pip install -e '.[test]')")
@pytest.mark.slow  # over 3 s alone on 2 cores: out of the fast subset
def test_fuzz_cli(pool):
    root, files = pool

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(argument_lists())
    def prop(args):
        check(args, fresh_sandbox(root, files))

    prop()


@pytest.mark.parametrize("args", [
    ["run", "system.yaml", "--inputs", "inputs_hostile.jsonl", "--out", "out/r"],
    ["run", "system.yaml", "--inputs", "binary.jsonl", "--out", "out/r"],
    ["run", "system_trunc.yaml", "--inputs", "inputs.jsonl", "--out", "out/r"],
    ["run", "system.yaml", "--inputs", "inputs_dup.jsonl", "--out", "out/r"],
    ["trace", "show", "trace_badspan.json"],
    ["trace", "show", "binary.json"],
    ["optimize", "optimize_types.yaml", "--out", "o"],
    ["optimize", "optimize.yaml", "--out", "o"],
    ["run", "system_types.yaml", "--inputs", "inputs_types.jsonl", "--out", "../escape"],
])
def test_fuzz_corpus(pool, args):
    """The cases the fuzzer is built to reach, always run."""
    root, files = pool
    check(args, fresh_sandbox(root, files))
