"""Structure-aware fuzzing of tracekit's input handling (used by tests/suites/test_fuzz.py).

Seeds are small slices of the real traces (a few hundred events around attention work, with
the launches, kernels and enclosing modules they link to), so a mutation lands on the shapes
tracekit actually parses. Mutations are applied to the decoded document (adversarial field
values, deleted keys, respelled categories, duplicated/shuffled/truncated events), then to the
bytes (truncation, flipped bytes, BOM, gzip, gzip padding). The properties are the CLI's contract:
no traceback, exit 0/1/3 (4 only for a ``diff`` gate), one ``Error:`` line on 1, valid output and
a ``Warning:`` on 3; and the library raises only ``TracekitError``.
"""

from __future__ import annotations

import bisect
import csv
import gc
import gzip
import io
import json
import re
import traceback
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import strategies as st

SEED_VERSION = 1  # bump when seed slicing changes (invalidates the on-disk seed cache)
MAX_EVENTS = 300  # events around each anchor; small enough that one CLI run takes milliseconds
_ATTN = re.compile(r"attention|attn|fmha|flash|softmax|sdpa|sage_", re.IGNORECASE)
_HOST_CATS = {"cpu_op", "user_annotation", "python_function", "operator", "Operator"}


# -- seeds ---------------------------------------------------------------------------------------

def load_doc(path: Path) -> Any:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return orjson.loads(data)


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def slices(doc: Any, anchors: int = 3, max_events: int = MAX_EVENTS) -> list[dict]:
    """Up to ``anchors`` sub-traces of ``doc``: the events nearest in time to an attention event,
    the events that share their correlation ids, the host events enclosing the anchor, and the
    metadata events. Each keeps the document's header keys."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    header = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else {}
    if not isinstance(events, list):
        return []
    evs = [e for e in events if isinstance(e, dict)]
    meta = [i for i, e in enumerate(evs) if e.get("ph") == "M"][:40]
    timed = sorted((t, i) for i, e in enumerate(evs) if e.get("ph") == "X" and (t := _num(e.get("ts"))) is not None)
    if not timed:
        return []
    ts = [t for t, _ in timed]
    by_corr: dict[object, list[int]] = {}
    for _, i in timed:
        a = evs[i].get("args")
        if isinstance(a, dict) and isinstance(a.get("correlation"), (int, str)):
            by_corr.setdefault(a["correlation"], []).append(i)
    # Anchor on attention kernels where there are any (their host side is found through the
    # launch's correlation id), else on attention-named host events, else mid-trace.
    named = [i for _, i in timed if _ATTN.search(str(evs[i].get("name", "")))]
    cand = [i for i in named if str(evs[i].get("cat", "")).lower() == "kernel"] or named or [timed[len(timed) // 2][1]]
    picks = sorted({cand[len(cand) * q // 4] for q in (1, 2, 3)})[:anchors]
    out = []
    for a in picks:
        times = [_num(evs[a]["ts"]) or 0.0]
        args = evs[a].get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        times += [_num(evs[i]["ts"]) or 0.0 for i in by_corr.get(corr, []) if i != a][:1]  # the launch
        keep: set[int] = set()
        for t0 in times:
            pos = bisect.bisect_left(ts, t0)
            half = max_events // (2 * len(times))
            keep.update(i for _, i in timed[max(0, pos - half): pos + half])
        for i in list(keep):
            args = evs[i].get("args")
            if isinstance(args, dict) and isinstance(args.get("correlation"), (int, str)):
                keep.update(by_corr.get(args["correlation"], ())[:4])
        t_host = times[-1]
        enclosing = [i for _, i in timed
                     if evs[i].get("cat") in _HOST_CATS and (d := _num(evs[i].get("dur"))) is not None
                     and (t := _num(evs[i]["ts"])) is not None and t <= t_host <= t + d]
        keep.update(enclosing[:40])
        keep.update(meta)
        out.append({**header, "traceEvents": [evs[i] for i in sorted(keep)]})
    return out


class Seeds(list):  # type: ignore[type-arg]
    """The seed list, with a short repr (hypothesis prints strategy arguments)."""

    def __repr__(self) -> str:
        return f"<{len(self)} real-trace seeds>"


def build_seeds(files: list[Path], root: Path) -> Seeds:
    """(label, document) for every slice of every file; ``label`` is ``rel/path#k``."""
    seeds = Seeds()
    was = gc.isenabled()
    gc.disable()  # millions of fresh dicts: the cyclic GC would triple the load time
    try:
        for f in files:
            rel = f.relative_to(root).as_posix()
            for k, doc in enumerate(slices(load_doc(f))):
                seeds.append((f"{rel}#{k}", doc))
    finally:
        if was:
            gc.enable()
    return seeds


# -- serialising with raw tokens -------------------------------------------------------------------

@dataclass(frozen=True)
class Raw:
    """JSON text inserted verbatim: numbers no Python float holds (1e400), ``-0``, NaN tokens, deep nesting."""

    text: str

    def __repr__(self) -> str:
        return f"Raw({self.text[:40]!r}{'…' if len(self.text) > 40 else ''} len={len(self.text)})"


def dumps(doc: Any) -> bytes:
    raws: list[str] = []

    def default(o: object) -> str:
        if isinstance(o, Raw):
            raws.append(o.text)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(type(o))

    text = json.dumps(doc, default=default, ensure_ascii=False, separators=(",", ":"))
    for k, r in enumerate(raws):
        text = text.replace(f'"\\u0000raw{k}\\u0000"', r, 1)
    return text.encode("utf-8", "surrogatepass")


# -- adversarial values ----------------------------------------------------------------------------

def deep(depth: int, kind: str = "list") -> Raw:
    if kind == "list":
        return Raw("[" * depth + "]" * depth)
    return Raw('{"a":' * depth + "1" + "}" * depth)


NUMBER_STRINGS = ["inf", "-inf", "Infinity", "NaN", "nan", "1e400", "-1e400", "1e306", "²", "٥", "1_0", "-0",
                  "0x1f", " 12 ", "12abc", "", "1e17", "18446744073709551616", "9" * 40, "1." + "0" * 500]
JSON_TRICKS = ["},{", "]", "]]]]", '"traceEvents":[', '{"traceEvents":[', '\\"', "\u2028", "\ufeff", "\ud800",
               "ProfilerStep#²", "ProfilerStep#18446744073709551616", "ProfilerStep#-1", "nn.Module: SelfAttention_0",
               "x" * 100_000, "]" * 100_000, "},{" * 30_000, "名前" * 1000]
RAW_NUMBERS = [Raw("1e400"), Raw("-1e400"), Raw("1E309"), Raw("-0"), Raw("NaN"), Raw("Infinity"), Raw("-Infinity"),
               Raw("1" + "0" * 400), Raw("0.0000000000000000000000001e-400"), Raw("01"), Raw("1.")]
BIG_NUMBERS = [10**30, 2**64, 2**64 - 1, 2**63, -(2**63) - 1, 10**400, -1, 0, 1e306, -1e306, 1e17,
               1.7976931348623157e308, 5e-324, -0.0, float("inf"), float("-inf"), float("nan")]
NAMES = ["ProfilerStep#1", "ProfilerStep#²", "ProfilerStep#18446744073709551616", "nn.Module: SelfAttention_0",
         "nn.Module: BertSelfAttention_3", "layer0.attention", "aten::scaled_dot_product_attention",
         "aten::_flash_attention_forward", "aten::_cudnn_attention_forward", "sglang::extend_attention",
         "vllm::mla_attention", "aten::softmax", "aten::bmm", "cudaLaunchKernel", "hipGraphLaunch",
         "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4> >(Flash_fwd_params)",
         "attn_fwd", "[memory]", "Memset (Device)", "Memcpy DtoD (Device -> Device)"]
# Names that attack the text outputs (issue 26): terminal control sequences (OSC 52, CR + erase, C1 CSI, BEL),
# spreadsheet formula prefixes, markdown structure (a newline and a heading, a cell separator, a code span, a link)
# and raw HTML, each around an attention word so that it names a block.
HOSTILE_PARTS = ["\x1b]52;c;aGk=\x07", "\r\x1b[2K", "\x9b31m", "\x07", "\x00", "\u2028", "\n# h\n", "|", "`",
                 "[x](javascript:alert(1))", "<script>alert(1)</script>", "\\u0041", "\\"]
FORMULA_STARTS = ["=", "+", "-", "@", "\t", "\r"]


def hostile_names() -> st.SearchStrategy[str]:
    """A formula prefix (or none), then attention words and hostile parts in any order."""
    word = st.sampled_from(["layer0.attention", "SelfAttention", "flash_fwd_kernel", "aten::softmax"])
    return st.builds(lambda pre, parts: pre + "".join(parts), st.sampled_from([""] + FORMULA_STARTS),
                     st.lists(st.one_of(word, st.sampled_from(HOSTILE_PARTS)), min_size=1, max_size=5))


CATS = ["Kernel ", "KERNEL", "kernel ", " kernel", "Kernel", "kernel", "cuda_runtime ", "CPU_OP", "cpu_op",
        "user_annotation", "gpu_user_annotation", "python_function", "gpu_memcpy", "Runtime", "", "ac2g"]
TOP_KEYS = ["ts", "dur", "cat", "ph", "name", "pid", "tid", "args", "id", "s", "bp"]
ARG_KEYS = ["correlation", "External id", "external id", "device", "stream", "Bytes", "Input Dims", "Input dims",
            "Device Type", "Python id", "Python parent id", "Ev Idx", "Addr", "Total Allocated", "Sequence number"]
HEADER_KEYS = ["schemaVersion", "deviceProperties", "distributedInfo", "traceName", "displayTimeUnit",
               "baseTimeNanoseconds", "cupti_version", "cuda_runtime_version", "roctracer_version", "with_stack"]
DELETABLE = ["cat", "ph", "ts", "dur", "name", "args", "pid", "tid", "correlation", "External id"]


NUMERIC_KEYS = ["ts", "dur", "pid", "tid", "correlation", "External id", "external id", "Bytes", "device", "stream"]


def numeric_values() -> st.SearchStrategy[Any]:
    """Values for a field tracekit reads as a number: strings of numbers, huge and non-finite ones."""
    return st.one_of(st.sampled_from(NUMBER_STRINGS), st.sampled_from(RAW_NUMBERS), st.sampled_from(BIG_NUMBERS),
                     st.integers(min_value=-(2**70), max_value=2**70), st.floats(), st.booleans(), st.none())


def adversarial_values() -> st.SearchStrategy[Any]:
    leaf = st.one_of(
        st.sampled_from(NUMBER_STRINGS + JSON_TRICKS), st.sampled_from(RAW_NUMBERS), st.sampled_from(BIG_NUMBERS),
        st.integers(min_value=-(2**70), max_value=2**70), st.floats(), st.text(max_size=12), st.booleans(), st.none(),
        st.builds(deep, st.sampled_from([2, 50, 299, 300, 999, 1000, 1001, 1100]), st.sampled_from(["list", "dict"])),
    )
    return st.one_of(leaf, st.lists(leaf, max_size=3), st.dictionaries(st.sampled_from(ARG_KEYS), leaf, max_size=3))


# -- latency inputs: measured.json's fields and the gate's --latency-* flags (issue 41) ------------------------
# The fields are read off tracekit.results.measured.Measured and the flags off `tracekit diff`'s options, so a field
# or flag added later is fuzzed with no change here. A handful of hostile values each (not a search): seconds.

MEASURED_NOT_IN_FILE = {"source"}  # set by the reader (the file's own name), never read from the file
# A recorder's file with every field valid: each case replaces one field (a new field, absent here, is added).
VALID_MEASURED = {"median_ms": 2.0, "low_ms": 1.9, "high_ms": 2.1, "spread_kind": "min-max", "repeats": 3,
                  "iters": 10, "graph_median_ms": 1.5, "peak_memory_mb": 100.0, "launch_bound": False,
                  "what": "forward pass", "samples_ms": [1.9, 2.0, 2.1]}
# JSON values no field should turn into a figure (or a traceback): non-finite and unholdable numbers, counts past
# 64 bits, finite latencies outside any plausible range, the wrong types, deep nesting.
HOSTILE_FIELD_VALUES: list[Any] = [Raw("NaN"), Raw("1e400"), Raw("1" + "0" * 400), 10**23, 2**64, -1, 0, 1e308,
                                   5e-324, "2.5", True, [], {"a": 1}, [2.0, Raw("Infinity")], deep(1000)]
# Texts for a --latency-* flag: non-finite, past a double, out of range, not ASCII decimals, malformed forms.
HOSTILE_LATENCY_TEXTS = ["inf", "nan", "NaN", "1e400", "-1", "0", "1" + "0" * 400, "1" + "0" * 308,
                         "0." + "0" * 323 + "5", "", "2.5±3", "٢.5", "0x10", "2,2,nan", "2.0±inf", "9" * 5000]
GOOD_LATENCY = "2.0,2.1,2.2"


def measured_fields() -> list[str]:
    """The measured.json fields: every field of ``Measured`` but those the reader sets itself."""
    from tracekit.results.measured import Measured

    return [f.name for f in dataclasses.fields(Measured) if f.name not in MEASURED_NOT_IN_FILE]


def latency_flags() -> list[str]:
    """The gate's latency options, as `tracekit diff` declares them (``--latency-before``, ``--latency-after``)."""
    from tracekit.cli import diff

    return sorted(o for p in diff.params for o in getattr(p, "opts", ()) if o.startswith("--latency-"))


def measured_cases() -> list[tuple[str, Any]]:
    """(field, hostile value) for every measured.json field and every hostile value, in a fixed order."""
    return [(f, v) for f in measured_fields() for v in HOSTILE_FIELD_VALUES]


def measured_doc(field: str, value: Any) -> bytes:
    """A valid measured.json with ``field`` set to ``value`` (Raw values written verbatim)."""
    from tracekit.results.measured import MEASURED_SCHEMA

    return dumps({"schema": MEASURED_SCHEMA, **VALID_MEASURED, field: value})


def check_measured(m: dict | None, ignored: list[str], what: str) -> None:
    """A measured.json is either taken, with every figure plausible, or ignored with one warning line, never both.
    ``m``: the JSON output's ``measured`` (None when absent); ``ignored``: the ``measured.json: ignored`` lines."""
    from tracekit.results.measured import MAX_COUNT, plausible_latency

    assert len(ignored) <= 1 and (m is None) == (len(ignored) == 1), f"taken and warned, or neither ({what})"
    if m is None:
        return
    for k, v in m.items():
        if k.endswith("_ms") and v is not None:
            assert all(plausible_latency(x) for x in (v if isinstance(v, list) else [v])), f"{k} {v!r:.60} ({what})"
    for k in ("repeats", "iters"):
        assert m.get(k) is None or 1 <= m[k] <= MAX_COUNT, f"{k} {m[k]!r:.60} ({what})"


def latency_flag_cases() -> list[tuple[dict[str, str], int | None]]:
    """(flags, wanted exit) for the gate: each flag hostile beside the others good (2), each flag alone with a
    good value (2: unpaired), and all good (None: whatever the gate decides, 0, 4 or 5)."""
    flags = latency_flags()
    out: list[tuple[dict[str, str], int | None]] = []
    for f in flags:
        out += [({**{g: GOOD_LATENCY for g in flags}, f: text}, 2) for text in HOSTILE_LATENCY_TEXTS]
        out.append(({f: GOOD_LATENCY}, 2))
    out.append(({g: GOOD_LATENCY for g in flags}, None))
    return out


# -- mutations -------------------------------------------------------------------------------------

class Case:
    """One fuzz input: the seed it came from, what was done to it, and the bytes to write.

    Not a dataclass: hypothesis prints dataclass fields whole, and ``data`` runs to megabytes."""

    def __init__(self, seed: str, ops: list[str], data: bytes, gz: bool) -> None:
        self.seed, self.ops, self.data, self.gz = seed, ops, data, gz

    def describe(self) -> str:
        return f"seed {self.seed}; " + "; ".join(self.ops)

    def __repr__(self) -> str:
        return f"Case({self.describe()!r}, {len(self.data)} bytes{', gzip' if self.gz else ''})"


_READ_CATS = {"kernel", "Kernel", "cuda_runtime", "cuda_driver", "Runtime", "cpu_op", "Operator", "user_annotation",
              "python_function", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "gpu_user_annotation",
              "cpu_instant_event", "ac2g", "fwdbwd"}


@st.composite
def _event_index(draw: st.DrawFn, evs: list[Any]) -> int:
    """Half the time an event tracekit reads (most of a slice is, but metadata is not)."""
    if draw(st.booleans()):
        read = [i for i, e in enumerate(evs) if isinstance(e, dict) and isinstance(e.get("cat"), str)
                and e["cat"] in _READ_CATS]
        if read:
            return draw(st.sampled_from(read))
    return draw(st.integers(min_value=0, max_value=len(evs) - 1))


# Each structural mutation: (draw, doc, evs, i, values) -> what it did, or None when it did nothing (a
# non-dict ``args`` it cannot write into, a key that was not there). ``evs`` is passed beside ``doc`` because a
# mutation edits the event list in place, and ``i`` is the event it lands on (drawn once, before the mutation).
_Mutation = Callable[[st.DrawFn, dict, list[Any], int, st.SearchStrategy[Any]], str | None]


def _mutate_numeric(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    """One of the fields tracekit turns into numbers gets a number-like adversarial value."""
    ev = evs[i]
    k = draw(st.sampled_from(NUMERIC_KEYS))
    v = draw(numeric_values())
    where = ev if k in TOP_KEYS else ev.setdefault("args", {})
    if not isinstance(where, dict):
        return None
    where[k] = v
    return f"event {i}: {k} = {v!r:.80}"


def _mutate_deep(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    """An argument becomes a deeply nested list/dict (around the decoders' recursion limits)."""
    k = draw(st.sampled_from(["Input Dims", "Input dims", "never_read", "correlation", "Bytes"]))
    v = draw(st.builds(deep, st.sampled_from([299, 300, 999, 1000, 1100]), st.sampled_from(["list", "dict"])))
    args = evs[i].setdefault("args", {})
    if not isinstance(args, dict):
        return None
    args[k] = v
    return f"event {i}: args[{k!r}] = {v!r}"


def _mutate_set(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    k, v = draw(st.sampled_from(TOP_KEYS)), draw(values)
    evs[i][k] = v
    return f"event {i}: {k} = {v!r:.80}"


def _mutate_set_arg(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    args = evs[i].setdefault("args", {})
    if not isinstance(args, dict):
        return None
    k = draw(st.sampled_from(sorted(set(ARG_KEYS) | set(args))))
    v = draw(values)
    args[k] = v
    return f"event {i}: args[{k!r}] = {v!r:.80}"


def _mutate_delete(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    ev = evs[i]
    k = draw(st.sampled_from(DELETABLE))
    where = ev.get("args") if k in ("correlation", "External id") else ev
    if isinstance(where, dict) and where.pop(k, None) is not None:
        return f"event {i}: del {k}"
    return None


def _mutate_cat(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    ev = evs[i]
    ev["cat"] = draw(st.sampled_from(CATS))
    return f"event {i}: cat = {ev['cat']!r}"


def _mutate_name(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    ev = evs[i]
    ev["name"] = draw(st.one_of(st.sampled_from(NAMES), hostile_names()))
    return f"event {i}: name = {ev['name']!r}"


def _mutate_duplicate(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    n = draw(st.integers(min_value=1, max_value=3))
    evs[i:i] = [evs[i]] * n
    return f"event {i}: duplicated x{n}"


def _mutate_shuffle(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    draw(st.randoms(use_true_random=False)).shuffle(evs)
    return "shuffled events"


def _mutate_truncate(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    del evs[i:]
    return f"kept the first {i} events"


def _mutate_drop(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    del evs[i]
    return f"event {i}: deleted"


def _mutate_insert_junk(draw: st.DrawFn, doc: dict, evs: list[Any], i: int,
                        values: st.SearchStrategy[Any]) -> str | None:
    junk: Any = draw(st.one_of(st.sampled_from([1, "x", None, [], [1, 2], True, {}]), values))
    evs.insert(i, junk)
    return f"event {i}: inserted {junk!r:.60}"


def _mutate_header(draw: st.DrawFn, doc: dict, evs: list[Any], i: int, values: st.SearchStrategy[Any]) -> str | None:
    k, v = draw(st.sampled_from(HEADER_KEYS)), draw(values)
    doc[k] = v
    return f"header {k} = {v!r:.80}"


STRUCTURE_MUTATIONS: dict[str, _Mutation] = {
    "numeric": _mutate_numeric, "set": _mutate_set, "set_arg": _mutate_set_arg, "deep": _mutate_deep,
    "delete": _mutate_delete, "cat": _mutate_cat, "name": _mutate_name, "duplicate": _mutate_duplicate,
    "shuffle": _mutate_shuffle, "truncate": _mutate_truncate, "drop": _mutate_drop,
    "insert_junk": _mutate_insert_junk, "header": _mutate_header,
}
# What one step draws from ("numeric" three times: number parsing is where most input handling lives). Changing
# this list changes which mutation a stored hypothesis example replays.
_MUTATION_DRAW = ["numeric", "numeric", "numeric", "set", "set_arg", "deep", "delete", "cat", "name",
                  "duplicate", "shuffle", "truncate", "drop", "insert_junk", "header"]
# The mutations that write into the event itself, so they skip an event that is not a JSON object.
_EVENT_FIELD_MUTATIONS = ("numeric", "set", "set_arg", "deep", "delete", "cat", "name")


@st.composite
def mutate_structure(draw: st.DrawFn, seed: tuple[str, dict]) -> tuple[dict, list[str]]:
    original = seed[1]
    doc = orjson.loads(orjson.dumps(original))  # a private copy (plain JSON types, so this is exact)
    evs: list[Any] = doc["traceEvents"]
    ops: list[str] = []
    values = adversarial_values()
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(_MUTATION_DRAW))
        if not evs:
            break
        i = draw(_event_index(evs))
        if op in _EVENT_FIELD_MUTATIONS and not isinstance(evs[i], dict):
            continue
        did = STRUCTURE_MUTATIONS[op](draw, doc, evs, i, values)
        if did is not None:
            ops.append(did)
    return doc, ops


@st.composite
def mutate_bytes(draw: st.DrawFn, data: bytes) -> tuple[bytes, bool, list[str]]:
    """Byte-level damage; returns (bytes, gzipped, ops)."""
    ops: list[str] = []
    # Mostly intact bytes, so the structural mutations reach the event handling.
    op = draw(st.sampled_from(["none"] * 6 + ["gzip"] * 3 + ["truncate", "truncate", "flip", "bom", "insert"]))
    n = len(data)
    if op == "truncate" and n:
        k = draw(st.integers(min_value=0, max_value=n - 1))
        data = data[:k]
        ops.append(f"cut at byte {k} of {n}")
    elif op == "flip" and n:
        k = draw(st.integers(min_value=0, max_value=n - 1))
        x = draw(st.integers(min_value=1, max_value=255))
        data = data[:k] + bytes([data[k] ^ x]) + data[k + 1:]
        ops.append(f"byte {k} of {n} xor {x:#x}")
    elif op == "bom":
        data = b"\xef\xbb\xbf" + data
        ops.append("UTF-8 BOM")
    elif op == "insert" and n:
        k = draw(st.integers(min_value=0, max_value=n))
        junk = draw(st.binary(min_size=1, max_size=8))
        data = data[:k] + junk + data[k:]
        ops.append(f"inserted {junk!r} at byte {k}")
    gz = op == "gzip"
    if gz:
        data = gzip.compress(data, compresslevel=1, mtime=0)
        tail = draw(st.sampled_from(["clean", "clean", "zeros", "member", "cut", "flip"]))
        m = len(data)
        if tail == "zeros":
            data += b"\0" * draw(st.integers(min_value=1, max_value=1024))
        elif tail == "member":
            data += gzip.compress(b"", mtime=0)
        elif tail == "cut":
            data = data[: draw(st.integers(min_value=10, max_value=max(10, m - 1)))]
        elif tail == "flip":
            k = draw(st.integers(min_value=10, max_value=m - 1))
            data = data[:k] + bytes([data[k] ^ 0xFF]) + data[k + 1:]
        ops.append(f"gzip ({tail}, {len(data)} bytes)")
    return data, gz, ops


@st.composite
def cases(draw: st.DrawFn, seeds: list[tuple[str, dict]]) -> Case:
    seed = draw(st.sampled_from(seeds))
    doc, ops = draw(mutate_structure(seed)) if draw(st.integers(0, 9)) else (seed[1], ["unmutated"])
    data, gz, bops = draw(mutate_bytes(dumps(doc)))
    return Case(seed[0], ops + bops, data, gz)


# -- graph capture lists (execution_details.json beside a replay, issue 41) ---------------------------------------
# The folder the capture-list tests lay out (capture_folder): the replay's one capture, a folder, a FIFO, a link
# back to the replay, a link loop. Only the regular files (after links) can be read as captures.
CAPTURE_FILE = "bs_2.json"
CAPTURE_READABLE = (CAPTURE_FILE, "link.json")  # the trace files of the folder: what a list with no usable entry reads
CAPTURE_USABLE = (*CAPTURE_READABLE, "execution_details.json")  # regular files: a list naming one reads it
# (Names the file system refuses first: hypothesis draws the first elements of a list most often.)
CAPTURE_NAMES = ["a" * 300, "a" * 256, "loop.json", "fifo.json", f"{CAPTURE_FILE}\x00", f"{CAPTURE_FILE}\ud800",
                 "sub", CAPTURE_FILE, "link.json", "execution_details.json", "nope.json", "a" * 255, "a" * 5000,
                 "../replay.json", "/etc/passwd", "", ".", "..", "sub/x.json", f"{CAPTURE_FILE}/", "\ud800",
                 f" {CAPTURE_FILE}", CAPTURE_FILE.upper(), "..\\replay.json", "~/x.json", "名前.json"]


def capture_folder(folder: Path, replay: Path) -> None:
    """Beside ``folder/bs_2.json`` (written by the caller): what a capture list may name that is no capture."""
    import os

    (folder / "sub").mkdir()
    os.mkfifo(folder / "fifo.json")
    (folder / "link.json").symlink_to(replay)
    (folder / "loop.json").symlink_to(folder / "loop.json")


def _capture_entry() -> st.SearchStrategy[Any]:
    """One entry of a capture list: mostly ``{"file": NAME, ...}`` with a name from CAPTURE_NAMES, else odd."""
    name = st.one_of(st.sampled_from(CAPTURE_NAMES), st.text(max_size=12))
    odd_value = st.one_of(st.sampled_from(RAW_NUMBERS + BIG_NUMBERS), st.none(), st.booleans(),
                          st.lists(st.sampled_from(CAPTURE_NAMES), max_size=2),
                          st.builds(deep, st.sampled_from([300, 1100]), st.sampled_from(["list", "dict"])))
    entry = st.fixed_dictionaries({"file": name}, optional={"batch_size": numeric_values(),
                                                            "mode": st.sampled_from(["FULL", "PIECEWISE", "", 1])})
    return st.one_of(entry, entry, entry, st.builds(lambda v: {"file": v}, odd_value),
                     st.sampled_from([None, 1, CAPTURE_FILE, [], {}, {"File": CAPTURE_FILE}]))


_ODD_LISTS = [b"", b" ", b"{not json", b"null", b"[]", b"\xff\xfe[]", b"\xef\xbb\xbf[{\"file\": \"bs_2.json\"}]",
              b'{"file": "bs_2.json"}', b'"bs_2.json"', b"[" * 100_000, b"[" * 1100 + b"]" * 1100,
              b'[{"file": "bs_2.json"}' + b', {"file": "x"}' * 80_000 + b"]",  # more than 1 MiB
              b'[{"file": "bs_2.json", "file": "nope.json"}]', b'[{"file": "bs_2\\u0000.json"}]']


# Tried first, every run: each name of CAPTURE_NAMES alone (a name that cannot be looked up: issue 41 row 3), and
# beside the capture's own.
CAPTURE_REGRESSIONS = [dumps([{"file": n}]) for n in CAPTURE_NAMES] + [
    dumps([{"file": n}, {"file": CAPTURE_FILE}]) for n in CAPTURE_NAMES[:7]]


@st.composite
def capture_lists(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """The bytes of an ``execution_details.json`` and what was done: a list of entries, a list damaged at the
    byte level, or one of the odd documents (not a list, not JSON, not UTF-8, too deep, over 1 MiB)."""
    kind = draw(st.sampled_from(["list", "list", "list", "damaged", "odd"]))
    if kind == "odd":
        data = draw(st.sampled_from(_ODD_LISTS))
        return data, [f"capture list {data[:60]!r} ({len(data)} bytes)"]
    entries = draw(st.lists(_capture_entry(), min_size=draw(st.sampled_from([0, 1, 1, 1])), max_size=5))
    data = dumps(entries)
    ops = [f"capture list {entries!r:.300}"]
    if kind == "damaged":
        data, _gz, more = draw(mutate_bytes(data))
        ops += more
    return data, ops


def expected_captures(data: bytes) -> set[str]:
    """The capture files a replay beside this list reads, by the rule (README, "Graph traces"): the list's entries
    naming a regular file of the folder, else every trace file there; walked here with the standard json module."""
    try:
        listed = json.loads(data) if len(data) <= 1 << 20 else None
    except (ValueError, RecursionError):
        listed = None
    names = [e.get("file") for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []
    usable = {n for n in names if isinstance(n, str) and n in CAPTURE_USABLE}
    return usable or set(CAPTURE_READABLE)


# -- report --step (issue 41) -----------------------------------------------------------------------------------

STEP_REGRESSIONS = [99999, -1, 0, 1, 2, 3, 2**63, 2**64]  # issue 41 row 7 and row 2's --step


def step_values() -> st.SearchStrategy[int]:
    """``--step`` values: the steps a hand-built trace holds, their neighbours, and any integer, up to past 64 bits."""
    return st.one_of(st.sampled_from([-1, 0, 1, 2, 3, 4, 99999, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30]),
                     st.integers(min_value=-(2**70), max_value=2**70), st.integers(min_value=-5, max_value=10))


def check_step_output(code: int, err: str, step: int, steps: list[int], what: str) -> None:
    """A step of the trace is drawn (exit 0); any other value is exit 2 with one ``Error:`` line naming it."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, f"traceback ({what})\n{err[-3000:]}"
    if step in steps:
        assert code == 0 and not any(ln.startswith("Error:") for ln in lines), f"exit {code} ({what})\n{err[-2000:]}"
        return
    assert code == 2 and len(lines) == 1 and lines[0].startswith("Error:"), f"exit {code} ({what})\n{err[-2000:]}"
    assert "step" in lines[0], f"the error does not say what was wrong ({what}): {lines[0]}"


# -- properties ------------------------------------------------------------------------------------

def _runner() -> Any:
    from click.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()  # click >= 8.2 keeps stderr apart by default


RUNNER = None


def _reraise_with_note(exc: BaseException, note: str) -> None:
    """Raise the tool's own exception (so hypothesis tells distinct bugs apart by where they came from)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
        raise exc
    raise AssertionError(f"{note}\n{''.join(traceback.format_exception(exc))}") from exc


def invoke(*args: str) -> tuple[int, str, str]:
    """The CLI in-process; a Python exception escaping it is re-raised (it is a bug)."""
    global RUNNER
    from tracekit.cli import cli

    RUNNER = RUNNER or _runner()
    res = RUNNER.invoke(cli, list(args), catch_exceptions=True)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        _reraise_with_note(res.exception, f"tracekit {' '.join(args)} raised (exit {res.exit_code})")
    return res.exit_code, res.stdout, res.stderr


_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")  # every control character but the newline
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|nan)")


def no_nan(c: str) -> None:
    raise ValueError(f"{c} is not JSON")


def check_cli_output(code: int, out: str, err: str, fmt: str, what: str, gate: bool = False) -> None:
    """The CLI contract for one run; ``what`` describes the input for the failure message."""
    allowed = {0, 1, 3, 4, 5} if gate else {0, 1, 3}
    assert code in allowed, f"exit {code} ({what})\nstderr: {err[-2000:]}"
    if code == 5:  # the gate could not decide (a launch-bound side, no measured latency): one line says so
        assert sum("inconclusive" in ln for ln in err.splitlines()) == 1, f"exit 5 without its line ({what})"
    assert "Traceback" not in err, f"traceback ({what})\n{err[-3000:]}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code == 1:
        assert len(lines) == 1 and lines[0].startswith("Error: "), \
            f"exit 1 without one Error: line ({what})\n{err[-2000:]}"
        assert out == "", f"exit 1 with output on stdout ({what})"
        return
    if code == 3:
        assert any(ln.startswith("Warning:") for ln in lines), f"exit 3 without a Warning: line ({what})\n{err[-2000:]}"
    assert not any(ln.startswith("Error:") for ln in lines), f"exit {code} with an Error: line ({what})\n{err[-2000:]}"
    assert not _CONTROL.search(err), f"a control character on stderr ({what})\n{err[-500:]!r}"
    if fmt in ("table", "markdown"):
        assert not _CONTROL.search(out), f"a control character in the {fmt} output ({what})"
    if fmt == "markdown":
        assert "<script" not in out and not re.search(r"^#", out, re.M), f"markdown structure injected ({what})"
    if fmt == "json":
        try:
            json.loads(out, parse_constant=no_nan)
        except ValueError as exc:
            raise AssertionError(f"--format json gave invalid JSON ({exc}) ({what})\n{out[:500]}") from None
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert rows and rows[0], f"--format csv gave no header ({what})"
        for row in rows[1:]:
            for cell in row:
                assert not cell or cell[0] not in "=+-@\t\r" or _NUMBER.fullmatch(cell), \
                    f"a CSV cell a spreadsheet would run: {cell[:60]!r} ({what})"
    else:
        assert out.strip(), f"exit {code} with empty output ({what})"


def check_library(path: Path, what: str) -> None:
    """``analyze(path).check()`` succeeds or raises TracekitError, nothing else."""
    from tracekit import TracekitError, analyze

    try:
        analyze(path).check()
    except TracekitError:
        pass
    except Exception as exc:  # noqa: BLE001 - any other type is the bug this property looks for
        _reraise_with_note(exc, f"tracekit.analyze(...).check() raised ({what})")
