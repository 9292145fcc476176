"""Survivors of the third mutmut run in tracekit.analysis.attribute (issue 21), on hand-built pieces."""

from __future__ import annotations

from tracekit.analysis.attribute import _backward_evidence
from tracekit.analysis.scopes import Block
from tracekit.results.attribution import Evidence
from tracekit.vocab import CoreKind, FoundBy


def test_backward_evidence_of_a_forward_block_without_evidence_is_none():
    """A forward block without evidence (a hand-built or pre-evidence block): its backward has none either,
    rather than a crash on the missing rule."""
    assert _backward_evidence(Block("attn", FoundBy.MODULE, [0], evidence=None), "autograd") is None


def test_backward_evidence_names_how_it_was_paired():
    """The forward's evidence with the rule prefixed: "autograd backward of innermost-scope"; the rest is kept."""
    ev = Evidence(rule="innermost-scope", core=CoreKind.FUSED_OP, names=("aten::sdpa",))
    got = _backward_evidence(Block("attn", FoundBy.MODULE, [0], evidence=ev), "autograd")
    assert got == Evidence(rule="autograd backward of innermost-scope", core=CoreKind.FUSED_OP, names=("aten::sdpa",))
