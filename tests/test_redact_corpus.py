"""A secret corpus (issue 26, rows 1-2): realistic secrets planted in every place a trace holds text, in every
spelling JSON allows, found by an independent check (the secret values themselves, searched in every decoded string
and key of the copy), never by the rules' own counts. And what is not a secret stays."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from support.builders import TraceBuilder, attention_block
from support.cli import run_cli

from tracekit.redact import redact_bytes
from tracekit.renderers import JSONRenderer
from tracekit.run.api import analyze

# Made up, shaped like the real thing.
S = {
    "hf": "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm0123",
    "gh": "ghp_" + "9z8y7x6w5v4u3t2s1r0qPONMLKJIHGFEDC",
    "ghpat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "openai": "sk-proj-" + "Abcdefghijklmnopqrstuvwx0123",
    "google": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",  # 39 characters, as Google's are
    "stripe": "sk_live_" + "51Habcdefghijklmnop0123",
    "slack": "xoxb-" + "123456789012-abcdefghijkl",
    "slackapp": "xapp-" + "1-A0123456789-0123456789-abcdef",
    "jwt": "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0." + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "akia": "AKIA" + "Z7EXAMPLE0KEYID1",
    "awssecret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLE12",  # 40, as AWS's are
    "pem": "MIIEowIBAAKCAQEAq7Bn0TESTKEYx1y2z3",
    "ssh": "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    "dbpass": "s3cr3t-db-pass-42",
    "urlpass": "p@ss/w0rd".replace("@", "Z"),  # a password with a slash
    "user": "zelda",
    "user2": "yorick",
    "cfgtok": "cfgTOKENvalue12345",
    "reprtok": "reprTOKENvalue6789",
}
SECRETS = list(S.values())


def _metadata() -> dict:
    return {
        "environment": {"HF_TOKEN": S["hf"], "GITHUB_TOKEN": S["gh"], "OPENAI_API_KEY": S["openai"],
                        "AWS_ACCESS_KEY_ID": S["akia"], "STRIPE_SECRET": S["stripe"],
                        "PYTHONPATH": f"/home/{S['user']}:/opt/lib", "TOKENIZERS_PARALLELISM": "false"},
        "command_line": f"python /home/{S['user']}/run.py --api-key {S['google']} --db-password={S['dbpass']}",
        "argv": ["python", "serve.py", "--slack-token", S["slack"]],
        "aws_config": f"[default]\naws_secret_access_key {S['awssecret']}\n",
        "headers": {"Authorization": f"Bearer {S['jwt']}"},
        "index": f"https://bob:{S['urlpass']}@pypi.example.com/simple",
        "ssh_key": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{S['ssh']}\n-----END OPENSSH PRIVATE KEY-----\n",
        "rsa_key": f"-----BEGIN RSA PRIVATE KEY-----\n{S['pem']}\n-----END RSA PRIVATE KEY-----",
        "config_json": json.dumps({"hf_token": S["cfgtok"], "lr": 0.001}),
        "config_repr": str({"api_token": S["reprtok"], "layers": 4}),
        "slack_app": S["slackapp"],
        "gh_pat": S["ghpat"],
        "pins": "asttokens==3.0.0 tokenizers==0.21.1",
        "env_dump": (f"HF_TOKEN={S['hf']}\nGITHUB_TOKEN={S['gh']}\nOPENAI_API_KEY={S['openai']}\n"
                     f"STRIPE_API_KEY={S['stripe']}\nAWS_SECRET_ACCESS_KEY={S['awssecret']}\n"
                     f"SLACK_BOT_TOKEN={S['slack']}\nGOOGLE_API_KEY={S['google']}\nHOME=/home/{S['user']}\n"),
    }


def _trace(path: Path) -> Path:
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100"}],
                     distributedInfo={"backend": "nccl", "rank": 0, "world_size": 1,
                                      "init_method": f"tcp://u:{S['dbpass']}@10.0.0.1:29500"},
                     **_metadata())
    attention_block(b, 10, name="layer0.attention")
    attention_block(b, 400, name="layer1.attention")
    # record_function names and stack paths
    b.annotation(f"load /home/{S['user2']}/ckpt token={S['hf']}", 900, 10)
    b.events.append({"ph": "X", "cat": "python_function", "name": f"/home/{S['user2']}/proj/model.py(42): forward",
                     "pid": 100, "tid": 1, "ts": 11, "dur": 5, "args": {}})
    b.events.append({"ph": "X", "cat": "python_function", "name": f"/Users/{S['user']}/proj/attn.py(7): attn",
                     "pid": 100, "tid": 1, "ts": 401, "dur": 5, "args": {}})
    # a secret as a JSON key, and in args
    b.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "note", "pid": 100, "tid": 1,
                     "ts": 950, "args": {S["gh"]: 1, "url": f"https://x:{S['urlpass']}@h/p"}})
    # bare tokens in an op's recorded scalar inputs: their shape alone gives them away
    bare = [S[k] for k in ("hf", "gh", "ghpat", "openai", "google", "stripe", "slack", "slackapp", "jwt", "akia")]
    b.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 100, "tid": 1, "ts": 960, "dur": 1,
                     "args": {"External id": 999, "Concrete Inputs": bare}})
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def _escaped(text: str) -> str:
    """The same JSON with every string written with the escapes a writer may use: each lower-case letter as
    \\uXXXX and every slash as \\/ (what escapes cannot hide must still go). All but the ``traceEvents`` key,
    by which the reader finds its array."""
    out, in_str, plain, k = [], False, False, 0
    while k < len(text):
        ch = text[k]
        if in_str and ch == "\\":
            out.append(text[k:k + 2])
            k += 2
            continue
        if ch == '"':
            in_str = not in_str
            plain = in_str and text.startswith('traceEvents"', k + 1)
        elif in_str and not plain and "a" <= ch <= "z":
            ch = f"\\u{ord(ch):04x}"
        elif in_str and not plain and ch == "/":
            ch = "\\/"
        out.append(ch)
        k += 1
    return "".join(out)


def _strings(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in [k, *_strings(v)]]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return [obj] if isinstance(obj, str) else []


def _left(doc: dict) -> list[str]:
    text = "\n".join(_strings(doc))
    return [s for s in SECRETS if s in text]


def _placements(doc: dict) -> int:
    """How many strings (or keys) of the original hold a secret: the corpus's size."""
    return sum(1 for t in _strings(doc) for s in SECRETS if s in t)


def _attribution(path: Path) -> dict:
    return json.loads(JSONRenderer().render(analyze(path, jobs=1, decode_workers=1).check()))


@pytest.mark.parametrize("spelling", ["plain", "escaped"])
@pytest.mark.parametrize("gz", [False, True])
def test_no_secret_is_left_after_decoding(tmp_path: Path, spelling: str, gz: bool) -> None:
    run = tmp_path / "run"
    src = _trace(run / "w0" / "a.pt.trace.json")
    if spelling == "escaped":
        src.write_text(_escaped(src.read_text()))
    if gz:
        zipped = src.with_name(src.name + ".gz")
        zipped.write_bytes(gzip.compress(src.read_bytes()))
        src.unlink()
        src = zipped
    original = json.loads(gzip.decompress(src.read_bytes()) if gz else src.read_bytes())
    assert _placements(original) >= 40 and not set(SECRETS) - set(_left(original)), "every secret is planted"
    r = run_cli("redact", str(run), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out" / src.relative_to(run)
    doc = json.loads(gzip.decompress(out.read_bytes()) if gz else out.read_bytes())
    assert _left(doc) == []
    assert _attribution(out) == _attribution(src)


def test_what_is_no_secret_stays() -> None:
    text = json.dumps(_metadata()).encode()
    out = json.loads(redact_bytes(text))
    assert out["pins"] == "asttokens==3.0.0 tokenizers==0.21.1"
    assert out["environment"]["TOKENIZERS_PARALLELISM"] == "false"
    assert json.loads(out["config_json"])["lr"] == 0.001


def test_the_summary_is_in_plain_words(tmp_path: Path) -> None:
    src = _trace(tmp_path / "t.json")
    r = run_cli("redact", str(src), "-o", str(tmp_path / "r.json"))
    assert r.returncode == 0
    summary = r.stderr.splitlines()[0]
    assert "Hugging Face tokens" in summary and "secret-assignment" not in summary
