"""Several results (ranks, workers) as one: blocks concatenated, totals summed.

No hint is evaluated here: hints read the merged blocks, so a caller that wants them runs
:func:`tracekit.analysis.hints.evaluate` on the merged result as its own step (``tracekit.analysis.attribute.merge``).
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

from ..results.attribution import Attribution, CompiledOutside, Coverage
from ..results.efficiency import merge_device
from ..results.hints import merge_facts
from ..results.ops import merge_ops
from ..results.stages import merge_stages
from ..vocab import TimeBase, UNLINKED_REASONS
from .totals import block_totals, by_count, total


def merge_attributions(parts: list[Attribution], source: str) -> Attribution:
    """Several traces (ranks, workers) as one result: blocks concatenated, totals summed, hint facts merged; no
    hint is evaluated (the caller runs that step: tracekit.analysis.attribute.merge)."""
    blocks = list(chain.from_iterable(p.blocks for p in parts))
    bases = {p.time_base for p in parts}
    totals = block_totals(blocks, 0, 1)
    totals.attention_share = _attention_share(parts)
    kernels, by_step = _kernel_tables(parts)
    return Attribution(source=source, time_base=bases.pop() if len(bases) == 1 else TimeBase.MIXED,
                       traces=list(chain.from_iterable(p.traces for p in parts)), blocks=blocks,
                       totals=totals, coverage=_coverage(parts), kernels=kernels, kernels_by_step=by_step,
                       device_events_owned=total(parts, "device_events_owned"),
                       device_events_owned_distinct=total(parts, "device_events_owned_distinct"),
                       hint_facts=merge_facts(p.hint_facts for p in parts),
                       device=merge_device([p.device for p in parts]),
                       compiled_outside=_compiled_outside(parts), ops=merge_ops([p.ops for p in parts]),
                       stages=merge_stages([(p.stages, sum(t.base_us for t in p.traces)) for p in parts]))


_COVERAGE_SUMS = ("device_us", "linked_us", "in_blocks_us", "unlinked_us", "device_events", "linked_events",
                  "attention_outside_kernels", "attention_outside_us")


def _coverage(parts: list[Attribution]) -> Coverage | None:
    """The parts' coverages summed field by field (None when no part has one: CPU-only traces)."""
    covs = [p.coverage for p in parts if p.coverage is not None]
    if not covs:
        return None
    names: Counter[str] = Counter()
    for c in covs:
        names.update(c.attention_outside_names)
    return Coverage(**{f: sum(getattr(c, f) for c in covs) for f in _COVERAGE_SUMS},
                    unlinked_by_reason={k: sum(c.unlinked_by_reason[k] for c in covs) for k in UNLINKED_REASONS},
                    attention_outside_names=by_count(names))


def _compiled_outside(parts: list[Attribution]) -> CompiledOutside | None:
    """The parts' compiled regions outside blocks summed (None when no part has any)."""
    got = [p.compiled_outside for p in parts if p.compiled_outside is not None]
    if not got:
        return None
    names: Counter[str] = Counter()
    for c in got:
        names.update(c.names)
    return CompiledOutside(regions=sum(c.regions for c in got), host_us=sum(c.host_us for c in got),
                           names=by_count(names), batched_products=sum(c.batched_products for c in got),
                           reason=got[0].reason)


def _attention_share(parts: list[Attribution]) -> float | None:
    """The blocks' share of the summed base time: each part's share weighted by its traces' base time."""
    base = sum(t.base_us for p in parts for t in p.traces)
    in_blocks = sum(p.totals.attention_share * t.base_us for p in parts for t in p.traces if p.totals.attention_share)
    return in_blocks / base if base > 0 else None


def _kernel_tables(parts: list[Attribution]) -> tuple[dict[tuple[str, str], tuple[int, float]],
                                                       dict[tuple[str, str, int | None], tuple[int, float]]]:
    """The kernel tables added up: whole-trace rows by (name, category), and per step number (ranks of a run add
    up per step)."""
    kernels: dict[tuple[str, str], tuple[int, float]] = {}
    by_step: dict[tuple[str, str, int | None], tuple[int, float]] = {}
    for p in parts:
        for key, (k, us) in p.kernels.items():
            n0, us0 = kernels.get(key, (0, 0.0))
            kernels[key] = (n0 + k, us0 + us)
        for skey, (k, us) in p.kernels_by_step.items():
            n0, us0 = by_step.get(skey, (0, 0.0))
            by_step[skey] = (n0 + k, us0 + us)
    return kernels, by_step
