"""Display names that fit a column and still say what the kernel does.

A CUDA kernel name is mostly launcher boilerplate (``void at::native::elementwise_kernel<128, 4,
gpu_kernel_impl_nocast<…>>(…)``); what tells one kernel from another is buried inside it: the functor
(``MulFunctor``), the op (``masked_fill_kernel``) or the tile shape (``256x128``). Cutting the name at N
characters keeps the boilerplate and loses that part, so :func:`short_name` applies the rules of
``NAME_RULES`` in order, each only while the name is still too long, and cuts last.

Display only: JSON and CSV always carry the full name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class NameRule:
    """One shortening step: ``apply`` maps a name to a shorter one that keeps what ``keeps`` says."""

    name: str
    keeps: str
    apply: Callable[[str, int], str]  # (name, width) -> name


def _top_level_paren(s: str) -> int:
    """Index of the first ``(`` outside template brackets, or -1. ``->`` is not a bracket."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">" and (i == 0 or s[i - 1] != "-"):
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and not s.startswith("(anonymous namespace)", i):
            return i
    return -1


def _drop_call_signature(s: str) -> str:
    """``f<…>(int, char*)`` → ``f<…>``; kept when a space precedes the bracket (``Memcpy DtoD (Device -> Device)``)."""
    i = _top_level_paren(s)
    if i <= 0 or s[i - 1] == " ":
        return s
    return s[:i]


_LAMBDA = re.compile(r"::\{lambda\([^(){}]*\)#\d+\}|::operator\(\)\(\) const")
_NOISE_NS = re.compile(r"\(anonymous namespace\)::|\bat::native::memory::|\bat::native::binary_internal::|"
                       r"\bat::native::|\bat::cuda::detail::|\bat::|\bc10::|\bstd::|\bbinary_internal::")
_INNER_ARGS = re.compile(r"(\w)\((?:[^()<>]|<[^<>]*>)*\)")  # a function's argument list inside a template


def _repeat(pattern: re.Pattern[str], repl: str) -> Callable[[str, int], str]:
    def apply(s: str, width: int) -> str:
        while True:
            t = pattern.sub(repl, s)
            if t == s:
                return s
            s = t
    return apply


# Launchers and wrappers that say how a kernel runs, not what it computes.
_GENERIC = re.compile(r"^(?:vectorized_|unrolled_)?elementwise_kernel(?:_with_index|_manual_unroll)?$|"
                      r"^gpu_kernel_impl(?:_nocast)?$|^reduce_kernel$|^ReduceOp$|^func_wrapper_t$|^index_elementwise_kernel$|"
                      r"^[AB](?:Unary|inary)Functor$|^BinaryFunctor$|^AUnaryFunctor$|^BUnaryFunctor$")
_IDENT = re.compile(r"[A-Za-z_]\w*")


def _outer(s: str) -> tuple[str, str]:
    """(the name before the first template bracket, the rest)."""
    i = s.find("<")
    return (s, "") if i < 0 else (s[:i], s[i:])


def _template_args(s: str, start: int) -> tuple[str, int]:
    """The bracketed text starting at ``s[start] == '<'`` and the index after its ``>``."""
    depth = 0
    for i in range(start, len(s)):
        if s[i] == "<":
            depth += 1
        elif s[i] == ">":
            depth -= 1
            if depth == 0:
                return s[start:i + 1], i + 1
    return s[start:], len(s)


def _focus(pick: Callable[[list[str]], str | None]) -> Callable[[str, int], str]:
    """``outer<…, X, …>`` → ``outer<…X<args>…>``, X chosen by ``pick`` among the identifiers inside the brackets."""
    def apply(s: str, width: int) -> str:
        head, rest = _outer(s)
        if not rest:
            return s
        idents = [m.group() for m in _IDENT.finditer(rest)]
        x = pick(idents)
        if x is None:
            return s
        i = rest.rfind(x)  # the innermost mention: the one nested deepest sits last
        end = i + len(x)
        if end < len(rest) and rest[end] == "<":
            args, end = _template_args(rest, end)
            x += args if len(args) <= 24 else "<" + ELLIPSIS + ">"
        return f"{head}<{ELLIPSIS}{x}{ELLIPSIS}>"
    return apply


def _functor(idents: list[str]) -> str | None:
    """The innermost functor that is not a wrapper: ``MulFunctor``, ``CUDAFunctor_add``, ``FillFunctor``,
    ``sum_functor``."""
    found = [x for x in idents if re.search(r"Functor|_functor$", x) and not _GENERIC.match(x)]
    return found[-1] if found else None


def _op(idents: list[str]) -> str | None:
    """The first op-like name that is not a launcher: ``masked_fill_kernel``, ``direct_copy_kernel_cuda``,
    ``where_kernel_impl``, ``GeluCUDAKernelImpl``, ``arange_cuda_out``, ``Flash_fwd_kernel_traits``."""
    for x in idents:
        if _GENERIC.match(x):
            continue
        if re.search(r"_kernel|Kernel|_cuda|_impl$|_out$", x) and not x.endswith("_traits"):
            return x
    return None


def _flatten_templates(s: str) -> str:
    """Brackets nested two deep become ``<…>``, keeping a leading run of numbers (a tile shape:
    ``<64, 128, 128, 4, …>``)."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(s):
        ch = s[i]
        if ch == "<" and depth >= 1:
            args, j = _template_args(s, i)
            nums = re.match(r"<((?:\s*\d+\s*,)*\s*\d+)\s*(,|>)", args)
            out.append("<" + nums.group(1) + (", " + ELLIPSIS + ">" if nums.group(2) == "," else ">") if nums
                       else "<" + ELLIPSIS + ">")
            i = j
            continue
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        out.append(ch)
        i += 1
    return "".join(out)


_SHAPE = re.compile(r"\d+x\d+")
_WORDS = re.compile(r"^(?:gemm|gemv|fprop|bprop|flash|fwd|bwd|sdpa|softmax|attention|mma|wgmma|xmma|nvjet|cutlass.*|"
                    r"fmha.*|tst|bias|relu|gelu|splitK.*|sgemm|hgemm)$")


def _token_ranks(toks: list[str]) -> list[float]:
    """How long each token of an ``a_b_c`` name survives: the first always; then the first tile shape and the
    first algorithm word; then the other shapes and words; then the second token; the rest go first."""
    ranks: list[float] = []
    shape = word = False
    for n, tok in enumerate(toks):
        if n == 0:
            ranks.append(0)
        elif _SHAPE.search(tok):
            ranks.append(2 if shape else 1)
            shape = True
        elif _WORDS.match(tok):  # a word goes before a shape of the same standing (the category says much of it)
            ranks.append(2 if word else 1.5)
            word = True
        else:
            ranks.append(3 if n == 1 else 9)
    return ranks


def _join_tokens(toks: list[str], keep: list[bool]) -> str:
    out: list[str] = []
    for t, k in zip(toks, keep):
        if k:
            out.append(t)
        elif not out or out[-1] != ELLIPSIS:
            out.append(ELLIPSIS)
    return "_".join(out).replace(f"_{ELLIPSIS}_", ELLIPSIS).replace(f"_{ELLIPSIS}", ELLIPSIS)


def _shorten_identifier(s: str, width: int) -> str:
    toks = s.split("_")
    keep = [True] * len(toks)
    ranks = _token_ranks(toks)
    order = sorted(range(len(toks)), key=lambda n: (-ranks[n], -n))
    out = s
    for n in order:
        if len(out) <= width or ranks[n] == 0:
            break
        keep[n] = False
        out = _join_tokens(toks, keep)
    return out


def _identifier_tokens(s: str, width: int) -> str:
    """A long ``a_b_c`` identifier (cuBLAS/cuDNN names, alone or as a template argument such as
    ``cutlass::Kernel2<cutlass_80_wmma_…>``) loses whole tokens, lowest rank first and the rightmost first
    among equals, until the name fits; each run of dropped tokens becomes ``…``."""
    args_at = s.find("<")  # (the kernel's own name before its template arguments is its identity: kept whole
    # here, cut only by template-args when nothing else is left; a name without arguments is fair game)
    idents = [m for m in re.finditer(r"[A-Za-z_]\w*", s) if m.group().count("_") >= 3 and m.start() > args_at]
    if not idents:
        return s
    m = max(idents, key=lambda m: len(m.group()))
    room = width - (len(s) - len(m.group()))
    return s[:m.start()] + _shorten_identifier(m.group(), room) + s[m.end():]


_FLAGS = re.compile(r"(?:,\s*(?:true|false))+")
_NUMERIC_TEMPLATE = re.compile(r"(?<=[<,\s])[A-Za-z_][\w:]*<(\d+(?:,\s*\d+)*(?:,\s*…)?)>")


def _flag_args(s: str) -> str:
    """Runs of ``, true, false`` template flags become ``, …``."""
    return _FLAGS.sub(", " + ELLIPSIS, s).replace(f", {ELLIPSIS}, {ELLIPSIS}", f", {ELLIPSIS}")


def _numeric_templates(s: str) -> str:
    """``kernel<Traits<64, 128, 128, 4, …>, …>`` → ``kernel<64, 128, 128, 4, …>``: the tile sizes without the
    traits name."""
    t = _NUMERIC_TEMPLATE.sub(lambda m: m.group(1), s)
    while f", {ELLIPSIS}, {ELLIPSIS}" in t:
        t = t.replace(f", {ELLIPSIS}, {ELLIPSIS}", f", {ELLIPSIS}")
    return t


_FOCUSED = re.compile(r"<…(\w+)<[^<>]*>…>$")
_FOCUSED_NAME = re.compile(r"^[\w:]+(<…\w+(?:<[^<>]*>)?…>)$")


def _split_args(inner: str) -> list[str]:
    """The top-level comma-separated arguments of a template's inside (``a, b<c, d>, e`` -> three)."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(inner[start:i].strip())
            start = i + 1
    out.append(inner[start:].strip())
    return out


def _template_tail(s: str, width: int) -> str:
    """``kernel<a, b, c, d>`` -> ``kernel<a, b, …>``: the last template arguments go first, the kernel's name last
    (``paged_attention_ll4mi_reduce_kernel<…>`` and ``…_QKV_mfma16_kernel<…>`` stay two names at any width); a
    name alone still too wide loses whole ``a_b_c`` tokens."""
    head, rest = _outer(s)
    if not rest.startswith("<") or not head or _FOCUSED_NAME.match(s):
        return s  # (a generic launcher focused on its functor or op: that is the identity, the final cut keeps it)
    inner, end = _template_args(rest, 0)
    args = [a for a in _split_args(inner[1:-1]) if a != ELLIPSIS]
    tail = rest[end:]
    while args:
        t = f"{head}<{', '.join(args)}, {ELLIPSIS}>{tail}" if len(args) < len(_split_args(inner[1:-1])) else s
        if len(t) <= width:
            return t
        args.pop()
    t = f"{head}<{ELLIPSIS}>"
    if len(t) <= width:
        return t
    return _shorten_identifier(head, width) if head.count("_") >= 3 else head


def _focus_args(s: str) -> str:
    """``outer<…MulFunctor<float>…>`` → ``outer<…MulFunctor…>``."""
    return _FOCUSED.sub(lambda m: f"<{ELLIPSIS}{m.group(1)}{ELLIPSIS}>", s)


_SOURCE_NAME = re.compile(r"(\d+)")


def _demangled(s: str, width: int) -> str:
    """An Itanium-mangled kernel name (``_ZN7ck_tile6kentryI…EEvNT1_5KargsE``, as HIP and CUDA traces write
    composable-kernel and other template kernels) shown by its qualified name, ``ck_tile::kentry<…>``: the nested
    source names up to the first template arguments. Display only, and only the prefix a trace's reader needs to tell
    kernels apart; anything this reading does not follow leaves the name as it is."""
    if not s.startswith("_Z"):
        return s
    i, nested = (3, True) if s.startswith("_ZN") else (2, False)
    parts: list[str] = []
    while i < len(s):
        m = _SOURCE_NAME.match(s, i)
        if m is None:
            break
        n = int(m.group(1))
        start = m.end()
        if n <= 0 or start + n > len(s):
            return s
        parts.append(s[start:start + n])
        i = start + n
        if not nested:
            break
    if not parts:
        return s
    args = f"<{ELLIPSIS}>" if i < len(s) and s[i] == "I" else ""
    return "::".join(parts) + args


# Ordered: each runs only while the name is still wider than its column.
NAME_RULES: tuple[NameRule, ...] = (
    NameRule(name="demangle", keeps="the kernel's qualified name, read from its Itanium mangling",
             apply=_demangled),
    NameRule(name="void-prefix", keeps="everything", apply=lambda s, w: s[5:] if s.startswith("void ") else s),
    NameRule(name="call-signature", keeps="the kernel and its template arguments",
             apply=lambda s, w: _drop_call_signature(s)),
    NameRule(name="lambda-scopes", keeps="the function that holds the lambda",
             apply=_repeat(_LAMBDA, "")),
    NameRule(name="noise-namespaces", keeps="every name, without at::native::, c10::, std::, (anonymous namespace)::",
             apply=_repeat(_NOISE_NS, "")),
    NameRule(name="inner-signatures", keeps="the names of functions passed as template arguments",
             apply=_repeat(_INNER_ARGS, r"\1")),
    NameRule(name="functor", keeps="the launcher and the innermost functor (MulFunctor, CUDAFunctor_add)",
             apply=_focus(_functor)),
    NameRule(name="op", keeps="the launcher and the op it runs (masked_fill_kernel, direct_copy_kernel_cuda)",
             apply=_focus(_op)),
    NameRule(name="nested-templates", keeps="the outer template arguments and leading tile sizes",
             apply=lambda s, w: _flatten_templates(s)),
    NameRule(name="flag-args", keeps="template arguments other than runs of true/false flags",
             apply=lambda s, w: _flag_args(s)),
    NameRule(name="numeric-templates", keeps="tile sizes passed through a traits template, without its name",
             apply=lambda s, w: _numeric_templates(s)),
    NameRule(name="identifier-tokens", keeps="prefix, tile shapes and algorithm words of a_b_c names",
             apply=_identifier_tokens),
    NameRule(name="focus-args", keeps="the launcher and the functor or op, without its template arguments",
             apply=lambda s, w: _focus_args(s)),
    NameRule(name="template-args", keeps="the kernel's own name and its first template arguments",
             apply=_template_tail),
)


def short_name(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: the rules of ``NAME_RULES`` in order, then a cut with ``…``."""
    s = name
    for rule in NAME_RULES:
        if len(s) <= width:
            return s
        s = rule.apply(s, width)
    if len(s) <= width:
        return s
    if width <= 1:
        return ELLIPSIS[:width]
    m = _FOCUSED_NAME.match(s)
    if m and len(m.group(1)) < width - 1:  # a focused name: cut the launcher, keep what it runs
        tail = m.group(1)
        return s[:width - 1 - len(tail)] + ELLIPSIS + tail
    return s[:width - 1] + ELLIPSIS


# The widths (characters) at which the report's timeline may label a kernel, widest first (issue 42, item 3). A bar's
# width in pixels changes with the zoom, so the page gets a few display names per kernel and draws the widest that
# fits its bar; the full name stays on hover. Widths between these fit the next narrower one.
LABEL_WIDTHS = (96, 64, 44, 30, 20)


def label_ladder(name: str, widths: tuple[int, ...] = LABEL_WIDTHS) -> list[str]:
    """``name``'s display names (:func:`short_name`) at each of ``widths``, widest first, each given once and none
    equal to ``name`` (the page has the full name already): [] for a name that fits the narrowest width."""
    out: list[str] = []
    for w in widths:
        s = short_name(name, w)
        if s != name and (not out or s != out[-1]):
            out.append(s)
    return out
