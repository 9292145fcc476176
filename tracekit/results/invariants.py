"""The bottom of results/: what every result's ``check()`` uses to say that its figures add up.

Why one module: the tolerances (1 ns per rounded term, float rounding of huge sums) and the error raised are
the same for every result type, and every result module may import this one without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable

from ..vocab import CATEGORIES, MATMUL_ROLES

EPS_US = 0.002  # 1 ns rounding on each side of a sum
REL = 1e-9  # float rounding of sums of huge figures (a 1e17 µs kernel), where 1 ns is below one ulp


class InvariantError(AssertionError):
    """A result broke one of its invariants: a tracekit bug, never a user error."""


def expect(ok: bool, msg: str | Callable[[], str]) -> None:
    """Raise InvariantError(msg) unless ``ok``: one invariant per call, one line each in a ``check()``.

    ``msg`` may be a function that makes it: the checks that run once per block (thousands on a 1 GB trace) pass
    their f-strings as lambdas, so that numbers are formatted only for a message that is raised."""
    if not ok:
        raise InvariantError(msg() if callable(msg) else msg)


def zero_categories() -> dict[str, float]:
    return dict.fromkeys(CATEGORIES, 0.0)


def near(terms: int, scale: float) -> float:
    """How far apart two figures may be and still be equal: ``terms`` ns roundings, or float rounding of ``scale``."""
    return max(EPS_US * terms, REL * abs(scale))


def close(a: float, b: float, terms: int = 1, scale: float = 0.0) -> bool:
    """``a == b`` up to ``terms`` ns roundings, or up to float rounding relative to the figures involved
    (the larger of ``a``, ``b`` and ``scale``, the magnitude of the terms summed)."""
    return abs(a - b) <= max(EPS_US * terms, REL * max(abs(a), abs(b), scale))


def check_roles(roles: dict[str, float], matmul: float, where: str) -> None:
    """The matmul roles partition ``matmul``: every role key, none negative, summing to it."""
    expect(list(roles) == list(MATMUL_ROLES), lambda: f"{where}: matmul role keys {list(roles)}")
    expect(all(v >= -EPS_US for v in roles.values()), lambda: f"{where}: negative matmul role")
    expect(close(sum(roles.values()), matmul, len(MATMUL_ROLES), matmul),
           lambda: f"{where}: matmul roles sum {sum(roles.values())} != matmul {matmul}")
