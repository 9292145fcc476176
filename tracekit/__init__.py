"""tracekit: where the time goes inside attention, from PyTorch profiler traces.

``import tracekit`` stays light: no torch, tensorboard or pandas.
"""

from .attribute import analyze, attribute_trace
from .errors import TracekitError
from .load import find_trace_files, load_trace
from .result import CATEGORIES, Attribution

__version__ = "0.1.0"
__all__ = ["analyze", "attribute_trace", "load_trace", "find_trace_files", "Attribution", "CATEGORIES",
           "TracekitError", "__version__"]
