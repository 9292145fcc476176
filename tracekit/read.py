"""Stream a trace file's events in batches, in bounded memory.

The file (plain or gzip) is read in chunks; the ``traceEvents`` array is cut at event
boundaries and each batch is decoded by msgspec straight into typed structs that keep only
the fields tracekit uses (``args`` beyond those is skipped unparsed). A trace cut off
mid-write yields every complete event and says how many bytes were dropped. Raw Kineto key
spellings are mapped here (``External id``/``external id``, ``Input Dims``/``Input dims``).
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Callable, Iterator

import msgspec
import orjson

from .errors import TraceFormatError, TraceReadError

try:  # ISA-L inflate is ~1.5x zlib's speed; optional
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - depends on the environment
    _zlib = zlib

CHUNK = 32 << 20
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_TRAILER_WINDOW = 4 << 20  # header keys after the events are small; look for the array end in the last 4 MB
_WS = b" \t\r\n"


class Args(msgspec.Struct, gc=False):
    """The only ``args`` keys tracekit reads."""

    correlation: int | float | str | None = None
    ext_id: int | float | str | None = msgspec.field(default=None, name="External id")
    ext_id_2021: int | float | str | None = msgspec.field(default=None, name="external id")
    device: int | float | str | None = None
    nbytes: int | float | str | None = msgspec.field(default=None, name="Bytes")
    device_type: int | float | str | None = msgspec.field(default=None, name="Device Type")
    dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    dims_2021: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input dims")


class Event(msgspec.Struct, gc=False):
    """One trace event, as far as tracekit cares. Every field may be missing."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | str | None = None  # ints stay ints: integer-µs epoch times need exact ns
    dur: int | float | str | None = None
    id: int | float | str | None = None
    args: Args | None = None


_DECODER = msgspec.json.Decoder(list[Event])
_ARG_KEYS = {"correlation": "correlation", "External id": "ext_id", "external id": "ext_id_2021",
             "device": "device", "Bytes": "nbytes", "Device Type": "device_type"}
_SCALAR = (int, float, str)


def _lenient(obj) -> Event | None:
    """One event decoded without a schema: keep what has the expected type, drop the rest."""
    if not isinstance(obj, dict):
        return None
    kw = {}
    for k in ("ph", "cat", "name"):
        v = obj.get(k)
        if isinstance(v, str):
            kw[k] = v
    for k in ("pid", "tid", "id"):
        v = obj.get(k)
        if isinstance(v, _SCALAR) and not isinstance(v, bool):
            kw[k] = v
    for k in ("ts", "dur"):
        v = obj.get(k)
        if isinstance(v, (int, float, str)) and not isinstance(v, bool):
            kw[k] = v
    a = obj.get("args")
    if isinstance(a, dict):
        akw = {f: a[k] for k, f in _ARG_KEYS.items() if isinstance(a.get(k), _SCALAR) and not isinstance(a.get(k), bool)}
        for k, f in (("Input Dims", "dims"), ("Input dims", "dims_2021")):
            if isinstance(a.get(k), list):
                akw[f] = msgspec.Raw(orjson.dumps(a[k]))
        kw["args"] = Args(**akw)
    return Event(**kw)


def decode_events(data: bytes) -> tuple[list[Event], int]:
    """Decode a JSON array of events; odd events are kept leniently. Returns (events, #not-objects)."""
    try:
        return _DECODER.decode(data), 0
    except msgspec.ValidationError:
        raw = msgspec.json.decode(data)
        events = [_lenient(o) for o in raw]
        return [e for e in events if e is not None], sum(e is None for e in events)


class _GzipTruncated(Exception):
    """The compressed stream ended before its end marker; ``tail`` is what could be inflated."""

    def __init__(self, tail: bytes):
        super().__init__("truncated gzip stream")
        self.tail = tail


class _Gunzip:
    """Incremental gunzip that keeps what it inflated when the file is cut short (gzip.open drops it)."""

    def __init__(self, raw, chunk: int):
        self.raw = raw
        self.step = max(1 << 16, chunk // 16)  # compressed bytes per read; traces inflate 10-30x
        self.d = _zlib.decompressobj(wbits=31)

    def read(self, n: int) -> bytes:
        out = []
        size = 0
        while size < n:
            data = self.raw.read(self.step)
            if not data:
                if not self.d.eof:
                    raise _GzipTruncated(b"".join(out))
                break
            piece = self.d.decompress(data)
            while self.d.eof and self.d.unused_data:  # concatenated gzip members
                rest = self.d.unused_data
                self.d = _zlib.decompressobj(wbits=31)
                piece += self.d.decompress(rest)
            out.append(piece)
            size += len(piece)
        return b"".join(out)

    def close(self) -> None:
        pass


class EventStream:
    """Iterate ``batches()`` to get lists of events; afterwards ``header``, ``warnings`` and ``damaged``."""

    def __init__(self, path: Path, progress: Callable[[int, int], None] | None = None, chunk: int = CHUNK):
        self.path = path
        self.chunk = chunk
        self.progress = progress
        self.header: dict = {}
        self.warnings: list[str] = []
        self.damaged = False
        self.not_objects = 0
        self.bytes_read = 0

    # -- reading --------------------------------------------------------------------------
    def _open(self):
        try:
            raw = open(self.path, "rb")
        except OSError as exc:
            raise TraceReadError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        magic = raw.read(2)
        raw.seek(0)
        self._raw = raw
        self._size = max(1, self.path.stat().st_size)
        self._eof = False
        return _Gunzip(raw, self.chunk) if magic == b"\x1f\x8b" else raw

    def _read(self, f) -> bytes:
        if self._eof:
            return b""
        try:
            data = f.read(self.chunk)
        except _GzipTruncated as exc:
            data = exc.tail
            self.damaged = True
            self.warnings.append(f"gzip stream ends early after {self._size:,} compressed bytes; "
                                 "reading what was decompressed")
            self._eof = True
        except OSError as exc:
            raise TraceReadError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        except Exception as exc:  # zlib.error, isal's IsalError: the deflate stream is corrupt
            raise TraceReadError(f"{self.path}: corrupt gzip data ({exc})") from None
        if not data:
            self._eof = True
        self.bytes_read += len(data)
        if self.progress is not None:
            self.progress(self._raw.tell(), self._size)
        return data

    # -- splitting ------------------------------------------------------------------------
    def batches(self) -> Iterator[list[Event]]:
        f = self._open()
        try:
            yield from self._events(f)
        finally:
            f.close()
            self._raw.close()

    def _events(self, f) -> Iterator[list[Event]]:
        buf = b""
        while True:  # find the start of the events array
            more = self._read(f)
            buf += more
            head = buf.lstrip(_WS)[:1]
            if head and head not in (b"{", b"["):
                while more:  # a JSON scalar, or not JSON at all: read it whole to say which
                    more = self._read(f)
                    buf += more
                self._whole_document(buf)
            m = _START.search(buf)
            if m is not None:
                self._parse_prefix(buf[: m.end()])
                buf = buf[m.end():]
                break
            if head == b"[":  # Chrome's bare-array format: an array of event objects
                buf = buf.lstrip(_WS)[1:]
                first = buf.lstrip(_WS)[:1]
                if first not in (b"{", b"]"):
                    if not first and not self._eof:
                        buf = b"[" + buf
                        continue
                    raise TraceFormatError(f"{self.path}: JSON is not a PyTorch profiler trace (no 'traceEvents' list)")
                break
            if not more:
                self._whole_document(buf)  # raises the right error
                return
        # Events are decoded in place: buf[0] is a spare byte that becomes '[' and the ',' after the
        # last complete event becomes ']' for the moment of decoding (no copies of 32 MB chunks).
        buf = bytearray(b" ") + buf
        while True:
            if not self._eof and len(buf) < self.chunk:
                buf += self._read(f)
                continue
            if self._eof:
                yield from self._tail(bytes(buf[1:]))
                return
            cut = _last_boundary(buf)
            if cut < 0:  # one event larger than a chunk: read on
                buf += self._read(f)
                continue
            events, nxt = self._decode_window(buf, cut)
            if events is None:  # a "boundary" inside a string or a nested array: read more and retry
                buf += self._read(f)
                continue
            yield events
            events = None  # the consumer is done: no Raw view into buf survives
            try:
                del buf[1:nxt]
            except BufferError:  # a consumer kept a view into the buffer: leave it be, copy instead
                buf = bytearray(b" ") + buf[nxt:]

    def _decode_window(self, buf: bytearray, cut: int):
        """Decode the events in ``buf[1:cut+1]``; on failure try a few earlier boundaries.

        Returns (events, index of the next event's '{'), or (None, 0) when no boundary works yet.
        """
        error = None
        for _ in range(8):
            saved = buf[cut + 1]
            buf[0], buf[cut + 1] = 0x5B, 0x5D  # '[' and ']'
            view = memoryview(buf)[: cut + 2]
            try:
                events, bad = decode_events(view)
            except msgspec.DecodeError as exc:
                error = str(exc)  # not the exception: its traceback would keep a view of buf alive
                events = None
            finally:
                del view
                buf[0], buf[cut + 1] = 0x20, saved
            if events is not None:
                self.not_objects += bad
                return events, buf.index(b"{", cut + 1)
            cut = _last_boundary(buf, cut)
            if cut < 0:
                return None, 0
        raise TraceFormatError(f"{self.path}: not valid JSON in the events after byte {self.bytes_read - len(buf):,} "
                               f"({error})")

    def _tail(self, buf: bytes) -> Iterator[list[Event]]:
        """The end of the file: the last events, the array's end, and the trailing header keys."""
        stripped = buf.lstrip(_WS)
        if stripped[:1] == b"]":  # the previous batch ended exactly at the last event
            self._parse_trailer(stripped[1:])
            return
        for end in self._array_ends(buf):
            try:
                events, bad = decode_events(b"[" + buf[:end] + b"]")
            except msgspec.DecodeError:
                continue  # a nested array inside the trailing header keys: look further left
            self.not_objects += bad
            self._parse_trailer(buf[end + 1:])
            yield events
            return
        # No array end: the file was cut off mid-write. Keep every complete event.
        self.damaged = True
        cut = _last_boundary(buf, len(buf))
        tries = 0
        while cut >= 0:
            try:
                events, bad = decode_events(b"[" + buf[: cut + 1] + b"]")
            except msgspec.DecodeError as exc:
                tries += 1
                if tries > 64:
                    raise TraceFormatError(f"{self.path}: not valid JSON near the end of the events ({exc})") from None
                cut = _last_boundary(buf, cut)
                continue
            self.not_objects += bad
            self._truncated(len(buf) - cut - 1)
            yield events
            return
        self._truncated(len(buf))

    @staticmethod
    def _array_ends(buf: bytes) -> Iterator[int]:
        """Candidates, right to left, for the ``]`` that closes the events: the remainder must end the document."""
        lo = max(0, len(buf) - _TRAILER_WINDOW)
        j = len(buf)
        while True:
            j = buf.rfind(b"]", lo, j)
            if j < 0:
                return
            rest = buf[j + 1:].strip(_WS)
            if rest in (b"", b"}"):
                yield j
            elif rest[:1] == b"," and rest[-1:] == b"}":
                try:
                    if isinstance(orjson.loads(b"{" + rest[1:]), dict):
                        yield j
                except orjson.JSONDecodeError:
                    pass

    def _truncated(self, dropped: int) -> None:
        self.warnings.append(f"trace is truncated: read {self.bytes_read:,} bytes of JSON, dropped the last "
                             f"{dropped:,} bytes (events cut off mid-write)")

    # -- header ---------------------------------------------------------------------------
    def _parse_prefix(self, prefix: bytes) -> None:
        """Keys before ``traceEvents`` (TraceLens writes its metadata first)."""
        try:
            doc = orjson.loads(prefix + b"]}")
        except orjson.JSONDecodeError:
            return
        if isinstance(doc, dict):
            doc.pop("traceEvents", None)
            self.header.update(doc)

    def _parse_trailer(self, rest: bytes) -> None:
        """Keys after the events (Kineto writes ``deviceProperties``, ``traceName``… after them)."""
        rest = rest.strip(_WS)
        if rest in (b"", b"}"):
            return
        if rest[:1] == b",":
            try:
                doc = orjson.loads(b"{" + rest[1:])
            except orjson.JSONDecodeError:
                self.damaged = True
                self.warnings.append("trace is truncated after its events: header keys at the end were lost")
                return
            if isinstance(doc, dict):
                self.header.update(doc)

    def _whole_document(self, data: bytes) -> None:
        """No events array was found: say precisely what the file is instead."""
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(f"{self.path}: not valid JSON (error at byte {getattr(exc, 'pos', 0):,})") from None
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):  # pragma: no cover - regex missed it
            raise TraceFormatError(f"{self.path}: could not locate the traceEvents array")
        raise TraceFormatError(f"{self.path}: JSON is not a PyTorch profiler trace (no 'traceEvents' list)")


def _last_boundary(buf: bytes, end: int | None = None) -> int:
    """Index of the ``}`` that ends the last event followed by ``,`` and ``{`` before ``end``; -1 if none."""
    j = len(buf) if end is None else end
    while True:
        j = buf.rfind(b"{", 0, j)
        if j <= 0:
            return -1
        k = j - 1
        while k >= 0 and buf[k] in _WS:
            k -= 1
        if k >= 0 and buf[k] == 44:  # ','
            k -= 1
            while k >= 0 and buf[k] in _WS:
                k -= 1
            if k >= 0 and buf[k] == 125:  # '}'
                return k
