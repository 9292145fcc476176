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
from ..calibration import BACKENDS, CALIBRATIONS, Calibration
from ..errors import TracekitError
from ..hardware import lookup, normalise
from ..io.calibration_file import calibration_document
from ..io.load import load_trace
from ..model import Trace
from ..output import write_report

__all__ = ["DEFAULT_FLOOR_US", "Point", "fit_backend", "fit_sweep", "sweep_points", "write_calibration"]

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


def _trace_file(run: Path) -> Path:
    """A run's one trace: profile_attention.py leaves <worker>.pt.trace.json.gz and a plain trace.json copy of it,
    so the first is read where it is there."""
    files = sorted(run.glob("*.pt.trace.json*")) or sorted(run.glob("*.json*"))
    if len(files) != 1:
        raise TracekitError(f"{run}: expected one trace, found {len(files)}")
    return files[0]


def _point(run: Path) -> Point:
    tr = load_trace(_trace_file(run))
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


# A fused call takes no less than this, where no built-in entry of the device says otherwise: a launch and one
# tile (the H200 entry's floor).
DEFAULT_FLOOR_US = 4.0


def fit_sweep(folder: str | Path, *, sms: int | None = None, source: str | None = None) -> list[Calibration]:
    """One entry per backend with ``sdpa-<backend>_<L>`` runs in ``folder`` (in BACKENDS order), fitted to them.

    The device is the traces'; its SM count is ``sms`` (the caller's GPU) or its built-in entry's, and the
    floor and query tile come from that entry too where there is one. The sweep's head dim, mask and phase are
    its points' (they must agree). ``source`` says where the sweep came from (default: the folder)."""
    fitted = []
    for backend in BACKENDS:
        try:
            points = sweep_points(folder, backend)
        except TracekitError:
            if not any(Path(folder).glob(f"sdpa-{backend}_*")):
                continue  # this backend did not run here (a GPU without it): no entry, no guess
            raise
        fitted.append(fit_backend(points, backend, _base(points, backend, sms, source or f"a sweep in {folder}")))
    if not fitted:
        raise TracekitError(f"no sdpa-<backend>_<L> runs of {', '.join(BACKENDS)} in {folder}")
    return fitted


def _base(points: list[Point], backend: str, sms: int | None, source: str) -> Calibration:
    """The facts an entry needs beside its fitted curve: the device's, and what the sweep covered."""
    covered = {(p.device, p.head_dim, p.causal) for p in points}
    if len(covered) != 1:
        raise TracekitError(f"the sdpa-{backend} runs differ in device, head dim or mask: {sorted(covered)}")
    [(device, head_dim, causal)] = covered
    known = next((c for c in CALIBRATIONS if c.device == device), None)
    if sms is None and known is None:
        raise TracekitError(f"the SM count of {device} is unknown: pass it (sms=...)")
    return Calibration(device=device, backend=backend, eta_max=1.0, l_half=0.0,
                       sms=sms if sms is not None else known.sms,  # type: ignore[union-attr]
                       tile_q=known.tile_q if known else 128,
                       floor_us=known.floor_us if known else DEFAULT_FLOOR_US, small_us=0.0, head_dim=head_dim,
                       causal=causal, phase="forward", source=source, points=0)


def write_calibration(path: str | Path, entries: list[Calibration], provenance: dict[str, str | None]) -> None:
    """The calibration file ``tracekit whatif --calibration`` reads (tracekit.io.calibration_file), written
    atomically (a half-written file must never be read as a calibration)."""
    doc = calibration_document(entries, provenance)
    write_report([orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"], Path(path), gz=False)
