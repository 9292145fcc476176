"""Survivors of the third mutmut run in tracekit.analysis.compare (issue 21): the median step's matmul roles are
None, not an empty value, when a median step has none (results/diff.py: "None if a block lacks roles")."""

from __future__ import annotations

from tracekit.analysis.compare import median_step
from tracekit.results.diff import Figures
from tracekit.vocab import CATEGORIES, MATMUL_ROLES


def _fig(total: float, roles: dict[str, float] | None) -> Figures:
    cats = dict.fromkeys(CATEGORIES, 0.0)
    cats[CATEGORIES[0]] = total
    return Figures(total_us=total, categories=cats, matmul_roles=roles, span_us=total, idle_us=0.0)


def test_median_step_without_roles_has_none():
    """One step (the only one, so the median) without roles: the median step's roles are None exactly."""
    m = median_step([(0, _fig(10.0, None))])
    assert m.matmul_roles is None
    assert m.total_us == 10.0


def test_median_of_two_steps_one_without_roles_has_none_and_both_with_roles_average():
    """Two steps, 10 and 30 µs: the median is the mean of both (20 µs); one lacks roles, so the median has none.
    With roles on both (first role 4 and 8 µs) the median's first role is (4 + 8) / 2 = 6 µs."""
    r1 = dict.fromkeys(MATMUL_ROLES, 0.0) | {MATMUL_ROLES[0]: 4.0}
    r2 = dict.fromkeys(MATMUL_ROLES, 0.0) | {MATMUL_ROLES[0]: 8.0}
    m = median_step([(0, _fig(10.0, r1)), (1, _fig(30.0, None))])
    assert m.total_us == 20.0 and m.matmul_roles is None
    both = median_step([(0, _fig(10.0, r1)), (1, _fig(30.0, r2))])
    assert both.matmul_roles is not None and both.matmul_roles[MATMUL_ROLES[0]] == 6.0
