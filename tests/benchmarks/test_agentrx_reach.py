"""benchmarks/agentrx_reach.py: its figures from a hand-worked record, and its one-line errors."""

from __future__ import annotations

import json

from conftest import ROOT, run_script

SCRIPT = ROOT / "benchmarks" / "agentrx_reach.py"


def _log(run, half, calls, reach_addressed, kept, total):
    return {"run": run, "half": half, "calls": calls, "reach_all": calls, "reach_addressed": reach_addressed,
            "edges_all": total, "edges_addressed": kept, "calls_with": {"address": 1, "reply": 1, "quoted": 1}}


def test_the_table_is_worked_from_the_record(tmp_path):
    f = tmp_path / "reach.json"
    f.write_text(json.dumps({"subset": "magentic", "broken": [], "logs": [
        _log("aaaaaaaa1", "A", 10, 10, 20, 45), _log("bbbbbbbb2", "B", 4, 3, 5, 6), _log("cccccccc3", "B", 8, 8, 10, 28)]}))
    p = run_script(str(SCRIPT), "--table", str(f), "--logs")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # shares 1.00, 0.75, 1.00: median 1.00, least 0.75; 2 of 3 reached whole; 35 of 79 edges kept
    assert lines[0] == ("all logs: 3 logs, 22 calls; the final output reaches back to every call along every edge "
                        "in 3 of 3; along the addressed edges to a median share of 1.00 of the calls (least 0.75), "
                        "all of them in 2; edges kept 35 of 79")
    assert lines[2].startswith("half B: 2 logs, 12 calls;") and "median share of 0.88" in lines[2]
    assert "| bbbbbbbb | B | 4 | 4 | 3 | 5 of 6 |" in lines


def test_bad_input_is_one_line(tmp_path):
    (tmp_path / "bad.json").write_text("{}")
    (tmp_path / "there.json").write_text("{}")
    for args, says in ((["--table", str(tmp_path / "bad.json")], "is not a record of benchmarks/agentrx_reach.py"),
                       (["--table", str(tmp_path / "none.json")], "is not a record"),
                       ([], "give --out FILE"), (["--out", str(tmp_path / "there.json")], "exists")):
        p = run_script(str(SCRIPT), *args)
        assert p.returncode != 0 and says in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
