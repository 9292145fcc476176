"""Memory per block (tracekit.analysis.allocations) against a plain walk: for each block, every allocation of its
side on a root's thread inside the root's interval, summed, and the largest ``Total Allocated`` among them.
Random allocations on several threads, out of time order, at equal times, on both sides, with and without totals.
"""

from __future__ import annotations

import random

import pytest

from tracekit.analysis.allocations import block_allocations
from tracekit.analysis.blocks.discovery import Block
from tracekit.model import OP, HostEvent, MemoryEvent
from tracekit.vocab import FoundBy


class _Tr:
    def __init__(self, host, memory):
        self.host, self.memory = host, memory


def _reference(tr: _Tr, blocks: list[Block], device_side: bool) -> tuple[list, list]:
    mine = [m for m in tr.memory if m.nbytes > 0 and (m.device_type != 0) == device_side]
    if not tr.memory:
        return [None] * len(blocks), [None] * len(blocks)
    any_total = any(m.total >= 0 for m in mine)
    got, peaks = [], []
    for b in blocks:
        inside = [m for r in b.roots for m in mine
                  if m.thread == tr.host[r].thread and tr.host[r].ts <= m.ts <= tr.host[r].ts + tr.host[r].dur]
        got.append(sum(m.nbytes for m in inside) if b.roots else None)
        totals = [m.total for m in inside if m.total >= 0]
        peaks.append(max(totals) if any_total and totals else None)
    return got, peaks


def _random(rng: random.Random) -> tuple[_Tr, list[Block]]:
    host = [HostEvent(kind=OP, name="op", thread=rng.randint(0, 2), ts=rng.randint(0, 200), dur=rng.choice([0, 5, 40]),
                      ext_id=0) for _ in range(rng.randint(2, 8))]
    totals = rng.random() < 0.7
    memory = [MemoryEvent(rng.randint(0, 2), rng.choice([10, 10, rng.randint(0, 260)]), rng.choice([1, 64, 4096]),
                          rng.choice([0, 1]), rng.randint(0, 10**6) if totals and rng.random() < 0.8 else -1)
              for _ in range(rng.randint(0, 40))]
    if rng.random() < 0.5:
        memory.sort(key=lambda m: m.ts)  # (in time order, as most traces write them)
    blocks = [Block(name="b", found_by=FoundBy.MODULE, roots=rng.sample(range(len(host)), rng.randint(0, 2)))
              for _ in range(rng.randint(1, 5))]
    return _Tr(host, memory), blocks


@pytest.mark.parametrize("seed", range(80))
@pytest.mark.parametrize("device_side", [True, False])
def test_block_allocations_match_a_plain_walk(seed, device_side):
    tr, blocks = _random(random.Random(seed))
    assert block_allocations(tr, blocks, device_side) == _reference(tr, blocks, device_side)
