"""The rest of the step: what a ProfilerStep spends outside its attention blocks (issue 37, item 7).

Why its own module: the attention figures answer "what does attention cost"; a regression or a launch-bound step
is often outside it, and the diff had one "step (median)" line about the rest of the model. These figures say
where that rest went (by category, by top-level module) and, for a launch-bound step, what the host did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..vocab import is_launch_bound
from .invariants import close, expect


@dataclass(slots=True, kw_only=True)
class StepRest:
    """One ProfilerStep#N outside its attention blocks (tracekit.analysis.rest), µs."""

    step: int
    # The busy time of the step's device events that no attention block owns, by category (first-come split among
    # those events, each instant once), and the same by top-level module ({} when no nn.Module was recorded).
    categories: dict[str, float]
    modules: dict[str, float] = field(default_factory=dict)
    kernels: int = 0  # device events the step launched (attention's included): the launches the host had to make
    host_ops_us: float = 0.0  # the durations of the step's top-level host ops (an op inside no other op)
    host_ops: dict[str, float] = field(default_factory=dict)  # the same by op name
    # Only for a trace with no attention blocks, and display only (not in the JSON; issue 42: such a trace still
    # gets a page that says where its steps went): the step's idle time by cause, its window split as a block's is
    # (µs, summing to the step's span less its busy time), and its device events by name, the largest busy time
    # first: (name, category, count, µs), at most analysis.rest.TOP_OUTSIDE of them.
    idle_by_cause: dict[str, float] | None = None
    top_kernels: list[tuple[str, str, int, float]] = field(default_factory=list)

    @property
    def outside_us(self) -> float:
        return sum(self.categories.values())

    def check(self, where: str) -> None:
        """No negative figure; the modules split at most the outside busy time; the ops sum to the host time."""
        expect(min(self.categories.values(), default=0) >= 0, f"{where}: negative outside-attention category")
        expect(sum(self.modules.values()) <= self.outside_us or close(sum(self.modules.values()), self.outside_us,
                                                                      len(self.modules) + 1, self.outside_us),
               f"{where}: modules {sum(self.modules.values())} µs beyond the outside busy {self.outside_us} µs")
        expect(close(sum(self.host_ops.values()), self.host_ops_us, len(self.host_ops) + 1, self.host_ops_us),
               f"{where}: host ops sum {sum(self.host_ops.values())} != {self.host_ops_us}")
        expect(self.kernels >= 0 and self.host_ops_us >= 0, f"{where}: negative kernel count or host time")
        self._check_blockless(where)

    def _check_blockless(self, where: str) -> None:
        """The blockless figures: no negative cause; the top kernels, a part of the outside busy time."""
        expect(self.idle_by_cause is None or min(self.idle_by_cause.values(), default=0) >= 0,
               f"{where}: negative idle cause")
        top = sum(us for *_, us in self.top_kernels)
        expect(top <= self.outside_us or close(top, self.outside_us, len(self.top_kernels) + 1, self.outside_us),
               f"{where}: top kernels {top} µs beyond the outside busy {self.outside_us} µs")


def median_rest(steps: list[StepRest]) -> StepRest | None:
    """The step whose busy time outside attention is the median (the lower of the middle two for an even count,
    so that the figures are one real step's); None without steps."""
    if not steps:
        return None
    ordered = sorted(steps, key=lambda r: (r.outside_us, r.step))
    return ordered[(len(ordered) - 1) // 2]


_TOP_CHANGED = 5  # host ops named in a diff


@dataclass(slots=True, kw_only=True)
class RestChange:
    """Each side's median step outside attention (one trace a side), and the top-level host ops whose time per
    step changed most: (name, before µs, after µs), the largest absolute change first."""

    before: StepRest
    after: StepRest
    steps: tuple[int, int]  # how many steps each side's median is taken over
    host_ops_changed: list[tuple[str, float, float]]
    launch_bound: tuple[bool | None, bool | None]  # each median step's device idle over half its span (None: unknown)


def rest_change(before: list, after: list) -> RestChange | None:
    """The change outside attention between two sides' traces (TraceSummary lists); None unless each side is one
    trace with steps (the ranks or runs of a folder are not one step)."""
    if len(before) != 1 or len(after) != 1:
        return None
    b, a = median_rest(before[0].step_rest), median_rest(after[0].step_rest)
    if b is None or a is None:
        return None
    names = set(b.host_ops) | set(a.host_ops)
    changed = sorted(((n, b.host_ops.get(n, 0.0), a.host_ops.get(n, 0.0)) for n in names),
                     key=lambda x: (-abs(x[2] - x[1]), x[0]))
    return RestChange(before=b, after=a, steps=(len(before[0].step_rest), len(after[0].step_rest)),
                      host_ops_changed=[x for x in changed if x[2] != x[1]][:_TOP_CHANGED],
                      launch_bound=(_launch_bound(before[0], b.step), _launch_bound(after[0], a.step)))


def _launch_bound(trace: object, step: int) -> bool | None:
    """Whether the step's device idled over half its span (its StepFigures), None without them."""
    fig = next((f for f in getattr(trace, "step_figures", []) if f.step == step), None)
    return None if fig is None else is_launch_bound(fig.span_us - fig.busy_us, fig.span_us)


@dataclass(slots=True, kw_only=True)
class TraceRest:
    """One trace's median step outside attention, as every format shows it (issue 37, item 7): the step
    (median_rest), how many steps it is the median of, and that step's span and busy time from its StepFigures
    (None without them), which say whether the step is launch-bound and so whether its host side is shown."""

    label: str  # what names the trace where several are shown: its file, or its run's name
    rest: StepRest
    steps: int
    span_us: float | None = None
    busy_us: float | None = None

    @property
    def idle_us(self) -> float | None:
        return None if self.span_us is None or self.busy_us is None else self.span_us - self.busy_us

    @property
    def launch_bound(self) -> bool | None:
        """The step's device idled over half its span (vocab.is_launch_bound); None without its figures."""
        idle = self.idle_us
        return None if idle is None or self.span_us is None else is_launch_bound(idle, self.span_us)


def trace_rest(trace: object, label: str) -> TraceRest | None:
    """A TraceSummary's median step outside attention; None on a trace without steps."""
    steps: list[StepRest] = getattr(trace, "step_rest", [])
    r = median_rest(steps)
    if r is None:
        return None
    fig = next((f for f in getattr(trace, "step_figures", []) if f.step == r.step), None)
    return TraceRest(label=label, rest=r, steps=len(steps), span_us=None if fig is None else fig.span_us,
                     busy_us=None if fig is None else fig.busy_us)
