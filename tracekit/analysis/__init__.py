"""The analysis layer: from a loaded :class:`tracekit.model.Trace` to typed results (docs/attribution.md).

It holds the attribution pipeline, :mod:`.pipeline`, an ordered list of named stages over one
:class:`.context.StageContext` (link host and device events, classify them, find attention blocks in
:mod:`.blocks`, account their time in :mod:`.account` and :mod:`.totals`, gather and evaluate the hints in
:mod:`.hints`), the entry points in :mod:`.attribute` (one trace; :mod:`.merge` for several), and the modules the
stages call: link, classify, roles, flops, idle, clock, graphs, busy, allocations; beside them, compare and gate
for diffs. It may import :mod:`tracekit.io`, :mod:`tracekit.results` and the bottom modules (vocab, model,
hardware, memory, errors, progress), never :mod:`tracekit.run` nor :mod:`tracekit.renderers`; no sibling
module or sub-package imports another in a cycle (``.importlinter``). Its tests live in tests/analysis/ (the
stages one by one on hand-built traces: tests/analysis/test_pipeline.py) and in the behaviour files of tests/.
"""
