"""Split ``matmul`` inside attention blocks by role: projection, score (Q·Kᵀ), context (P·V), or other.

Why: "matmul" lumps the q/k/v/out projections together with the QKᵀ and PV products, and a reader takes
it all for attention-score work (in the H200 ``sparse_4096`` trace every matmul µs is a projection).

Evidence, in this order (docs/attribution.md, "Matmul roles"); the first that decides wins:

1. **Names**: the innermost ``record_function`` range or ``nn.Module`` slice around the op whose name a
   NAME_RULES pattern matches (``qk_matmul`` → score, ``pv_matmul`` → context, ``q_proj``/``Linear`` → projection).
2. **Op and shapes**: over the chain of matrix-product ops around the launching op (``aten::mm`` under
   ``aten::matmul`` under ``aten::linear``), outermost first: ``linear``/``addmm`` are linear layers; else the
   recorded ``Input Dims`` (``Trace.op_inputs``) against SHAPE_RULES.
3. Else ``matmul-other``.

Rules are ordered data like :mod:`tracekit.analysis.classify`; each carries the fact behind it in ``why``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from .link import NONE, Links
from ..model import ANNOTATION, MODULE, OP, Trace
from ..vocab import LINEAR_OPS, MATMUL_ROLES, SHAPED_GEMM_OPS, MatmulRole, anchored

__all__ = ["MATMUL_ROLES", "NAME_RULES", "SHAPE_RULES", "MatmulRole", "NameRule", "RoleFinder", "ShapeRule",
           "op_roles", "zero_roles"]

# Matrix-product ops whose shapes decide a role (tracekit.vocab SHAPED_OPS "gemm" keeps their inputs).
GEMM_OP = re.compile(anchored(*SHAPED_GEMM_OPS))
# Ops that are a linear layer by definition: their weight is a 2-D matrix.
LINEAR_OP = re.compile(anchored(LINEAR_OPS))
# Largest contracted (score) or produced (context) dimension taken for a head dimension: head dims are
# 64-256 (MLA's absorbed 576 included); a wider one is a model dimension, so the product is a projection.
MAX_HEAD_DIM = 1024


def zero_roles() -> dict[str, float]:
    return dict.fromkeys(MATMUL_ROLES, 0.0)


@dataclass(frozen=True, slots=True)
class NameRule:
    """A role from a range or module name: ``pattern`` is a case-insensitive ``re.search`` over an annotation
    name, or over an ``nn.Module`` slice's class name without its ``_N`` instance suffix."""

    name: str
    role: MatmulRole
    pattern: str
    why: str = ""


NAME_RULES: tuple[NameRule, ...] = (
    NameRule("score-names", MatmulRole.SCORE,
             r"\b(?:qk|qkt|q_?k_?t|qk_?(?:matmul|bmm|mm|dot|product|scores?)|attn_scores?|attention_scores?)\b",
             "qk_matmul: the H200 sweep's eager range (scripts/profile_attention.py); the rest as commonly named"),
    NameRule("context-names", MatmulRole.CONTEXT,
             r"\b(?:pv|pv_?(?:matmul|bmm|mm|dot|product)|attn_?v|av_?matmul|context|context_layer)\b",
             "pv_matmul: the H200 sweep's eager range; context_layer: HF BERT's name for P·V"),
    NameRule("projection-names", MatmulRole.PROJECTION,
             r"\b(?:(?:qkv|q|k|v|o|kv|out|in)_?proj\w*|qkv|w_?qkv|w_?[qkvo]|c_attn|c_proj|query|key|value|dense"
             r"|to_(?:q|k|v|kv|qkv|out)|[qkvo]_linear)\b",
             "qkv_proj/out_proj: the H200 sweep; q/k/v/o_proj: Llama/Qwen/Mistral; c_attn/c_proj: GPT-2; "
             "query/key/value/dense: HF BERT; to_q/to_out: diffusers"),
    NameRule("linear-modules", MatmulRole.PROJECTION, r"^(?:\w*Linear|Conv1D)$",
             "with_modules names classes, not attributes: nn.Linear, vLLM QKVParallelLinear/RowParallelLinear, "
             "nn.MultiheadAttention's NonDynamicallyQuantizableLinear, HF GPT-2's Conv1D (the real traces)"),
)

Dims = list[int]


@dataclass(frozen=True, slots=True)
class ShapeRule:
    """A role from the two matrix operands ``a`` [..., M, K] and ``b`` [..., K, N] of a product op."""

    name: str
    role: MatmulRole
    test: Callable[[Dims, Dims], bool]
    why: str = ""


def _mnk(a: Dims, b: Dims) -> tuple[int, int, int]:
    return a[-2], b[-1], a[-1]


def _square_out(a: Dims, b: Dims) -> bool:
    m, n, k = _mnk(a, b)
    return m == n and k != m and k <= MAX_HEAD_DIM


def _square_in(a: Dims, b: Dims) -> bool:
    m, n, k = _mnk(a, b)
    return m == k and n != m and n <= MAX_HEAD_DIM


SHAPE_RULES: tuple[ShapeRule, ...] = (
    ShapeRule("square-output", MatmulRole.SCORE, _square_out,
              "Q[L,D]·Kᵀ[D,L] gives an L×L output over a head dimension D; "
              "all-square products (L = D, linear attention's Kᵀ·V) stay undecided"),
    ShapeRule("square-input", MatmulRole.CONTEXT, _square_in,
              "P[L,L]·V[L,D] consumes the L×L probabilities and gives head-dimension rows"),
    ShapeRule("2d-weight", MatmulRole.PROJECTION, lambda a, b: len(b) == 2,
              "x·W with a 2-D weight shared over the batch is a linear layer"),
)


def _operands(op: str, dims: list) -> tuple[Dims, Dims] | None:
    """The two matrix operands of a product op's recorded ``Input Dims``, or None when they are not matrices."""
    if op.endswith(("addmm", "baddbmm", "addbmm", "_addmm_activation")):
        pair = dims[1:3]
    elif op == "aten::einsum":
        return None  # the equation decides, and Input Dims hold it only as a string
    else:
        pair = dims[:2]
    if len(pair) != 2:
        return None
    a, b = pair
    if not (isinstance(a, list) and isinstance(b, list) and len(a) >= 2 and len(b) >= 2):
        return None
    if not all(isinstance(x, int) for x in a[-2:] + b[-2:]):
        return None
    return a, b


class RoleFinder:
    """Role of the matmul work each host op launches, memoised so each range/op is looked at once."""

    def __init__(self, tr: Trace, links: Links) -> None:
        self.tr = tr
        self.parent = links.parent
        self._names = [(re.compile(r.pattern, re.IGNORECASE), r.role) for r in NAME_RULES]
        self._name_of: dict[tuple[bool, str], MatmulRole | None] = {}  # per (is a module, distinct name)
        self._by_names: dict[int, MatmulRole | None] = {}  # per range or module: innermost named evidence
        self._dims: dict[bytes, list | None] = {}  # parsed Input Dims, per distinct bytes
        self._role: dict[int, str] = {}
        self._gemm: dict[str, bool] = {}  # per distinct op name: a matrix product or not
        self._op_role: dict[tuple[str, bytes | None], MatmulRole | None] = {}  # per (op name, Input Dims): _own_role
        # Whether any range or module name in the file says a role: when none does (most traces without
        # record_function names), the walk up each launcher's ranges is skipped.
        names = tr.names
        self._any_named = names is None or any(self._says_role(n) for n in names)

    def role(self, i: int) -> str:
        """Role of host event ``i`` (the launcher of a matmul kernel, or a matmul op on a CPU trace)."""
        r = self._role.get(i)
        if r is None:
            r = self._role[i] = str(self._from_names(i) or self._from_ops(i) or MatmulRole.OTHER)
        return r

    def _name_role(self, kind: int, name: str) -> MatmulRole | None:
        """The role a range (or a module's class/attribute) name says, memoised per (kind, raw name)."""
        key = (kind == MODULE, name)
        try:
            return self._name_of[key]
        except KeyError:
            pass
        text = name
        if kind == MODULE:
            text = re.sub(r"_\d+$", "", name[len("nn.Module: "):] if name.startswith("nn.Module: ") else name)
        hit = next((role for pat, role in self._names if pat.search(text)), None)
        self._name_of[key] = hit
        return hit

    def _says_role(self, name: str) -> bool:
        """A name that, as a range or as a module, some NAME_RULES pattern matches."""
        return self._name_role(ANNOTATION, name) is not None or self._name_role(MODULE, name) is not None

    def _from_names(self, i: int) -> MatmulRole | None:
        """Innermost range or module around ``i`` (itself included) whose name says a role."""
        if not self._any_named:
            return None
        host, parent = self.tr.host, self.parent
        path: list[int] = []
        found: MatmulRole | None = None
        k = i
        by_names = self._by_names
        while k != NONE:  # (answers are kept on ranges and modules only: ops above a launcher are its own)
            h = host[k]
            if h.kind == MODULE or h.kind == ANNOTATION:
                got = by_names.get(k, by_names)  # (the dict itself: no answer kept yet)
                if got is not by_names:
                    found = got  # type: ignore[assignment]
                    break
                path.append(k)
                found = self._name_role(h.kind, h.name)
                if found is not None:
                    break
            k = parent[k]
        for p in path:
            by_names[p] = found
        return found

    def _from_ops(self, i: int) -> MatmulRole | None:
        """The product ops around ``i``, outermost first: a linear layer by name, else by recorded shapes."""
        host, parent = self.tr.host, self.parent
        chain: list[int] = []
        k = i
        while k != NONE and host[k].kind == OP and self._is_gemm(host[k].name):
            chain.append(k)
            k = parent[k]
        op_inputs, memo = self.tr.op_inputs, self._op_role
        for k in reversed(chain):
            rec = op_inputs.get(k)
            key = (host[k].name, rec.dims if rec is not None else None)
            role = memo.get(key, memo)  # (the dict itself: not looked at yet)
            if role is memo:
                role = memo[key] = self._own_role(k)
            if role is not None:
                return role  # type: ignore[return-value]
        return None

    def _own_role(self, k: int) -> MatmulRole | None:
        """Product op ``k``'s own role: a linear layer by name, else by its recorded shapes. A function of its name
        and recorded Input Dims alone, so memoised per distinct pair (:meth:`_from_ops`)."""
        if LINEAR_OP.match(self.tr.host[k].name):
            return MatmulRole.PROJECTION
        ops = self._operands(k)
        if ops is not None:
            for rule in SHAPE_RULES:
                if rule.test(*ops):
                    return rule.role
        return None

    def _is_gemm(self, name: str) -> bool:
        """Whether op ``name`` is a matrix product (GEMM_OP), memoised per distinct name."""
        got = self._gemm.get(name)
        if got is None:
            got = self._gemm[name] = GEMM_OP.match(name) is not None
        return got

    def _operands(self, k: int) -> tuple[Dims, Dims] | None:
        rec = self.tr.op_inputs.get(k)
        if rec is None:
            return None
        try:
            dims = self._dims[rec.dims]
        except KeyError:
            try:
                parsed = orjson.loads(rec.dims)
            except orjson.JSONDecodeError:
                parsed = None
            dims = self._dims[rec.dims] = parsed if isinstance(parsed, list) else None
        return _operands(self.tr.host[k].name, dims) if dims is not None else None


class GemmRoles:
    """``roles[i]``: the matmul role of host op i when it is a matrix-product op, else None — what FLOP
    counts aggregate by (tracekit.analysis.flops), resolved lazily through the attribution's own RoleFinder."""

    def __init__(self, tr: Trace, finder: RoleFinder) -> None:
        self.host, self.finder = tr.host, finder
        self._gemm: dict[str, bool] = {}  # per distinct op name: a matrix product or not

    def __len__(self) -> int:
        return len(self.host)

    def __getitem__(self, i: int) -> str | None:
        h = self.host[i]
        if h.kind != OP:
            return None
        gemm = self._gemm.get(h.name)
        if gemm is None:
            gemm = self._gemm[h.name] = GEMM_OP.match(h.name) is not None
        return self.finder.role(i) if gemm else None


def op_roles(tr: Trace, links: Links) -> list[str | None]:
    """Per host index: the matmul role of every matrix-product op (``aten::mm``/``bmm``/``linear``/…), None
    for every other event. What FLOP counts aggregate by role; attribution uses the same RoleFinder."""
    finder = RoleFinder(tr, links)
    return [finder.role(i) if h.kind == OP and GEMM_OP.match(h.name) else None for i, h in enumerate(tr.host)]
