"""CSV in a fixed column order (a contract for scripts: tests/golden/*_header.csv).

An attribution is one row per block × category, with the block's attention layer (``layer``: empty where the block
is its own) and the layer's time in that category. A diff is sections in one table with one header:
``headline`` (the lead, category ``total``: the whole step or measured latency, ``basis`` naming which; absent
when neither side pair has one), ``category`` (headline, six rows + ``total``), ``block`` (paired block × category),
``block_layer`` (their attention layers × category, where a side has one),
``block_only_before``/``block_only_after`` (unpaired block × category), ``kernel_only_before``/
``kernel_only_after`` (one row per kernel or op), ``kernel_changed`` (a kernel on both sides whose count or
time changed beyond noise; ``count`` is the after count), ``span`` (the headline's profiled span, category
``total``), ``step_busy``/``step_span`` (the median step as a whole, all its device work: busy time and span,
category ``total``; only when both sides have ProfilerSteps on a device), ``rank`` (two folders of ranks: rank N
before and after, category ``total``, in the ``rank`` column), ``run_pair`` (two folders of runs: each run on both
sides, on its own headline, category ``total``, the run in ``trace_before``/``trace_after``, its verdict in
``paired_by``), ``run_only_before``/``run_only_after`` (the run in ``trace_before``/``trace_after``). With
``--by rank`` an attribution is instead one row
per rank × category (RANK_COLUMNS); with ``--by op`` one row per counted (op, shapes, dtype) (OP_COLUMNS),
with ``--by kernel`` one row per kernel the blocks own (KERNEL_COLUMNS). Rows stream out in chunks, so a huge
trace (or a 200 MB kernel name) never becomes one giant string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..results.attribution import CATEGORIES, Attribution, BlockResult
from ..results.diff import pair_headline
from ..results.rows import layer_or_own
from .base import Renderer, Result, pct, run_pair_verdict
from .optables import (  # issue 42: --by op/kernel
    KERNEL_COLUMNS, NOT_COMPUTED, OP_COLUMNS, basis_of, kernel_csv_row, kernel_rows, op_csv_row,
)
from .stagetable import STAGE_COLUMNS, stage_csv_row, stage_diff_csv  # issue 44: serving stages

if TYPE_CHECKING:
    from ..results.diff import DiffResult

COLUMNS = ("trace", "step", "phase", "ordinal", "block", "kind", "found_by", "category", "time_us",
           "pct_of_block", "block_total_us", "kernels",
           "layer", "layer_time_us", "pct_of_layer", "layer_total_us")  # the block's attention layer (issue 38)
DIFF_COLUMNS = ("section", "category", "before_us", "after_us", "delta_us", "ratio", "basis", "paired_by", "phase",
                "kind_before", "kind_after", "block_before", "block_after", "step_before", "step_after",
                "ordinal_before", "ordinal_after", "trace_before", "trace_after", "kernel", "count", "rank")
RANK_COLUMNS = ("rank", "trace", "rank_from", "blocks", "category", "time_us", "pct_of_rank", "rank_total_us",
                "span_us", "idle_us", "attention_share")

CHUNK_CHARS = 1 << 20  # flush the row buffer past this size
# A text cell starting with one of these is a formula to Excel, LibreOffice and Sheets; numbers (which may start with
# + or -) are written as they are, so scripts still read them as numbers.
_FORMULA_STARTS = frozenset("=+-@\t\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|nan)", re.ASCII)


def _field(x: object) -> str:
    """One cell, quoted as ``csv.QUOTE_MINIMAL`` quotes it (the csv module would copy a 200 MB name
    into a 4-bytes-a-character row buffer: here a cell costs only its own string)."""
    if x is None:
        return ""
    s = x if type(x) is str else str(x)
    if s and s[0] in _FORMULA_STARTS and not _NUMBER.fullmatch(s):
        s = "'" + s  # a name a spreadsheet would run as a formula (OWASP CSV injection): shown as text instead
    if "," in s or '"' in s or "\n" in s or "\r" in s:
        return '"' + s.replace('"', '""') + '"'
    return s


def _chunks(header: tuple[str, ...], rows: Iterable[list]) -> Iterator[str]:
    """Rows joined into chunks of about CHUNK_CHARS; a bigger row goes out cell by cell."""
    buf = [",".join(header) + "\n"]
    size = 0
    for row in rows:
        cells = [_field(x) for x in row]
        n = sum(map(len, cells)) + len(cells)
        if n > CHUNK_CHARS:  # a giant cell (a 200 MB kernel name): its pieces go out as they are
            if buf:
                yield "".join(buf)
                buf, size = [], 0
            for i, c in enumerate(cells):
                if i:
                    yield ","
                yield c
            yield "\n"
            continue
        if size + n > CHUNK_CHARS:
            yield "".join(buf)
            buf, size = [], 0
        buf.append(",".join(cells) + "\n")
        size += n
    if buf:
        yield "".join(buf)


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def _ratio(before: float, after: float) -> str:
    return f"{after / before:.4f}" if before > 0 else ""


class CSVRenderer(Renderer):
    name = "csv"
    extension = ".csv"

    def stream(self, result: Result) -> Iterator[str]:
        if isinstance(result, Attribution):
            if self.by == "rank":
                return _chunks(RANK_COLUMNS, self.rank_rows(result))
            if self.by == "op":  # issue 42: one table, OP_COLUMNS
                return _chunks(OP_COLUMNS, _op_rows(result))
            if self.by == "kernel":
                return _chunks(KERNEL_COLUMNS, _kernel_rows_csv(result))
            if self.by == "stage":  # issue 44: the serving stages (no rows on a trace without them)
                return _chunks(STAGE_COLUMNS, (stage_csv_row(r) for r in result.stages or []))
            return _chunks(COLUMNS, self.attribution_rows(result))
        return _chunks(DIFF_COLUMNS, self.diff_rows(result))

    def render_attribution(self, result: Attribution) -> str:
        return "".join(self.stream(result))

    def render_diff(self, result: DiffResult) -> str:
        return "".join(self.stream(result))

    @staticmethod
    def attribution_rows(result: Attribution) -> Iterator[list]:
        for b in result.blocks:
            lay = b.layer
            for c in CATEGORIES:
                yield [b.source, "" if b.step is None else b.step, b.phase, b.ordinal, b.name, b.kind,
                       b.found_by, c, f"{b.categories[c]:.3f}", f"{pct(b.categories[c], b.total_us):.2f}",
                       f"{b.total_us:.3f}", b.kernels,
                       *(("", "", "", "") if lay is None else (
                           lay.name, f"{lay.categories[c]:.3f}", f"{pct(lay.categories[c], lay.total_us):.2f}",
                           f"{lay.total_us:.3f}"))]

    @staticmethod
    def rank_rows(result: Attribution) -> Iterator[list]:
        from .base import rank_view_of

        view = rank_view_of(result)
        for r in view.rows:
            for c in CATEGORIES:
                yield [r.rank, r.source, view.rank_from, r.blocks, c, f"{r.categories[c]:.3f}",
                       f"{pct(r.categories[c], r.total_us):.2f}", f"{r.total_us:.3f}", f"{r.span_us:.3f}",
                       f"{r.idle_us:.3f}", "" if r.attention_share is None else f"{r.attention_share:.6f}"]

    @staticmethod
    def diff_rows(r: DiffResult) -> Iterator[list]:
        """The diff's rows, section by section, in DIFF_COLUMNS order (see the module docstring)."""
        for section in (_lead_rows, _category_rows, _block_rows, _layer_rows, _unmatched_rows, _span_rows,
                        _rank_rows, _kernel_rows, _run_pair_rows):
            yield from section(r)
        yield from (_row(**kw) for kw in stage_diff_csv(r))  # issue 44: stage to stage


def _op_rows(result: Attribution) -> Iterator[list]:
    """``--by op``: one row per (op, shapes, dtype), by time; ``time_per_step_us`` is the mean over ``steps``
    profiled steps (the total when ``steps`` is 0). A result analysed without the op table is refused."""
    if result.ops is None:
        raise ValueError(NOT_COMPUTED)
    basis = basis_of(result)
    return (op_csv_row(r, basis) for r in result.ops)


def _kernel_rows_csv(result: Attribution) -> Iterator[list]:
    """``--by kernel``: one row per kernel the blocks own, by time (KERNEL_COLUMNS)."""
    basis = basis_of(result)
    return (kernel_csv_row(k, basis) for k in kernel_rows(result))


_BLANK = dict.fromkeys(DIFF_COLUMNS, "")


def _row(**kw: object) -> list:
    """One diff row: the given columns, every other one empty."""
    return [{**_BLANK, **kw}[c] for c in DIFF_COLUMNS]


def _side(b: BlockResult, tag: str) -> dict:
    """The columns naming one side's block (``tag`` is before or after)."""
    return {f"kind_{tag}": b.kind, f"block_{tag}": b.name, f"step_{tag}": "" if b.step is None else b.step,
            f"ordinal_{tag}": b.ordinal, f"trace_{tag}": b.source}


def _lead_rows(r: DiffResult) -> Iterator[list]:
    """The diff's lead (issue 37): the whole step or the measured latency, ``basis`` naming which; none without one."""
    h = r.headline
    if h.basis is not None and h.before_us is not None and h.after_us is not None:
        yield _row(section="headline", category="total", before_us=_num(h.before_us), after_us=_num(h.after_us),
                   delta_us=_num(h.after_us - h.before_us), ratio=_ratio(h.before_us, h.after_us), basis=h.basis)


def _category_rows(r: DiffResult) -> Iterator[list]:
    """The headline: each category, then the total."""
    for c, d in r.categories.items():
        yield _row(section="category", category=c, before_us=_num(d.before_us), after_us=_num(d.after_us),
                   delta_us=_num(d.delta_us), ratio=_ratio(d.before_us, d.after_us), basis=r.basis)
    yield _row(section="category", category="total", before_us=_num(r.before_figures.total_us),
               after_us=_num(r.after_figures.total_us), delta_us=_num(r.delta_us),
               ratio=_ratio(r.before_figures.total_us, r.after_figures.total_us), basis=r.basis)


def _block_rows(r: DiffResult) -> Iterator[list]:
    """Each block pair × category."""
    for p in r.pairs:
        for c in CATEGORIES:
            bu, au = p.before.categories[c], p.after.categories[c]
            yield _row(section="block", category=c, before_us=_num(bu), after_us=_num(au), delta_us=_num(au - bu),
                       ratio=_ratio(bu, au), paired_by=p.paired_by, phase=p.before.phase,
                       **_side(p.before, "before"), **_side(p.after, "after"))


def _layer_rows(r: DiffResult) -> Iterator[list]:
    """Each block pair's layers × category (section ``block_layer``; a side whose block is its own layer counts its
    block), for the pairs where either side has a layer (issue 38)."""
    for p in r.pairs:
        if p.before.layer is None and p.after.layer is None:
            continue
        (_, bc), (_, ac) = layer_or_own(p.before), layer_or_own(p.after)
        for c in CATEGORIES:
            bu, au = bc[c], ac[c]
            yield _row(section="block_layer", category=c, before_us=_num(bu), after_us=_num(au),
                       delta_us=_num(au - bu), ratio=_ratio(bu, au), paired_by=p.paired_by, phase=p.before.phase,
                       **_side(p.before, "before"), **_side(p.after, "after"))


def _unmatched_rows(r: DiffResult) -> Iterator[list]:
    """Each unpaired block × category, its time on its own side and 0 on the other."""
    for tag, blocks in (("before", r.unmatched_before), ("after", r.unmatched_after)):
        for b in blocks:
            for c in CATEGORIES:
                v = b.categories[c]
                yield _row(section=f"block_only_{tag}", category=c, phase=b.phase, **_side(b, tag),
                           before_us=_num(v if tag == "before" else 0.0),
                           after_us=_num(v if tag == "after" else 0.0), delta_us=_num(-v if tag == "before" else v))


def _span_rows(r: DiffResult) -> Iterator[list]:
    """The headline's profiled span, then the median step's busy time and span (when both sides have one)."""
    fb, fa = r.before_figures, r.after_figures
    yield _row(section="span", category="total", before_us=_num(fb.span_us), after_us=_num(fa.span_us),
               delta_us=_num(fa.span_us - fb.span_us), ratio=_ratio(fb.span_us, fa.span_us), basis=r.basis)
    if r.step_before is not None and r.step_after is not None:
        for name in ("busy", "span"):
            b, a = getattr(r.step_before, f"{name}_us"), getattr(r.step_after, f"{name}_us")
            yield _row(section=f"step_{name}", category="total", before_us=_num(b), after_us=_num(a),
                       delta_us=_num(a - b), ratio=_ratio(b, a), basis=r.basis)


def _rank_rows(r: DiffResult) -> Iterator[list]:
    """Rank N before and after (two folders of ranks); a side without that rank leaves its cells empty."""
    for rp in r.ranks:
        rb = rp.before.total_us if rp.before is not None else None
        ra = rp.after.total_us if rp.after is not None else None
        yield _row(section="rank", category="total", rank=rp.rank, before_us=_num(rb), after_us=_num(ra),
                   delta_us=_num(rp.delta_us), ratio=_ratio(rb, ra) if rb is not None and ra is not None else "",
                   trace_before=rp.before.source if rp.before else "",
                   trace_after=rp.after.source if rp.after else "")


def _run_pair_rows(r: DiffResult) -> Iterator[list]:
    """Each run pair on its own headline (its verdict in ``paired_by``), then the runs found on one side only."""
    for p in r.run_pairs:
        h = pair_headline(p.diff)
        b, a = h["before_us"], h["after_us"]
        yield _row(section="run_pair", category="total", before_us=_num(b), after_us=_num(a), delta_us=_num(a - b),
                   ratio=_ratio(b, a), basis=h["basis"], paired_by=run_pair_verdict(p), trace_before=p.run,
                   trace_after=p.run)
    for tag, names in (("before", r.runs_only_before), ("after", r.runs_only_after)):
        for name in names:
            yield _row(section=f"run_only_{tag}", category="total", **{f"trace_{tag}": name})


def _kernel_rows(r: DiffResult) -> Iterator[list]:
    """Kernels changed beyond noise, then the kernels only one side ran."""
    for kc in r.kernels_changed:
        yield _row(section="kernel_changed", category=kc.category, kernel=kc.name, count=kc.after.count,
                   before_us=_num(kc.before.total_us), after_us=_num(kc.after.total_us), delta_us=_num(kc.delta_us),
                   ratio=_ratio(kc.before.total_us, kc.after.total_us))
    for tag, ks in (("before", r.only_before), ("after", r.only_after)):
        for k in ks:
            yield _row(section=f"kernel_only_{tag}", category=k.category, kernel=k.name, count=k.count,
                       before_us=_num(k.total_us if tag == "before" else 0.0),
                       after_us=_num(k.total_us if tag == "after" else 0.0),
                       delta_us=_num(-k.total_us if tag == "before" else k.total_us))
