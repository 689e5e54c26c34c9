"""The benchmark data directory: :func:`agentgrad.core.data.data_dir` and
:func:`~agentgrad.core.data.benchmark_dir`, named here for the benchmarks that read their data."""

from agentgrad.core.data import benchmark_dir, data_dir

__all__ = ["benchmark_dir", "data_dir"]
