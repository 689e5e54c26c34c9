"""The tau-bench systems, user simulator, verbal loss, pass^k and CLI (tiny models, fakes, a local server)."""

import json
import math
import os
from pathlib import Path

import pytest

from agentgrad.backward import backward
from agentgrad.benchmarks.common import parse_range, pass_hat_k
from agentgrad.benchmarks.taubench.env import RetailDatabase, load_tasks
from agentgrad.benchmarks.taubench.loss import reward_loss
from agentgrad.benchmarks.taubench.run import summarize
from agentgrad.benchmarks.taubench.system import MultiAgentRetail, build_system, load_retail_config, read_policy
from agentgrad.benchmarks.taubench.user import STOP, ScriptedUser, UserSimulator
from agentgrad.cli import main
from agentgrad.errors import ConfigError
from agentgrad.models.fake import FakeModel
from agentgrad.testing import OpenAICompatServer
from conftest import assert_spans_exact

pytestmark = pytest.mark.skipif(
    not (Path(os.environ.get("AGENTGRAD_DATA_DIR", "data")) / "taubench_retail").is_dir(),
    reason="tau-bench data not found (set AGENTGRAD_DATA_DIR)",
)

# test task 0: Yusuf Rossi (zip 19122) exchanges two items of delivered order #W2378156
EXCHANGE = {"order_id": "#W2378156", "item_ids": ["1151293680", "4983901480"],
            "new_item_ids": ["7706410293", "7747408585"], "payment_method_id": "credit_card_9513926"}
FIND = {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}


@pytest.fixture(scope="module")
def database():
    return RetailDatabase()


def scripted_team(exchange=EXCHANGE, route_exchange=True, reply="Done."):
    """One fake model answering for every agent of the multi system, by the agent's system prompt."""

    def respond(messages, tools):
        system, last = messages[0]["content"], messages[-1]
        turn = messages[1]["content"].count("Customer:") if len(messages) > 1 else 0
        if system.startswith("You are the manager"):
            if turn == 1:
                return "ROUTE: user_resolution\nINSTRUCTION: find the user by name and zip."
            return ("ROUTE: post_delivery\nINSTRUCTION: exchange the items." if route_exchange
                    else "ROUTE: none\nINSTRUCTION: ask what else.")
        if system.startswith("You identify the customer"):
            if last["role"] == "tool":
                return "The user id is " + last["content"]
            return {"tool_calls": [{"name": "find_user_id_by_name_zip", "arguments": FIND}]}
        if system.startswith("You return or exchange"):
            if last["role"] == "tool":
                return "Exchange requested."
            return {"tool_calls": [{"name": "exchange_delivered_order_items", "arguments": exchange}]}
        if "writes to the customer" in system:
            return reply
        raise AssertionError("unexpected agent: " + system[:60])

    return FakeModel(responder=respond, name="team")


def multi(database, team, lines, max_turns=30):
    cfg = load_retail_config("multi", None, read_policy())
    return build_system("multi", cfg, {"default": team, "user": team}, lambda seed: ScriptedUser(lines), database,
                        max_turns)


LINES = ["Hi, I'm Yusuf Rossi, zip code 19122.", "Please exchange the keyboard and thermostat of #W2378156. Yes."]


def test_multi_agent_episode_with_scripted_user_earns_the_reward(database):
    task = load_tasks("test")[0]
    system = multi(database, scripted_team(), LINES)
    ep = system.run({"task": task}, id="t0")
    out, tr = ep.output, ep.trace
    assert out.ended_by == "user_stop" and out.turns == 2
    assert out.reward.actions == 1.0 and out.reward.reward == 1.0
    assert reward_loss(tr, out) is None
    names = [n.name for n in tr.calls()]
    assert names == ["manager", "user_resolution", "user_resolution", "responder",
                     "manager", "post_delivery", "post_delivery", "responder"]
    assert assert_spans_exact(tr) > 10
    # the worker that exchanges reads the manager's instruction and the user id found in turn 1,
    # with the provenance of that tool result
    find_tool = next(n for n in tr.nodes if n.kind == "tool" and n.name == "find_user_id_by_name_zip")
    exchange_call = tr.calls("post_delivery")[0]
    assert find_tool.text == "yusuf_rossi_9620"
    assert find_tool.id in exchange_call.parents and tr.calls("manager")[1].id in exchange_call.parents
    assert tr.calls("manager")[0].meta["routes"] == ["user_resolution"]
    # workers hold only their own tools
    assert [t["function"]["name"] for t in exchange_call.tools] == ["return_delivered_order_items",
                                                                    "exchange_delivered_order_items"]
    # the database of the run is private: a fresh one is unchanged
    assert database.fresh()["orders"]["#W2378156"]["status"] == "delivered"


def test_wrong_write_action_blames_the_worker_that_made_it(database, tiny_llama):
    task = load_tasks("test")[0]
    wrong = dict(EXCHANGE, new_item_ids=["7706410293", "4983901480"])  # the thermostat left unchanged
    ep = multi(database, scripted_team(exchange=wrong), LINES).run({"task": task}, id="t0")
    assert ep.output.reward.actions == 0.0
    loss = reward_loss(ep.trace, ep.output)
    assert {ep.trace.nodes[t].name for t in loss.targets} == {"post_delivery"}
    made = ep.trace.calls("post_delivery")[0].id
    assert made in loss.targets
    assert "Wrong action by post_delivery" in loss.text and "Missing action" in loss.text
    assert loss.details["missing"] == ['exchange_delivered_order_items(' + json.dumps(EXCHANGE, sort_keys=True) + ')']
    # the loss walks backward through a real attribution graph (tiny scorer as a surrogate)
    from agentgrad.attribution.scorer import Scorer

    loss.attach(ep.trace)
    _, graph = Scorer(str(tiny_llama), max_context=32768).attribute(ep.trace)
    trajs = backward(graph, loss, top_k=1, method="mean_l1")
    assert trajs and all(t.agents[-1] == "post_delivery" for t in trajs)
    assert all(ep.trace.nodes[t.nodes[0]].kind == "input" for t in trajs)


def test_missing_action_blames_the_manager_that_never_routed(database):
    task = load_tasks("test")[0]
    ep = multi(database, scripted_team(route_exchange=False), LINES).run({"task": task}, id="t0")
    loss = reward_loss(ep.trace, ep.output)
    assert loss.targets == [ep.trace.calls("manager")[-1].id]
    assert "expected from manager" in loss.text


def test_missing_output_blames_the_replies(database):
    task = load_tasks("test")[24]  # no write action; the customer must be told 'polyester' and 'cotton'
    assert task.outputs == ["polyester", "cotton"] and not task.actions
    team = scripted_team(reply="It is made of polyester.")
    ep = multi(database, team, ["Hi, I'm Yusuf Rossi, zip code 19122."]).run({"task": task}, id="t24")
    out = ep.output
    assert out.reward.actions == 1.0 and out.reward.outputs == 0.0
    assert out.reward.outputs_found == {"polyester": True, "cotton": False}
    loss = reward_loss(ep.trace, out)
    assert loss.targets == out.reply_nodes == [c.id for c in ep.trace.calls("responder")]
    assert "never told: 'cotton'" in loss.text


def test_single_agent_keeps_its_tool_history_across_turns(database):
    seen = []

    def respond(messages, tools):
        seen.append(messages)
        last = messages[-1]
        n_users = sum(m["role"] == "user" for m in messages)
        if last["role"] == "tool":
            return "ok: " + last["content"][:30]
        if n_users == 1:
            return {"tool_calls": [{"name": "find_user_id_by_name_zip", "arguments": FIND}]}
        return {"tool_calls": [{"name": "exchange_delivered_order_items", "arguments": EXCHANGE}]}

    model = FakeModel(responder=respond)
    cfg = load_retail_config("single", None, read_policy())
    assert cfg.agents["agent"].protected == [read_policy()]
    system = build_system("single", cfg, {"default": model, "user": model}, lambda seed: ScriptedUser(LINES), database)
    ep = system.run({"task": load_tasks("test")[0]}, id="s0")
    assert ep.output.reward.reward == 1.0
    second_turn = seen[2]  # turn 2's first request carries turn 1's tool call and result
    roles = [m["role"] for m in second_turn]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert second_turn[3]["content"] == "yusuf_rossi_9620"
    assert second_turn[2]["tool_calls"][0]["name"] == "find_user_id_by_name_zip"
    assert len(ep.trace.calls("agent")[0].tools) == 16
    assert assert_spans_exact(ep.trace) > 0


def test_transfer_ends_the_episode(database):
    def respond(messages, tools):
        if messages[0]["content"].startswith("You are the manager"):
            return {"tool_calls": [{"name": "transfer_to_human_agents", "arguments": {"summary": "cannot help"}}]}
        raise AssertionError("nobody else runs after a transfer")

    team = FakeModel(responder=respond)
    ep = multi(database, team, LINES).run({"task": load_tasks("test")[0]}, id="x")
    assert ep.output.ended_by == "transfer" and ep.output.turns == 1 and ep.output.replies == []


def test_turn_limit_and_user_simulator(database):
    user_model = FakeModel(["Hello, I need help.", "Still here.", STOP])
    user = UserSimulator(user_model)
    assert user.reset("You are Ann.") == "Hello, I need help."
    sysmsg = user_model.requests[0][0]["content"]
    assert "You are Ann." in sysmsg and STOP in sysmsg
    assert user_model.requests[0][1] == {"role": "user", "content": "Hi! How can I help you today?"}
    assert user.reply("How can I help?") == "Still here."
    assert [m["role"] for m in user_model.requests[1]] == ["system", "user", "assistant", "user"]
    ep = multi(database, scripted_team(route_exchange=False), LINES * 3, max_turns=3).run(
        {"task": load_tasks("test")[0]}, id="x")
    assert ep.output.ended_by == "turn_limit" and ep.output.turns == 3


def test_routes_parsing():
    assert MultiAgentRetail.routes("ROUTE: retrieval, Post-Delivery, bogus\nINSTRUCTION: x") == ["retrieval",
                                                                                              "post_delivery"]
    assert MultiAgentRetail.routes("route: none") == [] and MultiAgentRetail.routes("no route line") == []


def test_pass_hat_k_and_summary_hand_computed():
    # task a: 2 of 3 trials succeed, task b: 1 of 3
    got = pass_hat_k({"a": [True, True, False], "b": [True, False, False]})
    assert got[1] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert got[2] == pytest.approx((math.comb(2, 2) / math.comb(3, 2) + 0) / 2)
    assert got[3] == 0.0
    recs = [{"split": "test", "index": 0, "trial": t, "ended_by": "user_stop",
             "reward": {"actions": a, "outputs": 1.0, "reward": a}} for t, a in enumerate([1.0, 0.0])]
    s = summarize(recs)
    assert s["action_reward"] == 0.5 and s["pass_hat_k"] == {"1": 0.5, "2": 0.0}


def test_parse_range_errors():
    assert parse_range("0-2,5,1", 10) == [0, 1, 2, 5]
    with pytest.raises(ConfigError, match="out of range"):
        parse_range("3-12", 10)
    with pytest.raises(ConfigError, match="indices and ranges"):
        parse_range("a-b", 10)


def _episodes(run):
    return [json.loads(l) for l in (run / "events.jsonl").read_text().splitlines() if '"episode"' in l]


def test_cli_evaluate_on_tiny_models_resumes(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["bench", "taubench", "evaluate", "--out", str(run), "--tasks", "0-1", "--max-turns", "1",
            "--model", "tiny", "--user-model", "tiny"]
    assert main(args + ["--trials", "1"]) == 0
    assert len(_episodes(run)) == 2
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["episodes"] == 2 and set(metrics["pass_hat_k"]) == {"1"}
    assert "action reward" in capsys.readouterr().out
    from agentgrad.core.trace import Trace

    tr = Trace.load(run / "traces" / "test-0-t0.json")
    assert tr.nodes[0].kind == "input" and tr.nodes[0].name == "customer"
    assert {n.name for n in tr.calls()} >= {"manager", "responder"}
    # resuming needs the same options; a finished run resumed runs nothing again
    assert main(args + ["--trials", "2", "--resume"]) == 2  # other options than the run was started with
    assert "other options" in capsys.readouterr().err
    assert main(args + ["--trials", "1", "--resume"]) == 0
    assert len(_episodes(run)) == 2
    assert main(["bench", "taubench", "evaluate", "--out", str(tmp_path / "r2"), "--system", "nope"]) == 2


def test_cli_optimize_on_tiny_models(tmp_path):
    out = tmp_path / "opt"
    code = main(["bench", "taubench", "optimize", "--out", str(out), "--samples", "2", "--tasks", "0",
                 "--max-turns", "1", "--model", "tiny", "--user-model", "tiny"])
    assert code == 0
    events = [json.loads(l) for l in (out / "train" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if e["event"] in ("sample", "step")] == ["sample", "step", "sample", "step"]
    assert len(list((out / "train" / "attribution").glob("*.json"))) == 2  # the tiny model fails every task
    rec = json.loads(next((out / "train" / "attribution").glob("*.json")).read_text())
    assert rec["loss"]["kind"] == "taubench_reward" and rec["trajectories"]
    result = json.loads((out / "result.json").read_text())
    assert result["eval"]["episodes"] == 1 and result["train"]["steps"] == 2
    final = json.loads((out / "train" / "final.json").read_text())
    assert read_policy() in final["prompts"]["manager"]  # the protected policy survives every step


def test_episode_against_openai_compatible_server(tmp_path, tiny_llama):
    from agentgrad.models.hf import HFModel

    with OpenAICompatServer(HFModel(path=str(tiny_llama), max_context=32768)) as srv:
        value = f"openai:tiny@{srv.base_url}"
        code = main(["bench", "taubench", "evaluate", "--out", str(tmp_path / "run"), "--tasks", "3-4",
                     "--max-turns", "1", "--system", "single", "--model", value, "--user-model", value,
                     "--concurrency", "2"])
        answered = srv.stats["answered"]
    assert code == 0 and answered >= 4
    eps = sorted(_episodes(tmp_path / "run"), key=lambda e: e["index"])
    assert [e["index"] for e in eps] == [3, 4] and all(e["turns"] == 1 and e["error"] is None for e in eps)


def test_run_jobs_records_finished_jobs_and_stops_on_error():
    from agentgrad.benchmarks.common import run_jobs

    got = []
    run_jobs(list(range(6)), lambda j: j * j, 3, lambda j, r: got.append((j, r)))
    assert sorted(got) == [(j, j * j) for j in range(6)]

    def boom(j):
        if j == 0:
            raise ValueError("bad job")
        return j

    seen = []
    with pytest.raises(ValueError, match="bad job"):
        run_jobs(list(range(50)), boom, 2, lambda j, r: seen.append(j))
    assert len(seen) < 49  # the jobs not yet started were cancelled
