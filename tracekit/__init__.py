"""tracekit: where the time goes inside attention, from PyTorch profiler traces.

``import tracekit`` stays light: no torch, tensorboard or pandas, and not even the analysis
until a name is used. The public names load on first access (PEP 562), which keeps
``tracekit --help`` fast (benchmarks/startup.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_LAZY = {
    "analyze": ".attribute",
    "attribute_trace": ".attribute",
    "load_trace": ".load",
    "find_trace_files": ".inputs",
    "discover": ".inputs",
    "diff_paths": ".diff",
    "diff": ".diff",
    "Attribution": ".result",
    "CATEGORIES": ".result",
    "TracekitError": ".errors",
}

__all__ = ["analyze", "attribute_trace", "load_trace", "find_trace_files", "discover", "diff", "diff_paths", "Attribution",
           "CATEGORIES", "TracekitError", "__version__"]

if TYPE_CHECKING:
    from .attribute import analyze, attribute_trace
    from .diff import diff, diff_paths
    from .errors import TracekitError
    from .inputs import discover, find_trace_files
    from .load import load_trace
    from .result import CATEGORIES, Attribution


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
