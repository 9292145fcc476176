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


def adapt(model: object, forward: Callable[[], object], *, mode: str = "infer", compile: bool = False,
          seq: int = 0, batch: int = 1, device: object = "cpu", vocab: int = 512) -> Callable[[], object]:
    """The script's own model (profiling/model.py) under ``--mode train`` and/or ``--compile``.

    Inference keeps ``forward`` (compiled when asked). Training runs the model on fixed random tokens in
    train mode with a next-token cross-entropy, then backward and an SGD step.
    """
    import torch
    import torch.nn.functional as F

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (choose from: {', '.join(MODES)})")
    if mode == "infer":
        return torch.compile(forward) if compile else forward
    net = torch.compile(model) if compile else model
    model.train()  # type: ignore[attr-defined]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)  # type: ignore[attr-defined]
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (batch, seq), generator=g).to(device)

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = net(tokens)
        F.cross_entropy(logits.float().flatten(0, 1), tokens.flatten()).backward()
        opt.step()
    return train_step


def run_hf(opts: object, log: Callable[[str], None] = print) -> list[dict]:
    """``--model hf:NAME``: one profiled run per (attention implementation, seq), analysed with tracekit.

    Each run goes to ``<out>/<name>_<attn>_<seq>_<mode>/trace.json``; the table printed (and written to
    ``<out>/summary.md``) gives the attention blocks found per phase and their share of the time base.
    """
    from pathlib import Path

    from tracekit import analyze

    from . import hf_models

    name = hf_models.parse_model(opts.model)  # type: ignore[attr-defined]
    rows = []
    for seq in opts.seqs:  # type: ignore[attr-defined]
        for attn in opts.attns:  # type: ignore[attr-defined]
            try:
                m = hf_models.build(name, attn=attn, layers=opts.layers, heads=opts.heads,  # type: ignore[attr-defined]
                                    d_model=opts.d_model, seq=seq, batch=opts.batch,  # type: ignore[attr-defined]
                                    device=opts.torch_device, dtype=opts.torch_dtype)  # type: ignore[attr-defined]
            except hf_models.Unavailable as exc:
                log(f"skip: {opts.model} {attn}: {exc}")  # type: ignore[attr-defined]
                continue
            step = make_step(m.model, m.inputs, m.loss, opts.mode, compile=opts.compile)  # type: ignore[attr-defined]
            run_dir = Path(opts.out) / f"{name}_{attn}_{seq}_{opts.mode}"  # type: ignore[attr-defined]
            path = record(step, str(run_dir), device=opts.torch_device.type,  # type: ignore[attr-defined]
                          active=opts.active_steps, warmup_calls=2 if opts.compile else 1,  # type: ignore[attr-defined]
                          with_stack=opts.with_stack, record_shapes=opts.record_shapes)  # type: ignore[attr-defined]
            res = analyze(path).check()
            fwd = sum(1 for b in res.blocks if b.phase == "forward")
            bwd = sum(1 for b in res.blocks if b.phase == "backward")
            rows.append({"model": opts.model, "attn": attn, "seq": seq, "mode": opts.mode,  # type: ignore[attr-defined]
                         "stack": opts.with_stack, "compile": opts.compile,  # type: ignore[attr-defined]
                         "forward_blocks": fwd, "backward_blocks": bwd,
                         "expected_per_phase": m.layers * opts.active_steps,  # type: ignore[attr-defined]
                         "attention_share": res.totals.attention_share or 0.0, "time_base": str(res.time_base),
                         "found_by": ",".join(sorted({str(b.found_by) for b in res.blocks})), "trace": str(path)})
            log(f"done: {opts.model} {attn} seq={seq} -> {path}")  # type: ignore[attr-defined]
    if rows:
        lines = ["| model | attn | seq | mode | stack | compile | fwd blocks | bwd blocks | expected/phase "
                 "| attention share | found_by |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['model']} | {r['attn']} | {r['seq']} | {r['mode']} | {r['stack']} | {r['compile']} | "
                         f"{r['forward_blocks']} | {r['backward_blocks']} | {r['expected_per_phase']} | "
                         f"{100 * r['attention_share']:.1f}% of {r['time_base']} | {r['found_by']} |")
        table = "\n".join(lines)
        print(table)
        Path(opts.out).mkdir(parents=True, exist_ok=True)  # type: ignore[attr-defined]
        (Path(opts.out) / "summary.md").write_text(table + "\n")  # type: ignore[attr-defined]
    return rows
