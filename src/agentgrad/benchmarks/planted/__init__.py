"""The planted-fault blame benchmark: synthetic episodes with known root causes, a trained copier as
scorer, and every blame method of :mod:`agentgrad.blame.methods` measured on them."""
