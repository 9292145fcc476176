"""The results of an analysis: typed objects with their invariants (``check()``), below every renderer.

Importing the package also loads the notebook facade (no pandas until a DataFrame is asked for), which
gives every result its ``to_dataframe()``, ``__repr__`` and ``_repr_html_`` (tracekit.results.views).
"""

from . import notebook as notebook  # registers the views
from .attribution import CATEGORIES, Attribution, BlockResult, InvariantError, RunResult
from .diff import DiffResult, Verdict

__all__ = ["CATEGORIES", "Attribution", "BlockResult", "DiffResult", "InvariantError", "RunResult", "Verdict"]
