"""Fit a fused-attention calibration (tracekit.calibration) to a sweep of SDPA runs on one device.

A sweep is ``scripts/profile_attention.py``'s folder layout: one folder per run, ``sdpa-<backend>_<L>/``, each
with a trace of a few profiled steps. Each run gives one point: the shape of its SDPA calls (read from their
recorded inputs: every call of a run must share it) and the median busy time of the fused attention kernels per
call (the blocks' ``fused_attention`` category). Only this module reads a sweep; ``scripts/fit_whatif.py`` prints
what it fits, and the tests refit the shared H200 sweep and compare with the entry in tracekit.calibration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

import orjson

from ..analysis.flops import attention_flops, cost_of
from ..analysis.pipeline import attribute_trace
from ..analysis.whatif.model import fit_curve, occupancy
from ..calibration import Calibration
from ..errors import TracekitError
from ..hardware import lookup, normalise
from ..io.load import load_trace
from ..model import Trace

__all__ = ["Point", "fit_backend", "sweep_points"]

_RUN = re.compile(r"sdpa-(?P<backend>[a-z]+)_(?P<len>\d+)$")
_SDPA = "aten::scaled_dot_product_attention"


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One run of a sweep: its calls' shape, their fused FLOPs and the fused kernels' median time per call."""

    run: str
    device: str
    batch_heads: int
    len_q: int
    len_k: int
    head_dim: int
    causal: bool
    flops: float
    fused_us: float
    small_us: float  # the block's busy time beside its projections and its fused kernels, per call


def sweep_points(folder: str | Path, backend: str) -> list[Point]:
    """The points of ``folder``'s ``sdpa-<backend>_<L>`` runs, by L."""
    runs = sorted((int(m["len"]), d) for d in Path(folder).iterdir()
                  if d.is_dir() and (m := _RUN.match(d.name)) and m["backend"] == backend)
    if not runs:
        raise TracekitError(f"no sdpa-{backend}_<L> runs in {folder}")
    return [_point(d) for _, d in runs]


def _point(run: Path) -> Point:
    files = sorted(run.glob("*.json*"))
    if len(files) != 1:
        raise TracekitError(f"{run}: expected one trace, found {len(files)}")
    tr = load_trace(files[0])
    att = attribute_trace(tr, hints=False)
    device = normalise(tr.info.gpus[0]) if tr.info.gpus else None
    if device is None:
        raise TracekitError(f"{run}: no known device in the trace")
    bh, lq, lk, d, causal = _one_shape(tr, run)
    calls = [b for b in att.blocks if b.categories["fused_attention"] > 0]
    if not calls:
        raise TracekitError(f"{run}: no fused attention kernels in its blocks")
    proj = [(b.matmul_roles or {}).get("projection", 0.0) for b in calls]
    return Point(run=run.name, device=device, batch_heads=bh, len_q=lq, len_k=lk, head_dim=d, causal=causal,
                 flops=attention_flops(bh, lq, lk, d, d, causal=causal, backward=False),
                 fused_us=median(b.categories["fused_attention"] for b in calls),
                 small_us=median(b.total_us - p - b.categories["fused_attention"] for b, p in zip(calls, proj)))


def _one_shape(tr: Trace, run: Path) -> tuple[int, int, int, int, bool]:
    """(batch * heads, Lq, Lk, head dim, causal) of the run's SDPA calls; they must all agree."""
    shapes = set()
    for i, h in enumerate(tr.host):
        if h.name == _SDPA and (oi := tr.op_inputs.get(i)) is not None and cost_of(tr, i) is not None:
            (q, k), concrete = orjson.loads(oi.dims)[:2], orjson.loads(oi.concrete or b"[]")
            shapes.add((q[0] * q[1], q[2], k[2], q[3], len(concrete) > 5 and concrete[5] == "True"))
    if len(shapes) != 1:
        raise TracekitError(f"{run}: its SDPA calls have {len(shapes)} shapes, not one")
    return shapes.pop()


def fit_backend(points: list[Point], backend: str, base: Calibration) -> Calibration:
    """``base`` (device facts, floor, source) with the curve and the small kernels fitted to ``points``."""
    peaks = lookup(points[0].device)
    if peaks is None or peaks.bf16 is None:
        raise TracekitError(f"no bf16 peak for {points[0].device}")
    etas = [(p.len_k, p.flops / (p.fused_us * 1e-6 * occupancy(base, p.batch_heads, p.len_q) * peaks.bf16 * 1e12))
            for p in points]
    eta_max, l_half = fit_curve(etas)
    return replace(base, backend=backend, eta_max=round(eta_max, 4), l_half=round(l_half, 1),
                   small_us=round(median(p.small_us for p in points), 2), points=len(points))
