"""JSON per the contract in shared/docs/attribution.md (named so it does not shadow ``json``)."""

from __future__ import annotations

import orjson

from ..result import SCHEMA_VERSION, Attribution
from .base import Renderer


def to_dict(result: Attribution, tool: str) -> dict:
    """The stable schema; extra keys beyond the contract are additive."""
    blocks = [{
        "name": b.name, "kind": b.kind, "found_by": b.found_by, "step": b.step, "ordinal": b.ordinal,
        "phase": b.phase, "total_us": round(b.total_us, 3), "span_us": round(b.span_us, 3),
        "idle_us": round(b.idle_us, 3), "categories": {k: round(v, 3) for k, v in b.categories.items()},
        "kernels": b.kernels, "host_us": None if b.host_us is None else round(b.host_us, 3),
        "alloc_bytes": b.alloc_bytes, "trace": b.source,
    } for b in result.blocks]
    t = result.totals
    out = {
        "schema_version": SCHEMA_VERSION,
        "tool": tool,
        "source": result.source,
        "time_base": result.time_base,
        "traces": [{
            "source": s.source, "gpus": s.gpus, "pytorch": s.pytorch, "runtime": s.runtime,
            "time_base": s.time_base, "steps": s.steps, "events": s.events, "base_us": round(s.base_us, 3),
            "external_ids_trusted": s.external_ids_trusted, "damaged": s.damaged, "warnings": s.warnings,
            "shapes": s.shapes,
        } for s in result.traces],
        "blocks": blocks,
        "totals": {"total_us": round(t.total_us, 3), "categories": {k: round(v, 3) for k, v in t.categories.items()},
                   "attention_share": None if t.attention_share is None else round(t.attention_share, 6),
                   "blocks": t.blocks},
        "top_kernels": [{"name": n, "category": c, "count": k, "total_us": round(us, 3)}
                        for n, c, k, us in result.top_kernels],
    }
    if result.coverage is not None:
        cv = result.coverage
        out["coverage"] = {"device_us": round(cv.device_us, 3), "linked_us": round(cv.linked_us, 3),
                           "in_blocks_us": round(cv.in_blocks_us, 3), "unlinked_us": round(cv.unlinked_us, 3),
                           "device_events": cv.device_events, "linked_events": cv.linked_events}
    return out


class JSONRenderer(Renderer):
    name = "json"
    extension = ".json"

    def render(self, result: Attribution) -> str:
        return orjson.dumps(to_dict(result, self.tool), option=orjson.OPT_INDENT_2).decode() + "\n"
