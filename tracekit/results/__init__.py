"""The results of an analysis: typed objects with their invariants (``check()``), below every renderer.

Importing the package also loads the notebook facade (no pandas until a DataFrame is asked for), which
gives every result its ``to_dataframe()``, ``__repr__`` and ``_repr_html_`` (tracekit.results.views).

What this room holds: the result types (``Attribution`` and its blocks, ``DiffResult``, efficiency, hints,
timelines, per-rank and per-run views), the invariants each ``check()`` asserts, and the rows and words that
every output format shares (``rows``, ``format``), so that no renderer computes a figure of its own. What it may
import (.importlinter's layers): only the bottom modules (``vocab``, ``model``, ``hardware``, ``text``, ``errors``
...); never ``io``, ``analysis``, ``run``, the renderers or the CLI, which all import it. Its tests live in
``tests/results/``.
"""

from . import notebook as notebook  # registers the views
from .attribution import CATEGORIES, Attribution, BlockResult, InvariantError, RunResult
from .diff import DiffResult, Verdict

__all__ = ["CATEGORIES", "Attribution", "BlockResult", "DiffResult", "InvariantError", "RunResult", "Verdict"]
