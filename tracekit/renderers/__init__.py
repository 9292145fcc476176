"""Sibling renderers over one result object; pick one by name or by output file extension."""

from __future__ import annotations

from .base import GROUPINGS, Renderer
from .csvrenderer import CSVRenderer
from .jsonrenderer import JSONRenderer
from .markdown import MarkdownRenderer
from .terminal import TerminalRenderer

RENDERERS: dict[str, type[Renderer]] = {r.name: r for r in (TerminalRenderer, JSONRenderer, CSVRenderer, MarkdownRenderer)}


def renderer_for(fmt: str | None, output: str | None) -> type[Renderer]:
    """An explicit --format wins; else the -o extension; else the terminal table."""
    if fmt:
        return RENDERERS[fmt]
    if output:
        for r in RENDERERS.values():
            if r.extension != ".txt" and output.endswith(r.extension):
                return r
    return TerminalRenderer


__all__ = ["RENDERERS", "GROUPINGS", "Renderer", "renderer_for", "TerminalRenderer", "JSONRenderer",
           "CSVRenderer", "MarkdownRenderer"]
