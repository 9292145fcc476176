"""How many (query, key) pairs a masked attention call scores: windows, varlen batches and paged decode (issue 44).

The attention FLOPs are ``2·Hq·pairs·(Dqk + Dv)`` (tracekit.analysis.flops); this module counts the ``pairs``.

* **One sequence** (``mask_pairs``): exactly, in O(1). Query row ``i`` sits at position ``i + shift`` (``shift``
  0 for a top-left mask, PyTorch's ``is_causal``; ``Lk − Lq`` for a bottom-right one, flash-attn >= 2.1, aiter,
  FlashInfer, vLLM and SGLang) and sees keys ``j`` with ``pos − left <= j <= pos + right``; causal is
  ``right = 0``; ``None`` is no limit (flash-attn's ``-1``). The count is a difference of two "keys at or below a
  diagonal" sums, each a sum of a clamped linear function (``_below``).
* **Varlen** (``varlen_pairs``): ``Σ f(l_i)`` over sequences whose lengths the trace does not hold, only their
  number ``B`` (``cu_seqlens`` has ``B + 1`` entries), the total ``T`` (the packed tensor's first dim) and the
  longest ``M`` (``max_seqlen``). ``f(l) = mask_pairs(l, l, …)`` is convex in ``l`` (each extra token adds a row
  and a column no shorter than the last), so over ``{1 <= l_i <= M, Σ l_i = T}`` its sum is smallest at the most
  even split (``T mod B`` sequences of ``⌈T/B⌉``, the rest ``⌊T/B⌋``) and largest at the most uneven one (as many
  ``M`` as fit, one remainder, the rest 1): every feasible split majorizes the first and is majorized by the
  second (Karamata). Equal bounds (``T = B·M``: every sequence is ``M`` long; or ``T = B``) are an exact count.
* **Paged** (``paged_pairs``): the queries' split as above; the keys live in a cache whose per-sequence lengths
  are a tensor, bounded by ``max_seqlen_k`` (or the block table's width × the block size) and at least the
  sequence's own queries (a prefill's keys include them). Decode is ``Lq = 1`` per sequence.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Mask", "Pairs", "mask_pairs", "paged_pairs", "varlen_pairs"]


class Mask(NamedTuple):
    """A mask: the keys a query row sees. ``left``/``right``: the window either side of the row's own position
    (None: unlimited); ``bottom_right``: rows aligned to the last key (flash-attn) rather than the first."""

    left: int | None = None
    right: int | None = None
    bottom_right: bool = False

    @property
    def masked(self) -> bool:
        return self.left is not None or self.right is not None


class Pairs(NamedTuple):
    """A count of scored pairs: ``lo == hi`` when exact; ``why`` says what made it a range."""

    lo: int
    hi: int
    why: str | None = None


def _tri(x: int, m: int) -> int:
    """``Σ_{t=0..x} min(t, m)`` for ``x >= 0`` (0 below): the keys seen by rows whose reach grows by one each."""
    if x <= 0:
        return 0
    if x <= m:
        return x * (x + 1) // 2
    return m * (m + 1) // 2 + (x - m) * m


def _below(lq: int, lk: int, c: int) -> int:
    """``#{(i, j): 0 <= i < lq, 0 <= j < lk, j <= i + c}``: row ``i`` sees ``clamp(i + c + 1, 0, lk)`` keys."""
    return _tri(c + lq, lk) - _tri(c, lk)


def mask_pairs(lq: int, lk: int, mask: Mask) -> int:
    """The exact number of (query, key) pairs ``mask`` keeps in an ``lq × lk`` score matrix."""
    if lq <= 0 or lk <= 0:
        return 0
    far = lq + lk  # farther than any key: no limit
    shift = lk - lq if mask.bottom_right else 0
    right = far if mask.right is None else mask.right
    left = far if mask.left is None else mask.left
    return max(0, _below(lq, lk, shift + right) - _below(lq, lk, shift - left - 1))


def _row_width(m: int, mask: Mask) -> int:
    """The most keys one row can see: ``m`` keys, narrowed by a window on both sides."""
    if mask.left is not None and mask.right is not None:
        return max(0, min(m, mask.left + mask.right + 1))
    return m


def _split_sum(lengths: list[tuple[int, int]], mask: Mask) -> int:
    """``Σ count · f(l)`` over (length, count) pairs, ``f(l)`` the self-attention pairs of one ``l``-long sequence."""
    return sum(n * mask_pairs(length, length, mask) for length, n in lengths if n > 0)


def _even(total: int, batch: int) -> list[tuple[int, int]]:
    q, r = divmod(total, batch)
    return [(q + 1, r), (q, batch - r)]


def _uneven(total: int, batch: int, longest: int) -> list[tuple[int, int]]:
    """As many ``longest`` as fit with every other sequence at least 1, one remainder, the rest 1."""
    if longest <= 1:
        return [(1, batch)]
    full, rem = divmod(total - batch, longest - 1)
    full = min(full, batch)
    rest = batch - full
    return [(longest, full), (1 + rem, 1 if rest and rem else 0), (1, rest - (1 if rest and rem else 0))]


def varlen_pairs(batch: int, total: int, longest: int, mask: Mask) -> Pairs | None:
    """Pairs of ``batch`` self-attention sequences (the same split for queries and keys) of ``total`` tokens, none
    longer than ``longest``: exact when the split is forced, else the convex sum's bounds. None when the recorded
    figures admit no split (``total`` outside ``[batch, batch·longest]``)."""
    if batch <= 0 or longest <= 0 or not batch <= total <= batch * longest:
        return None
    lo, hi = _split_sum(_even(total, batch), mask), _split_sum(_uneven(total, batch, longest), mask)
    if lo == hi:
        return Pairs(lo, hi)
    return Pairs(lo, hi, f"varlen: {batch} sequences of {total} tokens, none over {longest}, queries and keys split "
                         "alike; their lengths are a tensor the trace does not record (bounds: the most even and the "
                         "most uneven split)")


def paged_pairs(batch: int, total_q: int, longest_q: int | None, longest_k: int | None, mask: Mask,
                capacity: int | None = None) -> Pairs | None:
    """Pairs of ``batch`` sequences whose queries (``total_q`` tokens, none over ``longest_q``) attend a paged KV
    cache, bottom-right aligned: each sequence's keys include its queries, number at most ``longest_k``, and all
    sequences' keys together at most ``capacity`` (the page-index list's length × the page size).

    Exact when every length is forced (``total_q = batch·longest_q = batch·longest_k``: all ``M`` long). Else each
    query row sees at least one key (its own position) and at most ``min(longest_k, window)``, and a sequence's
    rows together at most its query length × the keys it has (``longest_q × capacity`` over the batch). None when
    nothing bounds the keys from above.
    """
    if batch <= 0 or total_q < batch or (longest_k is not None and longest_k < 1):
        return None
    lq = longest_q if longest_q is not None else total_q - batch + 1
    if lq * batch == total_q and longest_k == lq:
        n = batch * mask_pairs(lq, lq, mask)
        return Pairs(n, n)
    hi = _paged_upper(total_q, lq, longest_k, capacity, mask)
    if hi is None:
        return None
    keys = f"1..{longest_k}" if longest_k is not None else f"at most {capacity} in all"
    return Pairs(total_q, max(hi, total_q),
                 f"paged KV cache: {batch} sequences, {total_q} query tokens, contexts of {keys} keys; the context "
                 "lengths are a tensor the trace does not record")


def _paged_upper(total_q: int, lq: int, longest_k: int | None, capacity: int | None, mask: Mask) -> int | None:
    """The most pairs: every query row at its widest reach (``longest_k`` keys, narrowed by a window), and every
    sequence's rows over all the keys the page list holds (``Σ lq_i·lk_i <= max lq · Σ lk_i``); None: unbounded."""
    his = [total_q * _row_width(longest_k, mask)] if longest_k is not None else []
    if capacity is not None:
        his.append(lq * capacity)
    return min(his) if his else None
