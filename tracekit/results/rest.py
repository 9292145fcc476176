"""The rest of the step: what a ProfilerStep spends outside its attention blocks (issue 37, item 7).

Why its own module: the attention figures answer "what does attention cost"; a regression or a launch-bound step
is often outside it, and the diff had one "step (median)" line about the rest of the model. These figures say
where that rest went (by category, by top-level module) and, for a launch-bound step, what the host did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def median_rest(steps: list[StepRest]) -> StepRest | None:
    """The step whose busy time outside attention is the median (the lower of the middle two for an even count,
    so that the figures are one real step's); None without steps."""
    if not steps:
        return None
    ordered = sorted(steps, key=lambda r: (r.outside_us, r.step))
    return ordered[(len(ordered) - 1) // 2]
