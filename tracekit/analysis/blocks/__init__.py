"""Attention blocks: where each attention call's host and device events are (docs/attribution.md, "Attention blocks").

* :mod:`.discovery`: the ``Block`` record and the host-side rules (scopes, fused ops, eager triples), one finder;
* :mod:`.compiled`: what a torch.compile region shows of its work, for the finder, and the regions no block covers;
* :mod:`.kernels`: the blocks only the classified device kernels show (graph replays, compiled code);
* :mod:`.backward`: backward blocks paired to forward ones by what autograd recorded.

The pipeline (:mod:`tracekit.analysis.pipeline`) runs them as stages in that order, with backward before kernels.
"""
