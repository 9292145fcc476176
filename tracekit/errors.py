"""Typed errors: the CLI turns each into a one-line ``Error: …`` and its ``exit_code``."""

from __future__ import annotations


class TracekitError(Exception):
    """Base class. ``str(err)`` is the one line shown to the user."""

    exit_code = 1


class TraceNotFoundError(TracekitError):
    """The path does not exist (or is a dangling symlink), or a folder holds no trace files."""


class TraceReadError(TracekitError):
    """The bytes could not be read or decompressed (permissions, a FIFO or device, corrupt gzip)."""


class TraceFormatError(TracekitError):
    """The bytes are not JSON, or the JSON is not a profiler trace (an empty file included)."""


class OutputError(TracekitError):
    """An output file that cannot be written (missing folder, full disk, closed stdout)."""


class IncomparableError(TracekitError):
    """``diff --fail-if-slower`` on sides timed differently (device busy time vs host self time)."""


class InconclusiveError(TracekitError):
    """``diff --fail-if-slower`` cannot decide: a side is launch-bound and no measured latency was given, so
    neither busy time nor the profiled span is what the user waits for. Exit 5."""

    exit_code = 5


class UsageError(TracekitError):
    """A command line that must not run as given: ``-o`` naming an input, or an unknown ``-o`` extension.

    Exit 2 like click's own usage errors, but one ``Error: …`` line, since the fix is in the path.
    """

    exit_code = 2
