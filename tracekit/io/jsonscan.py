"""Find the elements of a JSON array in a buffer without decoding them, minding strings and nesting.

This is the reader's slow path (tracekit/io/read.py): it runs only when decoding a batch at a cheap
candidate boundary fails. Every pass is linear, and the work happens in regex C loops: a run
of shallow elements is one match. Bracket kinds and token spellings are not checked here;
msgspec checks them when the elements are decoded, and says where they are wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

WS = b" \t\r\n"
MORE, END, JUNK = "more", "end", "junk"

_WS_RUN = rb"[ \t\r\n]*+"
_STRING = rb'"(?:[^"\\]++|\\.)*+"'


def _object(depth: int) -> bytes:
    """A regex for one JSON object nested at most ``depth`` deep (brackets' kinds are msgspec's to check)."""
    body = rb'(?:[^"\[\]{}]++|' + _STRING + rb")*+"
    for _ in range(depth):
        body = rb'(?:[^"\[\]{}]++|' + _STRING + rb"|[\[{]" + body + rb"[\]}])*+"
    return rb"\{" + body + rb"\}"


_EVENT = _object(6)  # an event, its args, Input Dims' lists of lists: deeper ones take skip()
_RUN = re.compile(rb"(?:" + _WS_RUN + _EVENT + _WS_RUN + rb",)*+", re.DOTALL)  # whole events, each followed by ','
_ONE_EVENT = re.compile(_WS_RUN + rb"(" + _EVENT + rb")", re.DOTALL)
_NOT_WS = re.compile(rb"[^ \t\r\n]")
_STRUCT = re.compile(rb'["\[\]{}]')
_STRING_REST = re.compile(rb'(?:[^"\\]++|\\.)*+"', re.DOTALL)  # from just after the opening quote
_BARE = re.compile(rb'[^ \t\r\n,\[\]{}":]++')  # a number or literal (msgspec checks its spelling)


def skip(buf: bytearray, i: int, end: int, whole: bool = False) -> int:
    """End of the JSON value starting at ``buf[i]`` (not whitespace).

    -1 if it runs past ``end`` (a number that reaches ``end`` may go on, unless ``whole``);
    -2 if no value starts there.
    """
    c = buf[i]
    if c == 0x22:  # '"'
        m = _STRING_REST.match(buf, i + 1, end)
        return m.end() if m else -1
    if c not in (0x7B, 0x5B):  # '{', '['
        m = _BARE.match(buf, i, end)
        if m is None:
            return -2
        return m.end() if m.end() < end or whole else -1
    depth = 0
    while True:
        m = _STRUCT.search(buf, i, end)
        if m is None:
            return -1
        i = m.end()
        c = buf[i - 1]
        if c == 0x22:
            m = _STRING_REST.match(buf, i, end)
            if m is None:
                return -1
            i = m.end()
        elif c == 0x7B or c == 0x5B:
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i


def scan(buf: bytearray, i: int, end: int, fresh: bool) -> tuple[str, int, int]:
    """Walk the array's elements in ``buf[i:end]``, which starts just after its '[' (``fresh``) or a ','.

    Returns (what stopped it, where, the last ',' that follows a complete element or -1):
    MORE (``end`` came first; where = the start of the unfinished part), END (where = the
    array's ']') or JUNK (where = the start of the element that is, or is followed by, bad bytes).
    """
    comma = -1
    while True:
        run = _RUN.match(buf, i, end)  # (a '*' pattern: it always matches)
        if run is not None and run.end() > i:
            i = run.end()
            comma, fresh = i - 1, False
        m = _NOT_WS.search(buf, i, end)
        if m is None:
            return MORE, i, comma
        j = m.start()
        if buf[j] == 0x5D and fresh:  # ']': an empty array
            return END, j, comma
        k = skip(buf, j, end)
        if k == -2:
            return JUNK, j, comma
        if k < 0:
            return MORE, j, comma
        m = _NOT_WS.search(buf, k, end)
        if m is None:
            return MORE, j, comma
        k = m.start()
        if buf[k] == 0x2C:  # ','
            i, comma, fresh = k + 1, k, False
        elif buf[k] == 0x5D:
            return END, k, comma
        else:
            return JUNK, j, comma  # (the element may be the bad part: msgspec says where)


def spans(buf: bytearray, i: int, end: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each complete element in ``buf[i:end]``, a stretch that ``scan`` passed."""
    while True:
        m = _ONE_EVENT.match(buf, i, end)
        if m is not None:
            s, k = m.span(1)
        else:
            m = _NOT_WS.search(buf, i, end)
            if m is None:
                return
            s = m.start()
            k = skip(buf, s, end, whole=True)
            if k < 0:
                return
        yield s, k
        m = _NOT_WS.search(buf, k, end)
        if m is None or buf[m.start()] != 0x2C:
            return
        i = m.start() + 1


def before_ws(buf: bytearray, i: int) -> int:
    """``i`` moved left over whitespace."""
    while i > 1 and buf[i - 1] in WS:
        i -= 1
    return i


def last_boundary(buf: bytes | bytearray, end: int | None = None) -> int:
    """Index of the ``}`` that ends the last event followed by ``,`` and ``{`` before ``end``; -1 if none.

    Only a candidate (it may sit inside a string): decoding up to it proves it. The search gives
    up after 4096 '{'s, so text full of braces costs little before the scan takes over.
    """
    j = len(buf) if end is None else end
    for _ in range(4096):
        j = buf.rfind(b"{", 0, j)
        if j <= 0:
            return -1
        k = _ws_left(buf, j - 1)
        if k >= 0 and buf[k] == 44:  # ','
            k = _ws_left(buf, k - 1)
            if k >= 0 and buf[k] == 125:  # '}'
                return k
    return -1


def _ws_left(buf: bytes | bytearray, k: int) -> int:
    """``k`` moved left over whitespace (-1 when only whitespace is left). Once or twice per candidate '{' of
    last_boundary (one per chunk in practice), never per event."""
    while k >= 0 and buf[k] in WS:
        k -= 1
    return k
