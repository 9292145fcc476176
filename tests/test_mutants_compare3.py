"""Survivors of the third mutmut run in tracekit.analysis.compare (issue 21): the median step's matmul roles are
None, not an empty value, when a median step has none (results/diff.py: "None if a block lacks roles")."""

from __future__ import annotations

from support.builders import TraceBuilder

from tracekit.analysis.compare import median_step
from tracekit.results.diff import Figures
from tracekit.vocab import CATEGORIES, MATMUL_ROLES


def _fig(total: float, roles: dict[str, float] | None) -> Figures:
    cats = dict.fromkeys(CATEGORIES, 0.0)
    cats[CATEGORIES[0]] = total
    return Figures(total_us=total, categories=cats, matmul_roles=roles, span_us=total, idle_us=0.0)


def test_median_step_without_roles_has_none():
    """One step (the only one, so the median) without roles: the median step's roles are None exactly."""
    m = median_step([(0, _fig(10.0, None))])
    assert m.matmul_roles is None
    assert m.total_us == 10.0


def test_median_of_two_steps_one_without_roles_has_none_and_both_with_roles_average():
    """Two steps, 10 and 30 µs: the median is the mean of both (20 µs); one lacks roles, so the median has none.
    With roles on both (first role 4 and 8 µs) the median's first role is (4 + 8) / 2 = 6 µs."""
    r1 = dict.fromkeys(MATMUL_ROLES, 0.0) | {MATMUL_ROLES[0]: 4.0}
    r2 = dict.fromkeys(MATMUL_ROLES, 0.0) | {MATMUL_ROLES[0]: 8.0}
    m = median_step([(0, _fig(10.0, r1)), (1, _fig(30.0, None))])
    assert m.total_us == 20.0 and m.matmul_roles is None
    both = median_step([(0, _fig(10.0, r1)), (1, _fig(30.0, r2))])
    assert both.matmul_roles is not None and both.matmul_roles[MATMUL_ROLES[0]] == 6.0


def test_noise_note_with_three_steps_a_side(tmp_path):
    """Three steps on each side (NOISE_MIN_STEPS): the noise is known, and the note says which rule applies."""
    from support.pairs import diff, eager, write

    r = diff(write(tmp_path / "a.json", [[eager]] * 3), write(tmp_path / "b.json", [[eager]] * 3))
    assert r.noise is not None and r.noise.known
    assert r.noise_note == ("per-step spread: before 3 steps, after 3 steps; within noise when |Δ| <= "
                            "(range before + range after) / 2")


def test_replay_before_eager_names_the_before_side_as_the_replay(tmp_path):
    """test_graphs' eager-against-replay diff the other way round: the replay (mapped to Attention_0/1 through the
    capture beside it) is *before*; the eager side is launch-bound (each kernel waits 30 µs), so the note advises
    comparing spans and names the side that replays: "before replays CUDA/HIP graphs"."""
    from support.builders import eager_layers as _eager_layers, graph_pair as _pair

    from tracekit import diff

    eager = TraceBuilder()
    _eager_layers(eager, 2)
    replay, cap, _ = _pair(tmp_path)
    (tmp_path / "capture_traces").mkdir()
    cap.rename(tmp_path / "capture_traces" / "capture.json")
    (tmp_path / "capture_traces" / "execution_details.json").write_text('[{"file": "capture.json"}]')
    r = diff(replay, eager.write(tmp_path / "eager.json"), jobs=1)
    assert r is not None
    assert "before replays CUDA/HIP graphs" in r.no_claim and "capture CUDA graphs" not in r.no_claim


# Three steps whose attention order and whole-step busy order differ (eager: 2·gemm + softmax 5 µs of attention;
# plain: an add kernel no block owns):
#   step 5: gemm 5 → attention 15 µs, + 60 µs add → busy 75 µs
#   step 6: gemm 10 → attention 25 µs             → busy 25 µs
#   step 7: gemm 15 → attention 35 µs, + 100 µs add → busy 135 µs
# The median by attention is step 6; the median by whole-step busy (25, 75, 135) is step 5.
def _three_steps(path):
    from functools import partial

    from support.pairs import eager, plain, write

    return write(path, [[partial(eager, gemm=5), partial(plain, add=60)], [eager],
                        [partial(eager, gemm=15), partial(plain, add=100)]])


def test_whole_step_follows_the_attention_median_on_the_median_step_basis(tmp_path):
    """Both sides per-step (3 steps each): the whole step shown is the headline's median step, step 6 (25 µs)."""
    from support.pairs import diff

    r = diff(_three_steps(tmp_path / "a.json"), _three_steps(tmp_path / "b.json"))
    assert r.basis == "median_step"
    assert r.step_before.steps == [6] and r.step_after.steps == [6]
    assert r.step_after.busy_us == 25.0


def test_whole_step_is_the_busy_median_on_the_totals_basis(tmp_path):
    """The after side has its block outside any ProfilerStep, so the headline is whole-trace totals; the before
    side's whole step is then its median by whole-step busy: step 5 (75 µs), not the attention median (step 6)."""
    from support.pairs import diff, eager, no_steps

    r = diff(_three_steps(tmp_path / "a.json"), no_steps(tmp_path / "b.json", eager))
    assert r.basis == "total"
    assert r.step_before.steps == [5] and r.step_before.busy_us == 75.0
    r = diff(no_steps(tmp_path / "c.json", eager), _three_steps(tmp_path / "d.json"))  # the other way round
    assert r.basis == "total"
    assert r.step_after.steps == [5] and r.step_after.busy_us == 75.0


FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"


def test_a_replay_of_one_kernel_is_a_replay(tmp_path):
    """A graph launch that ran one 20 µs flash kernel (no capture: the kernel is its own block) against the
    launch-bound eager layers: one replayed kernel is enough for the before side to be named as replaying."""
    from support.builders import eager_layers as _eager_layers

    from support.builders import graph_launch
    from tracekit import diff

    one = TraceBuilder()
    graph_launch(one, 100, [(FLASH, 200, 20)])
    eager = TraceBuilder()
    _eager_layers(eager, 2)
    r = diff(one.write(tmp_path / "one.json"), eager.write(tmp_path / "eager.json"), jobs=1)
    assert "; before replays CUDA/HIP graphs, so compare the spans" in r.no_claim


def test_both_sides_replaying_launch_bound_graphs(tmp_path):
    """Both sides replay one captured attention call whose kernels (10, 5, 8 µs) sit 50 / 60 µs apart on the
    device: spans 123 / 143 µs, idle 100 / 120 µs, so both are launch-bound (idle > half the span), and the advice
    names both sides, plural verb: "before and after replay CUDA/HIP graphs"."""
    from support.builders import capture, graph_launch, replay_kernels
    from tracekit import diff

    def replay(path, gap):
        b = TraceBuilder()
        t = capture(b, 0, 1)
        ks, _ = replay_kernels(t + 200, 1, gap=gap)
        graph_launch(b, t + 100, ks)
        return b.write(path)

    r = diff(replay(tmp_path / "a.json", 50), replay(tmp_path / "b.json", 60), jobs=1)
    assert (r.before_figures.span_us, r.before_figures.idle_us) == (123.0, 100.0)
    assert (r.after_figures.span_us, r.after_figures.idle_us) == (143.0, 120.0)
    assert ("; before and after replay CUDA/HIP graphs, so compare the spans: a replay's span is its kernels' own, "
            "without launch gaps") in r.no_claim


def test_step_figures_have_no_roles_when_a_block_lacks_them(tmp_path):
    """One step, two eager blocks (each 2·10 µs GEMM + 5 µs softmax, the GEMMs split into score and context).
    With roles on both, the step's roles sum them (2 · 20 = 40 µs of matmul); with the first block's roles removed
    (a result without roles: "None if a block lacks roles"), the step has none rather than a partial sum."""
    from support.pairs import eager, write

    from tracekit import analyze
    from tracekit.analysis.compare import step_figures

    a = analyze(write(tmp_path / "a.json", [[eager, eager]])).check()
    ((step, f),) = step_figures(a)
    assert step == 5 and f.total_us == 50.0
    assert f.matmul_roles is not None and sum(f.matmul_roles.values()) == 40.0
    a.blocks[0].matmul_roles = None
    ((_, f),) = step_figures(a)
    assert f.total_us == 50.0 and f.matmul_roles is None
