"""TensorBoard's *tracekit* tab: the offline HTML report for a logdir's runs (``pip install 'tracekit[tensorboard]'``).

Imported only by TensorBoard, through the ``tensorboard_plugins`` entry point; ``import tracekit`` never loads it.
"""

from __future__ import annotations

from .plugin import PLUGIN_NAME, TracekitLoader, TracekitPlugin

__all__ = ["PLUGIN_NAME", "TracekitLoader", "TracekitPlugin"]
