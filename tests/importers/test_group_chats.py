"""Group chats as the frameworks write them, read by the one message-log reader: Magentic-One's logs
(AgentRx), tau-bench's results, hand-worked shapes of each speaker convention, and hostile files."""

from __future__ import annotations

import json
import tarfile

import pytest

from agentgrad.benchmarks.data import data_dir
from agentgrad.blame.losses import record_loss
from agentgrad.cli import main
from agentgrad.errors import ConfigError
from agentgrad.importers.groupchat import group_chat_trace, is_group_chat, prefer_addressed, preferred_edges, speaker
from agentgrad.importers.spans import import_file
from conftest import assert_spans_exact

AGENTRX = data_dir() / "agentrx"
needs_agentrx = pytest.mark.skipif(not AGENTRX.is_dir(), reason="AgentRx data not found (set AGENTGRAD_DATA_DIR)")
MAGENTIC_AGENTS = {"Orchestrator", "WebSurfer", "FileSurfer", "Assistant", "ComputerTerminal"}


def test_a_speaker_is_the_name_the_source_or_the_role_and_an_arrow_is_an_address():
    assert speaker({"role": "Orchestrator (-> WebSurfer)"}) == ("Orchestrator", "WebSurfer", None)
    assert speaker({"role": "Orchestrator (thought)"}) == ("Orchestrator", None, "thought")
    assert speaker({"role": "assistant", "name": "Coder"}) == ("Coder", None, None)  # AG2
    assert speaker({"source": "planner", "type": "TextMessage"}) == ("planner", None, None)  # AutoGen AgentChat
    assert speaker({"source": "triage", "type": "HandoffMessage", "target": "billing"}) == ("triage", "billing", None)
    assert is_group_chat([{"role": "WebSurfer", "content": "x"}]) and is_group_chat([{"source": "a", "content": "x"}])
    assert is_group_chat([{"role": "user", "name": "Coder", "content": "a"}, {"role": "user", "name": "Critic", "content": "b"}])
    assert not is_group_chat([{"role": "assistant", "name": "a", "content": "x"}, {"role": "assistant", "name": "b", "content": "y"}])
    assert not is_group_chat([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])


def test_a_group_chat_is_a_broadcast_with_exact_spans_and_tool_events():
    """Every message reads every earlier one; AutoGen's tool request and execution events become the
    call's tool calls and a tool node under it."""
    msgs = [{"source": "user", "type": "TextMessage", "content": "What is 12 * 7?"},
            {"source": "planner", "type": "TextMessage", "content": "Ask the calculator."},
            {"source": "calc", "type": "ToolCallRequestEvent",
             "content": [{"id": "c1", "name": "multiply", "arguments": "{\"a\": 12, \"b\": 7}"}]},
            {"source": "calc", "type": "ToolCallExecutionEvent",
             "content": [{"call_id": "c1", "name": "multiply", "content": "84", "is_error": False}]},
            {"source": "writer", "type": "TextMessage", "content": "12 * 7 = 84."}]
    tr = group_chat_trace(msgs, "t")
    assert [(n.kind, n.name) for n in tr.nodes] == [("input", "user"), ("call", "planner"), ("call", "calc"),
                                                     ("tool", "multiply"), ("call", "writer")]
    assert tr.nodes[2].tool_calls[0].arguments == {"a": 12, "b": 7} and tr.nodes[3].parents == [2]
    assert tr.nodes[4].parents == [0, 1, 2, 3] and [s.source for s in tr.nodes[4].spans] == [0, 1, 2, 3]
    assert tr.nodes[4].messages[0]["content"].startswith("[user]\nWhat is 12 * 7?\n\n[planner]\n")
    assert_spans_exact(tr)


@pytest.mark.parametrize("content, message", [
    ([{"role": "Orchestrator", "content": "a"}, {"content": "b", "role": "WebSurfer"}, "not a message"],
     "must be an object"),
    ([{"role": "human", "content": "task"}, {"role": "WebSurfer"}], "has no 'content'"),
    ([{"role": "human", "content": "task"}, {"role": "(thought)", "content": "x"}], "names no agent"),
    ([{"role": "WebSurfer", "content": "alone"}], "a log of 1 message"),
    ({"answer": 42}, "is not a trace agentgrad reads"),
    ([{"role": "human", "content": "task"}, {"source": "planner", "type": "TextMessage", "content": "plan"},
      {"role": "WebSurfer", "content": "page"}], "message 2 names its speaker by the agent's name as its role and "
                                                  "message 1 by AutoGen's source: mixed shapes in one list"),
    ([{"role": "user", "content": "task"}, {"role": "assistant", "name": "writer", "content": "draft"},
      {"role": "Orchestrator (thought)", "content": "next"}], "mixed shapes in one list"),
    ([{"source": "user", "type": "TextMessage", "content": "task"},
      {"source": "SelectorGroupChatManager", "type": "SelectSpeakerEvent", "content": []},
      {"source": "planner", "type": "TextMessage", "content": "plan"}], "must name the chosen speakers"),
    ([{"role": "user", "name": "user", "content": "task"}, {"role": "user", "name": "planner", "content": "plan"},
      {"role": "assistant", "name": "calc", "content": "", "tool_calls": [{"id": "c1", "function": {"name": "m", "arguments": "{a: 1"}}]}],
     "tool call 0 needs a function name and JSON arguments"),
    ([{"role": "user", "name": "user", "content": "task"}, {"role": "user", "name": "planner", "content": "plan"},
      {"role": "tool", "name": "user", "content": "84", "tool_responses": ["84"]}], "result 0 must be an object"),
])
def test_hostile_logs_get_one_line_each(tmp_path, capsys, content, message):
    f = tmp_path / "log.json"
    f.write_text(json.dumps(content))
    out = tmp_path / "B"
    code = main(["blame", str(f), "--loss", "the answer is wrong", "--method", "provenance", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()
    with pytest.raises(ConfigError):
        res = import_file(f)
        if res.broken:
            raise ConfigError(res.broken[0])


@needs_agentrx
def test_every_magentic_one_log_reads_as_it_is_with_its_agents_named(tmp_path):
    with tarfile.open(AGENTRX / "magentic_dataset.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    logs = sorted(p for p in tmp_path.rglob("*.json") if p.name != "steps_by_id.json")
    assert len(logs) == 58
    for f in logs:
        res = import_file(f)
        assert not res.broken and len(res.traces) == 1, (f.name, res.broken)
        tr = res.traces[0]
        raw = json.loads(f.read_text())
        assert tr.id == f.stem and len(tr.nodes) == len(raw)  # one node per message
        assert tr.nodes[0].kind == "input" and tr.nodes[0].name == "human"
        assert {c.name for c in tr.calls()} <= MAGENTIC_AGENTS
        for n in tr.calls():
            role = raw[n.meta["step"]]["role"]
            assert role.startswith(n.name) and (("->" in role) == ("to" in n.meta))
    assert_spans_exact(res.traces[0])


@needs_agentrx
def test_tau_bench_results_read_with_their_record_and_the_loss_goes_where_the_record_says():
    res = import_file(AGENTRX / "tau_retail" / "tau_dataset_failed.json")
    assert len(res.traces) == 29 and not res.broken
    t2 = next(t for t in res.traces if t.id == "2")
    assert t2.meta["imported"] == "taubench" and t2.meta["reward_info"]["info"]["outputs"] == {"10": False}
    loss = record_loss(t2)  # "there are 11 available T-shirt options": the agent's 3rd call, message 7
    node = t2.nodes[loss.targets[0]]
    assert node.meta["message"] == 6 and loss.details["wrong"] == "11" and "10" in loss.text
    a, b = loss.spans[node.id][0]
    assert node.text[a:b] == "11"
    rules = {record_loss(t).details["rule"] for t in res.traces if t.meta.get("reward_info")}
    assert rules <= {"write not expected", "write never made", "output stated wrong", "output never said", "none found"}
    assert record_loss(next(t for t in res.traces if not t.meta.get("reward_info"))) is None


DATA = __import__("pathlib").Path(__file__).parent / "data"  # recorded by benchmarks/record_group_chats.py


def test_autogen_agentchat_messages_as_the_library_returns_them(tmp_path):
    """A real RoundRobinGroupChat's TaskResult.messages (autogen-agentchat 0.7.5): the user's task, the
    planner, the calculator's tool request and its execution result, the writer."""
    rec = json.loads((DATA / "autogen_agentchat.json").read_text())
    assert rec["library"].startswith("autogen-agentchat")
    res = import_file(DATA / "autogen_agentchat.json")
    assert not res.broken and len(res.traces) == 1
    tr = res.traces[0]
    assert [(n.kind, n.name) for n in tr.nodes][:5] == [("input", "user"), ("call", "planner"), ("call", "calculator"),
                                                       ("tool", "multiply"), ("call", "calculator")]
    assert tr.nodes[2].tool_calls[0].name == "multiply" and tr.nodes[3].parents == [2] and tr.nodes[3].text == "84"
    assert tr.calls()[-1].name == "writer" and "84" in tr.calls()[-1].text
    assert_spans_exact(tr)
    # and agentgrad blame takes the file as it is: the string walk follows the 84 to the tool's result
    out = tmp_path / "B"
    assert main(["blame", str(DATA / "autogen_agentchat.json"), "--loss", "wrong product", "--wrong", "84",
                 "--method", "provenance", "--out", str(out)]) == 0
    blame = json.loads((out / "blame.json").read_text())
    assert blame["rows"][0]["agent"] == "multiply" and blame["rows"][0]["repair"] == ["calculator"]


def test_an_autogen_selectors_choices_address_the_next_speaker_and_no_agent_reads_them(tmp_path):
    """A real SelectorGroupChat with its team events (autogen-agentchat 0.7.5): each SelectSpeakerEvent is
    a call of the manager addressed to the speaker it chose; the chosen speaker's next message has it as
    a parent with no span (no agent was shown it), and no later call renders it. Along the addressed
    edges the writer's answer still reaches every call."""
    from agentgrad.runs.blame import reach

    raw = json.loads((DATA / "autogen_selector_events.json").read_text())["messages"]
    assert [m["type"] for m in raw].count("SelectSpeakerEvent") == 3
    tr = import_file(DATA / "autogen_selector_events.json").traces[0]
    picks = [n for n in tr.calls() if n.name == "SelectorGroupChatManager"]
    assert [(n.text, n.meta["to"]) for n in picks] == [("planner", "planner"), ("calculator", "calculator"),
                                                       ("writer", "writer")]
    for pick in picks:
        nxt = next(n for n in tr.calls() if n.id > pick.id and n.name == pick.meta["to"])
        assert pick.id in nxt.parents and pick.id not in {s.source for s in nxt.spans}
        assert not any(s.source == pick.id for n in tr.nodes for s in n.spans)
        assert preferred_edges(tr)[nxt.id]["address"] == [pick.id]
    assert_spans_exact(tr)
    ad = prefer_addressed(tr)
    assert reach(ad) == reach(tr) == (len(tr.calls()), len(tr.calls()))
    out = tmp_path / "B"
    assert main(["blame", str(DATA / "autogen_selector_events.json"), "--loss", "wrong product", "--wrong", "84",
                 "--method", "provenance", "--edges", "addressed", "--out", str(out)]) == 0
    blame = json.loads((out / "blame.json").read_text())
    assert blame["rows"][0]["agent"] == "multiply" and blame["rows"][0]["repair"] == ["calculator"]


def test_ag2_group_chat_messages_as_the_library_keeps_them(tmp_path):
    """A real AG2 GroupChat's messages (ag2 0.9.9, ``benchmarks/record_group_chats.py --only ag2``): every
    agent's message is a ``user`` message with its name; the user proxy's first message is the task; the
    calculator's OpenAI ``tool_calls`` are its call's tool calls and the proxy's ``tool`` message (its
    ``tool_responses``) a tool node of the named tool, whose parent is the call that asked."""
    res = import_file(DATA / "ag2_groupchat.json")
    assert not res.broken
    tr = res.traces[0]
    assert [(n.kind, n.name) for n in tr.nodes] == [("input", "user_proxy"), ("call", "planner"), ("call", "calculator"),
                                                    ("tool", "multiply"), ("call", "calculator"), ("call", "writer")]
    assert [(c.name, c.arguments) for c in tr.nodes[2].tool_calls] == [("multiply", {"a": 12, "b": 7})]
    assert tr.nodes[3].parents == [2] and tr.nodes[3].text == "84"
    assert tr.nodes[5].parents == [0, 1, 2, 3, 4]
    assert_spans_exact(tr)
    out = tmp_path / "B"
    assert main(["blame", str(DATA / "ag2_groupchat.json"), "--loss", "wrong product", "--wrong", "84",
                 "--method", "provenance", "--out", str(out)]) == 0
    blame = json.loads((out / "blame.json").read_text())
    assert blame["rows"][0]["agent"] == "multiply" and blame["rows"][0]["repair"] == ["calculator"]


@needs_agentrx
def test_blame_loss_auto_puts_the_loss_where_the_runs_record_says(tmp_path, capsys):
    results = json.loads((AGENTRX / "tau_retail" / "tau_dataset_failed.json").read_text())
    f = tmp_path / "tau2.json"
    f.write_text(json.dumps(next(r for r in results if str(r["task_id"]) == "2")))
    out = tmp_path / "B"
    assert main(["blame", str(f), "--loss", "auto", "--method", "provenance,last", "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "loss on n5 (assistant), from the run's record: The user had to be told 10; the agent said 11." in printed
    assert "not measured for traces like this" in printed
    blame = json.loads((out / "blame.json").read_text())
    assert blame["loss"]["targets"] == [5] and blame["loss"]["details"]["wrong"] == "11"
    # a trace that keeps no record: one line that says to write the loss
    g = tmp_path / "chat.jsonl"
    g.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]) + "\n")
    assert main(["blame", str(g), "--loss", "auto", "--method", "last", "--out", str(tmp_path / "C")]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--loss TEXT" in err


def test_a_failure_the_trace_shows_is_a_located_loss():
    """``--loss auto`` without a run record: a failed tool result puts the loss on the call that asked for
    it, a retry loop on its first call, an errored span on its own call; a clean trace gives none."""
    from agentgrad.blame.losses import failure_loss, trace_loss
    from agentgrad.core.trace import Node, ToolCall, Trace

    msgs = [{"source": "user", "type": "TextMessage", "content": "What is 12 * 7?"},
            {"source": "calc", "type": "ToolCallRequestEvent",
             "content": [{"id": "c1", "name": "multiply", "arguments": "{\"a\": 12, \"b\": 7}"}]},
            {"source": "calc", "type": "ToolCallExecutionEvent",
             "content": [{"call_id": "c1", "name": "multiply", "content": "boom", "is_error": True}]},
            {"source": "writer", "type": "TextMessage", "content": "I could not compute it."}]
    tr = group_chat_trace(msgs, "t")
    loss = trace_loss(tr)
    assert loss.targets == [1] and loss.details["rule"] == "error shown" and "boom" in loss.text
    assert failure_loss(group_chat_trace([msgs[0], msgs[3]], "clean")) is None
    loop = Trace(id="loop")
    q = loop.add(Node(id=-1, kind="input", name="user", text="find it"))
    for i in range(4):
        loop.add(Node(id=-1, kind="call", name="agent", text="", parents=[q.id],
                      tool_calls=[ToolCall(name="search", arguments={"q": "x"}, id=f"c{i}")]))
    retry = failure_loss(loop)
    assert retry.targets == [1] and retry.details["rule"] == "retry loop"
    errored = Trace(id="e")
    errored.add(Node(id=-1, kind="input", name="user", text="go"))
    errored.add(Node(id=-1, kind="call", name="a", text="ok", parents=[0]))
    errored.add(Node(id=-1, kind="call", name="b", text="", parents=[1], meta={"error": "RateLimitError: 429"}))
    assert failure_loss(errored).targets == [2] and "429" in failure_loss(errored).text


def test_an_error_status_in_spans_and_rows_reaches_the_node():
    from agentgrad.importers.otlp import status_error

    assert status_error({"code": 2, "message": "timeout"}) == "timeout" and status_error({"code": 1}) == ""
    assert status_error("ERROR", "bad tool") == "bad tool" and status_error("OK") == ""
    assert status_error({"code": "STATUS_CODE_ERROR"}) == "error"


@needs_agentrx
def test_the_loss_goes_to_the_call_its_words_describe():
    """`--loss TEXT` without --target: the call whose output the words describe (task 2: the reply that
    told the user the t-shirt count, the annotated root cause), and the loss says why; words no output
    shares stay on the last call."""
    from agentgrad.blame.losses import DESCRIBED, verbal_loss

    res = import_file(AGENTRX / "tau_retail" / "tau_dataset_failed.json")
    t2 = next(t for t in res.traces if t.id == "2")
    loss = verbal_loss(t2, "the agent told the user the wrong number of t-shirt options", target=DESCRIBED)
    node = t2.nodes[loss.targets[0]]
    assert node.meta["message"] == 6 and "shirt" in loss.details["target_reason"]
    vague = verbal_loss(t2, "it failed", target=DESCRIBED)
    assert vague.targets == [t2.calls()[-1].id] and "the last call" in vague.details["target_reason"]
    held = verbal_loss(t2, "wrong count", wrong="11 available", target=DESCRIBED)
    assert held.targets == [node.id] and held.spans[node.id]


# A Magentic-One log in its shape (worked by hand): the task, the orchestrator's plan, an instruction
# to WebSurfer, its reply, the orchestrator's next thought quoting that reply, an instruction to
# Assistant, and the final answer.
REPLY = "The page lists 11 available T-shirt options in three colours."
ADDRESSED = [{"role": "human", "content": "How many T-shirt options are there?"},
             {"role": "Orchestrator (thought)", "content": "Plan: ask WebSurfer to look it up."},
             {"role": "Orchestrator (-> WebSurfer)", "content": "Please open the shop page and count the options."},
             {"role": "WebSurfer", "content": REPLY},
             {"role": "Orchestrator (thought)", "content": f"WebSurfer says: {REPLY[:40]}. Next: Assistant."},
             {"role": "Orchestrator (-> Assistant)", "content": "Please write the answer."},
             {"role": "Assistant", "content": "There are 11 options."},
             {"role": "Orchestrator (termination condition)", "content": "FINAL ANSWER: 11"}]


def test_a_group_chats_preferred_edges_are_its_addresses_replies_and_quotes():
    """Hand-worked on the log above: WebSurfer answers the instruction addressed to it; the orchestrator's
    next thought reads WebSurfer's reply (the answer to its own last address) and quotes it; the plan has
    no such edge and keeps every edge. The addressed trace renders every call as before, its spans exact."""
    tr = group_chat_trace(ADDRESSED, "m1")
    got = preferred_edges(tr)
    assert got[3] == {"address": [2], "reply": [], "quoted": []}  # WebSurfer: the instruction it answers
    assert got[4] == {"address": [], "reply": [3], "quoted": [3]}  # the orchestrator reads and quotes the reply
    assert got[6] == {"address": [5], "reply": [], "quoted": []}
    assert got[7] == {"address": [], "reply": [6], "quoted": []}
    assert got[1] == {"address": [], "reply": [], "quoted": []}
    ad = prefer_addressed(tr)
    assert ad.nodes[1].parents == tr.nodes[1].parents == [0]  # no preferred edge: all kept
    assert ad.nodes[3].parents == [0, 2]  # the task and the instruction: not the plan
    assert ad.nodes[4].parents == [0, 2, 3]  # its own last message, the reply (and the task)
    assert ad.nodes[7].parents == [0, 5, 6]
    assert [s.source for s in ad.nodes[7].spans] == [0, 5, 6] and ad.nodes[7].meta["edges"] == {"reply": [6]}
    assert all(a.messages == b.messages for a, b in zip(ad.nodes, tr.nodes))
    assert tr.nodes[7].parents == list(range(7)) and ad.meta["edges"] == "addressed"  # the original is untouched
    assert_spans_exact(ad)


def test_addressed_edges_are_refused_outside_a_group_chat_and_for_a_set(tmp_path, capsys):
    from agentgrad.runs.blame import with_edges

    chat = import_file_text(tmp_path, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    with pytest.raises(ConfigError, match="reads a group chat's addresses"):
        with_edges(chat, "addressed")
    with pytest.raises(ConfigError, match="--edges takes all or addressed"):
        with_edges(chat, "some")
    f = tmp_path / "log.json"
    f.write_text(json.dumps(ADDRESSED))
    for args, says in ((["--edges", "some"], "--edges takes all or addressed"),
                       (["--edges", "addressed", "--losses", str(f)], "blames one group chat at a time")):
        code = main(["blame", str(f), "--loss", "the answer is wrong", "--method", "provenance",
                     "--out", str(tmp_path / "B"), *args])
        err = capsys.readouterr().err.strip()
        assert code != 0 and len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "B").exists()
    code = main(["blame", str(f), "--loss", "the final answer is wrong", "--method", "provenance",
                 "--edges", "addressed", "--out", str(tmp_path / "C")])
    out = capsys.readouterr().out
    assert code == 0 and "reaches back to 7 of 7 calls (7 along the addressed edges)" in " ".join(out.split())


def import_file_text(tmp_path, messages):
    f = tmp_path / "chat.json"
    f.write_text(json.dumps(messages))
    return import_file(f).traces[0]


@needs_agentrx
def test_in_every_magentic_one_log_a_worker_answers_the_latest_instruction_to_it(tmp_path):
    """Across the 58 logs, read against the raw roles: a worker's address edge is the latest earlier
    message whose role is ``Orchestrator (-> WORKER)``, and its spans stay exact on the addressed trace."""
    with tarfile.open(AGENTRX / "magentic_dataset.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    checked = 0
    for f in sorted(p for p in tmp_path.rglob("*.json") if p.name != "steps_by_id.json"):
        tr, raw = import_file(f).traces[0], json.loads(f.read_text())
        edges = preferred_edges(tr)
        for n in tr.calls():
            if n.name == "Orchestrator":
                continue
            told = [i for i in range(n.id) if raw[i]["role"] == f"Orchestrator (-> {n.name})"]
            assert edges[n.id]["address"] == told[-1:], (f.name, n.id)
            checked += bool(told)
        assert_spans_exact(prefer_addressed(tr))
    assert checked > 500
