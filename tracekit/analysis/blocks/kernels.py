"""Blocks found from device kernels alone, once the device events are classified: no host op shows them.

Rule fused-kernels: runs of one attention call's kernels on one stream that no host block owns (CUDA/HIP graph
replays, compiled regions), with the other kernels of the call (KERNEL_GROUPS). Rule eager-kernels: a GEMM →
softmax → GEMM run of kernels that none owns. The host-side rules live in :mod:`.discovery`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import groupby

from ...model import DeviceEvent, Trace
from ...results.attribution import Evidence
from ...vocab import Category, CoreKind, FoundBy, KernelLabel, Phase, kernel_label
from ..classify import Classifier
from ..link import NONE, Links
from .discovery import BREAKER, MAX_BETWEEN, SOFTMAX_OPS, Block, gemm_softmax_gemm, short_kernel_name


def find_kernel_blocks(tr: Trace, links: Links, blocks: list[Block], cats: Sequence[Category],
                       dev_owner: list[int]) -> None:
    """Add the blocks that only the classified kernels show; ``dev_owner`` gets their events."""
    fused = _fused_kernel_blocks(tr, links, blocks, cats, dev_owner)
    _pair_kernel_blocks(blocks, fused)
    _pair_kernel_blocks(blocks, _inferred_kernel_blocks(tr, links, blocks, cats, dev_owner))


def _by_stream(dev: Sequence[DeviceEvent], events: list[int]) -> list[list[int]]:
    """``events`` grouped by stream, each group in start order (ties in index order)."""
    starts = [d.ts for d in dev]
    order = sorted(events, key=starts.__getitem__)  # two stable sorts on key lists: no tuple per event
    streams = [d.stream for d in dev]
    order.sort(key=streams.__getitem__)
    return [list(g) for _, g in groupby(order, key=streams.__getitem__)]


@dataclass(frozen=True, slots=True)
class KernelGroup:
    """The kernels one attention call launches besides its attention kernel: ``before`` run ahead of it (quantise,
    plan, KV-cache write), ``after`` behind it (split-KV combine, merge). ``core`` limits the attention kernels the
    group belongs to (any fused attention kernel when empty). Patterns are ``re.search`` over kernel names."""

    name: str
    before: str
    after: str
    core: str
    why: str


KERNEL_GROUPS: tuple[KernelGroup, ...] = (
    KernelGroup("sage-attention", r"sage\w*quant|quant_per_(?:block|warp|thread)\w*|quant_query\w*|sub_mean\w*kernel",
                "", r"sage|qk_int8_sv|_attn_fwd",
                "SageAttention quantises Q/K to int8 (and V to fp8) in kernels of its own, with small kernels between"),
    KernelGroup("fp8-attention", r"scaled_fp8_quant|fp8_quant\w*kernel|quant_fp8|segmented_max_reduction"
                                 r"|compute_\w*scale\w*kernel", "", "",
                "FP8 attention computes its Q/K/V scales and casts before the attention kernel"),
    KernelGroup("kv-cache-write", r"reshape_and_cache|concat_and_cache|store_kvcache", "", "",
                "vLLM/SGLang write the new K/V into the paged cache just before attending (reshape_and_cache_flash, "
                "store_kvcache in the shared graph replays)"),
    KernelGroup("flashinfer", r"[Pp]lan\w*[Kk]ernel", r"MergeStates?\w*|merge_state\w*",
                r"(?:Batch|Single)(?:Prefill|Decode)With|BatchMLAPageAttention|BatchPOD",
                "FlashInfer plans on the device for some wrappers and merges cascade/split states after the run"),
    KernelGroup("split-kv", "", r"splitkv_combine|paged_attention\w*reduce|_fwd_kernel_stage2|merge_attn_states",
                "", "split-KV decode reduces its partial outputs in a second kernel (FA2 combine, vLLM ROCm "
                "paged_attention_ll4mi_reduce, SGLang Triton decode stage 2)"),
)
_MEMBERS = [(g, re.compile(g.before) if g.before else None, re.compile(g.after) if g.after else None,
             re.compile(g.core) if g.core else None) for g in KERNEL_GROUPS]


def _member_of(name: str, memo: dict[str, tuple[str, str] | None]) -> tuple[str, str] | None:
    """("before" | "after", group name) when a kernel is another kernel of an attention call, else None."""
    if name in memo:
        return memo[name]
    got = None
    for g, before, after, _core in _MEMBERS:
        if before is not None and before.search(name):
            got = ("before", g.name)
            break
        if after is not None and after.search(name):
            got = ("after", g.name)
            break
    memo[name] = got
    return got


def _core_of(group: str, name: str) -> bool:
    for g, _b, _a, core in _MEMBERS:
        if g.name == group:
            return core is None or core.search(name) is not None
    return False


class _KernelRun:
    """One stream's walk for rule fused-kernels: open runs of an attention call's kernels, close them into blocks."""

    def __init__(self, tr: Trace, links: Links, blocks: list[Block], cats: Sequence[Category],
                 dev_owner: list[int]) -> None:
        self.tr, self.links, self.blocks, self.cats, self.dev_owner = tr, links, blocks, cats, dev_owner
        self.memo: dict[str, tuple[str, str] | None] = {}
        self.new: list[int] = []
        names = tr.names if tr.names is not None else frozenset(d.name for d in tr.device)
        roles = {_member_of(n, self.memo) for n in names}
        self.any_members = any(r is not None for r in roles)
        self.any_before = any(r is not None and r[0] == "before" for r in roles)  # (else no owned kernel can lead)
        self.reset()

    def reset(self) -> None:
        self.lead: tuple[int, int, str] | None = None  # (position, kernel, group) of an owned "before" member
        self.members: list[int] = []  # the run's kernels so far (attention and group members)
        self.between: list[int] = []  # kernels since the last member, joined if another member follows
        self.core = False  # an attention kernel is in the run
        self.group: str | None = None
        self.last_core = NONE

    def close(self) -> None:
        """A run with an attention kernel becomes a block (or joins the host block of its kernel); else nothing."""
        if self.core and self.members:
            b = len(self.blocks)
            dev, links = self.tr.device, self.links
            first = self.members[0]
            lf = links.device_leaf[first]
            cores = [j for j in self.members if self.cats[j] == Category.FUSED_ATTENTION]
            lab, name = _core_label(dev, cores)
            names = tuple(dict.fromkeys(short_kernel_name(dev[j].name) for j in cores))[:4]
            ev = Evidence(rule="fused-kernels", core=CoreKind.FUSED_KERNEL, names=names, group=self.group)
            self.blocks.append(Block(name, FoundBy.FUSED_KERNEL, [], links.step[lf] if lf != NONE else None,
                                     lab.phase if lab is not None else Phase.FORWARD, dev[first].ts, evidence=ev))
            for j in self.members:
                self.dev_owner[j] = b
            self.new.append(b)
        self.reset()

    def walk(self, g: list[int]) -> None:
        """One stream's events in start order; only free kernels and those met while a run is open are looked at."""
        owner, linked, step = self.dev_owner, self.links.device_linked, self._step
        watch, members_any, memo = self.any_before, self.any_members, self.memo
        cats, dev, fused = self.cats, self.tr.device, Category.FUSED_ATTENTION
        for k, j in enumerate(g):
            free = owner[j] == NONE and linked[j]
            if self.lead is not None and self._follows_lead(k, j, free):
                continue
            if free or self.members:  # (else the common case: a kernel a host block owns, no run open)
                if not self.members and cats[j] != fused and (not members_any or
                                                              _member_of(dev[j].name, memo) is None):
                    continue  # (a free kernel that is no attention kernel and no group's, with no run open: nothing)
                step(j, free)
            elif watch:
                self._note_lead(k, j)
        self.close()

    def _note_lead(self, k: int, j: int) -> None:
        """Rule owned-lead: an owned kernel that runs before a call's attention kernel (a KERNEL_GROUPS "before"
        member: SageAttention's quantise) may lead a free attention kernel of the same call (its ``k``: the
        position on the stream)."""
        role = _member_of(self.tr.device[j].name, self.memo)
        if role is not None and role[0] == "before":
            self.lead = (k, j, role[1])
        elif self.cats[j] == Category.FUSED_ATTENTION:
            self.lead = None

    def _follows_lead(self, k: int, j: int, free: bool) -> bool:
        """A free attention kernel within MAX_BETWEEN kernels after the owned lead of its group joins the lead's
        block: one call is one block, even where a host block owns only the call's first kernel (a replay mapped to
        its capture, a quantise launched under the attention scope and the attention kernel outside it). A GEMM or
        a softmax between ends the lead (two calls), as it ends a run."""
        assert self.lead is not None
        at, lead, group = self.lead
        cat = self.cats[j]
        if cat in _ENDS_RUN or k - at > MAX_BETWEEN + 1:
            self.lead = None
            return False
        if not free or self.members or cat != Category.FUSED_ATTENTION or not _core_of(group, self.tr.device[j].name):
            return False
        b = self.dev_owner[lead]
        self.dev_owner[j] = b
        blk = self.blocks[b]
        if blk.evidence is not None and blk.evidence.group is None:
            blk.evidence = replace(blk.evidence, group=group)
        self.lead = None
        return True

    def _step(self, j: int, free: bool) -> None:
        """A kernel that no block owns extends, opens or closes the run; an owned one closes it, or takes it over
        when it is the attention kernel of the open run's call (:meth:`_owned_core`)."""
        if free:
            self._free_kernel(j)
        elif self._owned_core(j):
            self._give(self.dev_owner[j])  # a call's first kernels before the attention kernel a host block owns
        else:
            self.close()

    def _free_kernel(self, j: int) -> None:
        name, cat = self.tr.device[j].name, self.cats[j]
        role = _member_of(name, self.memo) if self.any_members else None
        if role is not None and role[0] == "before":
            self._open_with(j, role[1])
        elif cat == Category.FUSED_ATTENTION and self._core_fits(name):
            self._join(j, self.group)
            self.core = True
        elif role is not None and self._member_fits():
            self._join(j, role[1])
        elif self._between_fits(cat):
            self.between.append(j)
        elif self.members:
            self.close()

    def _open_with(self, j: int, group: str) -> None:
        """A kernel that runs before a call's attention kernel: it closes a run that has one, and joins the next."""
        if self.core:
            self.close()
        self._join(j, group)

    def _core_fits(self, name: str) -> bool:
        """An attention kernel joins the run unless the run's group names other attention kernels."""
        return self.group is None or self.core or _core_of(self.group, name)

    def _member_fits(self) -> bool:
        """A group member after the attention kernel joins within MAX_BETWEEN other kernels of the run."""
        return self.core and len(self.between) <= MAX_BETWEEN

    def _between_fits(self, cat: Category) -> bool:
        """A kernel may sit between members of an open run: memory kernels always, others (never a GEMM or a
        softmax) up to MAX_BETWEEN in a group's run."""
        if not self.members or cat in _ENDS_RUN:
            return False
        return cat == Category.MEMORY or (self.group is not None and len(self.between) < MAX_BETWEEN)

    def _owned_core(self, j: int) -> bool:
        """An owned attention kernel that the open run's group (before any attention kernel) leads up to."""
        if not self.members or self.core or self.cats[j] != Category.FUSED_ATTENTION or self.group is None:
            return False
        return self.dev_owner[j] != NONE and _core_of(self.group, self.tr.device[j].name)

    def _join(self, j: int, group: str | None) -> None:
        self.members.extend(self.between)
        self.between.clear()
        self.members.append(j)
        if group is not None and self.group is None:
            self.group = group

    def _give(self, b: int) -> None:
        """Hand the open run's kernels to host block ``b`` and say so in its evidence."""
        for j in (*self.members, *self.between):
            self.dev_owner[j] = b
        blk = self.blocks[b]
        if blk.evidence is not None and self.group is not None:
            blk.evidence = replace(blk.evidence, group=self.group)
        self.reset()


_ENDS_RUN = frozenset({Category.MATMUL, Category.SOFTMAX})  # a GEMM or softmax between two kernels: two calls


class CaptureLead:
    """Rule owned-lead in a graph capture, where no kernel runs and blocks only record their launches: a launch
    that no block owns, recording a group's attention kernel within MAX_BETWEEN launches after a block's recorded
    "before" member (SageAttention's quantise), is that block's. One call is one block, in captures too.
    Launches are fed in capture order (:meth:`owner`); kernels are judged by the default classifier."""

    def __init__(self) -> None:
        self.clf = Classifier()
        self.memo: dict[str, tuple[str, str] | None] = {}
        self.lead: tuple[int, int, str] | None = None  # (position, block, group)

    def owner(self, pos: int, name: str | None, b: int) -> int:
        """The block that records launch number ``pos`` (kernel ``name``, owned by block ``b`` or NONE)."""
        if name is None:
            return b
        if b != NONE:
            self._owned(pos, name, b)
            return b
        return self._free(pos, name) if self.lead is not None else NONE

    def _owned(self, pos: int, name: str, b: int) -> None:
        """A block's launch: a "before" member leads; another block's launch ends the lead."""
        role = _member_of(name, self.memo)
        if role is not None and role[0] == "before":
            self.lead = (pos, b, role[1])
        elif self.lead is not None and self.lead[1] != b:
            self.lead = None

    def _free(self, pos: int, name: str) -> int:
        """A launch no block owns: the lead's block when it records the lead's attention kernel, else NONE."""
        assert self.lead is not None
        at, b, group = self.lead
        cat = self.clf.device(name, "kernel", None)
        if cat in _ENDS_RUN or pos - at > MAX_BETWEEN + 1:
            self.lead = None
        elif cat == Category.FUSED_ATTENTION and _core_of(group, name):
            self.lead = None
            return b
        return NONE


def _core_label(dev: Sequence[DeviceEvent], cores: list[int]) -> tuple[KernelLabel | None, str]:
    """The label of the run's longest attention kernel (KERNEL_LABELS), and the block's name from it."""
    longest = max(cores, key=lambda j: dev[j].dur)
    lab = kernel_label(dev[longest].name)
    name = lab.name if lab is not None and lab.name is not None else short_kernel_name(dev[longest].name)
    return lab, name


def _fused_kernel_blocks(tr: Trace, links: Links, blocks: list[Block], cats: Sequence[Category],
                         dev_owner: list[int]) -> list[int]:
    """Rule fused-kernels: runs of one call's kernels on one stream that no host block owns (graphs, compiled code).

    Only linked events count: an orphan launched before the window is reported as unlinked, never guessed
    into a block. A run holds fused attention kernels, memory kernels between them (SageAttention zero-fills
    its outputs between quantising and attending) and its KERNEL_GROUPS members with up to MAX_BETWEEN other
    kernels between (never a GEMM or a softmax). A run with no attention kernel is no block; one whose
    attention kernel a host block owns joins that block. Returns the new blocks.
    """
    if Category.FUSED_ATTENTION not in cats:
        return []  # (eager attention: a run without an attention kernel is nothing, so no walk, no sort)
    run = _KernelRun(tr, links, blocks, cats, dev_owner)
    for g in _by_stream(tr.device, list(range(len(tr.device)))):
        run.walk(g)
    return run.new


def _inferred_kernel_blocks(tr: Trace, links: Links, blocks: list[Block], cats: Sequence[Category],
                            dev_owner: list[int]) -> list[int]:
    """Eager attention that no host op shows: compiled code (inductor) launches its GEMMs and fused softmax
    from one graph call. On each stream, a softmax kernel with a run of GEMM kernels shortly before and
    after it, none owned by a block, is one ``inferred`` block: forward QKᵀ → softmax → PV, backward
    dV, dP → softmax backward → dQ, dK. Returns the new blocks.
    """
    dev = tr.device
    linked = links.device_linked
    streams = _free_softmax_streams(tr, links, cats, dev_owner)
    if not streams:  # no softmax kernel left outside a block: the common case, no sort
        return []
    new: list[int] = []
    for g in _by_stream(dev, [j for j in range(len(dev)) if dev[j].stream in streams]):
        free = [j for j in g if dev_owner[j] == NONE and linked[j] and dev[j].kind == "kernel"]
        new += _infer_on_stream(tr, links, blocks, cats, dev_owner, free)
    return new


def _free_softmax_streams(tr: Trace, links: Links, cats: Sequence[Category], dev_owner: list[int]) -> set[int]:
    """The streams with a linked softmax kernel that no block owns."""
    dev, linked, softmax = tr.device, links.device_linked, Category.SOFTMAX
    return {dev[j].stream for j, c in enumerate(cats) if c == softmax and dev_owner[j] == NONE and linked[j]}


def _infer_on_stream(tr: Trace, links: Links, blocks: list[Block], cats: Sequence[Category], dev_owner: list[int],
                     free: list[int]) -> list[int]:
    """The inferred blocks among one stream's free kernels (start order), left to right, none sharing a kernel."""
    free_cats = [_pattern_category(tr, links, cats, j) for j in free]
    new: list[int] = []
    k = 0
    while k < len(free):
        run = gemm_softmax_gemm(free_cats, k) if free_cats[k] == Category.SOFTMAX else None
        if run is None:
            k += 1
            continue
        new.append(_inferred_block(tr, links, blocks, dev_owner, free[run[0]: run[1] + 1], free[k]))
        k = run[1] + 1
    return new


def _inferred_block(tr: Trace, links: Links, blocks: list[Block], dev_owner: list[int], run: list[int],
                    softmax: int) -> int:
    """One ``inferred`` block of the kernels ``run`` (GEMMs, the softmax, GEMMs): added, owning them; its index."""
    dev = tr.device
    first = run[0]
    lf = links.device_leaf[first]
    phase = Phase.BACKWARD if "backward" in dev[softmax].name.lower() else Phase.FORWARD
    b = len(blocks)
    names = tuple(short_kernel_name(dev[j].name) for j in (first, softmax, run[-1]))
    blocks.append(Block("inferred attention", FoundBy.INFERRED, [], links.step[lf] if lf != NONE else None,
                        phase, dev[first].ts,
                        evidence=Evidence(rule="eager-kernels", core=CoreKind.EAGER_KERNELS, names=names)))
    for j in run:
        dev_owner[j] = b
    return b


def _pattern_category(tr: Trace, links: Links, cats: Sequence[Category], j: int) -> Category:
    """A kernel's category as rule eager-kernels reads it: a GEMM launched by a breaker op (a linear layer, a
    router's gate, MoE experts) and a softmax launched by a host softmax op (which rule eager-ops already
    judged, and turned down) are no member of a kernel pattern: the eager MoE router is no attention."""
    c = cats[j]
    if c != Category.MATMUL and c != Category.SOFTMAX:
        return c
    lf = links.device_leaf[j]
    la = links.launcher[lf] if lf != NONE else NONE
    if la == NONE:
        return c
    name = tr.host[la].name
    if (BREAKER.match(name) if c == Category.MATMUL else SOFTMAX_OPS.match(name)) is not None:
        return Category.OTHER
    return c


def _pair_kernel_blocks(blocks: list[Block], found: list[int]) -> None:
    """Blocks found from kernels alone have no autograd link: in each step, when there are as many backward
    blocks of a kind as forward ones, they pair last-to-first (autograd runs the layers in reverse)."""
    groups: dict[tuple[str, int | None, Phase], list[int]] = defaultdict(list)
    for b in found:
        blk = blocks[b]
        groups[(blk.found_by, blk.step, blk.phase)].append(b)
    for (found_by, step, phase), bwd in groups.items():
        fwd = groups.get((found_by, step, Phase.FORWARD), [])
        if phase == Phase.BACKWARD and len(fwd) == len(bwd):
            fwd.sort(key=lambda b: blocks[b].ts)
            bwd.sort(key=lambda b: blocks[b].ts)
            for f, b in zip(reversed(fwd), bwd):
                blocks[b].forward = f
