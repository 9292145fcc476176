"""What a result adds up: totals over blocks, the trace summary, device coverage, whole-step figures and the
kernel table. Shared by the accounting stage (one trace) and :mod:`.merge` (several).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any
from itertools import compress, repeat
from operator import eq

from ..model import Trace
from ..results.attribution import BlockResult, Coverage, StepFigures, Totals, TraceSummary, zero_categories
from ..results.efficiency import sum_efficiency, sum_efficiency_maps
from ..vocab import IDLE_CAUSES, MATMUL_ROLES, Category, Phase, TimeBase, UNLINKED_REASONS, is_launch_bound
from .blocks.discovery import short_kernel_name
from .busy import block_window, window
from .clock import relative_us
from .link import NONE, Links
from .stepindex import StepIndex


def trace_summary(tr: Trace, links: Links | None, time_base: TimeBase, base_ns: int) -> TraceSummary:
    """The trace's own facts (source, GPUs, versions, steps, warnings) and its base time, the share's denominator."""
    i = tr.info
    return TraceSummary(source=i.source, gpus=i.gpus, pytorch=i.pytorch, runtime=i.runtime, time_base=time_base,
                        steps=i.steps, events=i.event_count, base_us=base_ns / 1000, warnings=list(i.warnings),
                        damaged=i.damaged, external_ids_trusted=bool(links and links.external_ids_trusted),
                        shapes=list(i.shapes), rank=i.rank)


def block_totals(results: list[BlockResult], in_blocks_ns: int, base_ns: int) -> Totals:
    """The blocks' figures summed (in result order, so sums are reproducible); the attention share of ``base_ns``."""
    dev = [r for r in results if r.launch_bound is not None]  # device blocks: a CPU-only block has no idle device
    return Totals(total_us=total(results, "total_us"), categories=_category_sums(results),
                  attention_share=in_blocks_ns / base_ns if base_ns > 0 else None,
                  blocks=len(results), matmul_roles=_sum_maps(_each(results, "matmul_roles"), MATMUL_ROLES),
                  span_us=total(results, "span_us"), idle_us=total(results, "idle_us"),
                  launch_bound=is_launch_bound(total(dev, "idle_us"), total(dev, "span_us")) if dev else None,
                  idle_by_cause=_sum_maps(_each(results, "idle_by_cause"), IDLE_CAUSES),
                  efficiency=sum_efficiency(_each(results, "efficiency")),
                  efficiency_by_category=sum_efficiency_maps(_each(results, "efficiency_by_category")))


def total(items: Sequence[Any], field: str) -> Any:
    """``sum`` of one field over ``items``, in their order (float sums stay reproducible)."""
    return sum(getattr(x, field) for x in items)


def _each(items: Sequence[Any], field: str) -> list[Any]:
    return [getattr(x, field) for x in items]


def _category_sums(results: list[BlockResult]) -> dict[str, float]:
    cats = zero_categories()
    for r in results:
        for k, v in r.categories.items():
            cats[k] += v
    return cats


def _sum_maps(maps: Sequence[dict[str, float] | None], keys: Sequence[str]) -> dict[str, float] | None:
    """Per-block maps summed key by key, or None when a block has none (a figure its trace cannot tell)."""
    if not all(m is not None for m in maps):
        return None
    out = dict.fromkeys(keys, 0.0)
    for m in maps:
        for k, v in (m or {}).items():
            out[k] += v
    return out


def sorted_results(results: list[BlockResult]) -> list[BlockResult]:
    return sorted(results, key=lambda r: (r.source, r.step is None, r.step or 0, r.phase != Phase.FORWARD, r.ordinal))


def over_steps(per_step: dict[tuple[str, str, int | None], list]) -> dict[tuple[str, str], tuple[int, float]]:
    """(name, category, step) -> [count, ns] summed over steps: the whole-trace kernel table, in µs."""
    out: dict[tuple[str, str], list] = {}
    for (name, cat, _), (n, ns) in per_step.items():
        v = out.setdefault((name, cat), [0, 0])
        v[0] += n
        v[1] += ns
    return {k: (n, ns / 1000) for k, (n, ns) in out.items()}


def device_coverage(tr: Trace, links: Links, share: Sequence[int], total_busy: int, in_blocks_ns: int,
                    cats: Sequence[Category], dev_owner: list[int]) -> Coverage:
    """How much device time is linked to host ops, how much of it lies in blocks, why the rest is unlinked
    (each unlinked event's busy share under the reason the linker gave it), and the fused attention kernels
    that no block owns after every block finder ran (``dev_owner`` NONE), linked or not."""
    linked_ns = sum(compress(share, links.device_linked))
    by_reason = dict.fromkeys(UNLINKED_REASONS, 0)
    for j, reason in zip(links.unlinked, links.unlinked_reason):
        by_reason[reason] += share[j]
    fused = Category.FUSED_ATTENTION
    outside = ([j for j in compress(range(len(cats)), map(eq, cats, repeat(fused))) if dev_owner[j] == NONE]
               if fused in cats else [])  # (an eager trace has none: one look, stopping at the first)
    names: Counter[str] = Counter()
    for name, k in Counter(tr.device[j].name for j in outside).items():
        names[short_kernel_name(name)] += k  # (per distinct name, in the order of first appearance as before)
    return Coverage(device_us=total_busy / 1000, linked_us=linked_ns / 1000, in_blocks_us=in_blocks_ns / 1000,
                    unlinked_us=(total_busy - linked_ns) / 1000, device_events=len(share),
                    linked_events=sum(links.device_linked),
                    unlinked_by_reason={k: v / 1000 for k, v in by_reason.items()},
                    attention_outside_kernels=len(outside),
                    attention_outside_us=sum(share[j] for j in outside) / 1000,
                    attention_outside_names=by_count(names))


def by_count(names: Counter[str]) -> dict[str, int]:
    """Kernel name -> count, the most frequent first (ties by name): the order every output lists them in."""
    return dict(sorted(names.items(), key=lambda kv: (-kv[1], kv[0])))


def whole_steps(tr: Trace, index: StepIndex, free_at: Sequence[int], origin: int = 0) -> list[StepFigures]:
    """Per ProfilerStep#N, all the device work of the step, not only attention's: the events its host ops launched
    (and those its blocks own), their busy union, and their span by the blocks' rule (:func:`block_window`, the
    ProfilerStep range as the host side). What the user waits for per step, beside the attention figures. The
    device side is the step index's sweep (tracekit.analysis.stepindex.step_busy)."""
    if not tr.info.steps:
        return []
    roots, busy = index.roots, index.busy
    out = []
    for s in sorted(roots):
        b = busy.get(s)
        if b is None or b.first < 0:
            start, end = block_window((), roots[s])
        else:
            start, end = window(b.start, b.end, roots[s], free_at[b.first])
        out.append(StepFigures(step=s, busy_us=(b.busy_ns if b else 0) / 1000, span_us=(end - start) / 1000,
                               attention_us=(b.attention_ns if b else 0) / 1000,
                               start_us=relative_us(start, origin), end_us=relative_us(end, origin)))
    return out
