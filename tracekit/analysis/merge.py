"""Several results (ranks, workers) as one: blocks concatenated, totals summed.

No hint is evaluated here: hints read the merged blocks, so a caller that wants them runs
:func:`tracekit.analysis.hints.evaluate` on the merged result as its own step (``tracekit.analysis.attribute.merge``).
"""

from __future__ import annotations

from collections import Counter

from ..results.attribution import Attribution, Coverage
from ..results.efficiency import merge_device
from ..results.hints import merge_facts
from ..vocab import TimeBase, UNLINKED_REASONS
from .totals import block_totals, by_count


def merge_attributions(parts: list[Attribution], source: str) -> Attribution:
    """Several traces (ranks, workers) as one result: blocks concatenated, totals summed, hint facts merged; no
    hint is evaluated (the caller runs that step: tracekit.analysis.attribute.merge)."""
    blocks = [b for p in parts for b in p.blocks]
    bases = {p.time_base for p in parts}
    time_base = bases.pop() if len(bases) == 1 else TimeBase.MIXED
    covs = [p.coverage for p in parts if p.coverage is not None]
    cov = None
    if covs:
        names: Counter[str] = Counter()
        for c in covs:
            names.update(c.attention_outside_names)
        cov = Coverage(**{f: sum(getattr(c, f) for c in covs) for f in
                          ("device_us", "linked_us", "in_blocks_us", "unlinked_us", "device_events", "linked_events",
                           "attention_outside_kernels", "attention_outside_us")},
                       unlinked_by_reason={k: sum(c.unlinked_by_reason[k] for c in covs) for k in UNLINKED_REASONS},
                       attention_outside_names=by_count(names))
    base = sum(t.base_us for p in parts for t in p.traces)
    in_blocks = sum(p.totals.attention_share * t.base_us for p in parts for t in p.traces if p.totals.attention_share)
    totals = block_totals(blocks, 0, 1)
    totals.attention_share = in_blocks / base if base > 0 else None
    kernels: dict[tuple[str, str], tuple[int, float]] = {}
    by_step: dict[tuple[str, str, int | None], tuple[int, float]] = {}
    for p in parts:
        for key, (k, us) in p.kernels.items():
            n0, us0 = kernels.get(key, (0, 0.0))
            kernels[key] = (n0 + k, us0 + us)
        for skey, (k, us) in p.kernels_by_step.items():  # ranks of a run add up per step number
            n0, us0 = by_step.get(skey, (0, 0.0))
            by_step[skey] = (n0 + k, us0 + us)
    facts = merge_facts(p.hint_facts for p in parts)
    return Attribution(source=source, time_base=time_base, traces=[t for p in parts for t in p.traces], blocks=blocks,
                       totals=totals, coverage=cov, kernels=kernels, kernels_by_step=by_step,
                       device_events_owned=sum(p.device_events_owned for p in parts),
                       device_events_owned_distinct=sum(p.device_events_owned_distinct for p in parts),
                       hint_facts=facts,
                       device=merge_device([p.device for p in parts]))
