"""Text outputs that names from a trace cannot inject into (issue 26, rows 8-11): terminal control characters,
CSV formulas, markdown structure and HTML, and numbers in file names too big for a rank."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from support.builders import TraceBuilder, attention_block
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.vocab import RankFrom

# A block name (a record_function range) that tries everything at once: an OSC 52 clipboard write, a carriage
# return and erase to forge a line, a C1 CSI, a formula, a markdown heading after a newline, a cell separator, a
# code span, a link and raw HTML.
HOSTILE = ("=HYPERLINK(\"http://x\") attention \x1b]52;c;aGVsbG8=\x07\r\x1b[2Kforged\x9b31m\n# pwned | `x` "
           "[l](javascript:alert(1)) <script>alert(1)</script>")
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # every control character but the newline


def _trace(tmp_path: Path, name: str = "t.json") -> Path:
    b = TraceBuilder()
    attention_block(b, 0, name=HOSTILE)
    attention_block(b, 1000, name="layer1.attention")
    return b.write(tmp_path / name)


def _run(*args: str) -> tuple[int, str, str]:
    out = CliRunner().invoke(cli, list(args))
    return out.exit_code, out.stdout, out.stderr


def test_terminal_output_carries_no_control_character(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    code, out, err = _run("attribute", str(trace), "--by", "block")
    assert code == 0
    assert not CONTROL.search(out) and not CONTROL.search(err)
    assert "\\x1b]52" in out  # shown, escaped
    assert not any(line.startswith("forged") or line.startswith("# pwned") for line in out.splitlines())
    code, out, err = _run("diff", str(trace), str(trace))
    assert code == 0 and not CONTROL.search(out) and not CONTROL.search(err)


def test_file_names_reach_stderr_escaped(tmp_path: Path) -> None:
    trace = _trace(tmp_path, "t\x1b[2J\x07.json")
    code, out, err = _run("attribute", str(trace))
    assert code == 0 and not CONTROL.search(out) and not CONTROL.search(err)
    code, _, err = _run("attribute", str(tmp_path / "missing\x1b[2J.json"))
    assert code == 1 and not CONTROL.search(err) and "\\x1b" in err


def test_csv_text_cells_cannot_be_formulas(tmp_path: Path) -> None:
    code, out, _ = _run("attribute", str(_trace(tmp_path)), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    hostile = [r for r in rows if "HYPERLINK" in r["block"]]
    assert hostile and all(r["block"].startswith("'=") and r["kind"].startswith("'=") for r in hostile)
    for r in rows:  # numbers are untouched: they still read as numbers
        float(r["time_us"])
        assert not r["time_us"].startswith("'")
    assert not any(v.startswith(("=", "+", "@")) for r in rows for v in r.values() if v)


def test_markdown_names_cannot_break_the_table(tmp_path: Path) -> None:
    code, out, _ = _run("attribute", str(_trace(tmp_path)), "--format", "markdown", "--by", "block")
    assert code == 0
    lines = out.splitlines()
    table = [x for x in lines if x.startswith("|")]
    assert len(table) == 2 + 2  # header, rule, two blocks
    widths = {len(re.findall(r"(?<!\\)\|", x)) for x in table}
    assert len(widths) == 1  # every row has as many unescaped separators as the header
    assert not any(x.startswith("#") for x in lines)
    assert "<script>" not in out and not re.search(r"(?<!\\)\]\(javascript:", out) and not CONTROL.search(out)


def test_a_rank_number_beyond_64_bits_in_a_file_name(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for name in ("rank18446744073709551616.pt.trace.json", "rank1.pt.trace.json"):
        b = TraceBuilder()
        attention_block(b, 0)
        b.write(folder / name)
    code, out, err = _run("attribute", str(folder), "--format", "json", "-j", "1")
    assert code == 0, err
    ranks = json.loads(out)["ranks"]
    assert ranks["rank_from"] == RankFrom.ORDER and [r["rank"] for r in ranks["rows"]] == [0, 1]
    assert "file order" in (ranks["note"] or "")
