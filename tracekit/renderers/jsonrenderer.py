"""JSON per the contracts in docs/attribution.md (named so it does not shadow ``json``).

Keys beyond the contracts are additive; the golden files in tests/golden/ pin the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson

from ..model import shape_text
from ..results.efficiency import efficiency_dict
from ..results.attribution import (
    CATEGORIES, DIFF_SCHEMA_VERSION, SCHEMA_VERSION, Attribution, BlockResult, CompiledOutside, Coverage, Evidence,
    GraphSummary, Layer, RankRow, RankView,
)
from ..results.diff import NOISE_MIN_STEPS, pair_headline
from ..results.measured import Measured
from ..results.steps import PerStep, per_step
from ..results.rest import rest_change
from ..results.rows import layer_or_own  # issue 38: a pair's layers
from ..results.sweep import RunRow, run_rows
from ..results.timeline import Timeline
from ..vocab import IDLE_CAUSES, LaneKind
from .base import Renderer, Result
from .optables import basis_of, kernel_rows  # issue 42: --by op/kernel
from .stagetable import stage_diff_dict, stages_key  # issue 44: serving stages

if TYPE_CHECKING:
    from ..results.attribution import StepFigures, Totals, TraceSummary
    from ..results.rest import RestChange, StepRest
    from ..results.diff import (
        AllocDelta, BlockPair, DiffResult, KernelChange, KernelTotal, Noise, RankPair, Spread, WholeStep,
    )
    from ..results.hints import Hint


def to_dict(result: Attribution, tool: str, ranks: RankView | None = None, intervals: bool = False) -> dict:
    """The stable schema; extra keys beyond the contract are additive.

    ``ranks`` (docs/attribution.md, "Ranks") is there for a folder of ranks, or when passed (``--by rank``).
    ``intervals`` adds each block's device intervals (``--with-intervals``: they outweigh the rest of the JSON)."""
    out = _head_dict(result, tool)
    out["blocks"] = [_block_dict(b, intervals) for b in result.blocks]
    out.update(_tail_dict(result, tool, ranks, intervals))
    return out


def _head_dict(result: Attribution, tool: str) -> dict:
    """The keys before ``blocks`` (:func:`to_dict`)."""
    return {"schema_version": SCHEMA_VERSION, "tool": tool, "source": result.source, "time_base": result.time_base,
            "traces": [_trace_dict(s) for s in result.traces]}


def _tail_dict(result: Attribution, tool: str, ranks: RankView | None, intervals: bool) -> dict:
    """The keys after ``blocks`` (:func:`to_dict`)."""
    t = result.totals
    out: dict = {
        "totals": _totals_dict(t, per_step(result)),
        "top_kernels": [{"name": n, "category": c, "count": k, "total_us": round(us, 3)}
                        for n, c, k, us in result.top_kernels],
    }
    out["device"] = _device_dict(result)
    out["hints"] = [hint_dict(h) for h in result.hints]
    if result.measured is not None:
        out["measured"] = measured_dict(result.measured)
    if result.runs:  # a folder of runs (--by run): each run's own result, under its name, and its run row
        out["pooled_over_runs"] = len(result.runs)  # the top-level figures and hints pool every run
        out["runs"] = _runs_list(result, tool, intervals)
    if result.coverage is not None:
        out["coverage"] = _coverage(result.coverage)
    out.update(compiled_outside_dict(result.compiled_outside))
    view = ranks or result.ranks
    if view is not None:
        out["ranks"] = ranks_dict(view)
    out.update(_ops_key(result))
    out.update(stages_key(result))
    return out


def _ops_key(result: Attribution) -> dict:
    """``{"ops": [...]}`` where the op table was computed (``--by op``; issue 42), else nothing: the default JSON
    (and the goldens) stay byte for byte."""
    return {} if result.ops is None else {"ops": ops_list(result)}


def ops_list(result: Attribution) -> list[dict]:
    """``--by op``'s rows (tracekit.results.ops.OpRow), by time: totals over the whole profile, and the mean per
    profiled step (``steps``; 0: no steps, ``time_per_step_us`` is then the total)."""
    basis = basis_of(result)
    return [{"op": r.op, "shapes": r.shapes, "dtype": r.dtype, "calls": r.calls, "time_us": _r(r.time_us),
             "time_per_step_us": _r(basis.per_step(r.time_us)), "steps": basis.steps, "flops": r.flops,
             "bytes": r.bytes, "tflops_per_s": _r(r.tflops_per_s), "gb_per_s": _r(r.gb_per_s),
             "roof_pct": _r(r.roof_pct), "bound": r.bound,
             "flops_max": r.flops_max, "tflops_per_s_max": _r(r.tflops_per_s_max),  # issue 44: bounds
             "roof_pct_max": _r(r.roof_pct_max)} for r in result.ops or []]


def kernels_list(result: Attribution) -> list[dict]:
    """``--by kernel``: every kernel the blocks own (``top_kernels`` keeps 15), by time, per step as ``ops``."""
    basis = basis_of(result)
    return [{"name": k.kernel, "category": k.category, "count": k.calls, "total_us": _r(k.total_us),
             "per_step_us": _r(basis.per_step(k.total_us)), "steps": basis.steps} for k in kernel_rows(result)]


def _device_dict(result: Attribution) -> dict:
    """The device and its peaks, or the same keys empty with the reason."""
    if result.device is None:
        return {"name": None, "model": None, "peaks": None, "reason": "no device recorded"}
    return result.device.as_dict()


def _block_dict(b: BlockResult, intervals: bool) -> dict:
    """One block: its identity, figures, efficiency and evidence (and device intervals when asked for)."""
    return {
        "name": b.name, "kind": b.kind, "found_by": b.found_by, "step": b.step, "ordinal": b.ordinal,
        "phase": b.phase, "total_us": round(b.total_us, 3), "span_us": round(b.span_us, 3),
        "idle_us": round(b.idle_us, 3), "categories": {k: round(v, 3) for k, v in b.categories.items()},
        **_roles(b.matmul_roles),
        "kernels": b.kernels, "host_us": None if b.host_us is None else round(b.host_us, 3),
        "alloc_bytes": b.alloc_bytes, "trace": b.source,
        "busy_us": round(b.total_us, 3), "launch_bound": b.launch_bound,
        "idle_by_cause": idle_cause_dict(b.idle_by_cause),
        "efficiency": efficiency_dict(b.efficiency),
        "efficiency_by_category": {k: efficiency_dict(e) for k, e in b.efficiency_by_category.items()},
        "evidence": evidence_dict(b.evidence),
        "layer": layer_dict(b.layer),
        **({} if b.recorded is None else {"recorded": dict(b.recorded)}),
        "start_us": _r(b.start_us), "end_us": _r(b.end_us),
        **({"intervals": intervals_list(b)} if intervals else {}),
    }


def _trace_dict(s: TraceSummary) -> dict:
    """One input file: its header facts, denominators, shapes, graphs and per-step figures."""
    return {
        "source": s.source, "gpus": s.gpus, "pytorch": s.pytorch, "runtime": s.runtime,
        "time_base": s.time_base, "steps": s.steps, "events": s.events, "base_us": round(s.base_us, 3),
        "external_ids_trusted": s.external_ids_trusted, "damaged": s.damaged, "warnings": s.warnings,
        "shapes": [shape_text(x) for x in s.shapes], "graphs": graphs_dict(s.graphs), "origin_us": _us(s.origin_ns),
        "step_figures": [{**_step_figures(f), "start_us": _r(f.start_us), "end_us": _r(f.end_us)}
                         for f in s.step_figures],
        "step_rest": [step_rest_dict(r) for r in s.step_rest],
    }


def rest_change_dict(c: RestChange | None) -> dict | None:
    """The diff outside attention (median step each side), or None when a side is not one trace with steps."""
    if c is None:
        return None
    return {"basis": "median step", "steps": {"before": c.steps[0], "after": c.steps[1]},
            "before": step_rest_dict(c.before), "after": step_rest_dict(c.after),
            "launch_bound": {"before": c.launch_bound[0], "after": c.launch_bound[1]},
            "host_ops_changed": [{"name": n, "before_us": _r(x), "after_us": _r(y)} for n, x, y in c.host_ops_changed]}


def step_rest_dict(r: StepRest) -> dict:
    """One step outside attention (docs/attribution.md, "The rest of the step"), µs."""
    return {"step": r.step, "outside_us": _r(r.outside_us), "categories": {k: _r(v) for k, v in r.categories.items()},
            "modules": {k: _r(v) for k, v in r.modules.items()}, "kernels": r.kernels,
            "host_ops_us": _r(r.host_ops_us),
            "host_ops": {k: _r(v) for k, v in sorted(r.host_ops.items(), key=lambda kv: -kv[1])}}


def per_step_dict(ps: PerStep) -> dict:
    """``totals.per_step`` (issue 37): the headline figures on the one time base, the median step (``basis``
    "median step", ``steps`` its count, ``median_steps`` the step(s) it is the mean of), or the whole trace
    (``basis`` "whole trace", ``steps`` 0, span and idle null, ``note`` why)."""
    return {"basis": ps.basis, "steps": ps.steps, "median_steps": list(ps.median_steps),
            "attention_us": _r(ps.attention_us), "busy_us": _r(ps.busy_us), "span_us": _r(ps.span_us),
            "idle_us": _r(ps.idle_us), "note": ps.note or None}


def _totals_dict(t: Totals, ps: PerStep | None = None) -> dict:
    """The totals over every block, and (``per_step``) the headline figures on the one time base."""
    return {"total_us": round(t.total_us, 3), "categories": {k: round(v, 3) for k, v in t.categories.items()},
            **_roles(t.matmul_roles),
            "attention_share": None if t.attention_share is None else round(t.attention_share, 6),
            "blocks": t.blocks, "busy_us": round(t.total_us, 3), "span_us": round(t.span_us, 3),
            "idle_us": round(t.idle_us, 3), "launch_bound": t.launch_bound,
            "idle_by_cause": idle_cause_dict(t.idle_by_cause),
            "efficiency": efficiency_dict(t.efficiency, None if t.blocks else "no attention blocks"),
            "efficiency_by_category": {k: efficiency_dict(e) for k, e in t.efficiency_by_category.items()},
            **({} if ps is None else {"per_step": per_step_dict(ps)})}


def _runs_list(result: Attribution, tool: str, intervals: bool) -> list[dict]:
    """A folder of runs: each run's own result (without the schema keys the top level holds) and its run row."""
    rows = {r.name: r for r in run_rows(result)}
    return [{"name": r.name, **{k: v for k, v in to_dict(r.attribution, tool, intervals=intervals).items()
                                if k not in ("schema_version", "tool")},
             "run_row": run_row_dict(rows[r.name])} for r in result.runs]


def intervals_list(b: BlockResult) -> list[list]:
    """A block's device events as ``[start_us, end_us, category, pid, tid]`` on its trace's clock (µs from the
    trace's ``origin_us``); [] for a block without device events.

    The times are whole ns over 1000, which ``round(x, 3)`` leaves as they are (an int's true division gives the
    double nearest the exact quotient, itself a number of 3 decimals): not rounded again, with an int origin."""
    iv = b.intervals
    if iv is None:
        return []
    if type(iv.origin_ns) is not int:  # (a hand-built origin: rounded as written)
        return [[round(s, 3), round(e, 3), c, pid, tid] for s, e, c, pid, tid in iv.rows()]
    return [list(r) for r in iv.rows()]


def _us(ns: int) -> int | float:
    """Integer ns as µs, exactly: an int where it is a whole number of µs (epoch-sized times stay exact)."""
    return ns // 1000 if ns % 1000 == 0 else ns / 1000


def hint_dict(h: Hint) -> dict:
    """A hint: its advice and figures, the kernels its saving counts, and the hints it overlaps (or null).

    ``overlap.combined_saving_us`` is the union of the overlapping hints' counted kernel time, the most they save
    together; ``sum_saving_us`` what adding them up would wrongly claim. ``saving_us`` is the total over ``steps``;
    ``saving_per_step_us`` the headline, at most ``step_attention_us`` (one step's attention time, on
    ``per_step_basis``); ``reaches_latency`` false for busy-time savings on launch-bound blocks.
    """
    ov = h.overlap
    return {"rule": h.rule, "message": h.message, "blocks": h.blocks, "evidence": h.evidence,
            "saving_us": h.saving_us, "saving_pct": h.saving_pct, "saving_basis": h.saving_basis,
            "saving_kernels": h.saving_kernels,
            "saving_per_step_us": h.saving_per_step_us, "steps": h.steps, "per_step_basis": h.per_step_basis,
            "step_attention_us": h.step_attention_us, "reaches_latency": h.reaches_latency,
            "overlap": None if ov is None else {
                "rules": ov.rules, "combined_saving_us": ov.union_us, "combined_saving_pct": ov.union_pct,
                "sum_saving_us": ov.sum_us, "double_counted_us": ov.double_counted_us,
                "shared_kernels": ov.shared_kernels, "combined_saving_per_step_us": ov.union_per_step_us}}


def idle_cause_dict(causes: dict[str, float] | None) -> dict | None:
    """``idle_us`` by cause (docs/attribution.md, "Idle by cause"): ``{launch_us, sync_us, other_us}``, summing to
    it."""
    return None if causes is None else {f"{c}_us": round(v, 3) for c, v in causes.items()}


def measured_dict(m: Measured) -> dict:
    """The latency measured outside the profiler (ms), as read from measured.json."""
    return {"median_ms": m.median_ms, "low_ms": m.low_ms, "high_ms": m.high_ms, "spread_kind": m.spread_kind,
            "repeats": m.repeats, "iters": m.iters, "graph_median_ms": m.graph_median_ms,
            "peak_memory_mb": m.peak_memory_mb, "launch_bound": m.launch_bound, "what": m.what, "source": m.source,
            "samples_ms": None if m.samples_ms is None else list(m.samples_ms)}


def run_row_dict(r: RunRow) -> dict:
    """A run's line of the sweep table: profiled figures (totals over its steps), idle, its median step, and the
    three speedups kept apart (issue 37): measured latency, profiled step busy, profiled attention busy."""
    return {"impl": r.impl, "seq": r.seq, "steps": r.steps, "busy_us": round(r.busy_us, 3),
            "span_us": round(r.span_us, 3), "idle_us": round(r.idle_us, 3),
            "idle_pct": None if r.idle_pct is None else round(r.idle_pct, 3), "launch_bound": r.launch_bound,
            "latency_ms": None if r.measured is None else r.measured.median_ms,
            "latency_speedup": _r(r.latency_speedup, 4), "step_speedup": _r(r.step_speedup, 4),
            "attention_speedup": _r(r.attention_speedup, 4), "step_speedup_launch_bound": r.step_speedup_launch_bound,
            "attention_speedup_launch_bound": r.attention_speedup_launch_bound,
            "baseline": r.baseline, "span_per_step_us": round(r.span_per_step_us, 3),
            "per_step": per_step_dict(r.per_step)}


def _coverage(cv: Coverage) -> dict:
    return {"device_us": round(cv.device_us, 3), "linked_us": round(cv.linked_us, 3),
            "in_blocks_us": round(cv.in_blocks_us, 3), "unlinked_us": round(cv.unlinked_us, 3),
            "device_events": cv.device_events, "linked_events": cv.linked_events,
            "unlinked_by_reason": {k: round(v, 3) for k, v in cv.unlinked_by_reason.items()},
            "attention_outside_blocks": {"kernels": cv.attention_outside_kernels,
                                         "busy_us": round(cv.attention_outside_us, 3),
                                         "names": dict(cv.attention_outside_names)}}


def compiled_outside_dict(co: CompiledOutside | None) -> dict:
    """``{"compiled_outside_blocks": …}``: the compiled regions no block covers on a CPU-only trace, "attention
    outside blocks" there (issue 38); {} when there are none (the key is left out)."""
    if co is None:
        return {}
    return {"compiled_outside_blocks": {"regions": co.regions, "host_us": round(co.host_us, 3),
                                        "names": dict(co.names), "batched_products": co.batched_products,
                                        "reason": co.reason}}


def graphs_dict(g: GraphSummary | None) -> dict | None:
    """A trace's CUDA/HIP graphs (docs/attribution.md, "Graphs"): its mode, captures and replays, and the share of
    replayed kernel time mapped to captured ops (None without replayed time)."""
    if g is None:
        return None
    share = g.mapped_share
    return {"mode": g.mode, "captures": g.captures, "captured_launches": g.captured_launches,
            "captured_named": g.captured_named, "instantiations": g.instantiations,
            "graph_launches": g.graph_launches, "replayed_kernels": g.replayed_kernels,
            "replayed_us": _r(g.replayed_us), "mapped_kernels": g.mapped_kernels, "mapped_us": _r(g.mapped_us),
            "mapped_share": None if share is None else round(share, 6), "mapped_by_order": g.mapped_by_order,
            "unmapped": dict(g.unmapped), "capture_sources": list(g.capture_sources),
            "eager_attention_kernels": g.eager_attention_kernels}


def _rank_row(r: RankRow) -> dict:
    return {"rank": r.rank, "trace": r.source, "blocks": r.blocks, "total_us": _r(r.total_us),
            "categories": {k: _r(v) for k, v in r.categories.items()}, "span_us": _r(r.span_us),
            "idle_us": _r(r.idle_us), "base_us": _r(r.base_us), "attention_share": _r(r.attention_share, 6),
            "launch_bound": r.launch_bound}


def ranks_dict(view: RankView) -> dict:
    sp = view.spread
    return {"rank_from": view.rank_from, "note": view.note or None, "rows": [_rank_row(r) for r in view.rows],
            "spread": {"min_us": _r(sp.min_us), "median_us": _r(sp.median_us), "max_us": _r(sp.max_us),
                       "fastest_rank": sp.fastest_rank, "slowest_rank": sp.slowest_rank,
                       "slowest_over_median_us": _r(sp.slowest_over_median_us),
                       "slowest_over_median_pct": _r(sp.slowest_over_median_pct, 2),
                       "max_over_min": _r(sp.max_over_min, 4)}}


def _roles(roles: dict[str, float] | None) -> dict:
    """``matmul_roles`` beside ``categories`` (docs/attribution.md, "Matmul roles"); absent when not computed."""
    return {} if roles is None else {"matmul_roles": {k: round(v, 3) for k, v in roles.items()}}


def _role_deltas(before: dict[str, float] | None, after: dict[str, float] | None) -> dict:
    """The diff's ``matmul_roles`` on the headline basis, like ``categories``; absent unless both sides have them."""
    if before is None or after is None:
        return {}
    return {"matmul_roles": {k: {"before_us": _r(before[k]), "after_us": _r(after[k]),
                                 "delta_us": _r(after[k] - before[k])} for k in before}}


def layer_dict(layer: Layer | None) -> dict | None:
    """``blocks[].layer``: the attention layer around the block's core, or None where the block is its own."""
    if layer is None:
        return None
    return {"name": layer.name, "total_us": round(layer.total_us, 3),
            "categories": {k: round(v, 3) for k, v in layer.categories.items()},
            "matmul_roles": None if layer.matmul_roles is None else {
                k: round(v, 3) for k, v in layer.matmul_roles.items()}}


def evidence_dict(e: Evidence | None) -> dict | None:
    """Why the block is attention: the discovery rule, the core's kind, its op/kernel names and shapes."""
    if e is None:
        return None
    return {"rule": e.rule, "core": e.core, "names": list(e.names), "shapes": list(e.shapes), "group": e.group}


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _block_ref(b: BlockResult) -> dict:
    return {"name": b.name, "kind": b.kind, "found_by": b.found_by, "step": b.step, "ordinal": b.ordinal,
            "trace": b.source}


def _unmatched(b: BlockResult) -> dict:
    return {**_block_ref(b), "phase": b.phase, "total_us": _r(b.total_us),
            "categories": {c: _r(b.categories[c]) for c in CATEGORIES}, "alloc_bytes": b.alloc_bytes}


def _kernels(ks: list[KernelTotal]) -> list[dict]:
    return [{"name": k.name, "category": k.category, "count": k.count, "total_us": _r(k.total_us)} for k in ks]


def _lead(r: DiffResult) -> dict:
    """The diff's lead (issue 37): the whole step, or the measured forward, on one named ``basis`` ("latency",
    "step busy", "step span"; null with ``note`` saying why there is none), and ``speedup`` on that basis."""
    h = r.headline
    return {"basis": h.basis, "before_us": _r(h.before_us), "after_us": _r(h.after_us),
            "delta_pct": None if h.before_us is None or h.after_us is None or h.before_us <= 0
            else _r(100 * (h.after_us - h.before_us) / h.before_us, 2),
            "speedup": _r(h.speedup, 4), "note": h.note or None,
            "steps_before": len(r.whole_steps_before), "steps_after": len(r.whole_steps_after)}


def _headline(r: DiffResult) -> dict:
    """The attention figures (the diff's second line, ``attention``), then what they claim: a busy-time speedup,
    or none (and why: launch-bound, or no block paired)."""
    return {"before_us": _r(r.before_figures.total_us), "after_us": _r(r.after_figures.total_us),
            "delta_us": _r(r.delta_us), "delta_pct": _r(r.delta_pct, 2), "speedup": _r(r.speedup, 4),
            "within_noise": None if r.noise is None else r.noise.within_noise,
            "claims_speedup": not r.no_claim, "no_claim": r.no_claim or None}


def _category_deltas(r: DiffResult) -> dict:
    """Per category on the headline basis: before, after, delta, ratio and share of the total delta."""
    return {c: {"before_us": _r(d.before_us), "after_us": _r(d.after_us), "delta_us": _r(d.delta_us),
                "ratio": _r(d.ratio, 4), "share_of_delta": _r(d.share_of_delta, 4)}
            for c, d in r.categories.items()}


def _pair(p: BlockPair) -> dict:
    """One paired block: both sides' references, totals, per-category deltas and allocations."""
    return {
        "paired_by": p.paired_by, "phase": p.before.phase, "before": _block_ref(p.before),
        "after": _block_ref(p.after), "before_us": _r(p.before.total_us), "after_us": _r(p.after.total_us),
        "delta_us": _r(p.delta_us),
        "categories": {c: {"before_us": _r(p.before.categories[c]), "after_us": _r(p.after.categories[c]),
                           "delta_us": _r(p.after.categories[c] - p.before.categories[c])} for c in CATEGORIES},
        "alloc_before_bytes": p.before.alloc_bytes, "alloc_after_bytes": p.after.alloc_bytes,
        "alloc_peak_before_bytes": p.before.alloc_peak_bytes, "alloc_peak_after_bytes": p.after.alloc_peak_bytes,
        "layer": _pair_layer(p),
    }


def _pair_layer(p: BlockPair) -> dict | None:
    """The pair's layers before and after (issue 38; a side whose block is its own layer counts its block, its
    name null), or None where neither side has a layer."""
    if p.before.layer is None and p.after.layer is None:
        return None
    (bt, bc), (at, ac) = layer_or_own(p.before), layer_or_own(p.after)
    return {"before": None if p.before.layer is None else p.before.layer.name,
            "after": None if p.after.layer is None else p.after.layer.name,
            "before_us": _r(bt), "after_us": _r(at), "delta_us": _r(at - bt),
            "categories": {c: {"before_us": _r(bc[c]), "after_us": _r(ac[c]), "delta_us": _r(ac[c] - bc[c])}
                           for c in CATEGORIES}}


def _spread(s: Spread) -> dict:
    return {"steps": s.steps, "totals_us": [_r(x) for x in s.totals_us], "min_us": _r(s.min_us),
            "median_us": _r(s.median_us), "max_us": _r(s.max_us)}


def _noise(n: Noise | None) -> dict | None:
    """Per-step spread on each side and whether the change (in total and per category) is within it: null, with
    ``known`` false, when a side has fewer steps than ``min_steps``."""
    if n is None:
        return None
    return {"before": _spread(n.before), "after": _spread(n.after), "combined_spread_us": _r(n.combined_spread_us),
            "within_noise": n.within_noise, "known": n.known, "min_steps": NOISE_MIN_STEPS,
            "categories": {c: {"before_min_us": _r(v.before_min_us), "before_max_us": _r(v.before_max_us),
                               "after_min_us": _r(v.after_min_us), "after_max_us": _r(v.after_max_us),
                               "within_noise": v.within_noise} for c, v in n.categories.items()}}


def _alloc(a: AllocDelta | None) -> dict | None:
    if a is None:
        return None
    return {"before_bytes": a.before_bytes, "after_bytes": a.after_bytes, "delta_bytes": a.delta_bytes,
            "before_blocks": a.before_blocks, "after_blocks": a.after_blocks,
            "before_peak_bytes": a.before_peak_bytes, "after_peak_bytes": a.after_peak_bytes,
            "delta_peak_bytes": a.delta_peak_bytes}


def _step_figures(f: StepFigures) -> dict:
    return {"step": f.step, "busy_us": _r(f.busy_us), "span_us": _r(f.span_us), "attention_us": _r(f.attention_us)}


def _whole_step(w: WholeStep | None) -> dict | None:
    if w is None:
        return None
    return {"steps": list(w.steps), "busy_us": _r(w.busy_us), "span_us": _r(w.span_us),
            "attention_us": _r(w.attention_us)}


def _steps(r: DiffResult) -> dict:
    """Each side's median step as a whole (all its device work), and every step's figures (ranks summed)."""
    return {"before": _whole_step(r.step_before), "after": _whole_step(r.step_after),
            "per_step": {"before": [_step_figures(f) for f in r.whole_steps_before],
                         "after": [_step_figures(f) for f in r.whole_steps_after]}}


def _kernel_change(k: KernelChange) -> dict:
    return {"name": k.name, "category": k.category,
            "before": {"count": k.before.count, "total_us": _r(k.before.total_us)},
            "after": {"count": k.after.count, "total_us": _r(k.after.total_us)},
            "delta_us": _r(k.delta_us)}


def _rank_pairs(ranks: list[RankPair]) -> dict:
    """``ranks`` last, and only when both sides were folders of ranks."""
    if not ranks:
        return {}
    return {"ranks": [{"rank": p.rank, "before": None if p.before is None else _rank_row(p.before),
                       "after": None if p.after is None else _rank_row(p.after), "delta_us": _r(p.delta_us)}
                      for p in ranks]}


def diff_to_dict(r: DiffResult, tool: str) -> dict:
    """The stable diff schema (docs/attribution.md, Diff); extra keys beyond the contract are additive.

    Key order is part of the output (the golden files pin it): each section's helper keeps its place."""
    db, da = to_dict(r.before, tool), to_dict(r.after, tool)
    return {
        "schema_version": DIFF_SCHEMA_VERSION,
        "tool": tool,
        "command": "diff",
        "before_source": r.labels[0],
        "after_source": r.labels[1],
        "time_base": {"before": r.before.time_base, "after": r.after.time_base},
        "basis": r.basis,
        "basis_note": r.basis_note,
        "before": db["totals"],
        "after": da["totals"],
        "headline": _lead(r),
        "attention": _headline(r),
        "categories": _category_deltas(r),
        **_role_deltas(r.before_figures.matmul_roles, r.after_figures.matmul_roles),
        "blocks": [_pair(p) for p in r.pairs],
        "unmatched_before": [_unmatched(b) for b in r.unmatched_before],
        "unmatched_after": [_unmatched(b) for b in r.unmatched_after],
        "kernel_unit": r.kernel_unit,
        "only_before": _kernels(r.only_before),
        "only_after": _kernels(r.only_after),
        "noise": _noise(r.noise),
        "noise_note": r.noise_note,
        "alloc": _alloc(r.alloc),
        "conclusions": list(r.conclusions),
        "warnings": list(r.warnings),
        "traces": {"before": db["traces"], "after": da["traces"]},
        "span": {"before_us": _r(r.before_figures.span_us), "after_us": _r(r.after_figures.span_us),
                 "ratio": _r(r.span_ratio, 4)},
        "launch_bound": {"before": r.before_figures.launch_bound, "after": r.after_figures.launch_bound},
        "step": _steps(r),
        "rest_of_step": rest_change_dict(rest_change(r.before.traces, r.after.traces)),
        "kernels_changed": [_kernel_change(k) for k in r.kernels_changed],
        "kernels_changed_note": r.kernels_changed_note,
        **_rank_pairs(r.ranks),
        **_measured_pair(r),
        **_run_pairs(r),
        **stage_diff_dict(r),
    }


def _run_pairs(r: DiffResult) -> dict:
    """``run_pairs`` (each run on both sides: its own headline, its verdict and the basis that verdict was decided on,
    which a gate may take from another figure than the headline), ``runs_only_before``/``_after``;
    absent unless both sides were folders of runs."""
    if not r.run_pairs:
        return {}
    return {"run_pairs": [{"run": p.run, "before": p.diff.labels[0], "after": p.diff.labels[1],
                           "headline": {k: _r(v, 4) if isinstance(v, float) else v
                                        for k, v in pair_headline(p.diff).items()},
                           "verdict": p.verdict, "verdict_basis": p.verdict_basis} for p in r.run_pairs],
            "runs_only_before": list(r.runs_only_before), "runs_only_after": list(r.runs_only_after)}


def _measured_pair(r: DiffResult) -> dict:
    """``measured: {before, after}``: each side's latency measured outside the profiler; absent when neither has."""
    if r.before.measured is None and r.after.measured is None:
        return {}
    return {"measured": {side: None if m is None else measured_dict(m)
                         for side, m in (("before", r.before.measured), ("after", r.after.measured))}}


class JSONRenderer(Renderer):
    name = "json"
    extension = ".json"
    with_intervals = False  # each block's device intervals too (``--with-intervals``)

    def render_attribution(self, result: Attribution) -> str:
        if self.by == "rank":
            from .base import rank_view_of

            return _dumps(to_dict(result, self.tool, rank_view_of(result), intervals=self.with_intervals))
        out = to_dict(result, self.tool, intervals=self.with_intervals)
        if self.by == "kernel":  # issue 42: the whole kernel table, only when asked
            out["kernels"] = kernels_list(result)
        return _dumps(out)

    def render_diff(self, result: DiffResult) -> str:
        return _dumps(diff_to_dict(result, self.tool))

    def stream(self, result: Result) -> Iterator[str]:
        """:meth:`render`'s text in pieces, an attribution's blocks one at a time (the same bytes).

        Why: the whole output as one dict, then as bytes, then as text, were alive together at the run's peak of
        memory (at 1 GB of trace about 80 MB over the analysis's own, in the CLI's ``-o`` write); a block's dict
        and text now live only while it is written. Only the default layout streams (``--by kernel`` and ``--by
        rank`` add or reshape keys: their outputs are small enough whole)."""
        if not isinstance(result, Attribution) or self.by in ("kernel", "rank"):
            yield self.render(result)
            return
        yield from _streamed(result, self.tool, self.with_intervals)


_BLOCK_INDENT = b"    "  # a block's own lines inside "blocks": [ ... ] at the top level, under OPT_INDENT_2
_STREAM_BATCH = 1 << 20  # bytes of blocks' JSON handed to the writer at a time


def _streamed(result: Attribution, tool: str, intervals: bool) -> Iterator[str]:
    """``_dumps(to_dict(result, tool, intervals=intervals))`` in pieces: the keys before ``blocks`` and after it
    dumped as two dicts and joined around the blocks, each block dumped alone and indented two levels. orjson
    writes no raw newline inside a string (it escapes them), so indenting every line of a block is exact."""
    head = orjson.dumps(_head_dict(result, tool), option=orjson.OPT_INDENT_2)
    tail = orjson.dumps(_tail_dict(result, tool, None, intervals), option=orjson.OPT_INDENT_2)
    assert head.endswith(b"\n}") and tail.startswith(b"{\n")
    if not result.blocks:
        yield (head[:-2] + b',\n  "blocks": [],\n' + tail[2:] + b"\n").decode()
        return
    batch = [head[:-2] + b',\n  "blocks": [\n']
    size = 0
    for i, b in enumerate(result.blocks):
        text = orjson.dumps(_block_dict(b, intervals), option=orjson.OPT_INDENT_2)
        batch.append((b",\n" if i else b"") + _BLOCK_INDENT + text.replace(b"\n", b"\n" + _BLOCK_INDENT))
        size += len(text)
        if size >= _STREAM_BATCH:
            yield b"".join(batch).decode()
            batch, size = [], 0
    batch.append(b"\n  ],\n" + tail[2:] + b"\n")
    yield b"".join(batch).decode()


def _dumps(obj: dict) -> str:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode() + "\n"


def timeline_dict(t: Timeline) -> dict:
    """The report's timeline (tracekit.results.timeline) as the page's script reads it: columns of numbers, the
    lanes' labels, the kernel names once each, and per drawn block its index in the JSON's ``blocks``."""
    def cols(d: dict[str, list], times: tuple[str, ...]) -> dict[str, list]:
        return {k: [round(x, 3) for x in v] if k in times else v for k, v in d.items()}

    return {
        "trace": t.trace, "step": t.step, "chosen": str(t.chosen), "steps": t.steps,
        "start_us": _r(t.start_us), "end_us": _r(t.end_us), "categories": list(CATEGORIES),
        "idle_causes": list(IDLE_CAUSES),
        "lanes": [{"kind": str(x.kind), "label": x.label} for x in t.lanes],
        "blocks": [{"index": i, "name": b.name, "kind": b.kind, "phase": str(b.phase), "start_us": _r(b.start_us),
                    "end_us": _r(b.end_us), "busy_us": _r(b.total_us), "idle_us": _r(b.idle_us),
                    "kernels": b.kernels, "launch_bound": b.launch_bound,
                    "categories": {k: _r(v) for k, v in b.categories.items()},
                    "idle_by_cause": idle_cause_dict(b.idle_by_cause)}
                   for i, b in zip(t.block_index, t.blocks)],
        "kernels": cols(t.kernels, ("start", "end")), "names": t.names,
        "gaps": cols(t.gaps, ("start", "end", *IDLE_CAUSES)), "host": cols(t.host, ("start", "end")),
        "left_out": t.left_out, "kernel_unit": "op" if t.kernel_lane == LaneKind.HOST else "kernel",
    }
