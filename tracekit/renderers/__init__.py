"""Renderers by format; each renders both an attribution and a diff. Pick one by name or by output file extension.

What this room holds: one renderer per output format (terminal table, JSON, CSV, Markdown, the HTML report with
its ``report.js``/``timeline.js``/``report.css``) and the lines they share (``base``, ``names``). A renderer
words and lays out figures the results already hold; it computes none. What it may import (.importlinter's
layers): ``results`` and the bottom modules (``vocab``, ``model``, ``hardware``, ``text`` ...); never ``run`` or
the CLI, which sit above it, and no analysis is re-run here. Its tests live in ``tests/renderers/``.
"""

from __future__ import annotations

from .base import GROUPINGS, Renderer, pick_renderer, verdict_line
from .csvrenderer import CSVRenderer
from .jsonrenderer import JSONRenderer
from .markdown import MarkdownRenderer
from .terminal import TerminalRenderer

RENDERERS: dict[str, type[Renderer]] = {
    r.name: r for r in (TerminalRenderer, JSONRenderer, CSVRenderer, MarkdownRenderer)}
DIFF_RENDERERS = RENDERERS  # the same classes render a DiffResult


def renderer_for(fmt: str | None, output: str | None) -> type[Renderer]:
    """The renderer class for ``--format`` (wins), else ``-o``'s extension, else the terminal table."""
    return pick_renderer(RENDERERS, fmt, output)


diff_renderer_for = renderer_for  # one picker serves both commands

__all__ = ["RENDERERS", "DIFF_RENDERERS", "GROUPINGS", "Renderer", "renderer_for", "diff_renderer_for",
           "verdict_line", "TerminalRenderer", "JSONRenderer", "CSVRenderer", "MarkdownRenderer"]
