import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(scope="session", autouse=True)
def _tiny_cache(tmp_path_factory):
    """Tiny models of the ``tiny`` backend are built into a temporary cache, not ~/.cache."""
    old = os.environ.get("AGENTGRAD_CACHE")
    os.environ["AGENTGRAD_CACHE"] = str(tmp_path_factory.mktemp("agentgrad-cache"))
    yield
    if old is None:
        os.environ.pop("AGENTGRAD_CACHE", None)
    else:
        os.environ["AGENTGRAD_CACHE"] = old


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    from agentgrad.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"), arch="llama")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    from agentgrad.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"), arch="qwen3")


def assert_spans_exact(trace):
    """Every span cut out of its message equals its source node's text, character for character."""
    n_spans = 0
    for node in trace.nodes:
        for s in node.spans:
            got = node.messages[s.message]["content"][s.start : s.end]
            assert got == trace.nodes[s.source].text, (node.id, s)
            n_spans += 1
    return n_spans
