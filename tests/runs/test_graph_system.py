import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgrad import ConfigError, GraphError, GraphSystem, Trace
from agentgrad.cli import main
from agentgrad.core.config import SystemConfig, apply_model_override, load_system_config
from agentgrad.models.fake import FakeModel
from conftest import ROOT, assert_spans_exact

EXAMPLE = ROOT / "examples" / "pipeline"


def cfg_of(agents, inputs=("q",), models=("default",)):
    return SystemConfig.model_validate(
        {"inputs": list(inputs), "models": {m: {"backend": "fake"} for m in models}, "agents": agents}
    )


def test_topological_execution_and_concurrent_levels():
    cfg = cfg_of({"c": {"prompt": "c", "inputs": ["a", "b"]}, "a": {"prompt": "a", "inputs": ["q"]},
                  "b": {"prompt": "b", "inputs": ["q"]}})
    model = FakeModel(responder=lambda m, t: "out:" + m[0]["content"])
    sys_ = GraphSystem(cfg, models={"default": model})
    assert sys_.levels == [["a", "b"], ["c"]]
    ep = sys_.run({"q": "question"})
    assert str(ep.output) == "out:c"
    assert_spans_exact(ep.trace)


@pytest.mark.parametrize(
    "agents,message",
    [
        ({"a": {"prompt": "x", "inputs": ["b"]}, "b": {"prompt": "x", "inputs": ["a"]}}, "cycle: a -> b -> a"),
        ({"a": {"prompt": "x", "inputs": ["ghost"]}}, "reads 'ghost'"),
        ({"a": {"prompt": "x", "inputs": ["q"], "model": "big"}}, "model 'big'"),
    ],
)
def test_graph_errors_name_the_problem(agents, message):
    with pytest.raises(GraphError, match=message):
        GraphSystem(cfg_of(agents), models={"default": FakeModel()})


def test_model_override_forms():
    cfg = cfg_of({"a": {"prompt": "x", "inputs": ["q"]}})
    apply_model_override(cfg, "default=./some/folder")
    assert cfg.models["default"].backend == "hf" and cfg.models["default"].options() == {"path": "./some/folder"}
    apply_model_override(cfg, "default=openai:llama@http://127.0.0.1:9/v1")
    assert cfg.models["default"].options() == {"model": "llama", "base_url": "http://127.0.0.1:9/v1"}
    with pytest.raises(ConfigError, match="no model named 'big'"):
        apply_model_override(cfg, "big=x")


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "agentgrad.cli", *args], capture_output=True, text=True, cwd=cwd)


def one_line_error(proc):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_cli_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  a: {prompt: x\n")
    line = one_line_error(run_cli("run", str(bad), "--inputs", str(EXAMPLE / "inputs.jsonl"), "--out", str(tmp_path / "r")))
    assert "not valid YAML" in line
    cyc = tmp_path / "cycle.yaml"
    cyc.write_text("inputs: [q]\nmodels: {default: {backend: fake}}\nagents:\n"
                   "  a: {prompt: x, inputs: [b]}\n  b: {prompt: y, inputs: [a]}\n")
    line = one_line_error(run_cli("run", str(cyc), "--inputs", str(EXAMPLE / "inputs.jsonl"), "--out", str(tmp_path / "r")))
    assert "cycle" in line and "a -> b -> a" in line
    line = one_line_error(run_cli("run", str(EXAMPLE / "system.yaml"), "--inputs", str(EXAMPLE / "inputs.jsonl"),
                                  "--out", str(tmp_path / "r"), "--model", f"default={tmp_path / 'no-such-model'}"))
    assert "does not exist" in line and "no-such-model" in line
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("inputs: [q]\nagents:\n  a: {prompt: x, inputs: [q], temperature: 1}\n")
    line = one_line_error(run_cli("run", str(unknown), "--inputs", str(EXAMPLE / "inputs.jsonl"), "--out", str(tmp_path / "r")))
    assert "agents.a.temperature: unknown field" in line
    dbg = run_cli("--debug", "run", str(cyc), "--inputs", str(EXAMPLE / "inputs.jsonl"), "--out", str(tmp_path / "r"))
    assert dbg.returncode != 0 and "Traceback" in dbg.stderr


def test_cli_help_lists_commands():
    out = run_cli("--help")
    assert out.returncode == 0
    for cmd in ("run", "trace", "testing"):
        assert cmd in out.stdout


def test_pipeline_example_on_tiny_model_writes_exact_traces(tmp_path, tiny_llama, capsys):
    out = tmp_path / "run"
    args = ["run", str(EXAMPLE / "system.yaml"), "--inputs", str(EXAMPLE / "inputs.jsonl"), "--out", str(out),
            "--model", f"default={tiny_llama}"]
    assert main(args) == 0
    n_inputs = len((EXAMPLE / "inputs.jsonl").read_text().splitlines())
    traces = sorted((out / "traces").glob("*.json"))
    assert len(traces) == n_inputs
    for p in traces:
        tr = Trace.load(p)
        assert [n.name for n in tr.calls()] == ["extractor", "planner", "answerer"]
        assert assert_spans_exact(tr) == 4
        raw = json.loads(p.read_text())
        for node in raw["nodes"]:
            for s in node.get("spans", []):
                src = raw["nodes"][s["source"]]
                assert node["messages"][s["message"]]["content"][s["start"]:s["end"]] == src["output"]["text"]
        call = tr.calls()[0]
        assert call.usage["prompt_tokens"] > 0 and call.model["path"] == str(tiny_llama)
    events = [json.loads(l) for l in (out / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "input_done" for e in events) == n_inputs
    assert "api_key" not in (out / "config.yaml").read_text()
    # a second run into the same folder is refused; --resume finds nothing left to do
    assert main(args) != 0
    assert main(args + ["--resume"]) == 0
    events = [json.loads(l) for l in (out / "events.jsonl").read_text().splitlines()]
    assert events[-2]["event"] == "run_started" and events[-2]["already_done"] == n_inputs
    assert main(["trace", "show", str(traces[0])]) == 0
    shown = capsys.readouterr().out
    assert "[n0]" in shown and "answerer" in shown


def test_resume_reruns_only_missing(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("inputs: [q]\nmodels: {default: {backend: fake, replies: [r], cycle: true}}\n"
                   "agents:\n  a: {prompt: x, inputs: [q]}\n")
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("\n".join(json.dumps({"q": f"q{i}"}) for i in range(5)))
    out = tmp_path / "r"
    assert main(["run", str(cfg), "--inputs", str(inputs), "--out", str(out)]) == 0
    (out / "traces" / "00002.json").unlink()  # as if the run had died before this episode was saved
    assert main(["run", str(cfg), "--inputs", str(inputs), "--out", str(out), "--resume"]) == 0
    assert len(list((out / "traces").glob("*.json"))) == 5
    events = [json.loads(l) for l in (out / "events.jsonl").read_text().splitlines()]
    assert [e["index"] for e in events[7:] if e["event"] == "input_done"] == [2]


def test_example_yaml_is_valid():
    cfg = load_system_config(EXAMPLE / "system.yaml")
    assert list(cfg.agents) == ["extractor", "planner", "answerer"] and list(cfg.models) == ["default"]
