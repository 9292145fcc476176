"""Hint rules: what to do next, read from an attribution. Rules are ordered data, like
:mod:`tracekit.analysis.classify`.

Each rule reads figures that the attribution already has (per block kind: busy, span and idle time,
categories) plus the kernel rows of :mod:`.facts`. A rule's saving is only ever an upper bound or a labelled
estimate, with the basis spelled out; when the trace cannot tell, the saving is None and ``saving_basis`` says
why (docs/attribution.md, "Hints").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from statistics import median
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...results.efficiency import Efficiency, efficiency_dict, sum_efficiency
from ...results.hints import NO_STEPS_BASIS, GroupFacts, Hint, HintFacts, HintOverlap, KernelRow, step_unit
from ...vocab import LAUNCH_BOUND_IDLE_SHARE, Category, GraphMode, is_launch_bound
from .advice import AdviceTopic, advise
from .facts import HintTag

if TYPE_CHECKING:
    from ...results.attribution import BlockResult

# -- thresholds (named, documented in docs/attribution.md "Hints") -------------------------------------------
EAGER_SOFTMAX_SHARE = 0.30  # softmax + elementwise (mask, scale) share of an eager block's busy time
LAUNCH_BOUND_IDLE = LAUNCH_BOUND_IDLE_SHARE  # the one launch-bound rule (tracekit.vocab.is_launch_bound)
KV_CAT_SHARE = 0.05  # KV-cache cat kernels' share of busy time
MASK_SHARE = 0.02  # masked_fill kernels' share of busy time
FP32_SOFTMAX_SHARE = 0.01  # fp32 softmax kernels' share of busy time
REPEAT_KV_SHARE = 0.02  # repeat_kv / repeat_interleave copies' share of busy time
LAYOUT_COPY_SHARE = 0.15  # transpose/contiguous copies' share of busy time
LOW_ROOF_PCT = 40.0  # % of the compute roof below which a compute-bound fused kernel is "low"
ROTARY_SHARE = 0.05  # rotate_half cat + neg kernels' share of busy time
COMM_SHARE = 0.10  # collective (all-reduce/all-gather) kernels' share of busy time

_TOP_NAMES = 3  # kernel names quoted as evidence
_LAYOUT_KERNEL = re.compile(r"direct_copy_kernel|_copy_kernel_cuda|copy_device_to_device|Memcpy DtoD|batched_transpose"
                            r"|nchwToNhwc|nhwcToNchw")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepBasis:
    """One step's attention time: the bound of every per-step saving (the kernels a hint counts are part of it).

    With every block inside a ProfilerStep, the median step's (``steps`` its step numbers); otherwise the whole
    trace's over its step count (``steps`` empty). ``busy_us`` bounds busy-time savings, ``span_us`` idle-time ones.
    """

    steps: tuple[int, ...]
    count: int  # the steps a whole-trace saving covers (1 where no step was recorded)
    busy_us: float
    span_us: float
    label: str  # "median of N steps", "whole trace over N steps" or NO_STEPS_BASIS


def _step_basis(blocks: Sequence[BlockResult]) -> StepBasis:
    """The per-step basis of an attribution's blocks, all kinds and phases: what a step of attention holds."""
    stepped = sorted({b.step for b in blocks if b.step is not None})
    n = max(1, len(stepped))
    if stepped and all(b.step is not None for b in blocks):
        return _median_basis(blocks, stepped)
    label = f"whole trace over {n} step{'s' if n != 1 else ''}" if stepped else NO_STEPS_BASIS
    return StepBasis(steps=(), count=n, busy_us=sum(b.total_us for b in blocks) / n,
                     span_us=sum(b.span_us for b in blocks) / n, label=label)


def _median_basis(blocks: Sequence[BlockResult], stepped: list[int]) -> StepBasis:
    """Every block inside a step: the blocks' busy time and span summed per step, and the median step's."""
    busy, span = dict.fromkeys(stepped, 0.0), dict.fromkeys(stepped, 0.0)
    for b in blocks:
        busy[b.step] += b.total_us  # type: ignore[index]
        span[b.step] += b.span_us  # type: ignore[index]
    n = len(stepped)
    return StepBasis(steps=tuple(stepped), count=n, busy_us=median(busy.values()), span_us=median(span.values()),
                     label=f"median of {n} step{'s' if n != 1 else ''}")


@dataclass(slots=True, kw_only=True)
class Group:
    """One block kind (and phase): BlockResult figures summed, plus its facts. What a rule's check reads."""

    label: str
    blocks: list[BlockResult]
    facts: GroupFacts
    # One step's attention time for this group's per-step savings (evaluate: the attribution's blocks, all kinds);
    # None: the group alone, as one whole-trace step (a hand-made Group).
    step_basis: StepBasis | None = None
    busy_us: float = 0.0
    span_us: float = 0.0
    idle_us: float = 0.0
    categories: dict[str, float] = field(default_factory=dict)

    def rows(self, pred: Callable[[str, str, str, str], bool]) -> list[tuple[str, str, str, str, int, float]]:
        """Kernel rows (name, category, launcher, tag, count, µs) for which ``pred(name, cat, launcher, tag)``."""
        return [(*k, int(v[0]), v[1]) for k, v in self.facts.kernels.items() if pred(*k)]

    def tagged(self, *tags: HintTag) -> list[tuple[str, str, str, str, int, float]]:
        return self.rows(lambda n, c, la, t: t in tags)

    def share(self, us: float) -> float:
        return us / self.busy_us if self.busy_us > 0 else 0.0

    @property
    def basis(self) -> StepBasis:
        """The per-step basis: the attribution's (``step_basis``), or this group's own time as one step."""
        if self.step_basis is not None:
            return self.step_basis
        return StepBasis(steps=(), count=1, busy_us=self.busy_us, span_us=self.span_us,
                         label=NO_STEPS_BASIS)

    @property
    def launch_bound(self) -> bool:
        """The blocks' device waits on launches (vocab.is_launch_bound): busy-time savings will not reach latency."""
        return self.span_us > 0 and is_launch_bound(self.idle_us, self.span_us)

    def per_step(self, us: float, idle: bool = False, counted: dict[KernelRow, float] | None = None) -> float:
        """``us`` of the group's busy time (``idle``: of its idle time) in one step, on the basis's terms: each
        step's part, then the median step's; or, where some block is outside every step, the whole trace's / N.

        A step's part is the ``counted`` kernel rows' time in that step (GroupFacts.step_us: the very kernels),
        or, without per-step rows (hand-made facts) or for idle time, ``us`` spread as the group's own busy
        (idle) time is over the steps. Either way it is at most the group's time in that step, so the median is
        at most the median step's attention time (the basis's bound)."""
        b = self.basis
        if not b.steps:
            return us / b.count
        own = self._own_by_step(idle)
        if counted and self.facts.step_us and not idle:
            parts = self._counted_by_step(counted)
            return median(min(own[s], parts.get(s, 0.0)) for s in b.steps)
        total = self.idle_us if idle else self.busy_us
        if total <= 0:
            return 0.0
        return median(min(v, us * v / total) for v in own.values())

    def _own_by_step(self, idle: bool) -> dict[int, float]:
        """The group's busy (``idle``: idle) time in each step of the basis, from its blocks."""
        by = dict.fromkeys(self.basis.steps, 0.0)
        for blk in self.blocks:
            by[blk.step] += blk.idle_us if idle else blk.total_us  # type: ignore[index]
        return by

    def _counted_by_step(self, counted: dict[KernelRow, float]) -> dict[int, float]:
        """Each step's part of the counted time: per row, its time in the step times the share the hint counts of
        the row (all of it, or an estimate's part)."""
        out: dict[int, float] = {}
        for step, rows in self.facts.step_us.items():
            part = 0.0
            for row, us in counted.items():
                whole = self.facts.kernels.get(row, (0, 0.0))[1]
                part += us * rows.get(row, 0.0) / whole if whole > 0 else 0.0
            out[step] = part
        return out



def _us(rows: Sequence[tuple[str, str, str, str, int, float]]) -> float:
    return sum(r[5] for r in rows)


def _names(rows: Sequence[tuple[str, str, str, str, int, float]]) -> list[str]:
    """The costliest kernel names of these rows (evidence), shortened."""
    by: dict[str, float] = {}
    for r in rows:
        by[r[0]] = by.get(r[0], 0.0) + r[5]
    return [n[:120] for n, _ in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:_TOP_NAMES]]


def _t(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.1f} µs"


def _r(x: float) -> float:
    return round(x, 3)


def _full(rows: Sequence[tuple[str, str, str, str, int, float]]) -> dict[KernelRow, float]:
    """All of these rows' time, as a hint's ``counted``."""
    out: dict[KernelRow, float] = {}
    for r in rows:
        out[r[:4]] = out.get(r[:4], 0.0) + r[5]
    return out


_NO_LATENCY = "; busy time only: these blocks are launch-bound, so this saving will not reach latency"


def _hint(rule: HintRule, g: Group, message: str, evidence: dict[str, Any], saving_us: float | None,
          basis: str, counted: dict[KernelRow, float] | None = None, idle: bool = False) -> Hint:
    """A Hint; ``counted`` is the kernel time its saving counts, per row (its sum is the saving), for overlaps.

    The saving is also given per step (the headline), bounded by one step's attention time: busy time, or with
    ``idle`` (a saving of idle time inside the blocks) their span. A busy-time saving on launch-bound blocks says
    it will not reach latency, in the message and as ``reaches_latency``."""
    if saving_us is None:
        return Hint(rule=rule.name, blocks=[g.label], message=message, evidence=evidence, saving_us=None,
                    saving_pct=None, saving_basis=basis, steps=g.basis.count, per_step_basis=g.basis.label).check()
    den = g.span_us if idle else g.busy_us
    reaches = idle or not g.launch_bound
    return Hint(rule=rule.name, blocks=[g.label], message=message + ("" if reaches else _NO_LATENCY),
                evidence=evidence, saving_us=_r(saving_us),
                saving_pct=round(100 * saving_us / den, 1) if den > 0 else None,
                saving_basis=basis, counted=dict(counted or {}),
                saving_per_step_us=_r(g.per_step(saving_us, idle, counted)), steps=g.basis.count,
                per_step_basis=g.basis.label,
                step_attention_us=_r(g.basis.span_us if idle else g.basis.busy_us), reaches_latency=reaches).check()


def _ps(g: Group, rows: Sequence[tuple[str, str, str, str, int, float]]) -> str:
    """These rows' time in one step (Group.per_step), for a message: "1.2 ms per step"."""
    return f"{_t(g.per_step(_us(rows), counted=_full(rows)))}{step_unit(g.basis.label)}"


def _eager_softmax(g: Group, rule: HintRule) -> Hint | None:
    """The softmax and elementwise rows' time (their kernels, the saving's count; the categories' sums agree)."""
    rows = g.rows(lambda n, c, la, t: c in (Category.SOFTMAX, Category.ELEMENTWISE))
    sm, ew = _us([r for r in rows if r[1] == Category.SOFTMAX]), _us([r for r in rows if r[1] != Category.SOFTMAX])
    if sm <= 0 or g.categories.get(Category.FUSED_ATTENTION, 0.0) > 0 or g.tagged(HintTag.SDPA_MATH):
        return None
    share = g.share(sm + ew)
    if share < rule.threshold:
        return None
    advice = advise(AdviceTopic.FUSED_SDPA, g.facts.platforms)
    fused = _fused_per_step(g)
    return _hint(rule, g, f"{g.label}: eager softmax + mask/scale kernels are {100 * share:.1f}% of busy time "
                          f"({_ps(g, rows)}); use F.scaled_dot_product_attention ({advice.text})"
                          + (f"; a fused kernel ({g.facts.fused_backend}) would take about {_t(fused)} per step "
                             "(`tracekit whatif` for the detail)" if fused is not None else ""),
                 {"softmax_us": _r(sm), "elementwise_us": _r(ew), "busy_us": _r(g.busy_us),
                  "share_pct": round(100 * share, 1), "kernels": _names(rows), "advice": advice.name,
                  **({"fused_us_per_step": _r(fused), "fused_backend": g.facts.fused_backend}
                     if fused is not None else {})},
                 sm + ew, "upper bound: these softmax/mask/scale kernels' time, what removing them saves at most; "
                          "not a prediction of SDPA: its fused kernel also replaces the score/context matmuls and "
                          "copies (not counted here) and costs time the trace cannot tell, so switching can remove "
                          "more busy time than this", counted=_full(rows))


def _fused_per_step(g: Group) -> float | None:
    """The median over steps of ``tracekit whatif``'s fused kernel time for this kind (None: not predicted)."""
    per_step = list(g.facts.fused_us_by_step.values())
    return median(per_step) if per_step and g.facts.fused_backend is not None else None


def _sdpa_math(g: Group, rule: HintRule) -> Hint | None:
    rows = g.tagged(HintTag.SDPA_MATH)
    soft = [r for r in rows if r[1] == Category.SOFTMAX]
    if not soft:
        return None
    total = _us(rows)
    not_mm_rows = [r for r in rows if r[1] != Category.MATMUL]
    not_mm = _us(not_mm_rows)
    advice = advise(AdviceTopic.FUSED_ELIGIBLE, g.facts.platforms)
    return _hint(rule, g, f"{g.label}: SDPA ran its math fallback (softmax kernels inside the SDPA op, "
                          f"{_ps(g, rows)} of kernels); make a fused backend eligible (bf16/fp16 inputs, is_causal "
                          f"instead of a mask, supported head_dim) or {advice.text}",
                 {"math_path_us": _r(total), "softmax_us": _r(_us(soft)), "non_matmul_us": _r(not_mm),
                  "busy_us": _r(g.busy_us), "kernels": _names(soft), "advice": advice.name},
                 not_mm, "upper bound: the math path's softmax/mask/cast/copy kernels' time, what removing them "
                         "saves at most; a fused kernel also replaces the math path's matmuls (not counted) and "
                         "costs time the trace cannot tell", counted=_full(not_mm_rows))


_CAPTURES = frozenset({GraphMode.CAPTURE_ONLY, GraphMode.CAPTURE_REPLAY})


def _launch_bound(g: Group, rule: HintRule) -> Hint | None:
    if g.span_us <= 0 or not is_launch_bound(g.idle_us, g.span_us):
        return None
    if _CAPTURES.intersection(g.facts.graph_modes) and g.share(g.facts.replayed_us) <= 0.5:
        return None  # the eager calls of a capture trace are its warm-up: their gaps are the capture's, not a cost
    kernels = sum(b.kernels for b in g.blocks)
    idle = f"{_t(g.per_step(g.idle_us, idle=True))}{step_unit(g.basis.label)}"
    return _hint(rule, g, f"{g.label}: launch-bound, the GPU is idle {100 * g.idle_us / g.span_us:.0f}% of the "
                          f"blocks' span ({idle}); {_launch_advice(g)}, and judge speedups by wall time, not busy "
                          f"time; busy-time savings on these blocks will not reach latency",
                 {"span_us": _r(g.span_us), "idle_us": _r(g.idle_us), "busy_us": _r(g.busy_us),
                  "idle_pct": round(100 * g.idle_us / g.span_us, 1), "kernels": kernels,
                  "mean_kernel_us": _r(g.busy_us / kernels) if kernels else None, **_graph_evidence(g)},
                 g.idle_us, "upper bound: the device idle time inside the blocks (wall time, percent of their "
                            "span), what removing every gap saves at most", idle=True)


def _graph_evidence(g: Group) -> dict[str, Any]:
    """The graph facts the advice read; none for blocks of eager traces only (their evidence stays as it was)."""
    modes = [m for m in g.facts.graph_modes if m != GraphMode.EAGER]
    if not modes and not g.facts.replayed_us:
        return {}
    return {"replayed_pct": round(100 * g.share(g.facts.replayed_us), 1), "graph_modes": modes}


# What removes launch gaps depends on whether the blocks already run from a CUDA/HIP graph (GroupFacts.replayed_us):
# advising graphs to a replay, or to a trace that is a capture, would be advice the trace itself refutes.
def _launch_advice(g: Group) -> str:
    modes = set(g.facts.graph_modes) - {str(GraphMode.EAGER)}
    if g.share(g.facts.replayed_us) > 0.5:
        return ("the blocks already run from a CUDA/HIP graph, so the gaps are not launch overhead: they are "
                "dependencies inside the graph (event waits, host callbacks, kernels in series); fuse kernels "
                "(torch.compile) or overlap independent work on another stream")
    if modes:
        return ("the trace replays CUDA/HIP graphs but these blocks run eagerly outside them (as attention does "
                "between the pieces of a piecewise graph), where each kernel pays its launch; capture attention in "
                "the graph too (vLLM: a FULL cudagraph mode for decode) or fuse its kernels")
    return "capture CUDA graphs (torch.compile mode='reduce-overhead') or fuse kernels (torch.compile)"


def _tagged_over(g: Group, rule: HintRule, tag: HintTag) -> tuple[list[tuple[str, str, str, str, int, float]], float]:
    """The rows with ``tag`` and their µs, when they reach the rule's share of busy time; else ([], 0)."""
    rows = g.tagged(tag)
    us = _us(rows)
    return (rows, us) if rows and g.share(us) >= rule.threshold else ([], 0.0)


def _kv_cat(g: Group, rule: HintRule) -> Hint | None:
    rows, us = _tagged_over(g, rule, HintTag.KV_CAT)
    if not rows:
        return None
    return _hint(rule, g, f"{g.label}: KV-cache concatenation (torch.cat of past and new K/V) is "
                          f"{100 * g.share(us):.1f}% of busy time ({_ps(g, rows)}); use a static, pre-allocated cache "
                          f"(transformers StaticCache, index_copy_ of the new tokens)",
                 {"cat_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                  "calls": sum(r[4] for r in rows), "kernels": _names(rows)},
                 us, "upper bound: the cat kernels' time; a static cache still writes the new tokens",
                 counted=_full(rows))


def _causal_mask(g: Group, rule: HintRule) -> Hint | None:
    rows = g.tagged(HintTag.MASK)
    us = _us(rows)
    fills = bool(rows) and g.share(us) >= rule.threshold
    masked = g.facts.sdpa_masked
    if not fills and not masked:
        return None
    parts = []
    if fills:
        parts.append(f"masked_fill kernels take {100 * g.share(us):.1f}% of busy time ({_ps(g, rows)})")
    if masked:
        parts.append(f"{masked} of {g.facts.sdpa_calls} SDPA calls were passed an attn_mask tensor")
    ev: dict[str, Any] = {"mask_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                          "sdpa_calls": g.facts.sdpa_calls, "sdpa_with_mask": masked, "kernels": _names(rows)}
    msg = (f"{g.label}: a materialised mask: {'; '.join(parts)}; if it is causal, call "
           f"F.scaled_dot_product_attention(..., is_causal=True) instead (no mask tensor, and the flash backend "
           f"becomes eligible)")
    if fills:
        return _hint(rule, g, msg, ev, us, "upper bound: the masked_fill kernels' time, what removing them saves "
                                           "at most; what a fused causal kernel saves besides is not counted",
                     counted=_full(rows))
    return _hint(rule, g, msg, ev, None, "none: what a fused causal kernel saves over a masked one is not in the trace")


def _fp32_softmax(g: Group, rule: HintRule) -> Hint | None:
    rows, us = _tagged_over(g, rule, HintTag.SOFTMAX_FP32)
    if not rows:
        return None
    sixteen = g.facts.gemm_16bit > 0 or any(re.search(r"bf16|f16|BFloat16|Half|_h_|_h$", r[0])
                                            for r in g.rows(lambda n, c, la, t: c == Category.MATMUL))
    if not sixteen:
        return None
    cast_rows = g.tagged(HintTag.CAST)
    casts = _us(cast_rows)
    counted = {k: v / 2 for k, v in _full(rows).items()}  # the half a bf16 softmax would save, then the casts
    for k, v in _full(cast_rows).items():
        counted[k] = counted.get(k, 0.0) + v
    return _hint(rule, g, f"{g.label}: softmax runs in fp32 ({_ps(g, rows)}, {100 * g.share(us):.1f}% of busy "
                          f"time) while the matmuls are bf16/fp16; keep the scores in bf16 (softmax accumulates in "
                          f"fp32 inside the kernel) and drop the casts around it ({_ps(g, cast_rows)})",
                 {"fp32_softmax_us": _r(us), "cast_us": _r(casts), "busy_us": _r(g.busy_us),
                  "gemm_ops_16bit": g.facts.gemm_16bit, "kernels": _names(rows)},
                 us / 2 + casts, "estimate: a memory-bound softmax moves half the bytes in bf16 (half its time), "
                                 "plus the bf16<->fp32 cast kernels", counted=counted)


def _repeat_kv(g: Group, rule: HintRule) -> Hint | None:
    rows, us = _tagged_over(g, rule, HintTag.REPEAT_KV)
    if not rows:
        return None
    return _hint(rule, g, f"{g.label}: GQA repeat_kv copies K/V per query head ({_ps(g, rows)}, "
                          f"{100 * g.share(us):.1f}% of busy time); pass enable_gqa=True to "
                          f"F.scaled_dot_product_attention or use a GQA-aware kernel",
                 {"copy_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                  "launchers": sorted({r[2] for r in rows}), "kernels": _names(rows)},
                 us, "upper bound: the repeat_kv copy kernels' time", counted=_full(rows))


def _layout_copies(g: Group, rule: HintRule) -> Hint | None:
    rows = g.rows(lambda n, c, la, t: c == Category.MEMORY and not t and _LAYOUT_KERNEL.search(n) is not None)
    us = _us(rows)
    if not rows or g.share(us) < rule.threshold:
        return None
    return _hint(rule, g, f"{g.label}: transpose/contiguous copies are {100 * g.share(us):.1f}% of busy time "
                          f"({_ps(g, rows)}); keep tensors in the layout the next op reads (e.g. (B, S, H, D) into "
                          f"flash-attn, no .contiguous() before SDPA) or let torch.compile fuse the copies",
                 {"copy_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                  "launchers": sorted({r[2] for r in rows if r[2]})[:5], "kernels": _names(rows)},
                 us, "upper bound: the copy kernels' time", counted=_full(rows))


def _fused_efficiency(g: Group) -> Efficiency | None:
    """The fused attention kernels' efficiency over the group's blocks: the sum of the very records the JSON's
    ``efficiency_by_category["fused_attention"]`` shows per block, so the hint's figures are the table's."""
    key = Category.FUSED_ATTENTION.value
    return sum_efficiency([b.efficiency_by_category.get(key) for b in g.blocks])


def _compute_bound_fused(g: Group) -> Efficiency | None:
    """The fused attention kernels' efficiency when they ran at all, compute-bound, against a known peak."""
    e = _fused_efficiency(g)
    if e is None or e.peak_tflops is None or e.bound != "compute" or e.time_ns <= 0:
        return None
    return e


def _low_tflops(g: Group, rule: HintRule) -> Hint | None:
    """A compute-bound fused kernel far below its dtype's peak (the one look-up: hardware.compute_peak)."""
    e = _compute_bound_fused(g)
    if e is None or e.peak_tflops is None or e.compute_s is None:
        return None
    peak = e.peak_tflops
    d = efficiency_dict(e)  # rates and roof exactly as the JSON's efficiency records round them
    roof_pct, rate = float(d["roof_pct"]), float(d["tflops_per_s"])  # type: ignore[arg-type]
    if roof_pct >= rule.threshold:
        return None
    rows = g.rows(lambda n, c, la, t: c == Category.FUSED_ATTENTION)
    us, at_roof_us = e.time_ns / 1000, e.compute_s * 1e6
    saving = max(0.0, us - at_roof_us)
    rows_us = _us(rows)
    counted = {k: v * saving / rows_us for k, v in _full(rows).items()} if rows_us > 0 else {}
    dtype = "/".join(e.dtypes)
    advice = advise(AdviceTopic.FASTER_KERNEL, g.facts.platforms, [r[0] for r in rows])
    return _hint(rule, g, f"{g.label}: the fused attention kernel is compute-bound but runs at {rate:.0f} TFLOP/s, "
                          f"{roof_pct:.0f}% of the device's {dtype} peak ({peak:.1f} TFLOP/s); for this GPU try "
                          f"{advice.text}; or larger head_dim/batch per launch, or check the dtype",
                 {"fused_attention_us": _r(us), "flops": e.flops, "tflops_per_s": rate,
                  "peak_tflops_per_s": round(peak, 1), "peak_dtypes": list(e.dtypes), "roof_pct": roof_pct,
                  "kernels": _names(rows), "advice": advice.name},
                 saving if counted else None,
                 "upper bound: the fused kernels' time above what the compute roof allows" if counted else
                 "none: the fused kernels' rows are not in the facts", counted=counted)


def _rotary_cat(g: Group, rule: HintRule) -> Hint | None:
    cat, neg = g.tagged(HintTag.HALVES_CAT), g.tagged(HintTag.NEG)
    us = _us(cat) + _us(neg)
    if not cat or not neg or g.share(us) < rule.threshold:
        return None
    return _hint(rule, g, f"{g.label}: rotary embedding by rotate_half (cat of the two halves + neg) costs "
                          f"{_ps(g, cat + neg)} ({100 * g.share(us):.1f}% of busy time) before the muls and adds; use "
                          f"a fused rotary kernel (flash_attn's apply_rotary_emb, Liger, or torch.compile)",
                 {"cat_us": _r(_us(cat)), "neg_us": _r(_us(neg)), "busy_us": _r(g.busy_us),
                  "share_pct": round(100 * g.share(us), 1), "kernels": _names(cat + neg)},
                 us, "upper bound: the cat and neg kernels' time; a fused kernel still reads and writes q and k",
                 counted=_full(cat + neg))


def _comm(g: Group, rule: HintRule) -> Hint | None:
    rows, us = _tagged_over(g, rule, HintTag.COMM)
    if not rows:
        return None
    return _hint(rule, g, f"{g.label}: collectives run inside the attention block ({_ps(g, rows)}, "
                          f"{100 * g.share(us):.1f}% of busy time: tensor-parallel all-reduce?); overlap them with "
                          f"compute (async TP) or check the TP degree for this size",
                 {"comm_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                  "kernels": _names(rows)},
                 us, "upper bound: the collective kernels' time, if fully overlapped", counted=_full(rows))


@dataclass(frozen=True, slots=True, kw_only=True)
class HintRule:
    """One hint rule: ``check`` returns a Hint for a block kind, or None. ``reads`` and ``why`` document it."""

    name: str
    threshold: float
    reads: str
    check: Callable[[Group, HintRule], Hint | None]
    why: str = ""


# launch-bound comes first: on launch-bound blocks, the busy-time savings after it will not reach latency.
HINT_RULES: tuple[HintRule, ...] = (
    HintRule(name="launch-bound", threshold=LAUNCH_BOUND_IDLE, check=_launch_bound,
             reads="idle_us / span_us of the blocks",
             why="busy time is not what the user pays when the GPU waits for launches"),
    HintRule(name="eager-softmax", threshold=EAGER_SOFTMAX_SHARE, check=_eager_softmax,
             reads="softmax + elementwise share of busy time, no fused/SDPA kernels",
             why="the unfused softmax/mask/scale round trips through HBM are what fused SDPA removes"),
    HintRule(name="sdpa-math-fallback", threshold=0.0, check=_sdpa_math,
             reads="softmax kernels launched under aten::scaled_dot_product_attention "
                   "(or _scaled_dot_product_attention_math) with no fused backend op",
             why="SDPA silently falls back to the math path (fp32 upcast, materialised scores)"),
    HintRule(name="kv-cache-cat", threshold=KV_CAT_SHARE, check=_kv_cat,
             reads="kernels of aten::cat([past, new], dim=-2) on 4-D K/V (Input Dims)",
             why="a growing cache re-copies all past tokens every step"),
    HintRule(name="materialised-mask", threshold=MASK_SHARE, check=_causal_mask,
             reads="masked_fill kernels; SDPA calls with an attn_mask and is_causal=False",
             why="a causal mask tensor costs a kernel and keeps SDPA off the flash backend"),
    HintRule(name="fp32-softmax", threshold=FP32_SOFTMAX_SHARE, check=_fp32_softmax,
             reads="softmax op Input type float (or kernel templated on float) while "
                   "GEMM ops take bf16/fp16",
             why="upcasting scores doubles the softmax's bytes and adds casts"),
    HintRule(name="gqa-repeat-kv", threshold=REPEAT_KV_SHARE, check=_repeat_kv,
             reads="copies launched by repeat_interleave or a 5-D expand+reshape",
             why="repeat_kv materialises K/V n_rep times"),
    HintRule(name="layout-copies", threshold=LAYOUT_COPY_SHARE, check=_layout_copies,
             reads="direct copy/transpose kernels (memory) not covered by another rule",
             why="contiguous()/transpose copies move the whole tensor for no math"),
    HintRule(name="low-tflops", threshold=LOW_ROOF_PCT, check=_low_tflops,
             reads="BlockResult.efficiency_by_category['fused_attention'] summed over the blocks (flops, "
                   "bound, roof_pct; the peak of the kernels' dtype)",
             why="a compute-bound kernel far below the roof leaves the most on the table"),
    HintRule(name="rotary-cat", threshold=ROTARY_SHARE, check=_rotary_cat,
             reads="cat of two equal halves along the last dim + neg kernels",
             why="HF rotate_half materialises two extra copies of q and k"),
    HintRule(name="collective-in-block", threshold=COMM_SHARE, check=_comm,
             reads="all-reduce/all-gather kernels in the block",
             why="a tensor-parallel collective serialises with attention unless overlapped"),
)


def _groups(blocks: Sequence[BlockResult], facts: HintFacts) -> list[Group]:
    by: dict[tuple[str, str], Group] = {}
    basis = _step_basis(blocks)
    for b in blocks:
        key = (b.kind, str(b.phase))
        g = by.get(key)
        if g is None:
            label = b.kind if b.phase == "forward" else f"{b.kind} ({b.phase})"
            g = by[key] = Group(label=label, blocks=[], facts=facts.get(key) or GroupFacts(), step_basis=basis,
                                categories=dict.fromkeys(b.categories, 0.0))
        g.blocks.append(b)
        g.busy_us += b.total_us
        g.span_us += b.span_us
        g.idle_us += b.idle_us
        for c, v in b.categories.items():
            g.categories[c] = g.categories.get(c, 0.0) + v
    return sorted(by.values(), key=lambda g: (-g.busy_us, g.label))


def evaluate(facts: HintFacts | None, blocks: Sequence[BlockResult],
             rules: Sequence[HintRule] = HINT_RULES) -> list[Hint]:
    """Every rule on every block kind, in rule order then by busy time; [] when no facts were gathered."""
    if facts is None:
        return []
    groups = _groups(blocks, facts)
    out: list[Hint] = []
    for rule in rules:
        for g in groups:
            h = rule.check(g, rule)
            if h is not None:
                out.append(h)
    _mark_overlaps(out, {g.label: g for g in groups})
    return out


def _mark_overlaps(hints: Sequence[Hint], groups: dict[str, Group]) -> None:
    """Hints of one block kind whose savings count some of the same kernel rows, linked (a connected set each):
    every member gets the set's HintOverlap, so no reader adds up savings that share device time."""
    by_label: dict[str, list[Hint]] = {}
    for h in hints:
        if h.counted:
            by_label.setdefault(h.blocks[0], []).append(h)
    for label, hs in by_label.items():
        for members in _sharing_sets(hs):
            if len(members) > 1:
                g = groups[label]
                ov = _overlap(members, label, g.busy_us)
                if g.basis.label != NO_STEPS_BASIS:  # no step recorded: the union in all is the only figure
                    ov.union_per_step_us = _r(g.per_step(ov.union_us, counted=_union_rows(members)))
                ov.check()
                for h in members:
                    h.overlap = ov


def _sharing_sets(hs: Sequence[Hint]) -> list[list[Hint]]:
    """The hints in connected sets, two linked when both count time of one kernel row (in hint order)."""
    parent = list(range(len(hs)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(hs)):
        for j in range(i + 1, len(hs)):
            if any(us > 0 and hs[j].counted.get(k, 0.0) > 0 for k, us in hs[i].counted.items()):
                parent[root(j)] = root(i)
    sets: dict[int, list[Hint]] = {}
    for i, h in enumerate(hs):
        sets.setdefault(root(i), []).append(h)
    return list(sets.values())


def _overlap(members: Sequence[Hint], label: str, busy_us: float) -> HintOverlap:
    """The union of the members' counted kernel time: each row once, at the most any member counts of it."""
    rows = list(dict.fromkeys(k for h in members for k in h.counted))  # hint order: the sums are reproducible
    most = _union_rows(members)
    twice = {k: sum(h.counted.get(k, 0.0) for h in members) - most[k] for k in rows}  # counted beyond the most
    union, total = sum(most.values()), sum(sum(h.counted.values()) for h in members)
    return HintOverlap(rules=[h.rule for h in members], blocks=[label], sum_us=_r(total), union_us=_r(union),
                       double_counted_us=_r(total - union), shared_kernels=_shared_names(twice),
                       busy_us=_r(busy_us), union_pct=round(100 * union / busy_us, 1) if busy_us > 0 else None).check()


def _shared_names(twice: dict[KernelRow, float]) -> list[str]:
    """Kernel names of the rows counted more than once, the most double-counted first (ties by name)."""
    names: dict[str, float] = {}
    for k, us in twice.items():
        if us > 0:
            names[k[0]] = names.get(k[0], 0.0) + us
    return [n[:120] for n, _ in sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))]


def _union_rows(members: Sequence[Hint]) -> dict[KernelRow, float]:
    """Each kernel row the members count, once, at the most any member counts of it (hint order)."""
    rows = dict.fromkeys(k for h in members for k in h.counted)
    return {k: max(h.counted.get(k, 0.0) for h in members) for k in rows}
