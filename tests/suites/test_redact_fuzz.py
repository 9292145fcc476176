"""Escape-split tokens (issue 26): a secret written with any mix of JSON escapes, in any name field of an event, is gone
after ``redact``, judged by the decoded copy; the copy is still JSON that means the same elsewhere."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.redact import redact_bytes

TOKENS = ["hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm0123", "ghp_" + "9z8y7x6w5v4u3t2s1r0qPONMLKJIHGFEDC",
          "AIza" + "SyA1234567890abcdefghijklmnopqrstuv", "sk_live_" + "51Habcdefghijklmnop0123",
          "xoxb-" + "123456789012-abcdefghijkl", "AKIA" + "Z7EXAMPLE0KEYID1"]
FIELDS = ["name", "cat", "args.name", "args.Module", "args.Call stack", "key"]


def _spell(text: str, escape: list[bool]) -> str:
    """``text`` as the inside of a JSON string, each character escaped as \\uXXXX where ``escape`` says so."""
    return "".join(f"\\u{ord(c):04x}" if e else c for c, e in zip(text, escape))


@st.composite
def placements(draw: st.DrawFn) -> tuple[str, str, str]:
    token = draw(st.sampled_from(TOKENS))
    escape = draw(st.lists(st.booleans(), min_size=len(token), max_size=len(token)))
    field = draw(st.sampled_from(FIELDS))
    before = draw(st.sampled_from(["", "load ", "x=", "/home/u/", "token: "]))
    return token, field, before + _spell(token, escape) + draw(st.sampled_from(["", " done", "/ckpt"]))


@settings(max_examples=300, deadline=None)
@given(placements())
def test_an_escape_split_token_is_gone(case: tuple[str, str, str]) -> None:
    token, field, inner = case
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {}}
    text = json.dumps({"traceEvents": [ev]})
    where = {"name": '"name": "aten::mm"', "cat": '"cat": "cpu_op"'}.get(field)
    if where is not None:
        text = text.replace(where, where.split(":")[0] + f': "{inner}"')
    elif field == "key":
        text = text.replace('"args": {}', f'"args": {{"{inner}": 1}}')
    else:
        text = text.replace('"args": {}', f'"args": {{"{field[5:]}": "{inner}"}}')
    original = json.loads(text)
    assert token in json.dumps(original)  # planted: the decoded text holds it
    out = json.loads(redact_bytes(text.encode()))
    assert token not in json.dumps(out, ensure_ascii=False)
    assert out["traceEvents"][0]["ts"] == 1 and out["traceEvents"][0]["ph"] == "X"
