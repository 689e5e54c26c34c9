"""The Who&When failure-attribution benchmark on the blame methods of :mod:`agentgrad.blame.methods`,
with the paper's published figures stored as data."""
