"""Helpers for tests only (the CLI fuzzer); library code never imports this package.

The offline test model and the local OpenAI-compatible server are library features:
:mod:`agentgrad.models.tiny` and :mod:`agentgrad.models.serve`.
"""
