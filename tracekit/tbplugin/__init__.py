"""TensorBoard's *tracekit* tab: the offline HTML report for a logdir's runs (``pip install 'tracekit[tensorboard]'``).

Imported only by TensorBoard, through the ``tensorboard_plugins`` entry point; ``import tracekit`` never loads it.

What this room holds: the plugin (``plugin``: the tab's routes, listing a logdir's runs and rendering the same HTML
report as ``tracekit report``), the annotated-trace route (``annotated``: ``tracekit annotate``'s copy, cached
outside the logdir) and the tab's page script (``index.js``). What it may import (.importlinter's layers): it sits
at the top beside ``cli``, so anything in tracekit (run, renderers, annotate and below), and TensorBoard/werkzeug;
nothing in tracekit imports it. Its tests live in tests/tbplugin/ (a real TensorBoard on 127.0.0.1).
"""

from __future__ import annotations

from .plugin import PLUGIN_NAME, TracekitLoader, TracekitPlugin

__all__ = ["PLUGIN_NAME", "TracekitLoader", "TracekitPlugin"]
