"""What a new user hits first: the demo's banner before an --out error, a report of a passed
sample reading "blamed" with nothing after it, and a bare arrow for a step without validation."""

import json

from agentgrad import Trace
from agentgrad.cli import main
from agentgrad.report.html import render_report


def test_demo_with_a_bad_out_is_one_line_and_no_banner(tmp_path, capsys):
    (tmp_path / "x").write_text("")
    assert main(["demo", "--tiny", "--out", str(tmp_path)]) != 0
    cap = capsys.readouterr()
    assert cap.out == "" and len(cap.err.strip().splitlines()) == 1 and "not empty" in cap.err


def test_report_shows_no_empty_blamed_and_no_bare_arrow(tmp_path):
    R = tmp_path / "R"
    (R / "traces").mkdir(parents=True)
    (R / "prompts").mkdir()
    tr = Trace(id="e1")
    tr.input("q")
    tr.save(R / "traces" / "e1.json")
    events = [{"event": "train_started", "samples": 1, "step_every": 1, "val_score": None},
              {"event": "sample", "sample": "e1", "score": 1.0, "passed": True, "blamed": []},
              {"event": "step", "step": 1, "train_score": 1.0, "failures": 0, "blamed": {}, "accepted": None,
               "updated": [], "update_frequency": 0.0, "note": "no failures"}]
    (R / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    html, _ = render_report(R)
    assert "score 1, passed yes" in html and "passed yes, blamed" not in html
    row = html[html.index("<th>validation score before → after</th>"):]
    row = row[row.index("<tr>", 10):row.index("</tr>", row.index("<tr>", 10))]
    assert "→" not in row and ">-</td>" in row
