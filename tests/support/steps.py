"""Traces with ProfilerSteps whose per-step figures are known (issue 37: one time base), and an independent walk
of a real trace's raw JSON into the same per-step figures."""

from __future__ import annotations

from pathlib import Path

from support.builders import TraceBuilder, host_core
from support.pairs import ADD, GEMM
from support.paths import SWEEP
from support.traces import read_doc

STEP_HOST = 20.0  # each ProfilerStep's host range, µs: [t - 10, t + 10]
STEP_LEAD = 13.0  # the step's span beyond its kernels: from t - 10 to the GEMM's start at t + 3


def dense_steps(path: Path, steps: list[tuple[float, float]], first: int = 1) -> Path:
    """One ProfilerStep per ``(gemm, add)``: an attention block whose GEMM (``gemm`` µs) starts at t + 3, then an
    add kernel (``add`` µs, launched by an op outside the block) right after it. By construction, per step:
    attention = gemm, busy = gemm + add, span = STEP_LEAD + gemm + add (from the step's start at t - 10 to the
    add's end, past the 20 µs host range when gemm + add >= 7), idle = STEP_LEAD."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    t = 1000.0
    for k, (gemm, add) in enumerate(steps):
        assert gemm + add >= 7
        b.annotation(f"ProfilerStep#{first + k}", t - 10, STEP_HOST)
        b.annotation("layer0.attention", t, 6)
        b.op("aten::bmm", t + 1, 2)
        b.launch(GEMM, t + 2, 1, t + 3, gemm)
        host_core(b, t + 4)
        b.op("aten::add", t + 7, 1)
        b.launch(ADD, t + 7.2, 0.5, t + 3 + gemm, add)
        t += 1000 + gemm + add
    return b.write(path)


def dense_runs(root: Path, runs: dict[str, list[tuple[float, float]]]) -> Path:
    """A folder of runs: one sub-folder per name, each holding one trace of ``dense_steps``."""
    for name, steps in runs.items():
        (root / name).mkdir(parents=True)
        dense_steps(root / name / "w.pt.trace.json", steps)
    return root


def lead_sweeps(tmp_path: Path) -> tuple[Path, Path]:
    """Two folders of runs, three steps a run, each pair leading on a different basis, by construction:

    - ``heavier`` (dense_steps): step busy 100 + 50 = 150 -> 100 + 100 = 200 µs a step (+33.3%, every step alike,
      so no spread: beyond noise), while attention stays at 100 µs.
    - ``noisy`` (dense_steps): attention 99/100/101 -> 109/110/111, the add 40/50/60 both sides: step busy
      139/150/161 -> 149/160/171, median (the median step by attention) 150 -> 160; Δ 10 within the busy spread
      (22 + 22) / 2, though beyond attention's (2 + 2) / 2.
    - ``longer`` (support.pairs: launch-bound eager blocks, one ProfilerStep of 1020 µs per block): one block a
      step before, two after (layer0 + layer1): step span 1020 -> 2020 µs, the steps alike.
    - ``unstepped``: one busy eager block per run and no ProfilerStep (no whole step): attention, whole trace,
      25 -> 45 µs (2·gemm + softmax, gemm 10 -> 20)."""
    from functools import partial

    from support.pairs import busy, eager, no_steps, steps_of, two_layers, write

    before = dense_runs(tmp_path / "before", {"heavier": [(100, 50)] * 3, "noisy": [(99, 40), (100, 50), (101, 60)]})
    after = dense_runs(tmp_path / "after", {"heavier": [(100, 100)] * 3, "noisy": [(109, 40), (110, 50), (111, 60)]})
    for root, longer, gemm in ((before, steps_of(eager, "gemm", [10] * 3), 10),
                               (after, two_layers(eager, gemm=[10] * 3), 20)):
        for name in ("longer", "unstepped"):
            (root / name).mkdir()
        write(root / "longer" / "w.pt.trace.json", longer)
        no_steps(root / "unstepped" / "w.pt.trace.json", partial(busy(eager), gemm=gemm))
    return before, after


DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def raw_steps(run: str) -> dict[int, tuple[float, float]]:
    """Step -> (busy, span) µs by my own walk: the device events whose launch call lies in the ProfilerStep#N
    range, their busy union, and the span from the earlier of the range's start and the first event to the later
    of its end and the last event's end."""
    (path,) = (SWEEP / run).glob("*.pt.trace.json*")
    evs = read_doc(path)["traceEvents"]
    ranges = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in evs  # the host's, not the GPU's
              if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")}
    launches = [(e["ts"], e["args"]["correlation"]) for e in evs
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})]
    device = {}
    for e in evs:
        if e.get("cat") in DEVICE_CATS:
            device.setdefault(e["args"]["correlation"], []).append((e["ts"], e["ts"] + e["dur"]))
    out = {}
    for s, (lo, hi) in ranges.items():
        ivs = sorted(iv for ts, c in launches if lo <= ts <= hi for iv in device.get(c, []))
        busy, end = 0.0, float("-inf")
        for a, b in ivs:
            busy += max(0.0, b - max(a, end))
            end = max(end, b)
        out[s] = (busy, max(hi, end) - min(lo, ivs[0][0]))
    return out


# -- the rest of the step (issue 37, item 7) -----------------------------------------------------------------------

REST_STEP = 250.0  # each rest_steps ProfilerStep's host range, µs: [t - 10, t + 240]
REST_GEMM, REST_ADD = 10.0, 5.0  # the attention GEMM and the Encoder's add kernel, µs
REST_HOST_OPS = {"aten::linear": 10.0, "aten::bmm": 8.4, "aten::add": 5.0, "aten::_softmax": 0.4}  # top-level, a step


def rest_steps(path: Path, linears: list[float], mul_us: float | None = None) -> Path:
    """One ProfilerStep per ``linears`` entry (1000 µs apart, from ProfilerStep#1), each in nn.Module Model_0 with
    two children: Encoder_0 holds the attention range (a 10 µs GEMM, its bmm op 8 µs on the host, host_core 0.8)
    and an aten::add (5 µs on the host) launching a 5 µs add kernel; Head_0 holds an aten::linear (10 µs on the
    host) launching a GEMM of ``linear`` µs at t + 120. ``mul_us``: in Head_0 an aten::mul (4 µs on the host) also
    launches a ``mul_us`` add kernel at t + 235.

    By construction, per step: outside attention, matmul = linear and elementwise = 5 (+ mul_us); by top-level
    module, Head = linear (+ mul_us) and Encoder = 5; kernels launched 3 (4 with the mul); top-level host ops
    REST_HOST_OPS (23.8 µs; + aten::mul 4). While the kernels end inside the step's 250 µs range, its span is 250
    and its busy 15 + linear (+ mul_us): launch-bound while that is under 125."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    for k, linear in enumerate(linears):
        t = 1000.0 * (k + 1)
        b.annotation(f"ProfilerStep#{k + 1}", t - 10, REST_STEP)
        b.module("Model_0", t - 5, 240)
        b.module("Encoder_0", t, 60)
        b.annotation("layer0.attention", t + 1, 40)
        b.op("aten::bmm", t + 2, 8)
        b.launch(GEMM, t + 3, 1, t + 12, REST_GEMM)
        host_core(b, t + 11)
        b.op("aten::add", t + 45, 5)
        b.launch(ADD, t + 46, 1, t + 50, REST_ADD)
        b.module("Head_0", t + 100, 134)
        b.op("aten::linear", t + 110, 10)
        b.launch(GEMM, t + 111, 1, t + 120, linear)
        if mul_us is not None:
            b.op("aten::mul", t + 225, 4)
            b.launch(ADD, t + 226, 1, t + 235, mul_us)
    return b.write(path)
