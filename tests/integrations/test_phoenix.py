"""A real Arize Phoenix server (``phoenix serve`` on loopback ports, SQLite): the LangGraph app's recorded
spans are sent to it over OTLP/HTTP, as the app's exporter would, and ``agentgrad blame --phoenix URL
--project NAME`` reads them back through Phoenix's client and blames the set: the same verdict as the
recorded file gives."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytest.importorskip("phoenix.client", reason="Phoenix's client is not installed: pip install '.[phoenix]'")

from agentgrad.testing.phoenix_server import PhoenixServer, phoenix_command  # noqa: E402

APP = ROOT / "records" / "team-verdict-apps" / "langgraph"


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    cmd = phoenix_command(ROOT)
    if cmd is None:
        pytest.skip("the Phoenix server is not installed: python -m venv .venv-phoenix && "
                    ".venv-phoenix/bin/pip install arize-phoenix (as .ci/run does), or set AGENTGRAD_PHOENIX")
    with PhoenixServer(cmd, tmp_path_factory.mktemp("phoenix")) as px:
        n = px.send_otlp_json(APP / "spans.jsonl", "langgraph-app")
        px.wait_for_spans("langgraph-app", n)
        yield px


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentgrad.cli", *args], capture_output=True, text=True, timeout=600)


def test_a_set_read_from_a_live_phoenix_gets_the_verdict_of_its_recorded_file(phoenix, tmp_path):
    r = cli("blame", "--phoenix", phoenix.url, "--project", "langgraph-app", "--expected", str(APP / "expected.jsonl"),
            "--method", "provenance", "--out", str(tmp_path / "B"))
    assert r.returncode == 0, r.stderr
    got = json.loads((tmp_path / "B" / "blame.json").read_text(encoding="utf-8"))
    want = json.loads((APP / "blame-provenance.json").read_text(encoding="utf-8"))
    assert got["team"] == want["team"] and got["methods"] == want["methods"]
    assert (tmp_path / "B" / "phoenix-spans.jsonl").is_file()  # what was blamed stays beside the verdict


def test_phoenix_mistakes_get_one_line_each(phoenix, tmp_path):
    r = cli("blame", "--phoenix", phoenix.url, "--project", "no-such-project", "--loss", "x", "--out", str(tmp_path / "a"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "no project 'no-such-project'" in r.stderr and "langgraph-app" in r.stderr
    r = cli("blame", "--phoenix", "http://127.0.0.1:9", "--project", "p", "--loss", "x", "--out", str(tmp_path / "b"))
    assert r.returncode == 1 and "cannot reach a Phoenix server" in r.stderr and "Traceback" not in r.stderr
    r = cli("blame", str(APP / "spans.jsonl"), "--phoenix", phoenix.url, "--loss", "x", "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "not both" in r.stderr
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())
