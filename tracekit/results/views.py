"""Where a result finds its notebook views (DataFrame, one-line repr, HTML table) without importing them.

Why: the views (tracekit.results.notebook) take the result types as input, so the result types cannot import
them back without a cycle. The notebook facade registers its functions here when ``tracekit.results`` loads
(its ``__init__`` imports it), and a result's ``to_dataframe()``/``__repr__``/``_repr_html_`` call through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_VIEWS: dict[str, Callable[..., Any]] = {}


def register(name: str, fn: Callable[..., Any]) -> None:
    _VIEWS[name] = fn


def show(name: str, *args: Any) -> Any:
    """The registered view ``name`` applied to ``args``."""
    return _VIEWS[name](*args)
