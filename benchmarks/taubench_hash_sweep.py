"""Every gold replay of every tau-bench retail split: the copy-on-write database hash equals the full one.

    python benchmarks/taubench_hash_sweep.py

tests/benchmarks/test_taubench_env.py replays all 635 tasks too, but compares the two hashes on one replay in five
(dev, test) and one in 25 (train), the full hash being the slow one; this compares them on every
replay. Prints the replays and hashes checked and the first task whose hashes differ; exits 1 on one,
or when a replay changed the shared database. Needs the benchmark data ($AGENTGRAD_DATA_DIR).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)  # no options: --help, a typo
    from agentgrad.benchmarks.taubench.env import RetailDatabase, data_hash, gold_database, load_tasks

    database = RetailDatabase()
    before = database.snapshot()
    checked = 0
    for split in ("dev", "test", "train"):
        for task in load_tasks(split):
            db = gold_database(database, task)
            if database.hash(db) != data_hash(db):
                print(f"{split} task {task.index}: the copy-on-write hash differs from the full one")
                return 1
            checked += 1
    if database.snapshot() != before:
        print("a replay changed the shared database")
        return 1
    print(f"{checked} replays, every copy-on-write hash equal to the full one, the shared database unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
