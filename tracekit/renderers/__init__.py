"""Sibling renderers over one result object; pick one by name or by output file extension."""

from __future__ import annotations

from .base import GROUPINGS, Renderer, pick_renderer
from .csvrenderer import CSVRenderer
from .jsonrenderer import JSONRenderer
from .markdown import MarkdownRenderer
from .terminal import TerminalRenderer

RENDERERS: dict[str, type[Renderer]] = {r.name: r for r in (TerminalRenderer, JSONRenderer, CSVRenderer, MarkdownRenderer)}


def renderer_for(fmt: str | None, output: str | None) -> type[Renderer]:
    return pick_renderer(RENDERERS, fmt, output)


__all__ = ["RENDERERS", "GROUPINGS", "Renderer", "renderer_for", "TerminalRenderer", "JSONRenderer",
           "CSVRenderer", "MarkdownRenderer"]
