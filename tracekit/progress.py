"""A progress line on stderr for loads that take more than about a second.

Silent when stderr is not a terminal (CI logs, pipes) and for quick loads, so that scripted
use sees only data on stdout and real messages on stderr.
"""

from __future__ import annotations

from .text import printable

import sys
import time
from typing import IO, Any


class Progress:
    """``update(name, done, total)`` with byte counts; redraws at most ten times a second."""

    DELAY_S = 1.0
    INTERVAL_S = 0.1

    def __init__(self, stream: IO[str] | None = None, force: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.enabled = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.last = 0.0
        self.drawn = False

    def update(self, name: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < self.DELAY_S or now - self.last < self.INTERVAL_S:
            return
        self.last = now
        pct = 100.0 * done / total if total else 0.0
        bar = "#" * int(pct / 5)
        self.stream.write(f"\rreading {printable(name[:40])} [{bar:<20}] {pct:5.1f}%  "
                          f"{done / 1e6:,.0f}/{total / 1e6:,.0f} MB ")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
