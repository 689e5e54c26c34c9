"""Faults injected into real runs (``agentgrad bench inject``): a call's output replaced by a corrupted
one, everything downstream generated again by the real model, the propagated faults blamed."""
