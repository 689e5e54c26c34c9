"""The tau-bench systems, user simulator, verbal loss, pass^k and CLI (tiny models, fakes, a local server)."""

import json
import math
import os
from pathlib import Path

import pytest

from agentgrad.blame.backward import backward
from agentgrad.benchmarks.common import parse_range, pass_hat_k
from agentgrad.benchmarks.taubench.env import RetailDatabase, load_tasks
from agentgrad.benchmarks.taubench.loss import reward_loss
from agentgrad.benchmarks.taubench.run import summarize
from agentgrad.benchmarks.taubench.system import MultiAgentRetail, build_system, load_retail_config, read_policy
from agentgrad.benchmarks.taubench.user import STOP, ScriptedUser, UserSimulator, load_user_rules
from agentgrad.cli import main
from agentgrad.errors import ConfigError
from agentgrad.models.fake import FakeModel
from agentgrad.models.serve import OpenAICompatServer
from conftest import ROOT, assert_spans_exact

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


def multi(database, team, lines, max_steps=30):
    cfg = load_retail_config("multi", None, read_policy())
    return build_system("multi", cfg, {"default": team, "user": team}, lambda seed: ScriptedUser(lines), database,
                        max_steps)


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
    # workers hold only their own tools, in tau-bench's order
    assert [t["function"]["name"] for t in exchange_call.tools] == ["exchange_delivered_order_items",
                                                                    "return_delivered_order_items"]
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


def test_user_simulator_follows_tau_bench(database):
    rules = load_user_rules()
    spec = json.loads((Path(os.environ.get("AGENTGRAD_DATA_DIR", "data")) / "taubench_retail" /
                       "user_simulator.json").read_text())
    user_model = FakeModel(["Hello, I need help.", "Thanks, that is all. ###STOP### Bye", "unused"])
    user = UserSimulator(user_model, rules)
    assert user.settings.temperature is None and user.settings.max_new_tokens is None  # tau-bench's defaults
    assert user.reset("You are Ann.") == "Hello, I need help."
    sysmsg = user_model.requests[0][0]["content"]
    # tau-bench's template with the instruction shown as it shows it
    assert sysmsg == spec["system_prompt_template"].replace("{instruction_display}", "\n\nInstruction: You are Ann.\n")
    assert sysmsg.startswith("You are a user interacting with an agent.\n\nInstruction: You are Ann.\n\nRules:")
    assert rules.system_prompt(None) == spec["system_prompt_template"].replace("{instruction_display}", "")
    assert user_model.requests[0][1] == {"role": "user", "content": spec["first_agent_message"]}
    said = user.reply("How can I help?")
    assert [m["role"] for m in user_model.requests[1]] == ["system", "user", "assistant", "user"]
    assert user.is_stop(said) and not user.is_stop("STOP") and rules.stop_token == STOP  # anywhere in the message


def test_step_limit_ends_the_episode_with_reward_zero(database):
    # turn 1: a tool call and a reply (2 steps); each later turn: a reply (1 step)
    task = load_tasks("test")[0]
    ep = multi(database, scripted_team(route_exchange=False), LINES * 3, max_steps=3).run({"task": task}, id="x")
    out = ep.output
    assert out.ended_by == "step_limit" and out.turns == 2 and len(out.replies) == 2
    assert out.reward.failed == "step_limit" and out.reward.reward == 0.0 and out.reward.outputs == 0.0
    assert ep.trace.meta["steps"] == 3
    # with steps enough, the same conversation ends with the customer
    ep = multi(database, scripted_team(route_exchange=False), LINES * 3, max_steps=30).run({"task": task}, id="y")
    assert ep.output.ended_by == "user_stop" and ep.output.reward.failed is None


def test_an_episode_that_fails_scores_zero(database):
    from agentgrad.errors import ContextLengthError

    # a task whose gold actions change nothing and that needs no output: doing nothing would score 1
    idle = next(t for t in load_tasks("test") if not t.outputs and all(
        a.name in ("find_user_id_by_email", "find_user_id_by_name_zip", "get_user_details", "get_order_details",
                   "get_product_details", "list_all_product_types", "calculate", "think") for a in t.actions))

    def overflow(messages, tools):
        raise ContextLengthError("prompt of 40000 tokens does not fit the context (32768 tokens)")

    ep = multi(database, FakeModel(responder=overflow), LINES).run({"task": idle}, id="e")
    assert ep.output.ended_by == "error" and "does not fit" in ep.output.error
    assert ep.output.reward.to_dict()["reward"] == 0.0 and ep.output.reward.outputs == 0.0
    assert ep.output.reward.failed == "error"
    ok = multi(database, scripted_team(route_exchange=False), []).run({"task": idle}, id="f")  # user stops at once
    assert ok.output.reward.reward == 1.0  # the same task, ended: scored as tau-bench scores it


def test_agents_see_tau_bench_tool_schemas_in_its_order(database):
    tools_json = json.loads((Path(os.environ.get("AGENTGRAD_DATA_DIR", "data")) / "taubench_retail" /
                             "tools.json").read_text())
    cfg = load_retail_config("single", None, read_policy())
    single = build_system("single", cfg, {"default": FakeModel(), "user": FakeModel()},
                          lambda seed: ScriptedUser([]), database)
    agent = single.agents_["agent"]
    assert [t.schema() for t in agent.tools] == tools_json
    assert cfg.agents["agent"].prompt.strip() == read_policy()  # tau-bench's agent: the policy alone
    m = multi(database, FakeModel(), [])
    worker = m.agents_["post_delivery"]
    assert [t.schema()["function"] for t in worker.tools] == [
        s["function"] for s in tools_json if s["function"]["name"] in ("exchange_delivered_order_items",
                                                                     "return_delivered_order_items")]


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


@pytest.mark.slow
def test_cli_evaluate_on_tiny_models_resumes(tmp_path, capsys):
    run = tmp_path / "run"
    # one task: what is checked (the files, the trace, a resume that runs nothing again) is per episode
    args = ["bench", "taubench", "evaluate", "--out", str(run), "--tasks", "0", "--max-steps", "1",
            "--model", "tiny", "--user-model", "tiny"]
    assert main(args + ["--trials", "1"]) == 0
    assert len(_episodes(run)) == 1
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["episodes"] == 1 and set(metrics["pass_hat_k"]) == {"1"}
    assert "action reward" in capsys.readouterr().out
    from agentgrad.core.trace import Trace

    tr = Trace.load(run / "traces" / "test-0-t0.json")
    assert tr.nodes[0].kind == "input" and tr.nodes[0].name == "customer"
    assert {n.name for n in tr.calls()} >= {"manager", "responder"}
    # resuming needs the same options; a finished run resumed runs nothing again
    assert main(args + ["--trials", "2", "--resume"]) == 2  # other options than the run was started with
    assert "other options" in capsys.readouterr().err
    assert main(args + ["--trials", "1", "--resume"]) == 0
    assert len(_episodes(run)) == 1
    assert main(["bench", "taubench", "evaluate", "--out", str(tmp_path / "r2"), "--system", "nope"]) == 2


@pytest.mark.slow
def test_cli_optimize_on_tiny_models(tmp_path):
    out = tmp_path / "opt"
    code = main(["bench", "taubench", "optimize", "--out", str(out), "--samples", "2", "--tasks", "0",
                 "--max-steps", "1", "--model", "tiny", "--user-model", "tiny"])
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


@pytest.mark.slow  # over 3 s alone on 2 cores: out of the fast subset
def test_episode_against_openai_compatible_server(tmp_path, tiny_llama):
    from agentgrad.models.hf import HFModel

    with OpenAICompatServer(HFModel(path=str(tiny_llama), max_context=32768)) as srv:
        value = f"openai:tiny@{srv.base_url}"
        code = main(["bench", "taubench", "evaluate", "--out", str(tmp_path / "run"), "--tasks", "3-4",
                     "--max-steps", "1", "--system", "single", "--model", value, "--user-model", value,
                     "--concurrency", "2"])
        answered = srv.stats["answered"]
        bodies = list(srv.bodies)
    assert code == 0 and answered >= 4
    eps = sorted(_episodes(tmp_path / "run"), key=lambda e: e["index"])
    assert [e["index"] for e in eps] == [3, 4] and all(e["turns"] == 1 and e["error"] is None for e in eps)
    user = [b for b in bodies if b["messages"][0]["content"].startswith("You are a user interacting")]
    agent = [b for b in bodies if b not in user]
    assert user and all("temperature" not in b and "max_tokens" not in b for b in user)  # unset, as in tau-bench
    tools_json = json.loads((Path(os.environ.get("AGENTGRAD_DATA_DIR", "data")) / "taubench_retail" /
                             "tools.json").read_text())
    assert agent and all(b["tools"] == tools_json and b["temperature"] == 0.0 for b in agent)
    assert agent[0]["messages"][0]["content"] == read_policy()


def test_user_temperature_is_passed_and_recorded(tmp_path):
    with OpenAICompatServer(FakeModel(["###STOP###"], cycle=True)) as srv:
        value = f"openai:fake@{srv.base_url}"
        code = main(["bench", "taubench", "evaluate", "--out", str(tmp_path / "run"), "--tasks", "0",
                     "--system", "single", "--model", value, "--user-model", value, "--user-temperature", "0.7"])
        bodies = list(srv.bodies)
    assert code == 0 and len(bodies) == 1 and bodies[0]["temperature"] == 0.7
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["user_temperature"] == 0.7 and metrics["max_steps"] == 30


def test_a_run_where_every_conversation_fails_exits_non_zero(tmp_path, capsys):
    prompts = tmp_path / "single.yaml"
    packaged = ROOT / "src" / "agentgrad" / "benchmarks" / "taubench" / "prompts" / "single.yaml"
    prompts.write_text(packaged.read_text().replace("default: {backend: tiny, max_context: 32768}",
                                                    "default: {backend: tiny, max_context: 256}"))
    code = main(["bench", "taubench", "evaluate", "--out", str(tmp_path / "run"), "--tasks", "0-1", "--system",
                 "single", "--prompts", str(prompts), "--model", "tiny", "--user-model", "tiny"])
    out, err = capsys.readouterr()
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["ended_by"] == {"error": 2} and metrics["output_reward"] == 0.0 and metrics["reward"] == 0.0
    mine = [line for line in err.splitlines() if line.strip() and "Loading weights" not in line]  # transformers' own bars
    assert code == 1 and len(mine) == 1 and "every one of the 2 conversations failed" in mine[0]


def test_run_jobs_records_finished_jobs_and_stops_on_error():
    from agentgrad.runs.runner import run_jobs

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


def test_single_agent_runs_only_the_first_tool_call_of_a_reply(database):
    cfg = load_retail_config("single", None, read_policy())
    two = {"tool_calls": [{"name": "find_user_id_by_name_zip", "arguments": FIND},
                          {"name": "get_user_details", "arguments": {"user_id": "yusuf_rossi_9620"}}]}
    agent_model = FakeModel([two, "Found you."])
    single = build_system("single", cfg, {"default": agent_model, "user": FakeModel()},
                          lambda seed: ScriptedUser(["Hi, Yusuf Rossi, 19122."]), database)
    ep = single.run({"task": load_tasks("test")[0]}, id="one")
    assert [a["name"] for a in ep.output.actions] == ["find_user_id_by_name_zip"]  # as tau-bench: the first only
    first = ep.trace.calls("agent")[0]
    assert len(first.tool_calls) == 1 and first.meta["dropped_tool_calls"][0]["name"] == "get_user_details"
    assert ep.trace.meta["steps"] == 2 and ep.output.ended_by == "user_stop"
