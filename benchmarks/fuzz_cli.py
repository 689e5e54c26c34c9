"""Nightly-style fuzzing of the agentgrad CLI: many generated argument lists and files.

    python benchmarks/fuzz_cli.py --examples 2000 [--seed N]

Prints the number of examples run, the exit codes seen, and the first failing argument list (the
property: exit 0, or a one-line message with a non-zero exit; no traceback; no file written outside
--out). Exits 1 on a failure. Needs the ``test`` extra (hypothesis).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("AGENTGRAD_CACHE", tempfile.mkdtemp(prefix="agentgrad-fuzz-cache-"))
    from hypothesis import HealthCheck, given, seed, settings

    from agentgrad.testing import fuzz

    root = Path(tempfile.mkdtemp(prefix="agentgrad-fuzz-"))
    pool = root / "pool"
    from agentgrad.models.tiny import cached_tiny_model

    fuzz.make_files(pool, tiny_model=str(cached_tiny_model()))
    codes: collections.Counter = collections.Counter()
    original = fuzz.run_cli

    def counting(args):
        rc, out, err = original(args)
        codes[rc] += 1
        return rc, out, err

    fuzz.run_cli = counting
    t0 = time.time()

    @seed(a.seed)
    @settings(max_examples=a.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(fuzz.argument_lists())
    def prop(args):
        fuzz.check(args, fuzz.fresh_sandbox(root, pool))

    try:
        prop()
    except AssertionError as e:
        print(f"FAILED after {sum(codes.values())} examples: {e}")
        return 1
    n = sum(codes.values())
    print(f"cli fuzz examples: {n}")
    print(f"cli fuzz exit codes: {dict(sorted(codes.items()))}")
    print(f"cli fuzz seconds: {time.time() - t0:.1f}")
    print("cli fuzz failures: 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
