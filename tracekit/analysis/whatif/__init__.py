"""``tracekit whatif``: what a fused attention kernel would take for each eager block's shapes (issue 39).

:mod:`.model` is the kernel-time model and its fit, :mod:`.facts` reads what a prediction needs from an analysed
trace, :mod:`.predict` makes the rows. docs/whatif.md says what each number means.
"""

from __future__ import annotations

from ...calibration import BACKENDS, calibrations_for
from ...model import Trace
from ...results.whatif import WhatIf
from ..context import AttributeConfig, StageContext
from ..pipeline import run_stages
from .facts import core_facts
from .model import efficiency, fit_curve, fused_time_us, occupancy
from .predict import CONFIDENCE_RULES, CoreFacts, predict, predict_block, resolve_mask

__all__ = ["CONFIDENCE_RULES", "CoreFacts", "efficiency", "fit_curve", "fused_time_us", "occupancy", "predict",
           "predict_block", "resolve_mask", "whatif_trace"]


def whatif_trace(tr: Trace, *, backend: str = "best", mask: str = "auto", scope: str | None = None) -> list[WhatIf]:
    """The prediction for one trace: one WhatIf for ``backend``, the fastest calibrated one for ``best`` (the one
    whose predicted blocks take least in all), or one per calibrated backend for ``all``.

    Runs every analysis stage (hints off), then reads each block's core facts: ``tracekit attribute`` never pays
    for this."""
    ctx = run_stages(StageContext(tr=tr, config=AttributeConfig(scope=scope, hints=False)))
    source, device = tr.info.source, (tr.info.gpus[0] if tr.info.gpus else None)
    if not ctx.device:
        return [WhatIf(source=source, backend=backend, device=device, calibration=None, mask_option=mask,
                       reason="a CPU-only trace: whatif predicts GPU kernels, and there is no device here")]
    facts = core_facts(ctx)
    names = [c.backend for c in calibrations_for(device)] if backend in ("best", "all") else [backend]
    if not names:  # no calibration: one result that says so
        return [predict(facts, source=source, device=device, backend=BACKENDS[0], mask_option=mask)]
    results = [predict(facts, source=source, device=device, backend=b, mask_option=mask) for b in names]
    if backend == "best":
        return [min(results, key=lambda w: w.totals.fused_us)]
    return results
