"""The one context every analysis stage reads and writes (:mod:`.pipeline` lists the stages).

A stage is ``stage(ctx) -> None``: it reads the fields earlier stages filled and fills its own. Fields are
grouped as the stages produce them, in pipeline order. A stage that needs a field no earlier stage filled
fails with :class:`StageOrderError`, naming the field, rather than an ``AttributeError`` deep in a loop.

Inner loops bind the fields they read to locals: attribute access on the context costs more than a local,
and the stages' loops run once per event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ..model import GraphFacts, Trace
from ..results.attribution import Attribution, BlockResult
from ..vocab import Category
from .blocks.discovery import Block
from .blocks.layer import LayerSpan
from .classify import Classifier
from .graphs import ReplayMap
from .link import Links

if TYPE_CHECKING:
    from .account import DeviceBlocks, DeviceTime

T = TypeVar("T")


class StageOrderError(RuntimeError):
    """A stage ran before the stage that fills a field it reads."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributeConfig:
    """What the caller of ``attribute_trace`` chose: block scope, classifier, hints on or off, capture traces."""

    scope: str | None = None
    classifier: Classifier = field(default_factory=Classifier)
    hints: bool = True
    captures: Sequence[Trace] = ()


@dataclass(slots=True, kw_only=True)
class StageContext:
    """One trace's analysis state, shared by the stages in order (docs/attribution.md)."""

    tr: Trace
    config: AttributeConfig = field(default_factory=AttributeConfig)
    # -- the trace as the stages read it
    graph_facts: GraphFacts | None = None  # captures and replays in the trace (find-graphs)
    origin: int = 0  # the trace's clock origin, ns (read-origin)
    replays: ReplayMap = field(default_factory=ReplayMap)  # replayed kernels mapped to captured ops (replay-captures)
    links: Links | None = None  # host tree, launches and steps (link)
    cats: list[Category] | None = None  # each device event's category; None on CPU-only traces (classify-device)
    # -- blocks
    blocks: list[Block] = field(default_factory=list)  # every attention block found so far
    owner: list[int] = field(default_factory=list)  # host event -> owning block index or NONE
    dev_owner: list[int] | None = None  # device event -> owning block index or NONE (find-kernel-blocks)
    layers: list[LayerSpan | None] = field(default_factory=list)  # per block: its attention layer (find-layers)
    # -- time
    device_time: DeviceTime | None = None  # the whole device's busy time (measure-busy)
    walk: DeviceBlocks | None = None  # per-event block shares, roles and the kernel table (account-device)
    block_results: list[BlockResult] = field(default_factory=list)  # one per block, in block order
    result: Attribution | None = None  # what attribute_trace returns (assemble-device / account-host)

    @property
    def device(self) -> bool:
        """A GPU trace (device busy time); False: CPU-only (host self time)."""
        return self.cats is not None

    def need(self, value: T | None, what: str) -> T:
        """``value``, or a StageOrderError naming the field no earlier stage filled."""
        if value is None:
            raise StageOrderError(f"no {what} yet: run the stage that fills it first (tracekit.analysis.pipeline)")
        return value
