"""The analysis layer's entry points: attribute one trace, merge several results.

:func:`attribute_trace` runs :data:`tracekit.analysis.pipeline.STAGES` (the stages and their order live there);
:func:`merge` is two named steps, :func:`tracekit.analysis.merge.merge_attributions` then the hint rules on the
merged blocks; :func:`op_self_times` is the host self-time table torch.profiler's own table is checked against.
"""

from __future__ import annotations

from ..results.attribution import Attribution
from .account import op_self_times
from .hints import evaluate
from .merge import merge_attributions
from .pipeline import attribute_trace

__all__ = ["attribute_trace", "merge", "op_self_times", "reevaluate_hints"]


def reevaluate_hints(result: Attribution) -> Attribution:
    """The hint rules on a merged result's blocks and merged facts: hints read block kinds across the parts, so
    the parts' own hints are not summed but evaluated again."""
    result.hints = evaluate(result.hint_facts, result.blocks)
    return result


def merge(parts: list[Attribution], source: str) -> Attribution:
    """Several traces (ranks, workers) as one result, with its hints: merge, then re-evaluate the hints."""
    return reevaluate_hints(merge_attributions(parts, source))
