"""A copy of a trace with secrets removed, so that it can be shared (``tracekit redact IN -o OUT``).

Traces embed what the profiled process saw: environment dumps and command lines in metadata, and user
names in the file paths of stacks and Python frames. A public trace once held a Hugging Face token.
The rules of ``REDACT_RULES`` (named, ordered) are applied to the trace's JSON text as bytes:

- streamed: the input is read in 1 MiB chunks, and each is cut after its last ``,`` that lies outside any
  JSON string, so that no string, and no ``"KEY": "value"`` pair, is split between chunks. Memory is bounded
  by the chunk plus the longest run of text without such a comma (one huge string), never the whole trace;
- every replacement is plain ASCII without quotes or backslashes, so the copy stays valid JSON and
  attributes exactly like the original (tests/test_redact.py checks the JSON output of both).
"""

from __future__ import annotations

import itertools
import os
import re
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from .errors import TraceFormatError, UsageError
from .output import refuse_inputs, trace_copy

CHUNK = 1 << 20
_WS = b" \t\n\r"  # JSON's whitespace
_BOM = b"\xef\xbb\xbf"
_SCALAR_STARTS = frozenset(bytes([c]) for c in b'"-0123456789tfn')  # first bytes of a JSON text that is no object
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # bytes no JSON text holds, even in a string


@dataclass(frozen=True, slots=True)
class RedactRule:
    """One kind of secret: ``pattern`` over the JSON text (bytes), replaced by ``repl`` (a bytes template)."""

    name: str
    pattern: re.Pattern[bytes]
    repl: bytes | Callable[[re.Match[bytes]], bytes]
    # The pattern starts with a name run (keyword + _NAME_REST): where it failed at one keyword of a run, it fails
    # at every later keyword of the same run (the run and what follows it are the same), so those are skipped.
    name_run: bool = False
    says: str = ""  # what it replaces, in plain words (the CLI's summary)
    # Literals every match holds (one of them), where the pattern does not start with one: ``_rules`` skips the
    # rule where none is in the text. Why: the regex engine finds a leading literal fast, but a pattern that starts
    # with a class or an alternation is tried at every byte that could start it ([srp]k_ at every s, r and p: 6 s
    # per GB of trace); a search for a literal runs at about 1.5 GB/s.
    needs: tuple[bytes, ...] = ()


_SEP = rb"(?:/|\\/)"  # a slash, or JSON's escaped one
_BSL = rb"(?:\\\\){1,2}"  # a Windows backslash as JSON writes it (\\), or doubled again inside an escaped string
_USER = rb"[^/\\\"\s:*?<>|]+"
_NAME_WORD = rb"(?:token|secret|passw(?:or)?d|key|credentials?|auth)"  # in a variable or member name
_NAME_REST = rb"[A-Za-z0-9_.-]*"

# Values that are settings, not secrets: TOKENIZERS_PARALLELISM=false, "KEY_SIZE": "256".
_NOT_SECRET = rb"(?:true|false|none|null|\d{1,6})"

# Token shapes, found wherever they are. Each starts with a literal, which the regex engine searches fast.
REDACT_RULES: tuple[RedactRule, ...] = (
    RedactRule(name="hf-token", pattern=re.compile(rb"hf_[A-Za-z0-9]{20,}"), repl=b"hf_<redacted>",
               says="Hugging Face tokens (hf_...)"),
    RedactRule(name="aws-access-key-id", pattern=re.compile(rb"(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}(?![A-Z0-9])"),
               repl=b"<redacted-aws-key-id>", says="AWS access key ids (AKIA...)"),
    RedactRule(name="github-token", pattern=re.compile(rb"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"),
               repl=b"<redacted-github-token>", says="GitHub tokens (ghp_..., github_pat_...)"),
    RedactRule(name="openai-key", pattern=re.compile(rb"sk-(?:proj-)?[A-Za-z0-9_-]{20,}"), repl=b"sk-<redacted>",
               says="OpenAI-style API keys (sk-...)"),
    RedactRule(name="slack-token", pattern=re.compile(rb"xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"),
               repl=b"<redacted-slack-token>", says="Slack tokens (xoxb-..., xapp-...)"),
    RedactRule(name="google-api-key", pattern=re.compile(rb"AIza[0-9A-Za-z_-]{35}"), repl=b"<redacted-google-key>",
               says="Google API keys (AIza...)"),
    RedactRule(name="stripe-key", pattern=re.compile(rb"(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}"),
               repl=b"<redacted-stripe-key>", says="Stripe keys (sk_live_...)", needs=(b"k_live_", b"k_test_")),
    RedactRule(name="jwt", pattern=re.compile(rb"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
               repl=b"<redacted-jwt>", says="JSON web tokens (eyJ...)"),
    # The whole key, to its END line or, cut off, to the end of its string (its newlines are \n in JSON).
    RedactRule(name="private-key",
               pattern=re.compile(rb"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----(?:(?!-----END)(?:[^\"\\]|\\.))*"
                                  rb"(?:-----END [A-Z ]{0,40}PRIVATE KEY-----)?"),
               repl=b"<redacted-private-key>", says="PEM and OpenSSH private keys"),
    RedactRule(name="url-credentials", pattern=re.compile(rb"(://)[^/\s\"@:]+:[^\s\"@]+@"), repl=rb"\1<redacted>@",
               says="user:password in URLs"),
    # --token VALUE, --api-key=VALUE, and the same as two items of an argv list ("--token", "VALUE")
    RedactRule(name="secret-flag",
               pattern=re.compile(rb"(?i)(--(?:[a-z0-9]+-)*(?:token|secret|password|api-key|access-key|key)"
                                  rb"(?:\s+|=|\"\s*,\s*\"))(?!<redacted)[^\s\"\\,;&-][^\s\"\\,;&]*"),
               repl=rb"\1<redacted>", says="values of secret command-line flags (--token VALUE)"),
    RedactRule(name="home-posix", pattern=re.compile(_SEP + rb"(?:home|Users)" + _SEP + rb"(?!<)" + _USER
                                                     + rb"(?=" + _SEP + rb"|\"|\s|:|,|;|\\)"),
               repl=b"<home>", says="user names in home paths (/home/<user>)",
               needs=(b"/home", b"/Users")),  # (a JSON-escaped slash, \\/, is a backslash before a slash)
    RedactRule(name="home-windows", pattern=re.compile(rb"(?i):" + _BSL + rb"(?:Users|Documents and Settings)" + _BSL
                                                       + rb"(?!<)" + _USER + rb"(?=\\|\"|\s|;)"),
               repl=b":<home>", says="user names in Windows home paths", needs=(b":\\\\",)),  # (a colon, then \\)
)

# Secrets known by the name beside them. These match from a keyword (found by bytes.find on a lower-cased
# copy, so the case-insensitive patterns run only where a keyword is, not at every byte).
KEYWORDS = (b"bearer", b"basic", b"token", b"secret", b"passw", b"key", b"credential", b"auth")
KEYWORD_RULES: tuple[RedactRule, ...] = (
    RedactRule(name="bearer",
               pattern=re.compile(rb"(?i)((?:bearer|basic|token)\s+)(?!<redacted)[A-Za-z0-9._~+/=-]{12,}"),
               repl=rb"\1<redacted>", says="Bearer/Basic credentials"),
    # aws_secret_access_key VALUE (an AWS config or credentials file, dumped with spaces)
    RedactRule(name="aws-secret-key", pattern=re.compile(rb"(?i)(secret_access_key\"?\s*[=:]?\s*\"?)(?!<redacted)"
                                                         rb"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])"),
               repl=rb"\1<redacted>", says="AWS secret access keys"),
    # NAME=value in a command line or an environment dump: HF_TOKEN=…, AWS_SECRET_ACCESS_KEY=… (not a pin: x==1.0)
    RedactRule(name="secret-assignment",
               pattern=re.compile(rb"(?i)(" + _NAME_WORD + _NAME_REST + rb"\s*=\s*)(?!=)(?!<redacted)(?!" + _NOT_SECRET
                                  + rb"(?:[\s\"\\,;&]|$))[^\s\"\\,;&]+"),
               repl=rb"\1<redacted>", name_run=True, says="values assigned to secret-looking names (NAME=value)"),
    # NAME: value in a dumped YAML config, an HTTP header or a log line (password: hunter2). Not a header's scheme
    # (Authorization: Bearer …): the bearer rule, at the scheme's own keyword, takes the credential after it.
    RedactRule(name="secret-colon",
               pattern=re.compile(rb"(?i)(" + _NAME_WORD + _NAME_REST + rb"\s*: +)(?!<redacted)(?!" + _NOT_SECRET
                                  + rb"(?:[\s\"\\,;&]|$))(?!(?:bearer|basic|token)\s)[^\s\"\\,;&]+"),
               repl=rb"\1<redacted>", name_run=True, says="values of secret-looking names in NAME: value"),
    # "HF_TOKEN": "value" in a JSON object (an environment dumped as metadata)
    RedactRule(name="secret-member",
               pattern=re.compile(rb"(?i)(" + _NAME_WORD + _NAME_REST + rb"\"\s*:\s*\")(?!<redacted)(?!" + _NOT_SECRET
                                  + rb"\")(?:[^\"\\]|\\.)+(?=\")"),
               repl=rb"\1<redacted>", name_run=True, says="values of secret-looking JSON members (\"NAME\": value)"),
    # The same inside a string: json.dumps(config) (\"hf_token\": \"…\") or str(config) ('hf_token': '…')
    RedactRule(name="secret-member-quoted",
               pattern=re.compile(rb"(?i)(" + _NAME_WORD + _NAME_REST + rb"(?:\\\"|')\s*:\s*(?:\\\"|'))(?!<redacted)(?!"
                                  + _NOT_SECRET + rb"(?:\\\"|'))[^\s\"\\',]+"),
               repl=rb"\1<redacted>", name_run=True,
               says="values of secret-looking members inside dumped configs ('NAME': value)"),
)
RULE_WORDS: dict[str, str] = {r.name: r.says for r in REDACT_RULES + KEYWORD_RULES}

_NAME_RUN = re.compile(rb"[A-Za-z0-9_.-]*")
_NAME_START = re.compile(rb"(?i)" + _NAME_WORD)

# Text that must not survive redaction (the tests read it).
LEAK_PATTERNS: tuple[re.Pattern[bytes], ...] = tuple(r.pattern for r in REDACT_RULES[:9]) + (
    re.compile(rb"(?i)\bBearer\s+(?!<redacted>)[A-Za-z0-9._~+/=-]{12,}"),
    re.compile(_SEP + rb"(?:home|Users)" + _SEP + rb"(?!<)" + _USER + _SEP),
    re.compile(rb"(?i)[A-Z]:" + _BSL + rb"Users" + _BSL + rb"(?!<)" + _USER),
    re.compile(rb"(?i)[A-Za-z0-9_]*(?:TOKEN|SECRET|PASSWORD)[A-Za-z0-9_]*=(?!=)(?!<redacted>)(?!" + _NOT_SECRET
               + rb"(?:[\s\"\\,;&]|$))[^\s\"\\,;&]+"),
)


@dataclass(slots=True)
class RedactStats:
    """What one file's redaction replaced, by rule name."""

    path: Path
    replaced: dict[str, int] = field(default_factory=dict)
    bytes_in: int = 0
    peak_buffer: int = 0  # the largest piece held at once: the memory bound
    damaged: str = ""  # why the input ended early (a truncated .gz): the copy ends where it does


class _Damage(Protocol):
    """What :func:`decompressed_blocks` reports to: why the input ended early ("" while it has not)."""

    damaged: str


_ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|(.))", re.DOTALL)


def _decoded(m: re.Match[bytes]) -> bytes:
    """One JSON escape as the character it stands for, where that keeps the JSON valid and equal: ``\\/`` and
    ``\\uXXXX`` of any character but a quote, a backslash, a control character or a surrogate; others stay."""
    hexa, other = m.group(1), m.group(2)
    if hexa is None:
        return b"/" if other == b"/" else m.group()
    c = int(hexa, 16)
    if c < 0x20 or c in (0x22, 0x5C) or 0xD800 <= c <= 0xDFFF or 0x7F <= c <= 0x9F:
        return m.group()
    return chr(c).encode()


def unescape(data: bytes) -> bytes:
    """JSON text with its harmless escapes decoded (``_decoded``), so that no escape can hide a token from the
    rules: ``gh\\u0070_…``, ``https:\\/\\/u:p@``, ``/ho\\u006de/alice`` and an escaped key name all read as
    what they decode to. The JSON means the same: the copy still attributes exactly like the original."""
    return _ESCAPE.sub(_decoded, data) if b"\\" in data else data


def redact_bytes(data: bytes, stats: RedactStats | None = None) -> bytes:
    """``data`` (a piece of JSON text that splits no string) with its escapes decoded, then every rule applied
    in order: to each percent-encoded run of text as it decodes (:func:`_percent_encoded`), then to all of it."""
    return _rules(_percent_encoded(unescape(data), stats), stats)


_PERCENT = re.compile(rb"%[0-9A-Fa-f]{2}")
_RUN_REST = re.compile(rb'[^ "\\]*')  # the rest of a run of text: to a space, a quote or an escape
_PERCENT_ROUNDS = 3  # decoded again while it changes: hf%255F… is hf%5F… once decoded, hf_… twice
_RUN_SEP = b'"\x00"'  # between decoded runs: no rule's match spans a quote, a zero byte and a quote
_UNSAFE = re.compile(rb'["\\\x00-\x1f\x7f-\xff%]')  # re-encoded in a redacted run: the JSON stays valid UTF-8


def _percent_encoded(data: bytes, stats: RedactStats | None) -> bytes:
    """Secrets written percent-encoded (a URL's query: ``?q=HF_TOKEN%3D…``, ``t=hf%5F…``): each run of text (to a
    space, a quote or a JSON escape) that holds a ``%XX`` is decoded and the rules run on that. Where they replace
    something, the run is written decoded and redacted, with every byte that could break the JSON (a quote, a
    backslash, a control or non-ASCII byte, ``%``) encoded again; a run with nothing to redact stays byte for byte,
    so a copy of a trace without such secrets is unchanged.

    The rules run once over all the piece's decoded runs, joined by a separator no rule matches across (a match
    that takes one in sends every run through on its own); only the runs they change are redacted one by one."""
    runs = _percent_runs(data) if b"%" in data else []
    if not runs:
        return data
    joined = _RUN_SEP.join(d for _, _, d in runs)
    done = _rules(joined, None)
    if done == joined:  # the usual case: nothing to redact in any decoded run
        return data
    out: list[bytes] = []
    last = 0
    for start, end, decoded in _changed(runs, done):
        redacted = _rules(decoded, stats)
        if redacted != decoded:
            out += [data[last:start], _UNSAFE.sub(lambda c: b"%%%02X" % c.group()[0], redacted)]
            last = end
    out.append(data[last:])
    return b"".join(out)


def _changed(runs: list[tuple[int, int, bytes]], done: bytes) -> list[tuple[int, int, bytes]]:
    """The runs that the rules changed in ``done`` (the joined runs, redacted); all of them where a match took a
    separator in (or a run holds one), since the parts then no longer line up with the runs."""
    parts = done.split(_RUN_SEP)
    if len(parts) != len(runs) or any(_RUN_SEP in d for _, _, d in runs):
        return runs
    return [r for r, part in zip(runs, parts) if part != r[2]]


def _percent_runs(data: bytes) -> list[tuple[int, int, bytes]]:
    """Each run of ``data`` holding a ``%XX`` escape: where it starts and ends, and what it decodes to."""
    from urllib.parse import unquote_to_bytes

    runs = []
    lo = 0  # where the previous run ended: no search goes back past it, so this is linear
    for m in _PERCENT.finditer(data):
        i = m.start()
        if i < lo:
            continue
        start = max(lo, data.rfind(b'"', lo, i) + 1, data.rfind(b" ", lo, i) + 1, data.rfind(b"\\", lo, i) + 1)
        rest = _RUN_REST.match(data, i)  # (it always matches: the empty string at worst)
        lo = rest.end() if rest is not None else i
        decoded = data[start:lo]
        for _ in range(_PERCENT_ROUNDS):
            if not _PERCENT.search(decoded):
                break
            decoded = unquote_to_bytes(decoded)
        runs.append((start, lo, decoded))
    return runs


def _rules(data: bytes, stats: RedactStats | None) -> bytes:
    """REDACT_RULES over ``data``, then KEYWORD_RULES at its keywords."""
    for rule in REDACT_RULES:
        if rule.needs and not any(literal in data for literal in rule.needs):
            continue  # (no match can be there)
        data, n = rule.pattern.subn(rule.repl, data)
        if n and stats is not None:
            stats.replaced[rule.name] = stats.replaced.get(rule.name, 0) + n
    return _at_keywords(data, stats)


def _at_keywords(data: bytes, stats: RedactStats | None) -> bytes:
    """KEYWORD_RULES, tried in order at each keyword (a name may hold several: the first match wins)."""
    low = data.lower()
    hits: set[int] = set()
    for kw in KEYWORDS:
        i = low.find(kw)
        while i >= 0:
            hits.add(i)
            i = low.find(kw, i + 1)
    if not hits:
        return data
    out: list[bytes] = []
    last = 0
    run_end = -1  # end of the name run where the name rules last failed: they fail again at any keyword inside it
    for i in sorted(hits):
        if i < last:
            continue
        inside = i < run_end
        for rule in KEYWORD_RULES:
            if inside and rule.name_run:
                continue
            m = rule.pattern.match(data, i)
            if m is not None:
                out += [data[last:m.start()], m.expand(rule.repl)]  # type: ignore[arg-type]
                last = m.end()
                if stats is not None:
                    stats.replaced[rule.name] = stats.replaced.get(rule.name, 0) + 1
                break
        else:  # (only where a name rule's own keyword starts: "basic_token=" must still reach "token")
            if not inside and _NAME_START.match(data, i):
                run = _NAME_RUN.match(data, i)
                run_end = run.end() if run is not None else i
    out.append(data[last:])
    return b"".join(out)


def _pieces(f: IO[bytes], stats: RedactStats, chunk: int = CHUNK) -> Iterator[bytes]:
    """The file's bytes in pieces that each end outside any string, after a comma (the last piece: at the end).

    Input that is no JSON text is refused as the reader refuses it (:func:`_opening`), and a byte that no JSON
    text holds (zero bytes: a crash's padding, a sparse file) ends the copy where it is (:func:`_unjson`): neither
    is read into memory. A block without a comma adds no place to cut, so it is only held, never searched again:
    a long string (or run of spaces) costs its length once, not once per block."""
    blocks = decompressed_blocks(f, stats, chunk)
    first = yield from _opening(blocks, stats)
    pending: list[bytes] = []  # read, not yet yielded: no cut falls in it
    size, cut_before = 0, False
    for more in itertools.chain((first,), _counted(blocks, stats)):
        size += len(more)
        stats.peak_buffer = max(stats.peak_buffer, size)
        new = more  # what is not yet searched for bytes no JSON holds
        if b"," in more:
            buf = b"".join([*pending, more])
            cut = _safe_cut(buf)
            if cut:
                yield buf[:cut]
                buf, new, cut_before = buf[cut:], buf[cut:], True
            pending, size = [buf], len(buf)
        else:
            pending.append(more)
        at = _unjson(new, stats, cut_before)
        if at is not None:  # the copy ends there
            pending, size = [b"".join(pending)[: size - len(new) + at]], size - len(new) + at
            break
    if size:
        yield b"".join(pending)


def _counted(blocks: Iterator[bytes], stats: RedactStats) -> Iterator[bytes]:
    for block in blocks:
        stats.bytes_in += len(block)
        yield block


def _opening(blocks: Iterator[bytes], stats: RedactStats) -> Generator[bytes, None, bytes]:
    """Leading whitespace, yielded as it comes, then (returned) the first block with text, which must start a
    JSON object or array: anything else is refused in the reader's words (``tracekit attribute`` refuses the same
    file in the same line), after one block, not after reading a 2 GB file of zero bytes."""
    at = 0
    for block in blocks:
        stats.bytes_in += len(block)
        text = block[3:] if at == 0 and block.startswith(_BOM) else block
        text = text.lstrip(_WS)
        if not text:
            at += len(block)
            yield block
            continue
        head, where = text[:1], stats.bytes_in - len(text)
        if head in _SCALAR_STARTS:
            raise TraceFormatError(f"{stats.path}: JSON is not a PyTorch profiler trace (no 'traceEvents' list)")
        if head not in (b"{", b"["):
            why = f"no JSON text starts with {head!r}"
            raise TraceFormatError(f"{stats.path}: not valid JSON at byte {where:,} ({why})")
        stats.peak_buffer = max(stats.peak_buffer, len(block))
        return block
    raise TraceFormatError(f"{stats.path}: not valid JSON at byte 0 (input data is empty)")


def _unjson(text: bytes, stats: RedactStats, cut_before: bool) -> int | None:
    """Where in ``text`` (the newest read, none of it cut off yet) a byte is that no JSON text holds: a control
    character (JSON escapes them even inside strings). The copy ends there, as ``attribute`` salvages a trace up
    to it (exit 3); with nothing cut before it, nothing is worth a copy: refused as ``attribute`` refuses it."""
    m = _CONTROL.search(text)
    if m is None:
        return None
    at = stats.bytes_in - len(text) + m.start()
    why = f"{m.group()!r} cannot be in JSON text"
    if not cut_before:
        raise TraceFormatError(f"{stats.path}: not valid JSON at byte {at:,} ({why})")
    stats.damaged = f"not valid JSON from byte {at:,} ({why})"
    return m.start()


def decompressed_blocks(f: IO[bytes], stats: RedactStats | _Damage, chunk: int) -> Iterator[bytes]:
    """The decompressed bytes of ``f`` (gzip members one after another, or plain) in blocks. Compressed input is
    read a sixteenth of ``chunk`` at a time, so that a block stays about a chunk. A stream cut off mid-write gives
    what it holds, and ``stats.damaged`` says so (attribute salvages the same way)."""
    head = f.read(2)
    if head != b"\x1f\x8b":
        block = head + f.read(chunk)
        while block:
            yield block
            block = f.read(chunk)
        return
    step = max(4096, chunk // 16)
    d, fed, pending = zlib.decompressobj(wbits=31), False, head
    try:
        while True:
            data = pending + f.read(step)
            pending = b""
            if not data:
                break
            out = d.decompress(data)
            fed = True
            if out:
                yield out
            while d.eof:  # the next member, if any
                rest, d, fed = d.unused_data, zlib.decompressobj(wbits=31), False
                if not rest.strip(b"\0"):  # (nothing, or the zero padding some writers add)
                    break
                out = d.decompress(rest)
                fed = True
                if out:
                    yield out
    except zlib.error as exc:
        stats.damaged = f"the compressed stream is damaged ({exc})"
        return
    if fed and not d.eof:
        stats.damaged = "the compressed stream ends early"


_FLAG_ITEM = re.compile(rb'"--[A-Za-z0-9_-]{0,200}"\s*,$')


def _safe_cut(buf: bytes) -> int:
    """:func:`_last_comma`, moved before an argv item that is a flag (``"--token", "VALUE"``: the flag and its
    value must reach the rules in one piece)."""
    end = len(buf)
    while True:
        cut = _last_comma(buf[:end]) if end < len(buf) else _last_comma(buf)
        if not cut:
            return 0
        m = _FLAG_ITEM.search(buf, max(0, cut - 260), cut)
        if m is None:
            return cut
        end = m.start()  # just before the flag's opening quote: outside any string


def _last_comma(buf: bytes) -> int:
    """The index just after the last comma outside every string of ``buf`` (which starts outside one), or 0.

    Escapes are masked first with same-length bytes (``\\\\`` then ``\\"``), so that every quote left
    opens or closes a string; counting them tells whether the end is inside one, and the segments between
    quotes alternate outside/inside from there. All of it runs in C (bytes.replace, count, rfind)."""
    b = buf.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    inside = b.count(b'"') % 2 == 1
    end = len(b)
    while end > 0:
        q = b.rfind(b'"', 0, end)
        if not inside:
            c = b.rfind(b",", q + 1, end)
            if c >= 0:
                return c + 1
        if q < 0:
            return 0
        end, inside = q, not inside
    return 0


def _open_in(path: Path) -> IO[bytes]:
    return open(path, "rb")  # (decompressed, if gzip, by _blocks: a cut-off member still gives its bytes)


def redact_file(src: Path, dst: Path, chunk: int = CHUNK) -> RedactStats:
    """Write ``dst`` (gzip when its name ends in .gz): ``src`` redacted. Atomic: a temp file, then a rename."""
    stats = RedactStats(path=src)
    with trace_copy(src, dst) as out, _open_in(src) as f:
        for piece in _pieces(f, stats, chunk):
            out.write(redact_bytes(piece, stats))
    return stats


def redact_path(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                notes: list[str] | None = None) -> list[RedactStats]:
    """A trace file to a file, or a run folder to a folder of the same layout. Never writes over an input:
    ``dst`` naming an input (by any path or link), or a folder inside the input folder, is refused, and so is a
    link inside the output folder that leads out of it. ``notes`` gets one line per file the folder scan skipped
    (the copy then lacks it: the CLI exits 3)."""
    from .run.inputs import discover

    found = discover(src)
    if notes is not None:
        notes.extend(found.warnings)
    out = Path(dst)
    src_is_dir = os.path.isdir(src)
    if src_is_dir:
        root = Path(os.path.realpath(src))
        real_out = Path(os.path.realpath(out))
        if real_out == root or root in real_out.parents or real_out in root.parents:
            raise UsageError(f"{dst}: refusing to write into or over the input folder {src}")
        if out.exists() and not out.is_dir():
            raise UsageError(f"{dst}: the input is a folder, so the output must be a folder")
        pairs = [(f, out / Path(os.path.relpath(f, src))) for f in found.files]
        _refuse_escapes(out, [d for _, d in pairs])
    else:
        if out.is_dir():
            raise UsageError(f"{dst}: is a folder; name the output file")
        pairs = [(found.files[0], out)]
    refuse_inputs([d for _, d in pairs], found.files)
    return [redact_file(s, d) for s, d in pairs]


def _refuse_escapes(out: Path, outputs: list[Path]) -> None:
    """No copy lands outside the output folder through a link already in it (``run/sub -> ../../elsewhere``)."""
    root = os.path.realpath(out)
    for o in outputs:
        where = os.path.realpath(o.parent)
        if where != root and not where.startswith(root + os.sep):
            raise UsageError(f"{o}: refusing to write through a link that leaves the output folder {out} ({where})")


def leaks(data: bytes) -> list[bytes]:
    """Token-shaped text left in ``data`` (empty when the redaction worked)."""
    return [m.group() for p in LEAK_PATTERNS for m in p.finditer(data)]
