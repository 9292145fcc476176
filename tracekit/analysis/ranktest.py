"""The Mann-Whitney U test (Wilcoxon rank-sum), in pure Python: what the CI gate asks of per-repeat latencies.

Why this test: repeated timings of a forward pass are skewed (a slow outlier when the machine is busy, never
a fast one), so a test on means (Welch's t) is pulled by one outlier; a rank test asks only whether one side's
repeats tend to lie above the other's. Why exact: the gate runs on 3 to 20 repeats a side, where the normal
approximation is poor; the exact permutation distribution of the rank sum, over the pooled mid-ranks, is exact
with ties too. Beyond ``EXACT_MAX`` samples in all, the normal approximation with tie and continuity corrections
(its error is then far below the gate's alpha). No scipy: tracekit does not depend on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

EXACT_MAX = 40  # samples in all (both sides) up to which the p-values are exact


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTest:
    """U counts the pairs (x, y) with x > y, a tie counting one half (0..n·m). ``p_greater`` is the chance,
    were x and y drawn alike, of a U at least this large (x tends to lie above y); ``p_less`` of one at most
    this small. ``exact``: from the permutation distribution, not the normal approximation."""

    u: float
    n_x: int
    n_y: int
    p_greater: float
    p_less: float
    exact: bool


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> RankTest:
    """The U test of ``x`` against ``y`` (both non-empty)."""
    if not x or not y:
        raise ValueError("the U test needs a sample on each side")
    doubled = _doubled_midranks([*x, *y])
    s_x = sum(doubled[: len(x)])  # twice the rank sum of x
    u = s_x / 2 - len(x) * (len(x) + 1) / 2
    if len(x) + len(y) <= EXACT_MAX:
        p_greater, p_less = _exact(doubled, len(x), s_x)
        exact = True
    else:
        p_greater, p_less = _normal(u, len(x), len(y), doubled)
        exact = False
    return RankTest(u=u, n_x=len(x), n_y=len(y), p_greater=p_greater, p_less=p_less, exact=exact)


def _doubled_midranks(values: list[float]) -> list[int]:
    """Twice each value's mid-rank (1-based; tied values share the mean of their ranks): whole numbers."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + 1) + (j + 1)  # twice the mean of ranks i+1..j+1
        i = j + 1
    return out


def _exact(doubled: list[int], n_x: int, s_x: int) -> tuple[float, float]:
    """P(S >= s_x) and P(S <= s_x), S the doubled rank sum of n_x of the pooled values drawn at random.

    ways[k][s]: how many k-subsets of the values seen so far have doubled rank sum s."""
    top = sum(sorted(doubled)[-n_x:])
    ways = [[0] * (top + 1) for _ in range(n_x + 1)]
    ways[0][0] = 1
    for seen, r in enumerate(doubled):
        for k in range(min(seen + 1, n_x), 0, -1):
            below, row = ways[k - 1], ways[k]
            for s in range(top, r - 1, -1):
                if below[s - r]:
                    row[s] += below[s - r]
    dist = ways[n_x]
    total = sum(dist)
    return sum(dist[s_x:]) / total, sum(dist[: s_x + 1]) / total


def _normal(u: float, n_x: int, n_y: int, doubled: list[int]) -> tuple[float, float]:
    """The normal approximation to U: mean n·m/2, variance n·m/12 · ((N + 1) − Σ(t³ − t) / (N(N − 1))) over the
    tie groups t, and a continuity correction of 1/2."""
    n = n_x + n_y
    ties: dict[int, int] = {}
    for r in doubled:
        ties[r] = ties.get(r, 0) + 1
    var = n_x * n_y / 12 * ((n + 1) - sum(t ** 3 - t for t in ties.values()) / (n * (n - 1)))
    if var <= 0:  # every value tied: nothing tends either way
        return 1.0, 1.0
    mean, sd = n_x * n_y / 2, math.sqrt(var)
    upper = 0.5 * math.erfc((u - mean - 0.5) / sd / math.sqrt(2))
    lower = 0.5 * math.erfc((mean - u - 0.5) / sd / math.sqrt(2))
    return min(1.0, upper), min(1.0, lower)
