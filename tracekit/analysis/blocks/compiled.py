"""Compiled attention that no op names (issue 38): torch.compile regions and what each shows of its work.

``torch.compile`` of eager attention leaves extern ``aten::bmm`` calls and generated kernels inside a
``Torch-Compiled Region``; ``attn_implementation="flex_attention"`` leaves a bare region per call (on CPU its
C++ kernels are not recorded at all). No fused op, no softmax op: rule innermost-scope found no core there.
:mod:`.discovery` asks this module what a region inside an attention scope shows (:data:`SIGHTS`, in order),
and makes the scope a block with a ``compiled-region`` core named by it. A region that no block covers is listed
on a CPU-only trace (:func:`compiled_outside`) under "attention outside blocks", with the reason.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...model import Trace
from ...results.attribution import COMPILED_OUTSIDE_REASON, CompiledOutside
from ...vocab import (
    BATCHED_PRODUCT_OPS, COMPILED_REGION_OPS, INDUCTOR_CPP_KERNELS, Category, anchored,
)
from ..link import NONE, Links, nearest_above

REGION = re.compile(anchored(COMPILED_REGION_OPS))
BATCHED = re.compile(anchored(BATCHED_PRODUCT_OPS))
# An inductor C++ kernel that computes a softmax (recorded with cpp.enable_kernel_profile); not a loss's log_softmax.
CPP_SOFTMAX = re.compile(rf"^{INDUCTOR_CPP_KERNELS}(?<!_log)_softmax\w*$")


@dataclass(frozen=True, slots=True)
class Sight:
    """One thing a compiled region can show of an attention call, in the order the core is named by them."""

    name: str
    why: str


SIGHTS: tuple[Sight, ...] = (
    Sight("fused-kernels", "a kernel classified fused attention launched inside the region: inductor's "
                           "FlexAttention templates (triton_tem_fused_flex_attention_0, …_backward_2) do QKᵀ, "
                           "softmax and PV at once"),
    Sight("softmax", "a softmax kernel launched inside the region (triton_per_fused__softmax_0), or an inductor "
                     "C++ softmax function the trace names (graph_1_cpp_fused__softmax_view_0): the score → "
                     "context products' softmax, fused by inductor"),
    Sight("batched-products", "two or more batched products (extern aten::bmm/baddbmm) inside the region: compiled "
                              "eager attention's QKᵀ and PV, one batch per head (the projections are 2-D mm)"),
    Sight("hidden", "a region that launched no device event (CPU inductor code: its kernels are not recorded): all "
                    "the trace shows is the region; inside an attention scope it is that call's work"),
)


@dataclass(slots=True)
class RegionWork:
    """What one compiled region shows: device events (indices) and host ops (indices) inside it."""

    fused: list[int] = field(default_factory=list)  # fused attention kernels
    softmax_kernels: list[int] = field(default_factory=list)
    softmax_ops: list[int] = field(default_factory=list)  # inductor C++ softmax functions (host)
    products: list[int] = field(default_factory=list)  # batched product ops (host)
    launched: bool = False  # any device event launched inside


def region_events(tr: Trace, names: frozenset[str]) -> list[int]:
    """The host events that open a compiled region (none looked for when no such name is in the file)."""
    region_names = {n for n in names if REGION.match(n)}
    if not region_names:
        return []
    return [i for i, h in enumerate(tr.host) if h.name in region_names]


class Regions:
    """The compiled regions of a trace, and the innermost one around any host event (memoised walks up)."""

    def __init__(self, links: Links, regions: Sequence[int]) -> None:
        self.parent = links.parent
        self.regions = set(regions)
        self._memo: dict[int, int] = {}

    def around(self, i: int) -> int:
        """The innermost compiled region around host event ``i`` (itself included), or NONE."""
        return nearest_above(self.parent, i, self.regions.__contains__, self._memo)


def region_work(tr: Trace, links: Links, cats: Sequence[Category] | None, regions: Regions,
                wanted: set[int], names: frozenset[str]) -> dict[int, RegionWork]:
    """What each region in ``wanted`` shows: one pass over the host ops with a batched-product or C++ softmax
    name (skipped when the file has none) and, on a device trace, one over the device events."""
    out = {r: RegionWork() for r in wanted}
    _host_work(tr, regions, out, {n for n in names if BATCHED.match(n) or CPP_SOFTMAX.match(n)})
    if cats is not None:
        _device_work(links, cats, regions, out)
    return out


def _host_work(tr: Trace, regions: Regions, out: dict[int, RegionWork], host_names: set[str]) -> None:
    """Each wanted region's batched products and named C++ softmax kernels (host ops with ``host_names``)."""
    if not host_names:
        return
    for i, h in enumerate(tr.host):
        if h.name in host_names:
            w = out.get(regions.around(i))
            if w is not None:
                (w.products if BATCHED.match(h.name) else w.softmax_ops).append(i)


def _device_work(links: Links, cats: Sequence[Category], regions: Regions, out: dict[int, RegionWork]) -> None:
    """Each wanted region's launches: whether it launched any, and its fused attention and softmax kernels."""
    leaf, fused, softmax = links.device_leaf, Category.FUSED_ATTENTION, Category.SOFTMAX
    for j, c in enumerate(cats):
        w = out.get(regions.around(leaf[j])) if leaf[j] != NONE else None
        if w is None:
            continue
        w.launched = True
        if c == fused:
            w.fused.append(j)
        elif c == softmax:
            w.softmax_kernels.append(j)


def core_names(tr: Trace, work: Sequence[RegionWork], region: str,
               kernel_name: Callable[[str], str]) -> tuple[str, ...]:
    """The names of the core a scope's regions show, by :data:`SIGHTS` in order; () when they show none (on a device
    trace, regions that launched only pointwise or norm kernels: no attention).

    ``kernel_name`` shortens a kernel's name (discovery.short_kernel_name)."""
    for seen in _kernels_seen(tr, work, kernel_name):
        if seen:
            return tuple(dict.fromkeys(seen))[:4]
    products = [tr.host[i].name for w in work for i in w.products]
    if len(products) >= 2:
        return tuple(products[:2])
    return () if any(w.launched for w in work) else (region,)


def _kernels_seen(tr: Trace, work: Sequence[RegionWork], kernel_name: Callable[[str], str]) -> list[list[str]]:
    """[the fused attention kernels' names, the softmax kernels' and C++ softmax functions' names]."""
    dev, host = tr.device, tr.host
    fused = [kernel_name(dev[j].name) for w in work for j in w.fused]
    soft = [kernel_name(dev[j].name) for w in work for j in w.softmax_kernels]
    return [fused, soft + [host[i].name for w in work for i in w.softmax_ops]]


def compiled_outside(tr: Trace, links: Links, roots: Sequence[Sequence[int]], owner: Sequence[int],
                     names: frozenset[str]) -> CompiledOutside | None:
    """CPU-only traces: the outermost compiled regions that no block covers (none inside a block, no block root
    inside them), with their host time, names and batched products; None when there are none.

    ``roots`` are the blocks' host roots. On a device trace a region's work shows as kernels, which the kernel
    rules and ``coverage.attention_outside_blocks`` already read: this list is for the code no event shows."""
    regions = region_events(tr, names)
    if not regions:
        return None
    reg = Regions(links, regions)
    holding = _holding(reg, links.parent, roots)
    out = [r for r in regions if owner[r] == NONE and r not in holding and _outermost(reg, links.parent, r)]
    if not out:
        return None
    host = tr.host
    counts = Counter(host[r].name for r in out)
    return CompiledOutside(regions=len(out), host_us=sum(host[r].dur for r in out) / 1000,
                           names=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
                           batched_products=_products_in(tr, reg, set(out), names), reason=COMPILED_OUTSIDE_REASON)


def _outermost(reg: Regions, parent: Sequence[int], r: int) -> bool:
    return parent[r] == NONE or reg.around(parent[r]) == NONE


def _holding(reg: Regions, parent: Sequence[int], roots: Sequence[Sequence[int]]) -> set[int]:
    """The regions with a block root inside them (or that are one), and every region around those."""
    holding: set[int] = set()
    for rs in roots:
        for r in rs:
            k = reg.around(r)
            while k != NONE and k not in holding:
                holding.add(k)
                k = reg.around(parent[k]) if parent[k] != NONE else NONE
    return holding


def _products_in(tr: Trace, reg: Regions, listed: set[int], names: frozenset[str]) -> int:
    """The batched product ops inside the ``listed`` regions (no walk when the file has none)."""
    batched = {n for n in names if BATCHED.match(n)}
    if not batched:
        return 0
    return sum(1 for i, h in enumerate(tr.host) if h.name in batched and reg.around(i) in listed)
