import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment (no terminal of their own):
# the CLI's console would fix its width at 80 when first imported, whatever width a test then asks for. A
# worker runs as a serial run does: without them (the tests that need a width set COLUMNS for their call)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

# The benchmark data: $AGENTGRAD_DATA_DIR, else ./data or ../shared/data when present (the same rule
# as the library), made absolute so that subprocesses and changed directories see it too.
from agentgrad.benchmarks.data import data_dir  # noqa: E402

if not os.environ.get("AGENTGRAD_DATA_DIR") and data_dir().is_dir():
    os.environ["AGENTGRAD_DATA_DIR"] = str(data_dir().resolve())

ROOT = Path(__file__).resolve().parent.parent  # the repository: README.md, docs/, benchmarks/, records/
EXAMPLE = ROOT / "examples" / "pipeline"


def llama_server_missing() -> str:
    """Why the llama.cpp server tests cannot run here ("" when they can)."""
    import importlib.util

    from agentgrad.errors import ModelError
    from agentgrad.models.spec import embedded_gguf

    try:
        embedded_gguf("smollm2")
    except ModelError as e:
        return str(e)
    if importlib.util.find_spec("llama_cpp") is None:
        return "the llama.cpp server is not installed: pip install 'llama-cpp-python[server]' (or .[llamacpp])"
    return ""


def pipeline_trace(model_path, question="What is the capital of France?"):
    """The example pipeline (extractor, planner -> answerer) run once on ``model_path``: its trace."""
    from agentgrad.core.config import apply_model_override, load_system_config
    from agentgrad.runs.graph_system import GraphSystem

    cfg = load_system_config(EXAMPLE / "system.yaml")
    apply_model_override(cfg, f"default={model_path}")
    return GraphSystem(cfg).run({"question": question}).trace

def run_script(script, *args, cwd=None, check=False) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS`` (a script of benchmarks/) run in this process: its stdout, stderr and exit
    status as :func:`subprocess.run` gives them, the script's folder first on ``sys.path`` and ``cwd`` the
    working directory, as the interpreter runs it, without a new interpreter's start and imports (about a
    second each on 2 cores). An exception the script does not catch is its traceback on stderr and exit 1,
    as it would be."""
    import contextlib
    import io
    import runpy
    import sys
    import traceback

    out, err, code = io.StringIO(), io.StringIO(), 0
    argv, path, here = sys.argv, list(sys.path), os.getcwd()
    sys.argv = [str(script), *map(str, args)]
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:  # sys.exit("message"): the message on stderr, status 1
                    print(e.code, file=sys.stderr)
                    code = 1
            except Exception:  # noqa: BLE001 - what the interpreter does with it
                traceback.print_exc()
                code = 1
    finally:
        sys.argv, sys.path[:] = argv, path
        os.chdir(here)
    done = subprocess.CompletedProcess([sys.executable, str(script), *map(str, args)], code, out.getvalue(),
                                       err.getvalue())
    if check:
        done.check_returncode()
    return done


DATA_SKIP = "data not found"  # the words every data test's skip reason holds


def _data_skips(terminalreporter):
    return [r for r in terminalreporter.stats.get("skipped", [])
            if DATA_SKIP in str(getattr(r, "longrepr", ""))]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say plainly why data tests were skipped; with AGENTGRAD_REQUIRE_DATA=1 (CI) that is a failure."""
    browser = [r for r in terminalreporter.stats.get("skipped", []) if "browser tests:" in str(getattr(r, "longrepr", ""))]
    if browser:
        terminalreporter.write_line(
            f"{len(browser)} browser tests of the HTML report were skipped: {str(browser[0].longrepr[-1])}", yellow=True)
    skipped = _data_skips(terminalreporter)
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} benchmark-data tests were skipped: no data directory "
            f"(set AGENTGRAD_DATA_DIR to the folder holding multiwoz/ and taubench_retail/)", yellow=True)


# skips CI allows: no browser where Chromium cannot be installed, no GPU on a CPU machine
ALLOWED_SKIPS = ("browser tests:", "CUDA")


def required_skips(terminalreporter) -> list[Any]:
    """The skipped tests that CI may not skip: with the data and every extra .ci/run installs there,
    only the browser tests (Chromium may not install) and the GPU tests may be skipped."""
    return [r for r in terminalreporter.stats.get("skipped", [])
            if not any(a in str(getattr(r, "longrepr", "")) for a in ALLOWED_SKIPS)]


def pytest_sessionfinish(session, exitstatus):
    """With AGENTGRAD_REQUIRE_DATA=1 (CI: the data and every extra installed) a skip for missing data or
    a missing extra is a failure, named with its reason."""
    if os.environ.get("AGENTGRAD_REQUIRE_DATA") == "1":
        rep = session.config.pluginmanager.get_plugin("terminalreporter")
        skipped = required_skips(rep) if rep is not None else []
        if skipped:
            rep.write_line(f"AGENTGRAD_REQUIRE_DATA=1 but {len(skipped)} test(s) were skipped for missing data or a "
                           f"missing extra, e.g. {str(skipped[0].longrepr)[:300]}", red=True)
            session.exitstatus = 1


@pytest.fixture(scope="session", autouse=True)
def _tiny_cache(tmp_path_factory):
    """Tiny models of the ``tiny`` backend are built into a temporary cache, not ~/.cache. A model the
    user's cache holds converted already (SmolLM2 from its GGUF: about 20 s of CPU each session) is
    linked in rather than converted again; tests/models/test_model_spec.py converts in caches of its own, so
    the conversion itself is still tested."""
    from agentgrad.models.spec import cache_dir

    converted = cache_dir() / "models"  # the user's (or $AGENTGRAD_CACHE's), read before it is replaced
    old = os.environ.get("AGENTGRAD_CACHE")
    cache = tmp_path_factory.mktemp("agentgrad-cache")
    os.environ["AGENTGRAD_CACHE"] = str(cache)
    if converted.is_dir():
        for folder in sorted(converted.iterdir()):  # a complete conversion has its source marker, written last
            if not folder.name.startswith(".") and (folder / "agentgrad-source.json").is_file():
                (cache / "models").mkdir(exist_ok=True)
                (cache / "models" / folder.name).symlink_to(folder, target_is_directory=True)
    yield
    if old is None:
        os.environ.pop("AGENTGRAD_CACHE", None)
    else:
        os.environ["AGENTGRAD_CACHE"] = old


@pytest.fixture(scope="session", autouse=True)
def _threads_per_worker():
    """Under pytest-xdist, each worker computes with its share of the cores (2 workers on 2 cores: one
    thread each), not with every core as a lone process does: PyTorch's threads of two workers on the
    same cores wait on each other. A test that sets a thread count sets it for itself."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if count > 1:
        import torch

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        torch.set_num_threads(max(1, cores // count))
    yield


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    from agentgrad.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"), arch="llama")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    from agentgrad.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"), arch="qwen3")


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """One ``agentgrad demo`` run for the session (tests read it; those that write go beside it)."""
    from agentgrad.cli import main

    out = tmp_path_factory.mktemp("demo") / "R"
    assert main(["demo", "--tiny", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def framework_server():
    """One llama.cpp server (SmolLM2, function calling) for every framework-app test of the session."""
    from agentgrad.testing.llama_server import LlamaServer

    # one thread: llama.cpp's threads wait on each other by spinning, which a busy machine makes very slow
    srv = LlamaServer(n_ctx=4096, chat_format="chatml-function-calling", n_threads=1)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def llama_server():
    """One llama.cpp server (SmolLM2, chatml) for the session's tests that need no server of their own."""
    from agentgrad.testing.llama_server import LlamaServer

    srv = LlamaServer(n_ctx=4096)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def smol():
    """SmolLM2 (the embedded ``smollm2``) on transformers, loaded once for the session: the SmolLM2 tests'
    replies, and their white-box scorers on the same weights (the process's one ``HFModel.shared``)."""
    from agentgrad.models.hf import HFModel

    return HFModel.shared(name="default", path="smollm2")


@pytest.fixture(scope="session")
def smollm2_scorer(smol):
    """The white-box scorer on the server's weights (dequantised), on the session's one SmolLM2 load."""
    from agentgrad.attribution.scorer import Scorer

    return Scorer(tokenizer=smol.tokenizer, model=smol.model, path="smollm2")


def assert_spans_exact(trace):
    """Every span cut out of its message equals its source node's text, character for character."""
    n_spans = 0
    for node in trace.nodes:
        for s in node.spans:
            got = node.messages[s.message]["content"][s.start : s.end]
            text = trace.nodes[s.source].text
            # the whole output, or a part of it a framework quoted (at least MIN_FRAGMENT characters)
            assert got == text[s.at : s.at + len(got)] and (got == text or len(got) >= 24), (node.id, s)
            n_spans += 1
    return n_spans


class IdealScorer:
    """Gradients of a model that copies: an output's value tokens point at the source value they copy
    (a corrupted value points at the source's correct value for its key). Tests the walk rules."""

    path = "ideal"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.cache_stats = {"hits": 0, "misses": 0}

    def describe(self):
        return {"path": self.path, "ideal": True}

    def attribute(self, trace, on_node=None):
        """Every call, as ``Scorer.attribute`` does (results and the attribution graph)."""
        from agentgrad.attribution.scorer import build_graph

        results = [self.attribute_node(trace, n) for n in trace.calls()]
        return results, build_graph(trace, results)

    def attribute_node(self, trace, node, target_chars=None):
        from agentgrad.attribution.render import render_call
        from agentgrad.attribution.scorer import NodeAttribution, SourceAttribution
        from agentgrad.attribution.weights import connection_weights

        r = render_call(self.tokenizer, node)
        wanted, at = set(), 0
        for line in node.text.split("\n"):  # the keys whose value lines the objective covers
            k = line.split(": ", 1)[0]
            if not target_chars or any(a < at + len(line) and b > at + len(k) + 2 for a, b in target_chars):
                wanted.add(k)
            at += len(line) + 1
        sources = []
        for src, chars in r.source_chars.items():
            text = trace.nodes[src].text
            hot = []
            for k in wanted:
                at = ("\n" + text).find(f"\n{k}: ")
                if at >= 0:
                    hot.append((chars[0][0] + at + len(k) + 2, chars[0][0] + at + len(k) + 2 + len(text[at:].split("\n")[0]) - len(k) - 2))
            positions = sorted({t for a, b in r.source_ranges[src] for t in range(a, b)})
            l1 = [10.0 if any(r.offsets[p][0] < hb and r.offsets[p][1] > ha for ha, hb in hot) else 0.1 for p in positions]
            sources.append(SourceAttribution(src, trace.nodes[src].kind, trace.nodes[src].name, r.source_ranges[src],
                                             connection_weights(l1, l1), positions, l1, l1))
        # log p of the objective's tokens, as the copier's output_logprobs gives them
        _, lps = self.output_logprobs(node)
        o_s = r.output_range[0]
        targets = r.output_tokens_for(target_chars) if target_chars else None
        log_prob = sum(lps[t - o_s] for t in (targets or range(o_s, r.output_range[1])))
        return NodeAttribution(node.id, node.name, r.input_ids, r.output_range, sources, "ideal", log_prob=log_prob)

    def output_logprobs(self, node):
        """A copier's log p: an output line's tokens are likely (p 0.99) when the line is in the inputs."""
        import math

        from agentgrad.attribution.render import render_call

        r = render_call(self.tokenizer, node)
        o_s, o_e = r.output_range
        user = node.messages[1]["content"].split("\n")
        lps, base = [], r.output_char_start
        for t in range(o_s, o_e):
            a = r.offsets[t][0] - base
            line_start = node.text.rfind("\n", 0, max(a, 0)) + 1
            line = node.text[line_start:].split("\n")[0]
            lps.append(math.log(0.99) if line in user else math.log(0.01))
        return r, lps


def smollm2_missing() -> str:
    """Why the SmolLM2 tests cannot run here (its wheel not installed), or "" where they can."""
    from agentgrad.errors import ModelError
    from agentgrad.models.spec import embedded_gguf

    try:
        embedded_gguf("smollm2")
    except ModelError as e:
        return str(e)
    return ""
