"""One profiled step of a model: inference (forward under no_grad) or training (forward, backward, optimizer).

Why a training mode: most attention time people pay for is in training, where each forward attention
block has a backward block (docs/attribution.md, "Attention blocks"); tracekit must find both.
"""
from __future__ import annotations

from typing import Callable

MODES = ("infer", "train")


def make_step(model: object, inputs: Callable[[], dict], loss: Callable[[object], object], mode: str = "infer",
              compile: bool = False) -> Callable[[], None]:
    """A zero-argument callable running one step; ``compile`` wraps the model in torch.compile first."""
    import torch

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (choose from: {', '.join(MODES)})")
    run = torch.compile(model) if compile else model
    if mode == "infer":
        model.eval()

        def step() -> None:
            with torch.no_grad():
                run(**inputs())
        return step
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        loss(run(**inputs())).backward()
        opt.step()
    return train_step


def record(step: Callable[[], None], out_dir: str, *, device: str = "cpu", active: int = 2, warmup_calls: int = 1,
           with_stack: bool = False, record_shapes: bool = False) -> str:
    """Profile ``active`` steps (schedule wait=0, warmup=1) into one Chrome trace; returns its path.

    ``warmup_calls`` un-profiled steps run first (compilation, allocator); each step ends with a device
    sync so its kernels stay inside its ProfilerStep.
    """
    import os

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    for _ in range(warmup_calls):
        step()
    sync()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if str(device).startswith("cuda") else [])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "trace.json")
    done: list[str] = []

    def handler(p: object) -> None:
        p.export_chrome_trace(path)  # type: ignore[attr-defined]
        done.append(path)

    with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
                 on_trace_ready=handler, record_shapes=record_shapes, with_stack=with_stack) as prof:
        for _ in range(1 + active):
            step()
            sync()
            prof.step()
    if not done:
        raise RuntimeError("the profiler wrote no trace")
    return path
