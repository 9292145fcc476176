"""The op table of ``tracekit attribute --by op`` (issue 42): each counted op call shape on its own roofline.

Read off the analysed context after the stages (tracekit.analysis.pipeline.attribute_trace, ``ops=True``), never
by a stage: only ``--by op`` asks for it, so the default run pays nothing. The ops, their kernels and one call's
cost are the efficiency figures' own (tracekit.analysis.flops: ``_counted_ops``, ``_unit_efficiency``), so a row's
FLOPs and time are the same counts the blocks' efficiency sums.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson

from ..hardware import lookup
from ..model import Trace
from ..results.ops import OpRow, merge_ops
from .context import StageContext
from .flops import OpCost, _counted_ops, _unit_efficiency, dtype_class
from .link import Links

__all__ = ["op_rows", "ops_of"]


def ops_of(ctx: StageContext) -> list[OpRow]:
    """The op rows of an analysed context ([] on a CPU-only trace, which has no kernels to time)."""
    if ctx.cats is None or ctx.device_time is None or ctx.walk is None:
        return []
    return op_rows(ctx.tr, ctx.need(ctx.links, "links"), ctx.device_time.members.values(), ctx.walk.dev_share)


def _dtype(types_raw: bytes) -> str:
    """The first recorded tensor input's dtype class ("bf16", …), else its recorded name; "" when none."""
    try:
        types = orjson.loads(types_raw) if types_raw else []
    except orjson.JSONDecodeError:
        return ""
    for t in types if isinstance(types, list) else []:
        if isinstance(t, str) and t not in ("", "Scalar", "ScalarList", "TensorList", "GenericList"):
            return dtype_class(t) or t
    return ""


class _AtPeak:
    """One call's seconds at the device's peak FLOP/s and bandwidth, per distinct cost (the efficiency figures'
    own look-up, flops._unit_efficiency); (None, None) without peaks."""

    def __init__(self, device: str | None) -> None:
        self.device, self.peaks = device, lookup(device)
        self.seen: dict[OpCost, tuple[float | None, float | None]] = {}

    def __call__(self, c: OpCost) -> tuple[float | None, float | None]:
        got = self.seen.get(c)
        if got is None:
            e = _unit_efficiency(c, 0, self.peaks, self.device)
            got = self.seen[c] = (e.compute_s, e.memory_s)
        return got


def op_rows(tr: Trace, links: Links, owned: Iterable[Sequence[int]], dev_share: Sequence[int]) -> list[OpRow]:
    """One row per (op name, recorded shapes, dtype) among the counted ops of the blocks' kernels, by time.

    ``owned``: each block's device events; ``dev_share[j]``: event ``j``'s share of its block's busy time, so a
    row's time is its kernels' part of the blocks' busy time and the rows never sum past it.
    """
    if not tr.op_inputs:
        return []
    units, costs = _counted_ops(tr, links, owned)
    at_peak = _AtPeak(tr.info.gpus[0] if tr.info.gpus else None)
    rows: dict[tuple[str, bytes, bytes], OpRow] = {}
    for u, js in units.items():
        c = costs[u]
        if c.kind == "none":  # no FLOP count (issue 44: vLLM's attention records no lengths): no row
            continue
        oi = tr.op_inputs[u]
        key = (tr.host[u].name, oi.dims, oi.types)
        r = rows.get(key)
        if r is None:
            r = rows[key] = OpRow(op=key[0], shapes=oi.dims.decode("utf-8", "replace"), dtype=_dtype(oi.types),
                                  calls=0, flops=0.0, bytes=0.0, time_ns=0, compute_s=0.0, memory_s=0.0)
        r.add(1, c.flops, c.bytes, sum(dev_share[j] for j in js), *at_peak(c), c.flops_max)
    # rows keyed by the raw recorded bytes merge where their labels agree (the same shapes with other spacing,
    # types that differ past the first tensor's dtype): one row per (op, shapes, dtype) shown, sorted by time
    return merge_ops([list(rows.values())]) or []
