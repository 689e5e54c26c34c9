"""Blame: which agent of a failed episode is at fault, by one registry of methods and one walk.

- :mod:`agentgrad.blame.backward`: :class:`VerbalLoss`, :class:`Trajectory` and :func:`backward` (the
  trajectories of a loss along the kept edges), and their rendering for the optimizer;
- :mod:`agentgrad.blame.context`: :class:`Blame` (agent, node, score) and :class:`BlameContext` (one
  episode as a method sees it, its gradients cached);
- :mod:`agentgrad.blame.walk`: the backward walk over attribution (kept edges, paths), and the walk
  rules, each with its function and parameters (and the seed a tuned one was chosen on);
- :mod:`agentgrad.blame.follow`: following the wrong text (what a source carries of it; the
  ``follow``, ``origin`` and ``blend`` rules);
- :mod:`agentgrad.blame.facts`: the fact readers (``lines``, ``prose``, ``json``): what a fact is in
  an agent's text, detected from the trace or chosen by a method's name;
- :mod:`agentgrad.blame.methods`: the registry, one table of method families (``gbc:W:OBJ:RULE``,
  occlusion, temporal, judges, provenance, priors, controls; aliases; the loop's default);
  :mod:`agentgrad.blame.provenance`: string provenance (no model); :mod:`agentgrad.blame.temporal`:
  temporal credit and counterfactual replay;
- :mod:`agentgrad.blame.outcome`: one episode blamed for the optimisation loop (blamed agents,
  trajectories);
- :mod:`agentgrad.blame.judge`: the LLM-judge protocols;
- :mod:`agentgrad.blame.credit`: an episode's score split over the nodes that produced it (conserved),
  along the same kept edges;
- :mod:`agentgrad.blame.confidence`: how far to trust one trace's verdict (whether the scorer method
  and ``provenance`` agree), with the accuracy that agreement was measured to carry (docs/confidence.md).

The benchmarks that measure these methods are :mod:`agentgrad.benchmarks.planted` and
:mod:`agentgrad.benchmarks.whowhen`. Nothing is imported here.
"""
