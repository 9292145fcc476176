"""Block discovery over the host tree's columns (issue 40): the owners handed down subtree runs and the softmax ops'
sibling groups, each against the plain walk it replaced (kept here as the reference), on random nestings."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from tracekit.analysis.blocks import discovery
from tracekit.analysis.blocks.discovery import Block, BlockFinder
from tracekit.analysis.link import NONE, link
from tracekit.model import ANNOTATION, MODULE, OP, HostEvent, Trace, TraceInfo
from tracekit.vocab import FoundBy

NAMES = {OP: ["aten::softmax", "aten::_softmax", "aten::bmm", "aten::matmul", "aten::linear", "aten::view",
              "aten::add"],
         ANNOTATION: ["self_attn", "qk_matmul", "ProfilerStep#3", "block"],
         MODULE: ["nn.Module: Attention", "nn.Module: Linear", "nn.Module: Layer"]}


def _random_trace(rng: random.Random, count: int, proper: bool) -> Trace:
    """Nested ranges, modules and ops on two threads (scopes, ProfilerSteps, transparent ranges and softmax ops
    among them); with ``proper`` False, intervals at random (children outlasting their parents, ties)."""
    host: list[HostEvent] = []

    def nest(thread: int, start: int, end: int, depth: int) -> None:
        t = start
        while depth < 6 and t < end and rng.random() < 0.85:
            t += rng.choice((0, 1, 2))
            if t > end:
                break
            e = min(end, t + rng.choice((0, 1, 4, 12, 40)))
            kind = rng.choice((MODULE, ANNOTATION, OP, OP, OP))
            host.append(HostEvent(kind, rng.choice(NAMES[kind]), thread, t, e - t, 0))
            nest(thread, t, e, depth + 1)
            t = e

    for thread in (0, 1):
        if proper:
            host.append(HostEvent(ANNOTATION, "ProfilerStep#3", thread, 0, 300, 0))
            nest(thread, 0, 300, 1)
        else:
            for _ in range(count // 2):
                kind = rng.choice((MODULE, ANNOTATION, OP, OP))
                host.append(HostEvent(kind, rng.choice(NAMES[kind]), thread, rng.randrange(60),
                                      rng.choice((0, 1, 3, 10, 30)), 0))
    rng.shuffle(host)
    return Trace(info=TraceInfo(source="random"), threads=[(1, 1), (1, 2)], host=host,
                 names=frozenset(h.name for h in host))


def _walked_owners(links, blocks: list[Block], n: int) -> list[int]:
    """The plain walk: each root's block, then parents first, an event takes its parent's owner."""
    owner = [NONE] * n
    for b, blk in enumerate(blocks):
        for r in blk.roots:
            owner[r] = b
    for i in links.order:
        p = links.parent[i]
        if owner[i] == NONE and p != NONE:
            owner[i] = owner[p]
    return owner


def _walked_siblings(tr: Trace, links, softmax_ops: list[int], key, is_key) -> list[list[int]]:
    """The plain walk over the whole order: the ops under each softmax op's key, through ranges that are no key."""
    host, parent = tr.host, links.parent
    key_of = {k: k for k in map(key, softmax_ops)}
    kids: dict[int, list[int]] = defaultdict(list)
    for i in links.order:
        if parent[i] not in key_of:
            continue
        if host[i].kind == OP:
            kids[key_of[parent[i]]].append(i)
        elif i not in key_of and not is_key(host[i]):
            key_of[i] = key_of[parent[i]]
    return list(kids.values())


@pytest.mark.parametrize("proper", [True, False])
@pytest.mark.parametrize("seed", range(30))
def test_owners_by_subtree_runs_are_the_walks(seed: int, proper: bool) -> None:
    """Random blocks of random roots (nested ones, a root in two blocks): the innermost root's block owns each
    event, the later block where two share a root."""
    rng = random.Random(seed)
    tr = _random_trace(rng, 300, proper)
    links = link(tr)
    n = len(tr.host)
    blocks = [Block("b", FoundBy.INFERRED, rng.sample(range(n), rng.choice((1, 1, 3))))
              for _ in range(rng.randrange(8))]
    if blocks:
        blocks.append(Block("again", FoundBy.INFERRED, [blocks[0].roots[0]]))
    assert discovery._owners(tr, links, blocks) == _walked_owners(links, blocks, n)


@pytest.mark.parametrize("proper", [True, False])
@pytest.mark.parametrize("seed", range(30))
def test_softmax_sibling_groups_are_the_walks(seed: int, proper: bool) -> None:
    """The sibling groups of the softmax ops' keys (scopes, ProfilerSteps, ops, or none at the top), in the order
    of their first op, each with where its softmax ops are."""
    rng = random.Random(seed)
    tr = _random_trace(rng, 300, proper)
    links = link(tr)
    cores = discovery._Cores(tr, links, BlockFinder(), None)
    softmax = cores.ops.of(cores.ops.softmax)
    got = discovery._softmax_siblings(tr, links, softmax, cores.sibling_key, cores.is_key)
    walked = _walked_siblings(tr, links, softmax, cores.sibling_key, cores.is_key)
    assert [sibs for sibs, _ in got] == walked and (walked or not softmax)
    assert discovery._softmax_siblings(tr, links, [], cores.sibling_key, cores.is_key) == []  # (names on ranges)
    assert [at for _, at in got] == [[p for p, i in enumerate(sibs) if tr.host[i].name in cores.ops.softmax]
                                     for sibs in walked]
    assert discovery._ops_named(tr, links, {"aten::bmm", "aten::softmax"}) == [
        i for i, h in enumerate(tr.host) if h.kind == OP and h.name in ("aten::bmm", "aten::softmax")]
