"""Hint facts: what the rules read beyond the attribution's figures, gathered once per trace.

While kernels are placed in blocks, each owned device event is counted on a kernel row (name, category,
launching op, tag) under its block kind: which host op launched it, whether it ran inside an SDPA math path,
and what the recorded input shapes and dtypes of a handful of ops say (a cat along the sequence axis, an fp32
softmax, a 5-D repeat_kv copy). The rules (:mod:`.rules`) read only these rows and the block figures.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import compress, repeat
from operator import is_, ne
from typing import TYPE_CHECKING, Any

import orjson

from ...hardware import platform
from ...results.hints import GroupFacts, HintFacts, merge_facts
from ...vocab import (
    SHAPED_GEMM_OPS, SOFTMAX_OPS, Category, StrEnum, anchored, compact_kernel_name, is_fused_attention_op,
)

if TYPE_CHECKING:
    from ..link import Links
    from ...model import Trace

NONE = -1  # tracekit.analysis.link.NONE, repeated so that importing this module stays light


class HintTag(StrEnum):
    """What a kernel row is to the rules (one tag each, the first that applies). Members are their string values
    (equality, hash, JSON), so the facts read, merge and serialise as the plain strings would."""

    UNTAGGED = ""  # no rule's tag (layout-copies reads untagged memory rows)
    SDPA_MATH = "sdpa-math"
    MASK = "mask"
    KV_CAT = "kv-cat"
    HALVES_CAT = "halves-cat"
    REPEAT_KV = "repeat-kv"
    CAST = "cast"
    SOFTMAX_FP32 = "softmax-fp32"
    NEG = "neg"
    COMM = "comm"
    SOFTMAX_UNKNOWN = "softmax?"  # a launcher's only (a softmax op without recorded input types); never a row's


class OpKind(StrEnum):
    """What a host op is to the rules, by its name alone (:func:`_op_kind`)."""

    NONE = ""
    MATH = "math"  # SDPA's math path (_scaled_dot_product_attention_math)
    FUSED = "fused"  # a fused attention op
    GEMM = "gemm"  # a GEMM whose input types are recorded
    MASK = "mask"
    CAT = "cat"
    REPEAT = "repeat"  # repeat_interleave
    SOFTMAX = "softmax"
    RESHAPE = "reshape"  # reshape/clone/expand/copy: HF repeat_kv's steps


class SdpaContext(StrEnum):
    """Where an op runs relative to an SDPA call (:meth:`_FactCollector.context`)."""

    NONE = ""
    MATH = "math"  # inside SDPA's math path
    SDPA = "sdpa"  # inside SDPA with no backend op between
    FUSED = "fused"  # inside a fused backend op under SDPA


# The tags the per-event path returns, bound as globals: on Python 3.11 ``HintTag.X`` takes the slow attribute path
# (EnumType defines __getattr__), ~10x a global look-up, and that path runs once per device event.
_UNTAGGED, _SDPA_MATH, _MASK, _REPEAT_KV = HintTag.UNTAGGED, HintTag.SDPA_MATH, HintTag.MASK, HintTag.REPEAT_KV
_MATH_CONTEXT, _SDPA_CONTEXT = SdpaContext.MATH, SdpaContext.SDPA


_MATH_OP = re.compile(r"aten::_scaled_dot_product_attention_math\w*$")
_SDPA_OP = "aten::scaled_dot_product_attention"
_SOFTMAX_OPS = frozenset(SOFTMAX_OPS)  # the attention softmax (tracekit.vocab), forward
_MASK_OP = re.compile(r"aten::masked_fill_?$")
_GEMM_OP = re.compile(anchored(*SHAPED_GEMM_OPS))  # the GEMMs whose input types are recorded
_RESHAPE_OPS = frozenset({"aten::reshape", "aten::clone", "aten::contiguous", "aten::expand", "aten::copy_",
                          "aten::_unsafe_view"})
_CAST_KERNEL = re.compile(r"(?:bfloat16|float16|half|float32|float)(?:to(?:float32|bfloat16|float16|half))?_copy_kernel"
                          r"|bfloat16tofloat|float32tobfloat|tofloat32_copy")
_FP32_SOFTMAX_KERNEL = re.compile(r"[Ss]oft[Mm]ax\w*<(?:\d+, )?float, ")
_NEG_KERNEL = re.compile(r"neg_kernel")
_COMM_KERNEL = re.compile(r"all_?reduce|allgather|all_gather|reduce_scatter|ReduceScatter|AllReduce|AllGather"
                          r"|nccl|rccl", re.IGNORECASE)
_SIXTEEN_BIT = ("c10::BFloat16", "c10::Half")


# The tag of each launcher kind that its name alone decides; the others' inputs decide (_FactCollector._input_tag).
_FIXED_TAGS: dict[OpKind, HintTag] = {OpKind.NONE: _UNTAGGED, OpKind.MATH: _UNTAGGED, OpKind.FUSED: _UNTAGGED,
                                      OpKind.MASK: _MASK, OpKind.REPEAT: _REPEAT_KV}


class _Inputs:
    """Recorded inputs of host ops, parsed lazily and once per distinct JSON text."""

    __slots__ = ("_tr", "_cache")

    def __init__(self, tr: Trace) -> None:
        self._tr = tr
        self._cache: dict[bytes, Any] = {}

    def _load(self, raw: bytes) -> Any:
        try:
            return self._cache[raw]
        except KeyError:
            pass
        try:
            v = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            v = None
        self._cache[raw] = v
        return v

    def dims(self, i: int) -> list | None:
        rec = self._tr.op_inputs.get(i)
        return self.as_list(rec.dims) if rec is not None else None

    def as_list(self, raw: bytes) -> list | None:
        """Recorded input text parsed, when it is a JSON list."""
        v = self._load(raw)
        return v if isinstance(v, list) else None

    def types(self, i: int) -> list | None:
        rec = self._tr.op_inputs.get(i)
        v = self._load(rec.types) if rec is not None else None
        return v if isinstance(v, list) else None

    def concrete(self, i: int) -> list | None:
        rec = self._tr.op_inputs.get(i)
        v = self._load(rec.concrete) if rec is not None else None
        return v if isinstance(v, list) else None


def _shape(x: object) -> list[int] | None:
    return x if isinstance(x, list) and all(isinstance(d, int) for d in x) else None


def _first_shape(inp: _Inputs, i: int) -> list[int] | None:
    """The shape of op i's first input, when it was recorded as one."""
    return _leading_shape(inp.dims(i))


def _leading_shape(dims: list | None) -> list[int] | None:
    """The first input's shape in parsed Input Dims, when it was recorded as one."""
    return _shape(dims[0]) if dims else None


def _copies_expanded_5d(inp: _Inputs, i: int) -> bool:
    """A clone of a 5-D (B, H_kv, n_rep, S, D) tensor with n_rep > 1: repeat_kv's expanded K/V."""
    s = _first_shape(inp, i)
    return s is not None and len(s) == 5 and s[2] > 1


def _is_matmul_op(name: str) -> bool:
    """GEMM and attention ops reshape their own operands (e.g. 5-D chunked products): not repeat_kv."""
    return _GEMM_OP.match(name) is not None or is_fused_attention_op(name)


def _cat_tag(inp: _Inputs, i: int) -> HintTag:
    """A cat of [past, new] along the sequence axis of 4-D (B, H, S, D) tensors is a KV-cache append;
    one of two equal halves along the last axis is rotary's rotate_half."""
    pair = _four_d_pair(inp, i)
    axis = _cat_axis(inp, i) if pair is not None else None
    if pair is None or axis is None:
        return HintTag.UNTAGGED
    a, b = pair
    if axis == 3 and a == b:
        return HintTag.HALVES_CAT
    if axis == 2 and a[:2] == b[:2] and a[3] == b[3] and a[2] >= b[2] > 0:
        return HintTag.KV_CAT  # past (a) at least as long as the new tokens (b): a cache that grows
    return HintTag.UNTAGGED


def _four_d_pair(inp: _Inputs, i: int) -> tuple[list[int], list[int]] | None:
    """The shapes of a cat of exactly two 4-D tensors, or None."""
    dims = inp.dims(i)
    if not dims or not isinstance(dims[0], list) or len(dims[0]) != 2:
        return None
    a, b = _shape(dims[0][0]), _shape(dims[0][1])
    if a is None or b is None or len(a) != 4 or len(b) != 4:
        return None
    return a, b


def _cat_axis(inp: _Inputs, i: int) -> int | None:
    """A 4-D cat's axis from its recorded ``dim`` (0 when not recorded), or None when it is not an int."""
    conc = inp.concrete(i) or []
    dim = conc[1] if len(conc) > 1 else ""
    try:
        return int(dim) % 4 if dim not in ("", None) else 0
    except (TypeError, ValueError):
        return None


def _sdpa_masked(inp: _Inputs, i: int) -> bool:
    """SDPA(query, key, value, attn_mask, dropout_p, is_causal, …) with a mask tensor and is_causal False."""
    dims = inp.dims(i)
    if not dims or len(dims) < 4 or not dims[3]:
        return False
    conc = inp.concrete(i) or []
    return not (len(conc) > 5 and conc[5] == "True")


_GEMM = "\0gemm"  # (_FactCollector._name_tag: a GEMM launcher, whose input dtype is counted per kernel)


class _NameTags(dict):
    """Launcher name -> :meth:`_FactCollector._name_tag`, worked out on the first look-up of each name: a hit is
    one C-level dict look-up per kernel."""

    __slots__ = ("_of",)

    def __init__(self, of: Callable[[str], HintTag | str | None]) -> None:
        super().__init__()
        self._of = of

    def __missing__(self, name: str) -> HintTag | str | None:
        got = self[name] = self._of(name)
        return got


class _FactCollector:
    """One trace's fact gathering. A class, not closures, so that each concept is one method: counting events on
    rows (``collect``), a launcher's tag (``launcher_tag``), the SDPA context walk and the repeat_kv walk.

    The memos are attributes, filled once per trace, so each host op is walked at most once.
    """

    __slots__ = ("_tr", "_host", "_links", "_op_parent", "_inp", "_up", "_seen_ops", "_five_d_clones", "_no_sdpa")

    def __init__(self, tr: Trace, links: Links) -> None:
        self._tr = tr
        self._host = tr.host
        self._links = links
        self._op_parent = links.op_parent
        self._inp = _Inputs(tr)
        # host op -> (nearest SDPA context above it, the SDPA op or NONE)
        self._up: dict[int, tuple[SdpaContext, int]] = {}
        self._seen_ops: set[tuple[int, int]] = set()  # (block, SDPA op) counted once
        self._five_d_clones: bool | None = None  # whether any aten::clone copies a 5-D tensor; None until asked
        # No SDPA op and no math-path op anywhere in the file: every op's context is empty, and the walk is skipped.
        names = tr.names
        self._no_sdpa = names is not None and not any(n == _SDPA_OP or _MATH_OP.match(n) for n in names)

    def collect(self, block_keys: Sequence[tuple[Any, ...]], dev_owner: Sequence[int], cats: Sequence[str],
                busy_ns: Sequence[int]) -> dict[tuple[Any, ...], GroupFacts]:
        """Each owned device event counted on its kernel row, under its block's key ((kind, phase), or with the
        block's step: (kind, phase, step)).

        Over columns of the owned events (picked in C): each launcher's name, then each kernel's tag -- one dict
        look-up where the name alone decides it (:meth:`_name_tag`), the launcher's walk otherwise -- and the
        GEMM kernels' dtypes counted in one go; then one loop adds each kernel to its row."""
        host, launcher = self._host, self._links.launcher
        owned = list(compress(range(len(dev_owner)), map(ne, dev_owner, repeat(NONE))))
        owners = list(map(dev_owner.__getitem__, owned))
        las = [launcher[lf] if lf != NONE else NONE for lf in map(self._links.device_leaf.__getitem__, owned)]
        lnames = [host[la].name if la != NONE else "" for la in las]
        facts: dict[tuple[Any, ...], GroupFacts] = {}
        for b in dict.fromkeys(owners):  # (the groups in the order their first kernels come)
            facts.setdefault(block_keys[b], GroupFacts())
        groups: list[Any] = [facts.get(k) for k in block_keys]  # (None: a block without kernels, never looked up)
        tags = self._tags(owners, las, lnames, groups)
        names = [e.name for e in map(self._tr.device.__getitem__, owned)]
        self._add_rows(groups, owned, owners, names, lnames, tags, cats, busy_ns)
        return facts

    def _tags(self, owners: list[int], las: list[int], lnames: list[str], groups: list[GroupFacts]) -> list[HintTag]:
        """Each owned kernel's launcher tag (untagged without a launcher); SDPA calls and GEMM dtypes counted on the
        way, as :meth:`launcher_tag` counts them."""
        # (launcher name -> its tag where the name alone decides it: a local, since it holds a bound method of self,
        # and as an attribute that cycle would keep the collector, the links and their lists alive while the CLI's
        # garbage collector is paused, about 40 MB at 1 GB of trace)
        tags: list[Any] = list(map(_NameTags(self._name_tag).__getitem__, lnames))
        if not self._no_sdpa:  # (before the inputs and dtypes: an op under SDPA's math path is SDPA's, uncounted)
            self._sdpa_contexts(tags, owners, las, groups)
        launcher_tag = self.launcher_tag
        for k in compress(range(len(tags)), map(is_, tags, repeat(None))):  # (inputs or ancestors decide)
            la = las[k]
            b = owners[k]
            tags[k] = launcher_tag(la, groups[b], b, lnames[k]) if la != NONE else _UNTAGGED
        gemms = list(compress(range(len(tags)), map(is_, tags, repeat(_GEMM))))
        if gemms:
            self._count_gemms(gemms, owners, las, groups)
            for k in gemms:
                tags[k] = _UNTAGGED
        return tags

    def _sdpa_contexts(self, tags: list[Any], owners: list[int], las: list[int], groups: list[GroupFacts]) -> None:
        """In a file with SDPA calls: each kernel whose launcher runs under SDPA's math path (or SDPA with no backend
        op between) tagged so, whatever its name says, and each SDPA call counted once per block (as
        :meth:`launcher_tag` does first)."""
        seen, inp, context = self._seen_ops, self._inp, self.context
        for k, (la, b) in enumerate(zip(las, owners)):
            if la == NONE:
                continue
            ctx, sdpa = context(la)
            if sdpa != NONE and (b, sdpa) not in seen:  # one call per (block, op), however many kernels
                seen.add((b, sdpa))
                groups[b].sdpa_calls += 1
                groups[b].sdpa_masked += _sdpa_masked(inp, sdpa)
            if ctx is _MATH_CONTEXT or ctx is _SDPA_CONTEXT:
                tags[k] = _SDPA_MATH

    def _count_gemms(self, ks: list[int], owners: list[int], las: list[int], groups: list[GroupFacts]) -> None:
        """The kernels ``ks`` of GEMM launchers, counted per block by their ops' input dtype (:meth:`_count_gemm`,
        per distinct ``Input type`` text and per block rather than per kernel)."""
        inputs = self._tr.op_inputs
        raw = [rec.types if rec is not None else None for rec in map(inputs.get, map(las.__getitem__, ks))]
        dtype = {t: self._gemm_dtype(t) for t in dict.fromkeys(raw)}
        for (b, d), n in Counter(zip(map(owners.__getitem__, ks), map(dtype.__getitem__, raw))).items():
            if d == 16:
                groups[b].gemm_16bit += n
            elif d == 32:
                groups[b].gemm_fp32 += n

    def _gemm_dtype(self, raw: bytes | None) -> int | None:
        """16 or 32: a GEMM's recorded ``Input type`` starts with a 16-bit or an fp32 tensor (None: neither)."""
        types = self._inp.as_list(raw) if raw is not None else None
        if types and types[0] in _SIXTEEN_BIT:
            return 16
        return 32 if types and types[0] == "float" else None

    @staticmethod
    def _add_rows(groups: list[GroupFacts], owned: list[int], owners: list[int], names: list[str], lnames: list[str],
                  tags: list[HintTag], cats: Sequence[str], busy_ns: Sequence[int]) -> None:
        """Each kernel (``names``: the owned events' kernel names) counted with its busy µs on its row of its
        block's facts, in event order (each row's float sum in the order the per-event walk made it)."""
        rows: dict[tuple[str, str, str, str], tuple[str, str, str, str]] = {}  # regexes run once per distinct row
        for j, b, name, lname, tag in zip(owned, owners, names, lnames, tags):
            cat = cats[j]
            memo = (name, cat, lname, tag)
            row = rows.get(memo)
            if row is None:
                row = rows[memo] = (compact_kernel_name(name), cat, lname, _kernel_tag(name, cat, tag))
            kernels = groups[b].kernels
            acc = kernels.get(row)
            if acc is None:
                kernels[row] = [1, busy_ns[j] / 1000]
            else:
                acc[0] += 1
                acc[1] += busy_ns[j] / 1000

    def _name_tag(self, name: str) -> HintTag | str | None:
        """The tag launcher ops named ``name`` give outside SDPA whatever their place and inputs, where the name
        alone decides: a kind whose tag is fixed, or a reshape-like op in a file with no 5-D clone (no repeat_kv to
        find). ``_GEMM``: a GEMM (untagged; its input dtype counted per
        kernel). None: the op's inputs or ancestors decide (:meth:`launcher_tag`). In a file with SDPA calls, the
        SDPA context decides first (:meth:`_sdpa_contexts`)."""
        kind = _op_kind(name)
        tag = _FIXED_TAGS.get(kind)
        if tag is not None:
            return tag
        if kind == OpKind.GEMM:
            return _GEMM
        if kind == OpKind.RESHAPE and not self._any_five_d_clone():
            return _UNTAGGED
        return None

    def launcher_tag(self, la: int, g: GroupFacts, b: int, name: str) -> HintTag:
        """The tag launcher op ``la`` (named ``name``) gives its kernels in block ``b``; the SDPA call above it is
        counted on the way."""
        ctx, sdpa = (SdpaContext.NONE, NONE) if self._no_sdpa else self.context(la)
        if sdpa != NONE and (b, sdpa) not in self._seen_ops:  # one call per (block, op), however many kernels
            self._seen_ops.add((b, sdpa))
            g.sdpa_calls += 1
            g.sdpa_masked += _sdpa_masked(self._inp, sdpa)
        if ctx == SdpaContext.MATH or ctx == SdpaContext.SDPA:
            return _SDPA_MATH
        kind = _op_kind(name)
        tag = _FIXED_TAGS.get(kind)  # (one dict look-up: most launchers' kinds decide the tag alone)
        return tag if tag is not None else self._input_tag(kind, la, g)

    def _input_tag(self, kind: OpKind, la: int, g: GroupFacts) -> HintTag:
        """The tag of a launcher whose recorded inputs decide it (and a GEMM's dtype, counted on the way)."""
        if kind == OpKind.GEMM:
            self._count_gemm(la, g)
            return _UNTAGGED
        if kind == OpKind.CAT:
            return _cat_tag(self._inp, la)
        if kind == OpKind.SOFTMAX:
            return self._softmax_tag(la)
        return self._repeat_kv_tag(la)  # OpKind.RESHAPE

    def _count_gemm(self, la: int, g: GroupFacts) -> None:
        """A kernel of a GEMM op, counted by the op's input dtype (what fp32-softmax compares against)."""
        types = self._inp.types(la)
        if types and types[0] in _SIXTEEN_BIT:
            g.gemm_16bit += 1
        elif types and types[0] == "float":
            g.gemm_fp32 += 1

    def _softmax_tag(self, la: int) -> HintTag:
        """fp32 by the op's recorded input type; without record_shapes, the kernel's template decides later."""
        types = self._inp.types(la)
        if not types:
            return HintTag.SOFTMAX_UNKNOWN
        return HintTag.SOFTMAX_FP32 if types[0] == "float" else HintTag.UNTAGGED

    def context(self, la: int) -> tuple[SdpaContext, int]:
        """The op's SdpaContext and the SDPA call above it (NONE without one).

        Memoised per host op and filled along the walked path, so each op is visited once per trace.
        """
        host, op_parent, up = self._host, self._op_parent, self._up
        path: list[int] = []
        p = la
        res: tuple[SdpaContext, int] = (SdpaContext.NONE, NONE)
        while p != NONE:
            hit = up.get(p)
            if hit is not None:
                res = hit
                break
            if host[p].name == _SDPA_OP:
                res = up[p] = (SdpaContext.SDPA, p)
                break
            path.append(p)
            p = op_parent[p]
        for q in reversed(path):  # from the top down: each op's context from its parent's
            kind = _op_kind(host[q].name)
            if kind == OpKind.MATH:
                res = (SdpaContext.MATH, res[1])
            elif kind == OpKind.FUSED and res[0] == SdpaContext.SDPA:
                res = (SdpaContext.FUSED, res[1])
            up[q] = res
        return res

    def _repeat_kv_tag(self, la: int) -> HintTag:
        """HF repeat_kv: reshape of a 5-D expand (B, H_kv, n_rep, S, D) -> clone -> copy_, outside any GEMM.

        The walk up from the launcher crosses only reshape-like ops (_RESHAPE_OPS, none of them a GEMM or
        attention op), at most 6, and ends at the reshape."""
        if not self._any_five_d_clone():  # without one, no walk can find repeat_kv: skip them all
            return HintTag.UNTAGGED
        host, op_parent = self._host, self._op_parent
        p, depth, five = la, 0, False
        while p != NONE and depth < 6:
            n = host[p].name
            if n not in _RESHAPE_OPS:
                return HintTag.UNTAGGED
            if n == "aten::reshape":
                return HintTag.REPEAT_KV if five and not self._in_matmul_op(p) else HintTag.UNTAGGED
            if n == "aten::clone":
                five = _copies_expanded_5d(self._inp, p)
            p = op_parent[p]
            depth += 1
        return HintTag.UNTAGGED

    def _in_matmul_op(self, p: int) -> bool:
        """Whether op ``p``'s parent is a GEMM or attention op (which reshape their own operands)."""
        up = self._op_parent[p]
        return up != NONE and _is_matmul_op(self._host[up].name)

    def _any_five_d_clone(self) -> bool:
        """Whether any aten::clone in the file copies a 5-D tensor: looked up once. A file records few distinct
        Input Dims: the ops are looked at only when one of those starts with a 5-D shape (most files: none)."""
        if self._five_d_clones is None:
            inputs, inp = self._tr.op_inputs, self._inp
            five = {raw for raw in {rec.dims for rec in inputs.values()}
                    if len(_leading_shape(inp.as_list(raw)) or ()) == 5}
            host = self._host
            self._five_d_clones = bool(five) and any(
                rec.dims in five and host[i].name == "aten::clone" for i, rec in inputs.items())
        return self._five_d_clones


def collect_facts(tr: Trace, links: Links, block_keys: Sequence[tuple[str, str]], dev_owner: Sequence[int],
                  cats: Sequence[str], busy_ns: Sequence[int], block_steps: Sequence[int | None] = ()) -> HintFacts:
    """Per block kind, the kernel rows the rules read: one pass over the device events blocks own.

    ``block_keys[b]`` is block b's (kind, phase); ``busy_ns[j]`` is event j's share of its block's busy time.
    Work per event is a few dict look-ups; ancestors are walked once per distinct launcher. With ``block_steps``
    (block b's ProfilerStep number or None), the rows are also kept per step (GroupFacts.step_us): the events are
    counted under (kind, phase, step) at no extra cost per event, and folded per kind after.
    """
    collector = _FactCollector(tr, links)
    if block_steps:
        facts = _fold_steps(collector.collect([(*k, s) for k, s in zip(block_keys, block_steps)], dev_owner, cats,
                                              busy_ns))
    else:
        facts = {(k[0], k[1]): g for k, g in collector.collect(block_keys, dev_owner, cats, busy_ns).items()}
    info = tr.info
    platforms = sorted({platform(n, info.runtime) for n in info.gpus} or {platform(None, info.runtime)})
    for g in facts.values():  # once per block kind, not per event
        g.platforms = list(platforms)
        g.check()
    return facts


def _fold_steps(by_step: dict[tuple[Any, ...], GroupFacts]) -> HintFacts:
    """Facts per (kind, phase, step) as facts per (kind, phase): summed as ranks are (merge_facts), each step's
    rows kept in ``step_us``. Once per (kind, phase, step), not per event."""
    parts: list[HintFacts] = []
    for (kind, phase, step), g in by_step.items():
        if step is not None:
            g.step_us = {step: {row: v[1] for row, v in g.kernels.items()}}
        parts.append({(kind, phase): g})
    return merge_facts(parts) or {}


@lru_cache(maxsize=4096)
def _op_kind(name: str) -> OpKind:
    """What a host op is to the rules, by its name alone."""
    if _MATH_OP.match(name):
        return OpKind.MATH
    if is_fused_attention_op(name):
        return OpKind.FUSED
    if _GEMM_OP.match(name):
        return OpKind.GEMM
    if _MASK_OP.match(name):
        return OpKind.MASK
    if name == "aten::cat":
        return OpKind.CAT
    if name == "aten::repeat_interleave":
        return OpKind.REPEAT
    if name in _SOFTMAX_OPS:
        return OpKind.SOFTMAX
    if name in _RESHAPE_OPS:
        return OpKind.RESHAPE
    return OpKind.NONE


def _kernel_tag(name: str, cat: str, tag: HintTag) -> HintTag:
    """The row's tag: the launcher's, refined by what the kernel's own name says."""
    if tag == HintTag.SOFTMAX_UNKNOWN or (not tag and cat == Category.SOFTMAX):
        fp32 = cat == Category.SOFTMAX and _FP32_SOFTMAX_KERNEL.search(name) is not None
        return HintTag.SOFTMAX_FP32 if fp32 else HintTag.UNTAGGED
    if tag == HintTag.SOFTMAX_FP32:
        return tag if cat == Category.SOFTMAX else HintTag.UNTAGGED
    return tag if tag else _name_tag(name, cat)


def _name_tag(name: str, cat: str) -> HintTag:
    """The tag a kernel's name alone gives (collectives, casts, neg), when its launcher gave none."""
    if _COMM_KERNEL.search(name):
        return HintTag.COMM
    if cat == Category.MEMORY and _CAST_KERNEL.search(name):
        return HintTag.CAST
    if _NEG_KERNEL.search(name):
        return HintTag.NEG
    return HintTag.UNTAGGED


def block_facts(tr: Trace, links: Links, results: Sequence[Any], dev_owner: Sequence[int], cats: Sequence[str],
                busy_ns: Sequence[int], replayed: Sequence[int] = ()) -> HintFacts:
    """:func:`collect_facts` for blocks whose results are in block order (``results[b]`` is block b's), with the
    busy time of the graph-replayed kernels per block kind: the hints tell a graph's blocks from eager ones by it."""
    keys = [(r.kind, str(r.phase)) for r in results]
    facts = collect_facts(tr, links, keys, dev_owner, cats, busy_ns, [r.step for r in results])
    for j in replayed:
        g = facts.get(keys[dev_owner[j]]) if dev_owner[j] != NONE else None
        if g is not None:
            g.replayed_us += busy_ns[j] / 1000
    return facts


class RepeatKv:
    """HF repeat_kv's K/V copies, as the gqa-repeat-kv hint finds them, for one trace: whether a launcher op is
    one (``is_copy``) and the KV heads its 5-D clone had (``heads_kv``). Read by ``tracekit whatif``: SDPA with
    ``enable_gqa`` makes no such copy."""

    def __init__(self, tr: Trace, links: Links) -> None:
        self._c = _FactCollector(tr, links)
        self._inp = _Inputs(tr)
        self._op_parent = links.op_parent
        self._host = tr.host

    def is_copy(self, la: int) -> bool:
        return self._c._repeat_kv_tag(la) == HintTag.REPEAT_KV

    def heads_kv(self, la: int) -> int | None:
        """H_kv of the (B, H_kv, n_rep, S, D) clone above launcher ``la`` (a repeat_kv copy), or None."""
        p, depth = la, 0
        while p != NONE and depth < 6:
            if self._host[p].name == "aten::clone":
                dims = self._inp.dims(p)
                shape = dims[0] if dims else None
                return shape[1] if isinstance(shape, list) and len(shape) == 5 else None
            p, depth = self._op_parent[p], depth + 1
        return None
