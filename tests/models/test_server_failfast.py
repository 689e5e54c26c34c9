"""A model server that is not there fails fast: a wrong address at a run's first call is one line and a
non-zero exit within seconds; a server that stops answering mid-run opens the breaker after
``breaker_seconds`` instead of every remaining input paying the full backoff. Real HTTP on 127.0.0.1
(the server of ``agentgrad.models.serve``) and a closed port for the refused case."""

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from agentgrad.cli import main
from agentgrad.core.model import GenerationSettings
from agentgrad.errors import ModelError, ServerUnreachableError
from agentgrad.models.breaker import Breaker, refused_or_unknown
from agentgrad.models.fake import FakeModel
from agentgrad.models.openai_compat import OpenAIModel
from agentgrad.models.serve import OpenAICompatServer
from conftest import ROOT

EXAMPLE = ROOT / "examples" / "pipeline"
MSGS = [{"role": "user", "content": "x"}]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_connection_at_the_first_call_fails_at_once_with_the_url_masked():
    url = f"http://user:sk-secret-123456@127.0.0.1:{closed_port()}/v1"
    model = OpenAIModel(name="m", model="tiny", base_url=url)  # default retries: 8, backoff up to 30 s
    t0 = time.time()
    with pytest.raises(ServerUnreachableError) as e:
        model.generate(MSGS, None, GenerationSettings())
    msg = str(e.value)
    assert time.time() - t0 < 5 and "refused the connection" in msg and "127.0.0.1" in msg
    assert "sk-secret" not in msg and "***@" in msg and "\n" not in msg
    with pytest.raises(ServerUnreachableError):  # the async path, and every later call: at once
        asyncio.run(model.agenerate(MSGS, None, GenerationSettings()))
    unknown = OpenAIModel(name="m", model="tiny", base_url="http://no-such-host.invalid/v1")
    t0 = time.time()
    with pytest.raises(ServerUnreachableError, match="no-such-host.invalid.*unknown host"):
        unknown.generate(MSGS, None, GenerationSettings())
    assert time.time() - t0 < 10


def test_errors_of_a_server_that_answers_are_still_retried():
    """429 and 5xx are answers: retried with backoff, never taken for an absent server."""
    with OpenAICompatServer(FakeModel(["a"], cycle=True), fail_rate=0.5, seed=1) as srv:
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url, backoff_initial=0.01, backoff_max=0.02,
                            breaker_seconds=0.05)
        for _ in range(6):
            assert model.generate(MSGS, None, GenerationSettings()).text == "a"
        assert srv.stats["failed"] > 0 and model.breaker.opened_at is None


def test_the_cli_stops_a_run_on_a_refused_connection_in_one_line(tmp_path, capfd):
    """The issue's command with a wrong port: one line naming the URL, non-zero, within 10 s."""
    out = tmp_path / "R"
    t0 = time.time()
    code = main(["run", str(EXAMPLE / "system.yaml"), "--inputs", str(EXAMPLE / "inputs.jsonl"), "--out", str(out),
                 "--model", f"default=openai:m@http://127.0.0.1:{closed_port()}/v1"])
    elapsed = time.time() - t0
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code != 0 and elapsed < 10
    assert len(lines) == 1 and "refused the connection" in lines[0] and "0 of 4 inputs done" in lines[0]
    events = [json.loads(ln) for ln in (out / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "run_stopped" and not any(e["event"] == "input_failed" for e in events)
    assert not list((out / "traces").glob("*.json"))  # nothing recorded as failed: --resume runs them all


def test_a_server_that_stops_mid_run_trips_the_breaker_and_the_run_keeps_what_it_did(tmp_path, capfd):
    """Two of four inputs are answered, then the server goes away: the run stops once the breaker
    opens (breaker_seconds=1), well before the backoff of every remaining input (8 retries up to 2 s
    each) would have run out; the two finished episodes are kept and --resume would run the rest."""
    answered = []
    srv = OpenAICompatServer(FakeModel(["fine"], cycle=True))

    class Counting(FakeModel):
        def generate(self, messages, tools, settings):  # the pipeline makes 3 calls per input
            answered.append(1)
            if len(answered) == 7:  # the first call of the third input: the server process goes away
                srv.stop()
                raise RuntimeError("gone")
            return super().generate(messages, tools, settings)

    srv.model = Counting(["fine"], cycle=True)
    srv.start()
    cfg = yaml.safe_load((EXAMPLE / "system.yaml").read_text())
    cfg["models"]["default"] = {"backend": "openai", "model": "tiny", "base_url": srv.base_url,
                                "backoff_initial": 0.5, "backoff_max": 2.0, "breaker_seconds": 1.0}
    sys_yaml = tmp_path / "system.yaml"
    sys_yaml.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "R"
    t0 = time.time()
    code = main(["run", str(sys_yaml), "--inputs", str(EXAMPLE / "inputs.jsonl"), "--out", str(out)])
    elapsed = time.time() - t0
    err = capfd.readouterr().err
    assert code != 0 and elapsed < 8, (elapsed, err)
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "stopped answering" in lines[0] and "2 of 4 inputs done" in lines[0]
    assert len(list((out / "traces").glob("*.json"))) == 2
    events = [json.loads(ln)["event"] for ln in (out / "events.jsonl").read_text().splitlines()]
    assert events.count("input_done") == 2 and events[-1] == "run_stopped" and "input_failed" not in events


def test_a_slow_answer_is_not_a_dead_server_but_a_hung_one_trips_the_breaker():
    """A request that times out counts from when it timed out: a server busy with one long prompt (a
    CPU server reading 8k tokens) gets its retry; a server that never answers opens the breaker at its
    next timeout, within two timeouts, instead of every request paying its retries."""
    with OpenAICompatServer(FakeModel(["a"], cycle=True), latency=1.0) as srv:
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url, timeout=0.4, breaker_seconds=0.2,
                            max_retries=3, backoff_initial=0.01, backoff_max=0.02)

        def fast_after_the_first():
            while srv.stats["requests"] < 1:
                time.sleep(0.005)
            srv.latency = 0.0  # the first request still sleeps its second; the retry is answered at once

        threading.Thread(target=fast_after_the_first, daemon=True).start()
        t0 = time.time()
        assert model.generate(MSGS, None, GenerationSettings()).text == "a"
        # the first request timed out (0.4 s; answered, it would have been the only one) and its retry was
        # answered; no bound above, which the machine's load would decide
        assert time.time() - t0 >= 0.4 and model.breaker.opened_at is None and srv.stats["requests"] == 2
    with OpenAICompatServer(FakeModel(["a"], cycle=True), latency=5.0) as srv:  # hung: never within the timeout
        model = OpenAIModel(name="m", model="tiny", base_url=srv.base_url, timeout=0.4, breaker_seconds=0.2,
                            max_retries=8, backoff_initial=0.01, backoff_max=0.02)
        t0 = time.time()
        with pytest.raises(ServerUnreachableError, match="stopped answering"):
            model.generate(MSGS, None, GenerationSettings())
        # two timeouts, not nine; and sooner than one answer of the hung server (5 s), whatever the load
        assert time.time() - t0 < 5.0 and srv.stats["requests"] == 2


def test_breaker_opens_after_its_time_and_lets_a_probe_through():
    now = [0.0]
    b = Breaker(10.0, clock=lambda: now[0])
    assert b.refused("x")  # never answered: a refusal opens it at once
    assert b.check() == "x"
    now[0] = 10.0
    assert b.check() is None  # half-open: one probe goes through
    b.alive()  # it answered
    assert b.answered and not b.refused("refused") and b.check() is None  # answered before: not a config error
    now[0] = 20.0
    assert not b.failed(20.0, "down") and b.wait_cap() == 10.0
    now[0] = 29.0
    assert not b.failed(25.0, "down") and b.wait_cap() == pytest.approx(1.0)
    now[0] = 30.0
    assert b.failed(29.5, "down") and b.check() == "down"  # 10 s since the first failed attempt began
    b.alive()
    assert b.check() is None and b.wait_cap() is None
    never = Breaker(None, clock=lambda: now[0])
    assert not never.failed(0.0, "down") and never.wait_cap() is None


def test_refused_or_unknown_reads_the_cause_chain():
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as inner:
            raise ModelError("wrapped") from inner
    except ModelError as e:
        assert refused_or_unknown(e) == "refused the connection"
    assert refused_or_unknown(TimeoutError("slow")) is None
    assert refused_or_unknown(socket.gaierror(-2, "Name or service not known")) == "is an unknown host"
