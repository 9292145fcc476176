"""tracekit: where the time goes inside attention, from PyTorch profiler traces.

``import tracekit`` stays light: no torch, tensorboard or pandas, and not even the analysis
until a name is used. The public names load on first access (PEP 562), which keeps
``tracekit --help`` fast (benchmarks/startup.py).
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING
from typing import Any as _Any

from .version import __version__

# public name -> the module that defines it
_LAZY = {
    "analyze": ".run.api",
    "attribute_trace": ".analysis.attribute",
    "load_trace": ".io.load",
    "find_trace_files": ".run.inputs",
    "discover": ".run.inputs",
    "diff_paths": ".run.api",
    "diff": ".run.api",
    "whatif": ".run.api",
    "report": ".reports",
    "annotate": ".annotation",
    "Attribution": ".results",
    "CATEGORIES": ".results",
    "TracekitError": ".errors",
}

__all__ = ["analyze", "attribute_trace", "load_trace", "find_trace_files", "discover", "diff", "diff_paths",
           "whatif", "report", "annotate", "Attribution", "CATEGORIES", "TracekitError", "__version__"]

if TYPE_CHECKING:
    from .analysis.attribute import attribute_trace
    from .errors import TracekitError
    from .io.load import load_trace
    from .results import CATEGORIES, Attribution
    from .annotation import annotate
    from .reports import report
    from .run.api import analyze, diff, diff_paths, whatif
    from .run.inputs import discover, find_trace_files


# Modules reachable as attributes of the package without importing them by hand (``tracekit.runs``, the
# documented home of folders of runs, and the layers' packages: ``tracekit.run.runs`` works after ``import tracekit``).
_MODULES = {"runs": ".run.runs", "run": ".run", "io": ".io", "analysis": ".analysis", "results": ".results",
            "renderers": ".renderers"}


def __getattr__(name: str) -> _Any:
    if name in _MODULES:
        value = _importlib.import_module(_MODULES[name], __name__)
        globals()[name] = value
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public names and the modules reachable from the package (not its own imports: issue 42's ``dir``)."""
    loaded = {n for n in globals() if not n.startswith("_") and n not in ("TYPE_CHECKING", "annotations")}
    return sorted(loaded | set(__all__) | set(_MODULES))
