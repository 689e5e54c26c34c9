"""Offline helpers for tests (ours and users'): tiny models, a fake model, a local server."""

from agentgrad.models.fake import FakeModel
from agentgrad.testing.server import OpenAICompatServer
from agentgrad.testing.tiny import ARCHS, build_tiny_model, build_tokenizer

__all__ = ["ARCHS", "FakeModel", "OpenAICompatServer", "build_tiny_model", "build_tokenizer"]
