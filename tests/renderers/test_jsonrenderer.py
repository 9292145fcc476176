"""The JSON renderer's streamed output (JSONRenderer.stream): the same bytes as render(), in pieces.

The reference is render(), one orjson dump of the whole document; the streamed path dumps the keys before and after
``blocks`` and each block alone, and stitches them. Hostile names (newlines, quotes, backslashes, non-ASCII) must
not break the stitching: orjson escapes every newline inside a string, so only structural lines are indented.
"""

from __future__ import annotations

import json

import pytest

from support.builders import TraceBuilder, attention_block
from support.paths import REAL, requires_real
from tracekit.analysis.attribute import attribute_trace
from tracekit.io.load import load_trace
from tracekit.renderers import jsonrenderer
from tracekit.renderers.jsonrenderer import JSONRenderer

HOSTILE = 'lay"er\n0.\\attention\u2028—é\t{"x": [1]}\n    '


def _result(tmp_path, blocks: int, name: str = "layer0.attention"):
    b = TraceBuilder()
    for i in range(blocks):
        attention_block(b, 1000 + 500 * i, name=f"{name}{i}")
    b.op("aten::add", 100_000, 5)  # (a trace without blocks still has an op)
    result = attribute_trace(load_trace(b.write(tmp_path / "t.json")))
    result.check()
    assert len(result.blocks) == blocks
    return result


def _both(result, **kw) -> tuple[str, list[str]]:
    r = JSONRenderer(**kw)
    return r.render(result), list(r.stream(result))


@pytest.mark.parametrize("blocks", [0, 1, 3])
@pytest.mark.parametrize("intervals", [False, True])
def test_the_stream_is_render_byte_for_byte(tmp_path, blocks, intervals):
    result = _result(tmp_path, blocks, name=HOSTILE)
    r = JSONRenderer()
    r.with_intervals = intervals
    whole, pieces = r.render(result), list(r.stream(result))
    assert "".join(pieces) == whole
    doc = json.loads(whole)
    assert [b["name"] for b in doc["blocks"]] == [f"{HOSTILE}{i}" for i in range(blocks)]
    assert ("intervals" in doc["blocks"][0]) == intervals if blocks else True


def test_blocks_come_in_several_pieces_when_they_outgrow_a_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonrenderer, "_STREAM_BATCH", 1)
    result = _result(tmp_path, 4)
    whole, pieces = _both(result)
    assert len(pieces) == 1 + 4  # the head with the first block, then each block's own batch, the last with the tail
    assert "".join(pieces) == whole


@pytest.mark.parametrize("by", ["kernel", "rank"])
def test_layouts_that_add_keys_are_rendered_whole(tmp_path, by):
    result = _result(tmp_path, 2)
    whole, pieces = _both(result, by=by)
    assert pieces == [whole]


@requires_real
@pytest.mark.parametrize("name", ["tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
                                  "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
def test_the_stream_of_a_real_trace_is_render_byte_for_byte(name):
    result = attribute_trace(load_trace(REAL / name))
    whole, pieces = _both(result)
    assert len(result.blocks) > 1 and "".join(pieces) == whole
