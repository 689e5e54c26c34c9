"""One error hierarchy for everything a user can get wrong.

The CLI turns any :class:`AgentgradError` into a one-line message and a non-zero exit; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations


class AgentgradError(Exception):
    """Root of every error agentgrad raises on purpose (bad input, unreachable model, ...)."""

    exit_code = 1


class ConfigError(AgentgradError):
    """A configuration file or option is malformed or inconsistent."""

    exit_code = 2


class GraphError(ConfigError):
    """A declared system graph has a cycle, a dangling input or an unknown reference."""


class RegistryError(ConfigError):
    """An unknown name was asked of a registry."""


class ModelError(AgentgradError):
    """A model could not be loaded or did not answer."""


class JudgeReplyError(ModelError):
    """A judge's reply that does not follow the asked format, twice: the method names nothing, and
    the benchmarks count it as a parse failure."""


class ServerUnreachableError(ModelError):
    """A model server that cannot be reached: refused or unknown at a run's first call (a wrong URL or
    port, a server not started), or silent for longer than its breaker allows mid-run. A run stops on
    it, keeping what it finished (retrying would only wait)."""


class OutputSchemaError(ModelError):
    """An output schema (JSON schema, regex or choices) that a backend cannot compile or honour."""


class ContextLengthError(ModelError):
    """A prompt does not fit in a model's context window."""


class TraceError(AgentgradError):
    """A trace file is corrupt, of an unknown schema version, or inconsistent."""


class RunError(AgentgradError):
    """A run directory cannot be written or resumed as asked."""


class ReportError(AgentgradError):
    """What was given to ``report`` is not a run directory or trace it can show."""
