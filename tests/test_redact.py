"""``tracekit redact``: no token survives, the copy attributes exactly like the original, inputs are never overwritten.

Secrets are planted in hand-built traces (so the test knows what must go), and every real and H200 trace is
redacted and attributed again; the leak check is the shapes of docs' token kinds, independent of the rules'
own replacement counts.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.builders import TraceBuilder, attention_block
from support.paths import REAL, real_trace_files
from support.cli import run_cli
from tracekit.run.api import analyze
from tracekit.redact import CHUNK, RedactStats, leaks, redact_file, redact_path
from tracekit.renderers import JSONRenderer

H200 = REAL.parent / "h200"
H200_FILES = sorted(H200.glob("*/*/*.json.gz"))

# Shaped like the real thing, but made up.
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
AKIA = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GH = "ghp_" + "0123456789abcdefghijABCDEFGHIJ012345"
BEARER = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.payload.sig"
PLANTED = [HF, AKIA, AWS_SECRET, GH, BEARER, "s3cr3t-db-pass", "alice", "bobby", "carol", "opensesame99"]


def _hostile_trace(path: Path) -> Path:
    """An eager attention block (known answer) inside a trace whose metadata and stacks hold secrets."""
    b = TraceBuilder(
        deviceProperties=[{"id": 0, "name": "NVIDIA H100"}],
        environment={"HF_TOKEN": HF, "AWS_ACCESS_KEY_ID": AKIA, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
                     "GITHUB_TOKEN": GH, "HOME": "/home/alice", "PATH": "/home/alice/.local/bin:/usr/bin"},
        command_line=f"HF_TOKEN={HF} python /home/alice/train.py --api-key opensesame99 --db-password=s3cr3t-db-pass",
        argv=["python", "train.py", "--token", "opensesame99"],
        headers={"Authorization": f"Bearer {BEARER}"},
        pip_index="https://carol:opensesame99@pypi.example.com/simple",
    )
    b.annotation("ProfilerStep#1", 0, 2000)
    attention_block(b, 10, name="layer0.attention")
    attention_block(b, 400, name="layer1.attention")
    # stack frames and Python frames carry file paths with user names
    b.events.append({"ph": "X", "cat": "python_function", "name": "/home/alice/proj/model.py(42): forward",
                     "pid": 100, "tid": 1, "ts": 11, "dur": 5, "args": {}})
    b.events.append({"ph": "X", "cat": "python_function", "name": "/Users/bobby/proj/attn.py(7): attn",
                     "pid": 100, "tid": 1, "ts": 401, "dur": 5, "args": {}})
    b.events.append({"ph": "X", "cat": "python_function", "name": "C:\\Users\\carol\\proj\\run.py(1): <module>",
                     "pid": 100, "tid": 1, "ts": 900, "dur": 5, "args": {}})
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def _attribution_json(path: Path) -> dict:
    return json.loads(JSONRenderer().render(analyze(path).check()))


def _text(path: Path) -> bytes:
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path).read() if head == b"\x1f\x8b" else path.read_bytes()


def test_planted_secrets_are_gone_and_the_attribution_is_unchanged(tmp_path):
    src = _hostile_trace(tmp_path / "in" / "t.json")
    raw = src.read_text()
    assert all(s in raw for s in PLANTED) and leaks(raw.encode()), "the planted secrets must be findable"
    out = tmp_path / "out" / "t.json"
    [st] = redact_path(src, out)
    red = out.read_text()
    json.loads(red)  # still JSON
    for s in PLANTED:
        assert s not in red, s
    assert not leaks(red.encode())
    assert "<home>/proj/model.py(42): forward" in red and "<home>\\\\proj\\\\run.py" in red
    assert "layer0.attention" in red and "HF_TOKEN" in red  # names stay, values go
    assert st.replaced.get("hf-token") and st.replaced.get("home-posix")
    assert _attribution_json(out) == _attribution_json(src)


def test_gzip_in_and_out_and_tiny_chunks_give_the_same_bytes(tmp_path):
    src = _hostile_trace(tmp_path / "t.json.gz")
    whole = tmp_path / "a" / "t.json"
    redact_file(src, whole)
    for chunk in (1, 7, 64, 4096):
        piece = tmp_path / f"c{chunk}" / "t.json"
        st = redact_file(src, piece, chunk=chunk)
        assert piece.read_bytes() == whole.read_bytes(), chunk
    zipped = tmp_path / "z" / "t.json.gz"
    st = redact_file(src, zipped)
    assert gzip.open(zipped).read() == whole.read_bytes()
    assert st.peak_buffer <= CHUNK + len(_text(src))  # trivially; the bound on a real trace is below


@pytest.mark.skipif(not H200_FILES, reason="no H200 traces")
def test_memory_is_bounded_by_the_chunk_not_the_trace(tmp_path):
    big = max(real_trace_files() or H200_FILES, key=lambda p: p.stat().st_size)
    st = redact_file(big, tmp_path / big.name, chunk=1 << 16)
    assert st.bytes_in > 4 * (1 << 16)
    assert st.peak_buffer < 4 * (1 << 16), (st.peak_buffer, st.bytes_in)  # pieces, never the whole file


def _same_attribution(src: Path, tmp: Path) -> None:
    out = tmp / src.name
    redact_path(src, out)
    assert not leaks(_text(out)), (src, leaks(_text(out))[:3])
    assert _attribution_json(out) == _attribution_json(src), src


@pytest.mark.skipif(not H200_FILES, reason="no H200 traces")
@pytest.mark.parametrize("src", H200_FILES, ids=[f"{p.parent.parent.name}/{p.parent.name}" for p in H200_FILES])
def test_every_h200_trace_redacts_to_an_identical_attribution(src, tmp_path):
    _same_attribution(src, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("src", real_trace_files(), ids=[str(p.relative_to(REAL)) for p in real_trace_files()])
def test_every_real_trace_redacts_to_an_identical_attribution_with_no_token_left(src, tmp_path):
    _same_attribution(src, tmp_path)


def test_a_run_folder_redacts_to_a_folder_of_the_same_layout(tmp_path):
    run = tmp_path / "run"
    _hostile_trace(run / "w0" / "a.pt.trace.json")
    _hostile_trace(run / "w1" / "b.pt.trace.json.gz")
    done = redact_path(run, tmp_path / "shared")
    assert len(done) == 2
    for rel in ("w0/a.pt.trace.json", "w1/b.pt.trace.json.gz"):
        text = _text(tmp_path / "shared" / rel)
        assert not leaks(text) and HF.encode() not in text


def test_the_cli_never_writes_over_its_input(tmp_path):
    src = _hostile_trace(tmp_path / "t.json")
    before = src.read_bytes()
    link = tmp_path / "link.json"
    link.symlink_to(src)
    hard = tmp_path / "hard.json"
    os.link(src, hard)
    for out in (src, link, hard):
        proc = run_cli("redact", src, "-o", out)
        assert proc.returncode == 2 and "refusing to overwrite an input trace" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    run = tmp_path / "run"
    _hostile_trace(run / "x.pt.trace.json")
    proc = run_cli("redact", run, "-o", run / "sub")
    assert proc.returncode == 2 and "refusing to write into or over the input folder" in proc.stderr
    assert src.read_bytes() == before
    proc = run_cli("redact", tmp_path / "missing.json", "-o", tmp_path / "o.json")
    assert proc.returncode == 1 and proc.stderr.startswith("Error: ")
    proc = run_cli("redact", src, "-o", tmp_path / "ok.json")
    assert proc.returncode == 0 and "replaced" in proc.stderr and HF not in (tmp_path / "ok.json").read_text()


# -- issue 26, rows 3-7 ------------------------------------------------------------------------------------------

def test_skipped_files_are_named_and_exit_3(tmp_path):
    run = tmp_path / "run"
    _hostile_trace(run / "a.pt.trace.json")
    (run / "gone.pt.trace.json").symlink_to(tmp_path / "nowhere.json")
    os.mkfifo(run / "fifo.pt.trace.json")
    r = run_cli("redact", str(run), "-o", str(tmp_path / "out"))
    assert r.returncode == 3, r.stderr
    warnings = [x for x in r.stderr.splitlines() if x.startswith("Warning:")]
    assert any("gone.pt.trace.json" in x for x in warnings) and any("fifo.pt.trace.json" in x for x in warnings)
    assert (tmp_path / "out" / "a.pt.trace.json").exists()


def test_a_link_out_of_the_output_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    _hostile_trace(run / "sub" / "a.pt.trace.json")
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "sub").symlink_to(elsewhere)
    r = run_cli("redact", str(run), "-o", str(out))
    assert r.returncode == 2 and "leaves the output folder" in r.stderr and "Traceback" not in r.stderr
    assert not list(elsewhere.iterdir())


def test_an_output_under_a_file_is_one_error_line(tmp_path):
    src = _hostile_trace(tmp_path / "plain.json")
    r = run_cli("redact", str(src), "-o", str(src / "sub" / "x.json"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert [x for x in r.stderr.splitlines() if x.startswith("Error:")] and len(r.stderr.strip().splitlines()) == 1


def test_one_long_keyword_string_is_linear():
    import time

    from tracekit.redact import redact_bytes

    def cost(n: int) -> float:
        data = b'{"name": "' + b"key" * n + b'"}'
        t = time.perf_counter()
        assert redact_bytes(data) == data
        return time.perf_counter() - t

    small, big = cost(20_000), cost(160_000)  # 8x the text: a quadratic scan would take about 64x
    assert big < 20 * small + 0.05


def test_keywords_inside_a_name_still_reach_the_secret_word():
    from tracekit.redact import redact_bytes

    out = redact_bytes(b'"basic_token=abcdef123", "keykey_password": "hunter2xyz"')
    assert b"abcdef123" not in out and b"hunter2xyz" not in out


def test_a_truncated_gz_is_salvaged_with_exit_3(tmp_path):
    src = _hostile_trace(tmp_path / "t.json.gz")
    raw = src.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    r = run_cli("redact", str(cut), "-o", str(tmp_path / "red.json.gz"))
    assert r.returncode == 3 and "ends early" in r.stderr and "Traceback" not in r.stderr
    copy = _text(tmp_path / "red.json.gz")
    assert copy and not leaks(copy)
    got = run_cli("attribute", str(tmp_path / "red.json.gz"), "--format", "json")
    assert got.returncode == 3  # the copy is as damaged as its input: attribute salvages it the same way


# ---------------------------------------------------------------------------------------------
# PASSWORD=… and "PASSWORD": "…"

H100 = "NVIDIA H100 80GB HBM3"


ASSIGNED, MEMBER = "hunter2-Xyzzy-77", "correct-horse-battery"


def test_password_assignment_and_member_are_redacted(tmp_path):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}],
                     command_line=f"PASSWORD={ASSIGNED} python serve.py --port 8080",
                     environment={"PASSWORD": MEMBER, "LANG": "C.UTF-8", "SHELL": "/bin/bash"})
    b.annotation("ProfilerStep#1", 0, 300)
    attention_block(b, 10)
    src = b.write(tmp_path / "in.json")
    out = tmp_path / "out.json"
    run_cli("redact", src, "-o", out, check=True)
    text = out.read_text()
    assert ASSIGNED not in text  # PASSWORD=…
    assert MEMBER not in text  # "PASSWORD": "…"
    orig, red = json.loads(src.read_text()), json.loads(text)
    cmd = red.pop("command_line")
    assert cmd.startswith("PASSWORD=") and ASSIGNED not in cmd
    assert cmd.endswith(" python serve.py --port 8080")  # the value ends at the space: the rest is kept
    env = red["environment"]
    assert set(env) == {"PASSWORD", "LANG", "SHELL"} and MEMBER not in env["PASSWORD"] and env["PASSWORD"]
    assert (env["LANG"], env["SHELL"]) == ("C.UTF-8", "/bin/bash")
    del orig["command_line"], orig["environment"]["PASSWORD"], env["PASSWORD"]
    assert red == orig  # everything else, events included, is unchanged


# -- issue 41, row 4: input that is no JSON text at all ----------------------------------------------------------

def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".")]


def test_a_sparse_file_of_zero_bytes_is_one_error_line_at_once_and_leaves_nothing(tmp_path):
    import time

    src = tmp_path / "z.pt.trace.json"
    with open(src, "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of NUL bytes that take no disk
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.monotonic()
    r = run_cli("redact", src, "-o", out / "r.json")
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not valid JSON at byte 0" in r.stderr and "Traceback" not in r.stderr
    assert not list(out.iterdir())  # no copy, no temp file
    assert took < 20, took  # (reading the whole file took 10 s and 150 MB before the fix; refusing reads one block)
    attr = run_cli("attribute", src)
    assert attr.returncode == 1 and attr.stderr == r.stderr  # the same line as attribute gives


def _peak_while(fn) -> tuple[int, object]:
    """The Python heap's peak while ``fn`` runs, and what it returned or raised."""
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            got: object = fn()
        except Exception as exc:  # noqa: BLE001 - the caller asserts which
            got = exc
        return tracemalloc.get_traced_memory()[1], got
    finally:
        tracemalloc.stop()


def test_text_that_cannot_be_json_is_refused_with_memory_bounded(tmp_path):
    from tracekit.errors import TraceFormatError

    chunk, size = 1 << 16, 8 << 20
    spaces = tmp_path / "spaces.json"
    spaces.write_bytes(b" " * size)  # all whitespace: no JSON text (attribute: "input data is empty")
    peak, got = _peak_while(lambda: redact_file(spaces, tmp_path / "o1.json", chunk=chunk))
    assert isinstance(got, TraceFormatError) and "not valid JSON" in str(got), got
    assert peak < size // 4, peak  # blocks, never the whole file
    opened = tmp_path / "opened.json"
    opened.write_bytes(b"{" + b"\0" * size)  # an object opened, then zero bytes: no text to copy
    peak, got = _peak_while(lambda: redact_file(opened, tmp_path / "o2.json", chunk=chunk))
    assert isinstance(got, TraceFormatError) and "not valid JSON at byte 1" in str(got), got
    assert peak < size // 4, peak
    assert not _temps(tmp_path)


def test_a_trace_padded_with_zero_bytes_is_copied_to_its_end_with_exit_3(tmp_path):
    """A crash can leave a file's tail as zero bytes: attribute salvages the events before them (exit 3), and
    redact copies them, stops at the first zero byte (not reading the rest into memory) and says so."""
    src = _hostile_trace(tmp_path / "t.json")
    raw = src.read_bytes()
    cut = raw.rfind(b'{"ph"')
    padded = tmp_path / "padded.pt.trace.json"
    padded.write_bytes(raw[:cut] + b"\0" * (4 << 20))
    out = tmp_path / "red.json"
    r = run_cli("redact", padded, "-o", out)
    assert r.returncode == 3 and f"not valid JSON from byte {cut:,}" in r.stderr, r.stderr
    assert out.read_bytes() == redact_bytes_of(raw[:cut])
    peak, st = _peak_while(lambda: redact_file(padded, tmp_path / "o.json", chunk=1 << 16))
    assert isinstance(st, RedactStats) and st.damaged and peak < 1 << 20, (peak, st)
    assert run_cli("attribute", out).returncode == run_cli("attribute", padded).returncode == 3


def test_a_long_string_is_searched_for_a_cut_once(tmp_path, monkeypatch):
    """A string (or run of spaces) longer than many blocks: each block is searched for a place to cut once, not
    again with every block after it (that made 64 MiB of spaces take 10 s, and 2 GiB hours)."""
    import tracekit.redact as red

    scanned: list[int] = []
    real = red._safe_cut
    monkeypatch.setattr(red, "_safe_cut", lambda buf: scanned.append(len(buf)) or real(buf))
    chunk, size = 1 << 12, 1 << 20
    src = tmp_path / "long.json"
    src.write_bytes(b'{"traceEvents": [{"name": "' + b"a" * size + b'"}, ' + b" " * size + b"]}")
    st = redact_file(src, tmp_path / "out.json", chunk=chunk)
    assert (tmp_path / "out.json").read_bytes() == src.read_bytes()
    assert sum(scanned) < 3 * st.bytes_in, (sum(scanned), st.bytes_in)  # (quadratic: ~ size * size / chunk)


def redact_bytes_of(data: bytes) -> bytes:
    from tracekit.redact import redact_bytes

    return redact_bytes(data)


def test_sigterm_during_a_copy_leaves_no_temp_file(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from support.paths import ROOT

    src = tmp_path / "big.pt.trace.json"
    event = b'{"ph": "X", "name": "token key secret auth passw", "ts": 1, "dur": 1, "pid": 1, "tid": 1},\n'
    with open(src, "wb") as f:
        f.write(b'{"traceEvents": [')
        for _ in range(40):
            f.write(event * 8000)
        f.write(event[:-2] + b"]}")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "redact", str(src), "-o", str(out / "r.json")],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _temps(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.skip("the copy ended before it could be stopped")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM) and "Traceback" not in err, err
    assert not list(out.iterdir())


# -- issue 41, row 11: percent-encoded secrets and NAME: value ---------------------------------------------------

URL_VAL, HF_REST, YAML_PW, HEADER_TOK = "tok3nValue-Xyz987", "ZyXwVuTsRqPoNmLkJiHgFeDcBa9876", "hunter2-Plugh", \
    "qrstuvwxyz0123456789ABCD"


def test_percent_encoded_and_yaml_secrets_are_gone(tmp_path):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}],
                     query=f"https://example.com/search?q=HF_TOKEN%3D{URL_VAL}&page=2",
                     link=f"https://hub.example.com/api?t=hf%5F{HF_REST}",
                     twice=f"https://hub.example.com/api?t=hf%255F{HF_REST}",  # encoded twice
                     config_yaml=f"model: llama\npassword: {YAML_PW}\nlayers: 4\nkey: 256\n",
                     http=f"Authorization: Bearer {HEADER_TOK}",
                     plain="/data/my%20file%22s.json?x=%3D")  # encoded, but no secret: kept byte for byte
    b.annotation("ProfilerStep#1", 0, 300)
    attention_block(b, 10)
    (tmp_path / "in").mkdir()
    src = b.write(tmp_path / "in" / "t.json")
    out = tmp_path / "out" / "t.json"
    run_cli("redact", src, "-o", out, check=True)
    text = out.read_text()
    red = json.loads(text)  # still JSON
    for s in (URL_VAL, HF_REST, YAML_PW, HEADER_TOK):
        assert s not in text, s
    assert red["query"].startswith("https://example.com/search?q=") and red["query"].endswith("&page=2")
    assert red["config_yaml"].startswith("model: llama\npassword: ") and "\nlayers: 4\nkey: 256\n" in red["config_yaml"]
    assert red["plain"] == "/data/my%20file%22s.json?x=%3D"
    orig = json.loads(src.read_text())
    for k in ("query", "link", "twice", "config_yaml", "http"):
        assert red.pop(k) != orig.pop(k), k
    assert red == orig  # everything else, events included, is unchanged
    assert _attribution_json(out) == _attribution_json(src)


def _rules_with_literals():
    from tracekit.redact import REDACT_RULES

    return [r for r in REDACT_RULES if r.needs]


@pytest.mark.parametrize("rule", _rules_with_literals(), ids=lambda r: r.name)
def test_a_rule_is_skipped_only_where_it_could_not_match(rule):
    """``RedactRule.needs``: every match of such a rule holds one of its literals, so skipping the rule where none
    is in the text changes nothing. Checked on text drawn from the rule's own pattern (hypothesis's ``from_regex``:
    its alternatives, classes and repeats), each match the pattern then finds in it."""

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.from_regex(rule.pattern))
    def every_match_holds_a_literal(text: bytes) -> None:
        for m in rule.pattern.finditer(text):
            assert any(literal in m.group() for literal in rule.needs), m.group()

    every_match_holds_a_literal()


@pytest.mark.parametrize(("text", "secrets"), [
    (b'"sk_live_0123456789abcdefghij"', True),
    (b'"rk_test_0123456789abcdefghij"', True),
    (b'"/home/alice/x.py"', True),
    (b'"\\/Users\\/bobby\\/y.py"', True),
    (b'"C:\\\\Users\\\\carol\\\\z.py"', True),
    (b'"d:\\\\\\\\documents and settings\\\\\\\\dave\\\\\\\\w"', True),
    (b'"sk_other", "/usr/home", "C:/Users", "homes of Users", "C:\\\\Program Files"', False),  # near misses
])
def test_skipping_rules_by_their_literals_gives_the_same_bytes(text, secrets, monkeypatch):
    """The copy is byte for byte what every rule run everywhere gives (the rules' ``needs`` emptied)."""
    import dataclasses

    import tracekit.redact as redact

    skipped = redact.redact_bytes(text)
    monkeypatch.setattr(redact, "REDACT_RULES", tuple(dataclasses.replace(r, needs=()) for r in redact.REDACT_RULES))
    assert skipped == redact.redact_bytes(text)
    assert (skipped != text) == secrets
