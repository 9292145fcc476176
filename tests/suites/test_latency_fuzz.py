"""Fuzzing the latency inputs (issue 41): every field of measured.json and every ``--latency-*`` flag of the gate,
each with a handful of hostile values (tests/support/fuzzing.py reads the fields and flags off the code, so a new
one is fuzzed by default). Hand-built traces and a fixed list of cases, no search: a few seconds.

The contract: a measured.json is taken with plausible figures or ignored with one warning line, on every path
(``attribute``, ``--by run``, ``diff``, the gate, ``report``), never a traceback; a hostile ``--latency-*`` value,
or one flag without a latency for the other side, is exit 2 with one ``Error:`` line naming the flag.
"""

from __future__ import annotations

import json
from pathlib import Path

from support import fuzzing
from support.pairs import cpu_trace, launch_bound_trace

from tracekit.results.measured import MEASURED_FILE, MEASURED_SCHEMA


def _ignored(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("Warning:") and f"{MEASURED_FILE}: ignored" in ln]


def _sweep(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two runs: ``eager_512`` (the case's measured.json goes there) and ``fast_512``, validly measured."""
    root = tmp_path / "runs"
    for name in ("eager_512", "fast_512"):
        (root / name).mkdir(parents=True)
        launch_bound_trace(root / name / "t.pt.trace.json", gemm=10, host=60)
    (root / "fast_512" / MEASURED_FILE).write_text(json.dumps({"schema": MEASURED_SCHEMA, "median_ms": 1.0,
                                                               "repeats": 3, "samples_ms": [0.9, 1.0, 1.1]}))
    return root, root / "eager_512", root / "fast_512"


def test_the_fuzzed_fields_and_flags_are_read_off_the_code():
    """What the cases below cover: measured.json's fields (the recorder's valid file names each one it knows) and
    the gate's flags."""
    fields = fuzzing.measured_fields()
    assert {"median_ms", "low_ms", "high_ms", "repeats", "iters", "samples_ms", "graph_median_ms"} <= set(fields)
    assert "source" not in fields and set(fuzzing.VALID_MEASURED) <= set(fields)
    assert {"--latency-before", "--latency-after"} <= set(fuzzing.latency_flags())


def test_every_measured_field_with_a_hostile_value_is_taken_or_ignored_on_every_path(tmp_path):
    """Each field × each hostile value: ``attribute RUN --format json`` takes the file with plausible figures or
    ignores it with one line, and a second path in turn (``--by run``, ``diff``, the gate, ``report``) agrees."""
    root, run, good = _sweep(tmp_path)
    others = [("attribute", root, "--by", "run", "--format", "json"), ("diff", run, good, "--format", "json"),
              ("diff", good, run, "--fail-if-slower", "5", "--format", "json"),
              ("report", run, "-o", tmp_path / "r.html")]
    for i, (field, value) in enumerate(fuzzing.measured_cases()):
        (run / MEASURED_FILE).write_bytes(fuzzing.measured_doc(field, value))
        what = f"measured.json {field} = {value!r:.60}"
        code, out, err = fuzzing.invoke("attribute", str(run), "--format", "json")
        fuzzing.check_cli_output(code, out, err, "json", what)
        ignored = _ignored(err)
        fuzzing.check_measured(json.loads(out).get("measured"), ignored, what)
        args = others[i % len(others)]
        code, out, err = fuzzing.invoke(*map(str, args))
        gate = "--fail-if-slower" in args
        assert code in ({0, 4, 5} if gate else {0}), f"exit {code} ({what}; {args[0]})\n{err[-500:]}"
        assert "Traceback" not in err and not any(x in err + out for x in ("inf%", "nan%", "inf s")), what
        assert len(_ignored(err)) == len(ignored), f"{args[0]} warned {len(_ignored(err))}× ({what})\n{err}"


def test_every_latency_flag_with_a_hostile_text_is_a_one_line_usage_error(tmp_path):
    """Each ``--latency-*`` flag × each hostile text (the other flags good), and each flag alone: exit 2, one
    ``Error:`` line naming the flag, nothing on stdout; all flags good: the gate decides (0, 4 or 5)."""
    a, b = cpu_trace(tmp_path / "a.json", 40), cpu_trace(tmp_path / "b.json", 40)
    cases = fuzzing.latency_flag_cases()
    assert len(cases) >= len(fuzzing.HOSTILE_LATENCY_TEXTS) * 2
    for flags, want in cases:
        args = ["diff", str(a), str(b), "--fail-if-slower", "5"] + [x for kv in flags.items() for x in kv]
        code, out, err = fuzzing.invoke(*args)
        what = " ".join(f"{k} {v[:40]!r}" for k, v in flags.items())
        assert "Traceback" not in err, what
        if want is None:
            assert code in (0, 4, 5), f"exit {code} ({what})\n{err}"
            continue
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and out == "", f"exit {code} ({what})\n{err[-500:]}"
        assert len(lines) == 1 and lines[0].startswith("Error: --latency-") and len(lines[0]) < 300, (what, err)
