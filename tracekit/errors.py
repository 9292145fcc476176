"""Typed errors: the CLI turns each into a one-line ``Error: …`` and an exit code."""

from __future__ import annotations


class TracekitError(Exception):
    """Base class. ``str(err)`` is the one line shown to the user."""

    exit_code = 1


class TraceNotFoundError(TracekitError):
    """The path does not exist, or a folder holds no trace files."""


class TraceReadError(TracekitError):
    """The bytes could not be read or decompressed (permissions, corrupt gzip)."""


class TraceFormatError(TracekitError):
    """The bytes are not JSON, or the JSON is not a profiler trace."""


class OutputError(TracekitError):
    """An output path that would clobber an input, or cannot be written."""
