"""attribute_trace as an ordered list of named stages over one :class:`~.context.StageContext`.

Every stage has one signature, ``stage(ctx) -> None``, like pyinstrument's processors: it reads what earlier
stages put on the context and adds its own. :data:`STAGES` is the order, each entry with the reason it sits
where it does; :func:`run_stages` runs any prefix of it, so each stage can be tested alone on a hand-built
trace (tests/analysis/test_pipeline.py). Stages run once per trace: the per-event work stays in the modules
they call (blocks/, account, totals, hints/), on locals.

A stage that does not apply to a trace returns at once: the device stages on a CPU-only trace
(``ctx.device`` False), the host stage on a GPU trace, the hint stages with hints off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..io.graphs import find_graphs
from ..model import Trace
from ..results.attribution import Attribution
from .account import (
    account_device_blocks, add_efficiency, device_categories, device_result, host_attribution, measure_device,
    own_device_events,
)
from .blocks.backward import attach_backward
from .blocks.compiled import compiled_outside
from .blocks.discovery import BlockFinder
from .blocks.layer import find_layers, layer_figures
from .classify import Classifier
from .clock import trace_origin
from .context import AttributeConfig, StageContext
from .whatif import add_fused_estimates, whatif_of
from .graphs import graph_warnings, record_captured, replay_with_captures, summarize
from .hints import evaluate
from .hints.facts import block_facts
from .link import link
from .ops import ops_of
from .stages import serving_stages


def find_graph_facts(ctx: StageContext) -> None:
    """The CUDA/HIP graph captures and replays in the trace (the loader's, else found now)."""
    ctx.graph_facts = ctx.tr.graphs if ctx.tr.graphs is not None else find_graphs(ctx.tr)


def read_origin(ctx: StageContext) -> None:
    """The trace's clock origin, which every µs figure counts from."""
    ctx.origin = trace_origin(ctx.tr)


def replay_captures(ctx: StageContext) -> None:
    """Replayed kernels mapped to the captured ops (``--capture`` traces, or a capture in the trace itself)."""
    if ctx.need(ctx.graph_facts, "graph facts").any:
        ctx.tr, ctx.replays = replay_with_captures(ctx.tr, ctx.config.captures)


def link_events(ctx: StageContext) -> None:
    """The host tree, each kernel's launching op and each op's ProfilerStep (tracekit.analysis.link)."""
    ctx.links = link(ctx.tr)


def classify_device(ctx: StageContext) -> None:
    """Each device event's category by its name, kind and launcher; stays None on CPU-only traces."""
    if ctx.tr.device:
        ctx.cats = device_categories(ctx.tr, ctx.need(ctx.links, "links"), ctx.config.classifier)


def find_host_blocks(ctx: StageContext) -> None:
    """The blocks host events show (scopes, fused ops, eager triples) and each host event's owner. The nesting's
    arrays (``Links.tree``) go after it: no later stage reads them (one that did would build them again), and at
    1 GB of trace they hold about 17 MB through the accounting, where the peak of memory is."""
    links = ctx.need(ctx.links, "links")
    ctx.blocks, ctx.owner = BlockFinder(ctx.config.scope).find(ctx.tr, links, ctx.cats)
    links.tree = None


def attach_backward_blocks(ctx: StageContext) -> None:
    """Each forward block's backward work as a backward block, paired by what autograd recorded."""
    attach_backward(ctx.tr, ctx.need(ctx.links, "links"), ctx.blocks, ctx.owner)


def record_captured_blocks(ctx: StageContext) -> None:
    """In a graph capture, the kernels each block's launches recorded (they run later, in the replays)."""
    facts = ctx.need(ctx.graph_facts, "graph facts")
    if facts.captures:
        record_captured(ctx.tr, ctx.need(ctx.links, "links"), facts, ctx.blocks, ctx.owner)


def find_device_blocks(ctx: StageContext) -> None:
    """Device traces: each device event's block, and the blocks only the classified kernels show."""
    if ctx.cats is not None:
        ctx.dev_owner = own_device_events(ctx.tr, ctx.need(ctx.links, "links"), ctx.blocks, ctx.owner, ctx.cats)


def measure_busy(ctx: StageContext) -> None:
    """Device traces: the whole device's busy time, each instant once, and each block's events."""
    if ctx.cats is not None:
        ctx.device_time = measure_device(ctx.tr, ctx.need(ctx.dev_owner, "device owners"))


def account_device(ctx: StageContext) -> None:
    """Device traces: each block's busy time by category and matmul role, span, idle time and memory."""
    if ctx.cats is not None:
        graphs = ctx.need(ctx.graph_facts, "graph facts")
        ctx.block_results, ctx.walk = account_device_blocks(
            ctx.tr, ctx.need(ctx.links, "links"), ctx.blocks, ctx.cats, ctx.need(ctx.device_time, "device time"),
            graph_launches=graphs.launches, origin=ctx.origin)


def add_block_efficiency(ctx: StageContext) -> None:
    """Device traces: each block's FLOP/byte efficiency; before the hints, whose low-tflops rule reads it."""
    if ctx.cats is not None:
        add_efficiency(ctx.tr, ctx.need(ctx.links, "links"), ctx.cats, ctx.need(ctx.dev_owner, "device owners"),
                       ctx.need(ctx.device_time, "device time"), ctx.need(ctx.walk, "device walk"), ctx.block_results)


def assemble_device(ctx: StageContext) -> None:
    """Device traces: the Attribution (blocks sorted, totals, coverage, kernel table, step figures)."""
    if ctx.cats is not None:
        ctx.result = device_result(ctx.tr, ctx.need(ctx.links, "links"), ctx.cats, ctx.blocks,
                                   ctx.need(ctx.dev_owner, "device owners"), ctx.need(ctx.device_time, "device time"),
                                   ctx.need(ctx.walk, "device walk"), ctx.block_results, origin=ctx.origin)


def split_stages(ctx: StageContext) -> None:
    """Device traces of a serving engine: the device time per prefill, decode and mixed iteration (issue 44);
    returns before any walk when the trace shows no serving iteration (tracekit.analysis.stages)."""
    if ctx.cats is not None:
        ctx.need(ctx.result, "result").stages = serving_stages(
            ctx.tr, ctx.need(ctx.links, "links"), ctx.blocks, ctx.owner, ctx.block_results, ctx.cats,
            ctx.need(ctx.dev_owner, "device owners"), ctx.need(ctx.device_time, "device time").share,
            ctx.need(ctx.graph_facts, "graph facts").launches)


def collect_hint_facts(ctx: StageContext) -> None:
    """Device traces with hints on: the kernel rows the hint rules read, per block kind, in one pass."""
    if ctx.cats is not None and ctx.config.hints:
        result = ctx.need(ctx.result, "result")
        result.hint_facts = block_facts(ctx.tr, ctx.need(ctx.links, "links"), ctx.block_results,
                                        ctx.need(ctx.dev_owner, "device owners"), ctx.cats,
                                        ctx.need(ctx.walk, "device walk").dev_share, ctx.replays.replayed)
        add_fused_estimates(ctx, result.hint_facts)  # (a calibrated device only: tracekit.calibration)


def account_host(ctx: StageContext) -> None:
    """CPU-only traces: each block's host self time by category, and the Attribution."""
    if ctx.cats is None:
        ctx.result = host_attribution(ctx.tr, ctx.need(ctx.links, "links"), ctx.blocks, ctx.owner,
                                      ctx.config.classifier, ctx.origin, results=ctx.block_results)


def find_block_layers(ctx: StageContext) -> None:
    """Each block's attention layer: the outermost scope around its core holding no other core and no MLP/MoE."""
    ctx.layers = find_layers(ctx.tr, ctx.need(ctx.links, "links"), ctx.blocks)


def account_layers(ctx: StageContext) -> None:
    """Each block's layer figures on the block's own time base, set on its result (blocks.layer)."""
    time = ctx.device_time
    layer_figures(ctx.tr, ctx.need(ctx.links, "links"), ctx.blocks, ctx.layers, ctx.block_results, ctx.owner,
                  cats=ctx.cats, members=time.members if time is not None else None, classifier=ctx.config.classifier)


def list_compiled_outside(ctx: StageContext) -> None:
    """CPU-only traces: the compiled regions no block covers, under "attention outside blocks" (issue 38)."""
    if ctx.cats is None:
        result = ctx.need(ctx.result, "result")
        names = ctx.tr.names if ctx.tr.names is not None else frozenset(h.name for h in ctx.tr.host)
        result.compiled_outside = compiled_outside(ctx.tr, ctx.need(ctx.links, "links"),
                                                   [b.roots for b in ctx.blocks], ctx.owner, names)


def summarize_graphs(ctx: StageContext) -> None:
    """The trace's clock origin and graph summary on the result, the graph warnings, and each block kind's graph
    mode on the hint facts (the launch-bound rule reads it)."""
    result = ctx.need(ctx.result, "result")
    trace = result.traces[0]
    trace.origin_ns = ctx.origin
    graphs = trace.graphs = summarize(ctx.tr, ctx.need(ctx.graph_facts, "graph facts"), ctx.replays, ctx.cats)
    trace.warnings.extend(graph_warnings(graphs))
    for g in (result.hint_facts or {}).values():
        g.graph_modes = [str(graphs.mode)]


def evaluate_hints(ctx: StageContext) -> None:
    """The hint rules on the result's block kinds ([] without facts: CPU-only, or hints off)."""
    result = ctx.need(ctx.result, "result")
    result.hints = evaluate(result.hint_facts, result.blocks)


@dataclass(frozen=True, slots=True)
class Stage:
    """One named step of the analysis; ``why`` says why it sits where it does in :data:`STAGES`."""

    name: str
    run: Callable[[StageContext], None]
    why: str


STAGES: tuple[Stage, ...] = (
    Stage("find-graphs", find_graph_facts, "replays and captures decide what the next stages see"),
    Stage("read-origin", read_origin, "before the replays: copies of captured ops carry the capture's clock"),
    Stage("replay-captures", replay_captures, "replayed kernels must have their captured ops before linking"),
    Stage("link", link_events, "every later stage reads the host tree, the launches and the steps"),
    Stage("classify-device", classify_device, "a fused attention kernel counts as a scope's core in block finding"),
    Stage("find-host-blocks", find_host_blocks, "host blocks first: kernels a host block owns are no kernel block"),
    Stage("attach-backward", attach_backward_blocks, "backward ops join forward blocks before owners reach kernels"),
    Stage("record-captured", record_captured_blocks, "a capture's blocks, with their owners final, record kernels"),
    Stage("find-kernel-blocks", find_device_blocks, "kernel blocks take only the device events no host block owns"),
    Stage("find-layers", find_block_layers, "every block is known (host, backward, kernel): one core per layer"),
    Stage("measure-busy", measure_busy, "block figures, coverage and step figures share one busy-time split"),
    Stage("account-device", account_device, "needs every block and its events: after all block finders"),
    Stage("add-efficiency", add_block_efficiency, "reads each event's share of its block's busy time"),
    Stage("assemble-device", assemble_device, "sorts blocks and sums totals once every block figure is in"),
    Stage("split-stages", split_stages, "needs the assembled result, each event's block and its busy share"),
    Stage("collect-hint-facts", collect_hint_facts, "reads the block results' kinds and the busy shares"),
    Stage("account-host", account_host, "CPU-only traces: host self time instead of the device stages"),
    Stage("list-compiled-outside", list_compiled_outside,
          "CPU-only traces, once every block is final: a compiled region is outside blocks or not"),
    Stage("account-layers", account_layers, "a layer's figures add to its block's: after either accounting"),
    Stage("summarize-graphs", summarize_graphs, "adds graph modes to the hint facts, which the rules read"),
    Stage("evaluate-hints", evaluate_hints, "last: rules read figures every other stage adds (efficiency, graphs)"),
)


def stage_names(stages: Sequence[Stage] = STAGES) -> list[str]:
    """The stages' names, in order."""
    return [s.name for s in stages]


def run_stages(ctx: StageContext, stages: Sequence[Stage] = STAGES) -> StageContext:
    """Run ``stages`` in order on ``ctx`` (any prefix of STAGES works on a fresh context); returns ctx."""
    for stage in stages:
        stage.run(ctx)
    return ctx


def attribute_trace(tr: Trace, scope: str | None = None, classifier: Classifier | None = None,
                    hints: bool = True, captures: Sequence[Trace] = (), whatif: bool = False,
                    ops: bool = False) -> Attribution:
    """Link, find blocks and attribute their time (docs/attribution.md): :data:`STAGES` on one context.

    ``captures``: traces of the graph captures that ``tr`` replays (``--capture``); a capture in ``tr`` itself
    is found without them. Replayed kernels are mapped to the captured ops first (tracekit.analysis.graphs).

    The cyclic GC is not touched here: its one owner is ``tracekit.memory.one_file``, around each file's load
    and attribution (tracekit.run.tasks.attribute_one), so a caller that builds a ``Trace`` itself and calls
    this directly pauses it the same way if it wants the speed (about 15% on a 200 MB trace).

    ``whatif``: the result also carries ``tracekit whatif``'s prediction on the fastest calibrated backend
    (``Attribution.whatif``), read off the analysed context after the stages, not by one of them: only the report
    and the TensorBoard tab ask for it, so ``tracekit attribute`` never pays for it.

    ``ops``: the result also carries the op table of ``--by op`` (``Attribution.ops``, tracekit.analysis.ops), read
    off the analysed context after the stages in the same way: only ``--by op`` asks for it.
    """
    config = AttributeConfig(scope=scope, classifier=classifier or Classifier(), hints=hints, captures=captures)
    ctx = run_stages(StageContext(tr=tr, config=config))
    result = ctx.need(ctx.result, "result")
    if whatif:
        [result.whatif] = whatif_of(ctx)
    if ops:
        result.ops = ops_of(ctx)
    return result
