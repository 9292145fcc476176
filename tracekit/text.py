"""Text from a trace made safe for a terminal: the one escape every text output uses (below every layer)."""

from __future__ import annotations


def printable(text: str) -> str:
    """Text from a trace (names, file names) safe on a terminal line: every character that is not printable
    (ESC, BEL, CR, newlines, C1 controls, separators) as its Python escape (``\\x1b``), so that no name can move the
    cursor, write the clipboard (OSC 52) or forge a line."""
    return text if text.isprintable() else "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
