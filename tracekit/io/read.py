"""Stream a trace file's events in batches, in bounded memory.

The file (plain or gzip) is read in chunks; the ``traceEvents`` array is cut at event
boundaries and each batch is decoded by msgspec straight into typed structs that keep only
the fields tracekit uses (``args`` beyond those is skipped unparsed). Raw Kineto key
spellings are mapped here (``External id``/``external id``, ``Input Dims``/``Input dims``).

Damage is told apart (docs/attribution.md, "Inputs"): a trace cut off mid-write yields every
complete event and says how many bytes were dropped; an event whose values cannot be held
(numbers beyond 64 bits or a double, nesting too deep to decode) is dropped and counted; a
syntax error in a document that ends properly is an error naming its byte offset.

Speed: each batch is first decoded whole at a cheap candidate boundary. Only when that fails
does a string-aware scan (linear, in regex C loops) find the true event boundaries.
"""

from __future__ import annotations

import io
import re
import zlib
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Annotated, Any, NamedTuple, NoReturn, Protocol, cast

import msgspec
import orjson

from . import jsonscan
from ..errors import TraceFormatError, TraceReadError
from .jsonscan import END, JUNK, MORE, before_ws

if TYPE_CHECKING:
    import mmap

_zlib: ModuleType = zlib
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,)  # caught by name: a corrupt deflate stream
try:  # ISA-L inflate is ~1.5x zlib's speed; optional
    from isal import isal_zlib
except ImportError:  # pragma: no cover - depends on the environment
    pass
else:
    _zlib = isal_zlib
    _INFLATE_ERRORS += (cast("type[Exception]", isal_zlib.error),)  # its stub calls the class an instance

CHUNK = 4 << 20
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_TRAILER_WINDOW = 4 << 20  # header keys after the events are small: keep the last 4 MB to judge the ending
_END_WINDOW = 4 << 20  # look for the events' closing ']' this far from the end before scanning
_END_TRIES = 64  # ']' characters examined there, at most (a string of ']'s must not cost quadratic time)
_TAIL_WINDOW = 1 << 20  # a last stretch of events this big takes the fast path (a worker's window, or pieces)
_PASS_READ = 64 << 10  # a window passed over (``FileWindow``): how much of its end is read to find its cut
_WS = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_NOT_WS = re.compile(rb"[^ \t\r\n]")
_AT_BYTE = re.compile(r"\s*\(byte (\d+)\)$")  # where msgspec says JSON is malformed
_SCALAR_STARTS = frozenset(bytes([c]) for c in b'"-0123456789tfn')  # first bytes of a JSON scalar
# What ``EventStream._batch`` returns besides a buffer index (always >= 2): read on without dropping anything
# (the buffer grew), or stop (the end of the events, or an error, was handed out).
_READ_ON, _ENDED = 0, -1

# Numbers beyond 64 bits: no profiler writes them, and orjson could not write them back out.
_Int = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


class Args(msgspec.Struct, gc=False):
    """The only ``args`` keys tracekit reads."""

    correlation: _Int | float | str | None = None
    ext_id: _Int | float | str | None = msgspec.field(default=None, name="External id")
    ext_id_2021: _Int | float | str | None = msgspec.field(default=None, name="external id")
    device: _Int | float | str | None = None
    nbytes: _Int | float | str | None = msgspec.field(default=None, name="Bytes")
    device_type: _Int | float | str | None = msgspec.field(default=None, name="Device Type")
    total_allocated: _Int | float | str | None = msgspec.field(default=None, name="Total Allocated")  # [memory]
    dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    dims_2021: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input dims")
    types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")  # dtypes, with record_shapes
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")  # scalars (is_causal…)
    seq: _Int | float | str | None = msgspec.field(default=None, name="Sequence number")  # autograd: fwd <-> bwd
    fwd_tid: _Int | float | str | None = msgspec.field(default=None, name="Fwd thread id")
    kernel: _Int | float | str | None = None  # a runtime launch's kernel name (HIP writes it; a str is kept)


class Event(msgspec.Struct, gc=False):
    """One trace event, as far as tracekit cares. Every field may be missing."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: _Int | str | None = None
    tid: _Int | str | None = None
    ts: _Int | float | str | None = None  # ints stay ints: integer-µs epoch times need exact ns
    dur: _Int | float | str | None = None
    id: _Int | float | str | None = None
    args: Args | None = None


class FileWindow(NamedTuple):
    """A window of a plain file that ``EventStream.windows()`` passed over unread: the worker reads it itself.

    ``offset`` is the file offset of the byte before the window's first event (the array's '[', a ',' or
    whitespace), ``size`` runs to the byte after its last event's '}' (a ',' or whitespace): the worker writes
    '[' and ']' over those two to decode the window as an array, as the reader does in its own buffer.
    """

    offset: int
    size: int


@dataclass
class ReadSummary:
    """What a read found besides the events: ``batches()`` returns it when it is exhausted.

    ``dropped`` counts events the reader could not use, by reason; ``bytes_read`` is the
    decompressed JSON read; ``damaged`` says results are partial (truncation, lost header).
    """

    header: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    damaged: bool = False
    dropped: Counter[str] = field(default_factory=Counter)
    bytes_read: int = 0


_DECODER = msgspec.json.Decoder(list[Event])
_ONE = msgspec.json.Decoder(Event)
_ARG_KEYS = {"correlation": "correlation", "External id": "ext_id", "external id": "ext_id_2021",
             "device": "device", "Bytes": "nbytes", "Device Type": "device_type", "Total Allocated": "total_allocated",
             "Sequence number": "seq", "Fwd thread id": "fwd_tid", "kernel": "kernel"}
_SCALAR = (int, float, str)
NOT_OBJECT = "not an object"
OUT_OF_RANGE = "number out of range"
TOO_DEEP = "nested too deep"


def _value(v: object) -> object:
    """``v`` if it is a usable scalar; None if not; OUT_OF_RANGE for an int beyond 64 bits."""
    if type(v) is int:
        return v if _INT_MIN <= v <= _INT_MAX else OUT_OF_RANGE
    return v if isinstance(v, _SCALAR) and not isinstance(v, bool) else None


def _lenient(obj: object) -> Event | str:
    """One event decoded without a schema: keep what has the expected type; else why it is dropped."""
    if not isinstance(obj, dict):
        return NOT_OBJECT
    kw: dict[str, Any] = {}
    for k in ("ph", "cat", "name"):
        v = obj.get(k)
        if isinstance(v, str):
            kw[k] = v
    for k in ("pid", "tid", "id", "ts", "dur"):
        v = _value(obj.get(k))
        if v is OUT_OF_RANGE:
            return OUT_OF_RANGE
        if v is not None:
            kw[k] = v
    a = obj.get("args")
    if isinstance(a, dict):
        akw: dict[str, Any] = {}
        for k, f in _ARG_KEYS.items():
            v = _value(a.get(k))
            if v is OUT_OF_RANGE:
                return OUT_OF_RANGE
            if v is not None:
                akw[f] = v
        for k, f in (("Input Dims", "dims"), ("Input dims", "dims_2021"), ("Input type", "types"),
                     ("Concrete Inputs", "concrete")):
            if isinstance(a.get(k), list):
                try:
                    akw[f] = msgspec.Raw(orjson.dumps(a[k]))
                except orjson.JSONEncodeError:  # orjson's limits (255 levels): the typed path keeps such
                    pass  # an event, so keep it here too, without the shapes it only shows
        kw["args"] = Args(**akw)
    return Event(**kw)


def events_array_at(head: bytes) -> int:
    """Index just after the '[' that opens the events array, in ``head`` (a file's text from its start, BOM
    stripped), by the reader's own test (``EventStream._start``): a ``"traceEvents": [`` whose text before it
    parses as the document's first keys, or the '[' of Chrome's bare array of events; -1 while ``head`` does not
    reach it. ``tracekit annotate`` inserts its events there."""
    for m in _START.finditer(head):
        try:
            doc = orjson.loads(head[: m.end()] + b"]}")
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            return m.end()
    rest = head.lstrip(_WS)
    if rest[:1] == b"[" and rest[1:].lstrip(_WS)[:1] in (b"{", b"]"):
        return len(head) - len(rest) + 1
    return -1


def decode_events(data: bytes | bytearray | memoryview) -> tuple[list[Event], Counter[str]]:
    """Decode a JSON array of events; odd events are kept leniently. Returns (events, dropped by reason).

    Raises msgspec.DecodeError or RecursionError when the array cannot be decoded as a whole.
    """
    try:
        return _DECODER.decode(data), Counter()
    except msgspec.ValidationError:
        raw = msgspec.json.decode(data)  # (raises what the typed decoding would have, had it gone on)
    events: list[Event] = []
    dropped: Counter[str] = Counter()
    # Each event typed where it validates, so that its raw shapes keep the file's spelling wherever the
    # batch was cut (workers decode smaller pieces than the serial reader), leniently where it does not.
    spans = list(jsonscan.spans(data, 1, len(data) - 1))  # type: ignore[arg-type]  # (any bytes-like buffer)
    typed = len(spans) == len(raw)  # (always, for an array that decoded: a safeguard)
    for k, o in enumerate(raw):
        e: Event | str | None = None
        if typed:
            s, end = spans[k]
            try:
                e = _ONE.decode(data[s:end])
            except msgspec.ValidationError:
                pass
        if e is None:
            e = _lenient(o)
        if isinstance(e, str):
            dropped[e] += 1
        else:
            events.append(e)
    return events, dropped


# Windows and batches are decoded in pieces of about this size (``decode_pieces``): a piece's decoded events
# (about 2x its JSON) are still in the CPU's cache when they are ingested (benchmarks/README.md).
PIECE = 1 << 19


def decode_pieces(buf: bytearray | mmap.mmap,
                  close: int) -> Generator[tuple[list[Event], Counter[str], int], None, int]:
    """The events of the array ``buf[0:close + 1]`` (its ``[`` and ``]`` written there meanwhile), decoded in
    pieces of about PIECE bytes, in order: (events, their drops, the index just past the piece's last event).

    Each piece is cut where the reader cuts (``jsonscan.last_boundary``) and framed in place by ``[`` and ``]``
    written over the whitespace or comma between two events; the bytes are put back before the piece is
    handed out. A cut inside a string or a nested value never decodes, so the pieces that do are the array's
    events. Returns ``close`` when all decoded, else where the piece that did not starts (0: none did).
    """
    start = 0  # buf[start] is (made) '['
    while start < close:
        end = close
        if close - start > 2 * PIECE:
            cut = jsonscan.last_boundary(buf, start + PIECE)  # type: ignore[arg-type]  # (an mmap is a buffer too)
            if cut > start:
                end = cut + 1  # the byte after the event's '}': whitespace or the comma
        opened, closed = buf[start], buf[end]
        buf[start], buf[end] = 0x5B, 0x5D
        view = memoryview(buf)[start: end + 1]
        try:
            events, dropped = decode_events(view)
        except (msgspec.DecodeError, RecursionError):
            return start
        finally:
            buf[start], buf[end] = opened, closed
        del view  # (the events' raw fields still hold it: the consumer copies what it keeps)
        yield events, dropped, end
        del events
        start = buf.find(b",", end) if end < close else close  # (the comma of the boundary cut at)
    return close


class _GzipTruncated(Exception):
    """The compressed stream ended before its end marker; ``tail`` is what could be inflated."""

    def __init__(self, tail: bytes):
        super().__init__("truncated gzip stream")
        self.tail = tail


class _Inflater(Protocol):
    eof: bool
    unused_data: bytes

    def decompress(self, data: bytes) -> bytes: ...


class _Gunzip:
    """Incremental gunzip that keeps what it inflated when the file is cut short (gzip.open drops it).

    Concatenated members are read on; zero bytes after a member (tape or dd padding) are
    skipped, as gzip(1) and Python's gzip module do.
    """

    def __init__(self, raw: IO[bytes], chunk: int):
        self.raw = raw
        self.step = max(1 << 16, chunk // 16)  # compressed bytes per read; traces inflate 10-30x
        self.d: _Inflater = _zlib.decompressobj(wbits=31)

    def read(self, n: int) -> bytes:
        out = bytearray()
        try:
            self.read_into(out, n)
        except _GzipTruncated:
            raise _GzipTruncated(bytes(out)) from None
        return bytes(out)

    def read_into(self, out: bytearray, n: int) -> None:
        """Inflate at least ``n`` more bytes (fewer at the end) onto the end of ``out``.

        Why onto the caller's buffer: each inflated piece is copied once, where joining the pieces first and then
        appending the joined bytes copied each twice into fresh memory, about 0.9 s of CPU per GB inflated.
        On a cut-short stream, what was inflated is in ``out`` when _GzipTruncated is raised."""
        size = len(out)
        n += size
        while size < n:
            data = self.raw.read(self.step)
            if not data:
                if not self.d.eof:
                    raise _GzipTruncated(b"")
                break
            while data:
                if self.d.eof:  # between members: padding, or the next member's header
                    data = data.lstrip(b"\0")
                    if not data:
                        break
                    if not b"\x1f\x8b".startswith(data[:2]):
                        raise zlib.error("not a gzip member after the end of the stream")
                    self.d = _zlib.decompressobj(wbits=31)
                out += self.d.decompress(data)
                data = self.d.unused_data if self.d.eof else b""
            size = len(out)


class _Source(Protocol):
    def read(self, n: int, /) -> bytes: ...


class Fallback(Exception):
    """``windows()`` met what only the serial reader handles (no cheap boundary): read serially instead."""


class EventStream:
    """``batches()`` yields lists of events, then returns a :class:`ReadSummary`.

    ``windows()`` (tracekit.pload) yields the fast path's windows undecoded, for worker processes to
    decode; ``trusted`` windows, proven there, are then passed over undecoded by a serial re-read.
    """

    def __init__(self, path: Path, progress: Callable[[int, int], None] | None = None, chunk: int = CHUNK,
                 trusted: int = 0, pass_over: bool = False):
        self.path = path
        self.chunk = chunk
        self.progress = progress
        self.trusted = trusted
        # windows() of a plain file: each window but the last few as a FileWindow, its bytes not read here
        # (``_pass_over``); the serial re-read after a failure passes over its ``trusted`` windows the same way
        self.pass_over = pass_over
        self._raw_windows = False
        self._summary = ReadSummary()
        self._raw: IO[bytes] | None = None
        self._size = 1  # compressed bytes, for progress
        self._eof = False
        self._base = 0  # absolute offset, in the decompressed JSON, of buf[1] (buf[0] is a spare byte)
        self._bare = False  # Chrome's bare-array format: no header keys around the events
        self._done = 0  # absolute offset just after the last complete event handed out
        self._scratch: bytearray | None = None  # the buffer plain-file chunks are read into (_read's reuse)

    # -- reading --------------------------------------------------------------------------
    def _open(self) -> _Source:
        try:
            raw = open(self.path, "rb")  # noqa: SIM115 - closed by batches(), after the last read
        except OSError as exc:
            raise TraceReadError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        try:
            magic = raw.read(2)
            raw.seek(0)
            self._size = max(1, self.path.stat().st_size)
        except OSError as exc:
            raw.close()
            raise TraceReadError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        self._raw = raw
        return _Gunzip(raw, self.chunk) if magic == b"\x1f\x8b" else raw

    def _read(self, f: _Source, n: int = 0) -> bytes:
        """The next ``n`` bytes (a chunk by default); b"" at the end."""
        return cast(bytes, self._fetch(f, n, False))

    def _read_view(self, f: _Source) -> bytes | memoryview:
        """The next chunk; from a plain file, a view of one buffer kept for all such reads, valid
        until the next one (the caller copies it at once).

        Why: a fresh 32 MB bytes per chunk is fresh memory to fault in, about 0.2 s per GB read.
        """
        return self._fetch(f, 0, True)

    def _extend(self, f: _Source, buf: bytearray) -> None:
        """``buf +=`` the next chunk: a gzip's inflated straight onto it (_Gunzip.read_into), a plain file's
        through the scratch view (``_read_view``)."""
        if isinstance(f, _Gunzip):
            self._fetch(f, 0, False, buf)
        else:
            buf += self._read_view(f)

    def _fetch(self, f: _Source, n: int, reuse: bool, into: bytearray | None = None) -> bytes | memoryview:
        """The next chunk (at least ``n`` bytes); with ``into`` (a gzip's), inflated onto its end instead, and
        b"" returned. Either way its bytes are counted, and the end, a cut-short stream or an error judged."""
        if self._eof:
            return b""
        held = len(into) if into is not None else 0
        try:
            if into is not None:
                cast(_Gunzip, f).read_into(into, max(n, self.chunk))
                data: bytes | memoryview = b""
            else:
                data = self._read_chunk(f, max(n, self.chunk), reuse)
        except _GzipTruncated as exc:
            data = exc.tail
            self._summary.damaged = True
            self._summary.warnings.append(f"gzip stream ends early after {self._size:,} compressed bytes; "
                                          "reading what was decompressed")
            self._eof = True
        except OSError as exc:
            raise TraceReadError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        except _INFLATE_ERRORS as exc:  # the deflate stream is corrupt
            raise TraceReadError(f"{self.path}: corrupt gzip data ({exc})") from None
        got = len(data) + (len(into) - held if into is not None else 0)
        if not got:
            self._eof = True
        self._summary.bytes_read += got
        if self.progress is not None and self._raw is not None:
            self.progress(self._raw.tell(), self._size)
        return data

    def _read_chunk(self, f: _Source, size: int, reuse: bool) -> bytes | memoryview:
        """``size`` bytes; from a plain file into the one scratch buffer when ``reuse`` (see ``_read_view``)."""
        if reuse and isinstance(f, io.BufferedReader):
            if self._scratch is None or len(self._scratch) < size:
                self._scratch = bytearray(size)
            view = memoryview(self._scratch)
            return view[: f.readinto(view[:size])]
        return f.read(size)

    def _drain(self, f: _Source, tail: bytes) -> bytes:
        """Read to the end, keeping only the last bytes (enough to judge how the document ends)."""
        while not self._eof:
            tail = (tail + self._read(f))[-_TRAILER_WINDOW:]
        return tail

    # -- splitting ------------------------------------------------------------------------
    def batches(self) -> Generator[list[Event], None, ReadSummary]:
        f = self._open()
        try:
            yield from self._events(f)
        finally:
            if self._raw is not None:
                self._raw.close()
        return self._summary

    def windows(self) -> Generator[memoryview | FileWindow | list[Event], None, ReadSummary]:
        """Like ``batches()``, but each fast-path window comes as the JSON array ``[...]`` undecoded.

        A window is a view into the reader's buffer, valid until the next one is asked for.
        Its cut is only a candidate: the consumer proves it by decoding, and on a failure re-reads
        serially (``trusted=`` the windows proven before it). Where the serial reader would take its
        slow path this raises :class:`Fallback`. The last batch is decoded here.
        """
        self._raw_windows = True
        return self.batches()

    def _events(self, f: _Source) -> Iterator[list[Event]]:
        """Fill the buffer to a chunk, hand out the events it ends with (``_batch``), drop them, read on."""
        buf = bytearray(b" ") + self._start(f)
        self._done = self._base
        fresh = True  # buf[1:] follows the array's '[' (not a ','): a ']' may close it at once
        seeks = self.pass_over and isinstance(f, io.BufferedReader) and f.seekable()
        while True:
            if not self._eof and len(buf) < self.chunk:
                if seeks and (self._raw_windows or self.trusted > 0):
                    rest = yield from self._pass_over(cast(io.BufferedReader, f), buf)
                    if rest is not None:
                        buf, fresh = rest, False
                        continue
                self._extend(f, buf)
                continue
            nxt = yield from self._batch(f, buf, fresh)
            if nxt == _ENDED:
                return
            if nxt != _READ_ON:
                buf = self._consume(buf, nxt)
                fresh = False

    def _batch(self, f: _Source, buf: bytearray, fresh: bool) -> Generator[list[Event], None, int]:
        """The events of a full buffer (or of the file's last bytes), by the cheapest path that proves its cut.

        Returns where the rest starts (``buf.index`` of its first event), or _READ_ON (``buf`` grew: one
        element is longer than a chunk), or _ENDED (the end of the events was handed out, or an error).
        """
        if self._eof:
            cut = self._tail_cut(buf)
            if cut <= 0:
                yield from self._last(f, buf, fresh)
                return _ENDED
        else:  # Fast path: decode up to the last thing that looks like a boundary between events.
            cut = jsonscan.last_boundary(buf)
        if (self._raw_windows or self.trusted) and cut > 0:  # decoded elsewhere, or proven there already
            return (yield from self._window(buf, cut))
        if self._raw_windows:
            raise Fallback
        if cut > 0:
            nxt = yield from self._fast(buf, cut)
            if nxt != _READ_ON:
                return nxt
        if self._eof:  # a cut before the end (_tail_cut) that does not decode: the end is _last's, as ever
            yield from self._last(f, buf, fresh)
            return _ENDED
        return (yield from self._slow(f, buf, fresh))

    def _window(self, buf: bytearray, cut: int) -> Generator[list[Event], None, int]:
        """``buf[1:cut + 1]`` as the undecoded window ``[...]`` (``windows()``), or passed over as proven
        (``trusted``); returns where the rest starts."""
        if self._raw_windows:
            saved = buf[cut + 1]
            buf[0], buf[cut + 1] = 0x5B, 0x5D  # '[' and ']' around the window, meanwhile
            with memoryview(buf) as view, view[: cut + 2] as window:
                yield window  # type: ignore[misc]  # (the consumer copies it before it asks for more)
            buf[0], buf[cut + 1] = 0x20, saved
        else:
            self.trusted -= 1
        self._done = self._abs(cut + 1)
        return buf.index(b"{", cut + 1)

    def _pass_over(self, f: io.BufferedReader, buf: bytearray) -> Generator[list[Event], None, bytearray | None]:
        """The next window as a :class:`FileWindow`, found without reading its bytes: only the end of the stretch
        the usual read would hold (``buf`` and one more chunk) is read, and its cut is the usual candidate
        (``jsonscan.last_boundary``) searched there. Returns the new buffer (what follows the cut), or None where
        the usual path must read on: near the file's end, or no candidate in the bytes read.

        Why: the parent of a parallel read would otherwise read, copy and hand over every byte, about a quarter
        of the CPU time of the read (benchmarks/README.md); the worker reads its window from the page cache.
        The cuts depend only on the file and the chunk size, so the serial re-read after a failure finds the same
        windows and passes over the ``trusted`` ones alike.
        """
        have = self._abs(len(buf))  # just past buf's bytes: the file's position now
        end = have + self.chunk  # where the usual read would end the buffer
        size = min(_PASS_READ, self.chunk // 2)
        if end > self._size:
            return None
        f.seek(end - size)
        tail = f.read(size)
        cut = jsonscan.last_boundary(tail) if len(tail) == size else -1
        nxt = tail.find(b"{", cut + 1) if cut > 0 else -1
        if nxt < 0:
            f.seek(have)
            return None
        at = end - size  # the file offset of tail[0]
        if self._raw_windows:
            first = self._abs(1)
            yield FileWindow(first - 1, at + cut + 2 - (first - 1))  # type: ignore[misc]  # (windows() only)
        else:
            self.trusted -= 1
        f.seek(end)
        self._summary.bytes_read += self.chunk
        if self.progress is not None:
            self.progress(end, self._size)
        self._done = at + cut + 1
        self._base = at + nxt
        return bytearray(b" ") + tail[nxt:]

    def _fast(self, buf: bytearray, cut: int) -> Generator[list[Event], None, int]:
        """The events up to the candidate ``cut``, in pieces or whole; returns where the rest starts, or
        _READ_ON when nothing before the cut decodes (the slow path's to find out why)."""
        at = yield from self._pieces(buf, cut + 1)
        if at == cut + 1:  # all of it
            return buf.index(b"{", cut + 1)
        if at > 0:  # pieces before a cut that did not decode: drop them; the rest starts with that one
            return buf.index(b"{", at)
        events = self._decode_window(buf, cut + 1)
        if events is None:
            return _READ_ON
        yield events
        del events  # the consumer is done: no Raw view into buf survives
        self._done = self._abs(cut + 1)
        return buf.index(b"{", cut + 1)

    def _slow(self, f: _Source, buf: bytearray, fresh: bool) -> Generator[list[Event], None, int]:
        """Slow path: the candidate sat inside a string, a nested array, or a bad event. A string-aware scan
        finds the last true boundary; returns where the rest starts, _READ_ON or _ENDED (as ``_batch``)."""
        kind, _, comma = jsonscan.scan(buf, 1, len(buf), fresh)
        if kind == MORE and comma < 0:  # one element larger than what is held: read as much again
            buf += self._read(f, len(buf))  # (in place; doubling keeps the rescans linear in all)
            return _READ_ON
        if kind != MORE:
            yield from self._last(f, buf, fresh)
            return _ENDED
        events, err = self._decode(buf, comma)
        if err is not None:
            yield from self._bad(f, events, err, bytes(buf[-_TRAILER_WINDOW:]))
            return _ENDED
        yield events
        del events
        self._done = self._abs(before_ws(buf, comma))
        return comma + 1

    def _pieces(self, buf: bytearray, close: int) -> Generator[list[Event], None, int]:
        """The events of ``buf[1:close]`` piece by piece (``decode_pieces``); returns where it stopped."""
        pieces = decode_pieces(buf, close)
        while True:
            try:
                events, dropped, end = next(pieces)
            except StopIteration as stopped:
                at: int = stopped.value
                return at
            self._summary.dropped.update(dropped)
            yield events
            del events  # the consumer is done: no Raw view into buf survives
            self._done = self._abs(end)

    def _consume(self, buf: bytearray, nxt: int) -> bytearray:
        """Drop ``buf[1:nxt]``, whose events were handed out."""
        self._base += nxt - 1
        try:
            del buf[1:nxt]
        except BufferError:  # a consumer kept a view into the buffer: leave it be, copy instead
            buf = bytearray(b" ") + buf[nxt:]
        return buf

    def _abs(self, i: int) -> int:
        """Absolute offset in the decompressed JSON of ``buf[i]``."""
        return self._base + i - 1

    def _decode_window(self, buf: bytearray, close: int) -> list[Event] | None:
        """Decode ``buf[1:close]`` in place ('[' at buf[0], ']' at buf[close] meanwhile); None if it fails.

        In place: no copy of a 32 MB chunk. Success proves ``close`` ends an element at the
        array's top level (a prefix cut inside a string or a nested value never decodes).
        """
        saved = buf[close]
        buf[0], buf[close] = 0x5B, 0x5D  # '[' and ']'
        view = memoryview(buf)[: close + 1]
        try:
            events, dropped = decode_events(view)
        except (msgspec.DecodeError, RecursionError):
            return None  # (the exception is not kept: its traceback would hold a view of buf)
        finally:
            del view
            buf[0], buf[close] = 0x20, saved
        if dropped:
            self._summary.dropped.update(dropped)
        return events

    def _decode(self, buf: bytearray, close: int) -> tuple[list[Event], tuple[int, str] | None]:
        """The elements of ``buf[1:close]``: whole if possible, else one by one.

        One at a time, an event that cannot be held is dropped and counted; a syntax error stops
        the decoding and comes back as (absolute offset, reason) with the events before it.
        """
        events = self._decode_window(buf, close)
        if events is not None:
            return events, None
        events = []
        for s, e in jsonscan.spans(buf, 1, close):
            err = self._decode_element(bytes(buf[s:e]), s, events)
            if err is not None:
                return events, err
        return events, None

    def _decode_element(self, data: bytes, s: int, events: list[Event]) -> tuple[int, str] | None:
        """Append the event in ``data`` (read from ``buf[s:]``) or count why it is dropped.

        Returns (absolute offset, reason) when ``data`` is not JSON.
        """
        try:
            events.append(_ONE.decode(data))
            return None
        except msgspec.ValidationError:
            pass
        except RecursionError:
            self._summary.dropped[TOO_DEEP] += 1
            return None
        except msgspec.DecodeError as exc:
            return self._where(data, s, exc)
        try:
            ev = _lenient(msgspec.json.decode(data))
        except msgspec.ValidationError:  # msgspec's only value complaint about untyped JSON: a number
            ev = OUT_OF_RANGE
        except RecursionError:
            ev = TOO_DEEP
        except msgspec.DecodeError as exc:  # a syntax error after the value the typed decoder stopped at
            return self._where(data, s, exc)
        if isinstance(ev, str):
            self._summary.dropped[ev] += 1
        else:
            events.append(ev)
        return None

    def _where(self, data: bytes, s: int, exc: msgspec.DecodeError) -> tuple[int, str]:
        """(absolute offset, reason) of msgspec's complaint about ``data``, read from ``buf[s:]``."""
        msg = str(exc)
        m = _AT_BYTE.search(msg)
        if m is not None:
            off, why = int(m.group(1)), msg[: m.start()].removeprefix("JSON is malformed: ")
        elif "UTF-8" in msg:
            off, why = 0, "invalid UTF-8"
            try:
                data.decode()
            except UnicodeDecodeError as u:
                off = u.start
        else:
            off, why = len(data), msg
        return self._abs(s) + off, why

    # -- the end of the events --------------------------------------------------------------
    def _last(self, f: _Source, buf: bytearray, fresh: bool) -> Iterator[list[Event]]:
        """The last events, the array's end and the trailing header keys; the file is read to its end."""
        if not self._eof:  # the array ended before the last chunk: the rest is header keys
            buf += self._drain(f, b"")  # (bounded: a longer trailer is cut, and judged damaged)
        end, events = self._array_end(buf)
        if events is not None:
            self._parse_trailer(buf, end + 1)
            yield events
            return
        kind, where, comma = jsonscan.scan(buf, 1, len(buf), fresh)
        if kind == END:
            yield from self._last_complete(f, buf, where)
            return
        events, err = self._decode_to_comma(buf, comma)
        if err is None and kind == JUNK:
            err = self._junk_error(buf, where)
        if err is None:  # the end came in an element: cut off mid-write, or a syntax error in it?
            err = self._last_element(buf, where, events)
        if err is not None:
            yield from self._bad(f, events, err, bytes(buf[-_TRAILER_WINDOW:]))
            return
        self._summary.damaged = True
        self._summary.warnings.append(
            f"trace is truncated: read {self._summary.bytes_read:,} bytes of JSON, dropped the last "
            f"{self._summary.bytes_read - self._done:,} bytes (events cut off mid-write)")
        if events:
            yield events

    def _decode_to_comma(self, buf: bytearray, comma: int) -> tuple[list[Event], tuple[int, str] | None]:
        """The elements before the last comma (none when ``comma`` is 0), which are then done."""
        if comma <= 0:
            return [], None
        out = self._decode(buf, comma)
        self._done = self._abs(before_ws(buf, comma))
        return out

    def _last_complete(self, f: _Source, buf: bytearray, end: int) -> Iterator[list[Event]]:
        """The array ends at ``end`` in the last read: its last events, then the trailing header keys."""
        events, err = self._decode(buf, end)
        if err is not None:
            yield from self._bad(f, events, err, bytes(buf[-_TRAILER_WINDOW:]))
            return
        self._parse_trailer(buf, end + 1)
        yield events

    def _junk_error(self, buf: bytearray, where: int) -> tuple[int, str]:
        """Where and why what follows the last element (not an element, not the array's end) is malformed:
        msgspec's own words where it finds the fault, else the first unexpected byte."""
        data = bytes(buf[where:])
        err = (self._abs(where), f"unexpected {data[:1]!r}")
        try:
            msgspec.json.decode(data, type=msgspec.Raw)
        except msgspec.DecodeError as exc:
            err = self._where(data, where, exc)
        except RecursionError:
            pass
        return err

    def _last_element(self, buf: bytearray, where: int, events: list[Event]) -> tuple[int, str] | None:
        """The element the file ends in: None when it was cut off mid-write (the caller reports the truncation),
        its error when it holds a syntax error before the cut, and kept (into ``events``) when it is complete and
        only its ',' or the array's ']' is missing."""
        data = bytes(buf[where:]).rstrip(_WS)
        try:
            msgspec.json.decode(data, type=msgspec.Raw)
        except msgspec.DecodeError as exc:
            at, why = self._where(data, where, exc)
            return (at, why) if at < self._abs(where + len(data)) else None
        except RecursionError:  # too deep to tell: take it for the cut
            return None
        if not data:
            return None
        err = self._decode_element(data, where, events)
        self._done = self._abs(where + len(data))
        return err

    def _tail_cut(self, buf: bytearray) -> int:
        """At the end of the file: a candidate cut before the events' closing ']', so that a big last stretch of
        events takes the fast path (in pieces, or as a window for a worker) and ``_last`` decodes only the last
        event and the trailer; -1 for a small tail or an ending that does not look usual.

        The ']' is only a guess (the last one followed by what can end the document); the cut before it is
        proven, as every window's is, by decoding, and everything after it is ``_last``'s as before.
        """
        if len(buf) < _TAIL_WINDOW:
            return -1
        for j in self._closing_candidates(buf):
            return jsonscan.last_boundary(buf, j)
        return -1

    def _array_end(self, buf: bytearray) -> tuple[int, list[Event] | None]:
        """The ']' that closes the events, with the events, when the document ends the usual way.

        Candidates are tried right to left near the end; a decode proves one. The number tried is
        bounded, so a tail full of ']'s falls through to the linear scan instead of costing n².
        Returns (-1, None) when unsure.
        """
        for decodes, j in enumerate(self._closing_candidates(buf)):
            if decodes >= 3:
                break
            events = self._decode_window(buf, j)
            if events is not None:
                return j, events
        return -1, None

    def _closing_candidates(self, buf: bytearray) -> Iterator[int]:
        """Right to left near the end, the ']'s followed by what can end the document (``_ends_after``);
        at most _END_TRIES ']'s are examined."""
        lo = max(1, len(buf) - _END_WINDOW)
        j = len(buf)
        for _ in range(_END_TRIES):
            j = buf.rfind(b"]", lo, j)
            if j < 0:
                return
            if self._ends_after(buf, j + 1):
                yield j

    def _ends_after(self, buf: bytearray | bytes, i: int) -> bool:
        """Whether ``buf[i:]`` can end the document after the events' ']' (no keys, or valid ones)."""
        m = _NOT_WS.search(buf, i)
        if m is None:
            return True
        c = buf[m.start()]
        if self._bare:
            return False
        if c == 0x7D:  # '}'
            return _NOT_WS.search(buf, m.start() + 1) is None
        if c != 0x2C:
            return False
        try:
            return isinstance(orjson.loads(b"{" + bytes(buf[m.start() + 1:])), dict)
        except orjson.JSONDecodeError:
            return False

    def _ends_properly(self, tail: bytes) -> bool:
        """Whether the file ends as a complete trace does (judged from its last bytes)."""
        end = tail.rstrip(_WS)
        if self._bare:
            return end.endswith(b"]")
        if not end.endswith(b"}"):
            return False
        j = len(end)
        for _ in range(_END_TRIES):
            j = end.rfind(b"]", 0, j)
            if j < 0:
                return False
            if self._ends_after(end, j + 1):
                return True
        return False

    def _bad(self, f: _Source, events: list[Event], err: tuple[int, str], tail: bytes) -> Iterator[list[Event]]:
        """A syntax error at an absolute offset: fatal in a complete document; else where the writer stopped."""
        at, why = err
        tail = self._drain(f, tail)
        if self._ends_properly(tail):
            raise TraceFormatError(f"{self.path}: not valid JSON at byte {at:,} ({why})")
        self._summary.damaged = True
        self._summary.warnings.append(
            f"trace is truncated: not valid JSON from byte {at:,} ({why}) and the file does not end like a trace; "
            f"dropped the last {self._summary.bytes_read - at:,} of {self._summary.bytes_read:,} bytes")
        if events:
            yield events

    # -- header ---------------------------------------------------------------------------
    def _start(self, f: _Source) -> bytes:
        """Read up to the events array's '[' and return what follows it (a BOM is skipped)."""
        buf = self._read(f)
        if buf.startswith(_BOM):
            buf = buf[3:]
            self._base = 3
        while True:
            head = buf.lstrip(_WS)[:1]
            if head and head not in (b"{", b"["):
                self._not_an_object(f, buf, head)
            for m in _START.finditer(buf):
                if self._parse_prefix(buf[: m.end()]):
                    self._base += m.end()
                    return buf[m.end():]
            if head == b"[":  # Chrome's bare-array format: an array of event objects
                rest = self._bare_array(buf)
                if rest is not None:
                    return rest
            if self._eof:
                self._whole_document(buf)
            buf += self._read(f)

    def _not_an_object(self, f: _Source, buf: bytes, head: bytes) -> NoReturn:
        """The document starts with neither '{' nor '[': a JSON scalar, or not JSON at all (then no need to read a
        binary file through)."""
        if head not in _SCALAR_STARTS:
            at = self._base + len(buf) - len(buf.lstrip(_WS))
            raise TraceFormatError(f"{self.path}: not valid JSON at byte {at:,} (no JSON text starts with {head!r})")
        self._whole_document(buf + self._drain_all(f))

    def _bare_array(self, buf: bytes) -> bytes | None:
        """What follows the '[' of a bare array of events (Chrome's format); None while the read text does not
        yet show its first element. An array of anything but objects is not a trace."""
        i = buf.index(b"[")
        first = buf[i + 1:].lstrip(_WS)[:1]
        if first in (b"{", b"]"):
            self._bare = True
            self._base += i + 1
            return buf[i + 1:]
        if first or self._eof:
            raise TraceFormatError(f"{self.path}: JSON is not a PyTorch profiler trace (no 'traceEvents' list)")
        return None

    def _drain_all(self, f: _Source) -> bytes:
        out: list[bytes] = []
        while not self._eof:
            out.append(self._read(f))
        return b"".join(out)

    def _parse_prefix(self, prefix: bytes) -> bool:
        """Keys before ``traceEvents`` (TraceLens writes its metadata first); False if this is no top-level key."""
        try:
            doc = orjson.loads(prefix + b"]}")
        except orjson.JSONDecodeError:
            return False
        if not isinstance(doc, dict):
            return False
        doc.pop("traceEvents", None)
        self._summary.header.update(doc)
        return True

    def _parse_trailer(self, buf: bytearray, i: int) -> None:
        """Keys after the events (Kineto writes ``deviceProperties``, ``traceName``… after them)."""
        rest = bytes(buf[i:]).strip(_WS)
        if rest == b"}" or self._bare:
            return
        if rest[:1] == b",":
            try:
                doc = orjson.loads(b"{" + rest[1:])
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict):
                self._summary.header.update(doc)
                return
        self._summary.damaged = True
        self._summary.warnings.append("trace is truncated after its events: header keys at the end were lost")

    def _whole_document(self, data: bytes) -> NoReturn:
        """No events array was found: say precisely what the file is instead."""
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            at = len(exc.doc[: exc.pos].encode()) if isinstance(exc.doc, str) else exc.pos  # chars to bytes
            raise TraceFormatError(f"{self.path}: not valid JSON at byte {self._base + at:,} ({exc.msg})") from None
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):  # pragma: no cover - regex missed it
            raise TraceFormatError(f"{self.path}: could not locate the traceEvents array")
        raise TraceFormatError(f"{self.path}: JSON is not a PyTorch profiler trace (no 'traceEvents' list)")
