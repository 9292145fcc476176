"""glibc's malloc settings (``mallopt``), called from one place; each caller says why beside its call."""

from __future__ import annotations

import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # malloc.h


def is_glibc() -> bool:
    """Linux with GNU libc: where ``mallopt`` and these parameters exist."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (OSError, ValueError):  # no such confstr name (musl)
        return False


def mallopt(param: int, value: int) -> bool:
    """``mallopt(param, value)``; False where glibc refused it or is not the C library (musl, macOS, Windows)."""
    if not is_glibc():
        return False
    import ctypes

    try:
        return bool(ctypes.CDLL(None).mallopt(param, value))
    except (OSError, AttributeError):
        return False
