"""AgentRx: blame on labelled real failed runs (tau-bench retail and Magentic-One), docs/agentrx.md."""
