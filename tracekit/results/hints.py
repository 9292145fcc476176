"""Hints (what to do next) and the per-kernel facts their rules read (the rules: tracekit.analysis.hints)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .invariants import expect

__all__ = ["GroupFacts", "Hint", "HintFacts", "merge_facts"]


@dataclass(slots=True, kw_only=True)
class Hint:
    """One piece of advice about one or more block kinds, with what it read and what it may save."""

    rule: str
    blocks: list[str]  # block kinds (with " (backward)" for backward groups)
    message: str
    evidence: dict[str, Any]  # figures (µs, %) and kernel names the rule read
    saving_us: float | None  # an upper bound or a labelled estimate; None when the trace cannot tell
    saving_pct: float | None  # of the blocks' busy time (launch-bound: of their span)
    saving_basis: str  # "upper bound: …", "estimate: …" or why there is no figure


@dataclass(slots=True, kw_only=True)
class GroupFacts:
    """What the rules read about one block kind beyond BlockResult's figures, summed over its blocks."""

    # (compact kernel name, category, launcher op, tag) -> [count, busy µs inside the blocks]
    kernels: dict[tuple[str, str, str, str], list[float]] = field(default_factory=dict)
    sdpa_calls: int = 0  # public SDPA ops whose kernels ran in these blocks
    sdpa_masked: int = 0  # ... of which were passed an attn_mask tensor with is_causal=False
    gemm_16bit: int = 0  # kernels launched by GEMM ops with bf16/fp16 inputs
    gemm_fp32: int = 0  # kernels launched by GEMM ops with fp32 inputs
    replayed_us: float = 0.0  # busy µs of the blocks' kernels that CUDA/HIP graph launches ran
    graph_modes: list[str] = field(default_factory=list)  # the graph modes (vocab.GraphMode) of the blocks' traces

    def check(self) -> GroupFacts:
        """Raise InvariantError unless the counts can be true: a broken row would skew every share a rule computes.
        Returns self."""
        for name in ("sdpa_calls", "sdpa_masked", "gemm_16bit", "gemm_fp32"):
            expect(getattr(self, name) >= 0, f"GroupFacts.{name} is negative: {getattr(self, name)}")
        expect(self.replayed_us >= 0, f"GroupFacts.replayed_us is negative: {self.replayed_us}")
        expect(self.sdpa_masked <= self.sdpa_calls,
               f"GroupFacts: {self.sdpa_masked} masked SDPA calls of {self.sdpa_calls}")
        for row, v in self.kernels.items():
            expect(len(v) == 2 and v[0] >= 0 and v[1] >= 0,
                   f"GroupFacts.kernels[{row!r}] is {v!r}, not [count >= 0, µs >= 0]")
        return self


# (block kind, phase) -> facts; plain data so that it pickles from a worker process and merges by summing.
HintFacts = dict[tuple[str, str], GroupFacts]


def merge_facts(parts: Iterable[HintFacts | None]) -> HintFacts | None:
    """Several files' facts as one (a folder of ranks): rows and counts summed per block kind."""
    out: HintFacts = {}
    seen = False
    for facts in parts:
        if facts is None:
            continue
        seen = True
        for key, g in facts.items():
            m = out.setdefault(key, GroupFacts())
            g.check()  # each part as it arrives (from a worker process): sums of sound parts are sound
            for row, (n, us) in g.kernels.items():
                acc = m.kernels.setdefault(row, [0, 0.0])
                acc[0] += n
                acc[1] += us
            m.sdpa_calls += g.sdpa_calls
            m.sdpa_masked += g.sdpa_masked
            m.gemm_16bit += g.gemm_16bit
            m.gemm_fp32 += g.gemm_fp32
            m.replayed_us += g.replayed_us
            m.graph_modes = sorted(set(m.graph_modes) | set(g.graph_modes))
    return out if seen else None
