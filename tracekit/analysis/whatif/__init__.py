"""``tracekit whatif``: what a fused attention kernel would take for each eager block's shapes (issue 39).

:mod:`.model` is the kernel-time model and its fit, :mod:`.facts` reads what a prediction needs from an analysed
trace, :mod:`.predict` makes the rows. docs/whatif.md says what each number means.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...calibration import BACKENDS, CALIBRATIONS, Calibration, calibrations_for
from ...results.hints import HintFacts
from ...results.whatif import WhatIf
from ..context import StageContext
from .facts import core_facts
from .model import efficiency, fit_curve, fused_time_us, occupancy
from .predict import CONFIDENCE_RULES, CoreFacts, predict, predict_block, resolve_mask

__all__ = ["CONFIDENCE_RULES", "CoreFacts", "efficiency", "fit_curve", "fused_time_us", "occupancy", "predict",
           "predict_block", "resolve_mask", "whatif_of", "add_fused_estimates"]


def whatif_of(ctx: StageContext, *, backend: str = "best", mask: str = "auto",
              entries: Sequence[Calibration] = CALIBRATIONS) -> list[WhatIf]:
    """The prediction for one trace whose analysis stages have all run: one WhatIf for ``backend``, the fastest
    calibrated one for ``best`` (the one whose predicted blocks take least in all), or one per calibrated backend
    for ``all``. ``entries``: the calibrations to use (a user's file's first: tracekit.calibration.with_user_entries).
    ``tracekit attribute`` never calls this (run.api.whatif does): the 1 GB benchmark never pays."""
    tr = ctx.tr
    source, device = tr.info.source, (tr.info.gpus[0] if tr.info.gpus else None)
    if not ctx.device:
        return [WhatIf(source=source, backend=backend, device=device, calibration=None, mask_option=mask,
                       reason="a CPU-only trace: whatif predicts GPU kernels, and there is no device here")]
    facts = core_facts(ctx)
    names = [c.backend for c in calibrations_for(device, entries)] if backend in ("best", "all") else [backend]
    if not names:  # no calibration: one result that says so
        return [predict(facts, source=source, device=device, backend=BACKENDS[0], mask_option=mask, entries=entries)]
    results = [predict(facts, source=source, device=device, backend=b, mask_option=mask, entries=entries)
               for b in names]
    if backend == "best":
        return [min(results, key=lambda w: w.totals.fused_us)]
    return results


def add_fused_estimates(ctx: StageContext, facts: HintFacts) -> None:
    """The eager-softmax hint's "a fused kernel would take about X per step": each block kind's predicted fused
    kernel time per step on the fastest calibrated backend, on its hint facts. Only on a calibrated device (the
    facts' walk is skipped everywhere else, so traces of other devices pay nothing)."""
    device = ctx.tr.info.gpus[0] if ctx.tr.info.gpus else None
    if not ctx.device or not calibrations_for(device):
        return
    [best] = whatif_of(ctx)
    for b in best.predicted():
        g = facts.get((b.kind, str(b.phase)))
        if g is not None and b.step is not None and b.fused_us is not None:
            g.fused_backend = best.backend
            g.fused_us_by_step[b.step] = g.fused_us_by_step.get(b.step, 0.0) + b.fused_us
