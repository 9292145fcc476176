"""Matmul split by role (tracekit/roles.py): projection / score / context / matmul-other.

Hand-built traces know their answer by construction; the real traces are checked against sums computed
here straight from the raw JSON (orjson), never against tracekit's own figures.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import orjson
import pytest

from support.builders import TraceBuilder, host_core
from support.paths import REAL, real_trace_files
from support.cli import run_cli
from tracekit.run.api import analyze
from tracekit.analysis.link import link
from tracekit.io.load import load_trace
from tracekit.results.attribution import InvariantError
from tracekit.analysis.roles import NAME_RULES, SHAPE_RULES, RoleFinder, op_roles
from tracekit.vocab import MATMUL_ROLES
from tracekit.analysis.roles import _operands
from support.pairs import GEMM, H100, SOFTMAX
from support.builders import attribute_built, two_fp32_products, with_dims
from support.traces import read_events
from tracekit.vocab import MatmulRole

H200 = REAL.parent / "h200"
requires_h200 = pytest.mark.skipif(not H200.is_dir(), reason=f"H200 traces not present at {H200}")


def _gemm(b: TraceBuilder, op: str, t: float, kernel_ts: float, dur: float, dims: list | None = None) -> None:
    ev = b.op(op, t, 4)
    if dims is not None:
        ev["args"]["Input Dims"] = dims
    b.launch(GEMM, t + 1, 1, kernel_ts, dur)


def _attr(tmp_path: Path, b: TraceBuilder):
    return analyze(b.write(tmp_path / "t.json")).check()


def test_shapes_decide_without_names(tmp_path):
    """QKᵀ (square output), PV (square input), a linear layer, an all-square and an unshaped product."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    _gemm(b, "aten::bmm", 1, 1000, 10, [[64, 512, 64], [64, 64, 512]])  # score
    _gemm(b, "aten::bmm", 10, 1020, 7, [[64, 512, 512], [64, 512, 64]])  # context
    b.op("aten::linear", 20, 10)["args"]["Input Dims"] = [[4, 512, 1024], [3072, 1024], [3072]]
    _gemm(b, "aten::addmm", 21, 1040, 5, [[3072], [2048, 1024], [1024, 3072], [], []])  # projection via linear
    _gemm(b, "aten::bmm", 40, 1060, 3, [[512, 64, 64], [512, 64, 64]])  # all square: undecided
    _gemm(b, "aten::bmm", 50, 1080, 2)  # no shapes recorded
    _gemm(b, "aten::matmul", 60, 1090, 4, [[4, 512, 1024], [1024, 4096]])  # 2-D weight
    blk = _attr(tmp_path, b).blocks[0]
    assert blk.categories["matmul"] == pytest.approx(31)
    assert blk.matmul_roles == pytest.approx({"projection": 9, "score": 10, "context": 7, "matmul-other": 5})


def test_names_win_over_shapes_and_innermost_name_wins(tmp_path):
    """A qk_matmul range says score even where the shapes say context; an inner range beats an outer one."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    b.annotation("qk_matmul", 1, 9)
    _gemm(b, "aten::bmm", 2, 1000, 10, [[64, 512, 512], [64, 512, 64]])
    b.annotation("pv_matmul", 11, 9)
    _gemm(b, "aten::bmm", 12, 1020, 6)
    b.module("Linear_3", 21, 9)  # with_modules names the class: nn.Linear is a projection
    _gemm(b, "aten::bmm", 22, 1040, 4, [[64, 512, 64], [64, 64, 512]])
    b.annotation("out_proj", 31, 20)
    b.annotation("context", 32, 9)  # inner: context, although inside out_proj
    _gemm(b, "aten::mm", 33, 1060, 2)
    blk = _attr(tmp_path, b).blocks[0]
    assert blk.matmul_roles == pytest.approx({"projection": 4, "score": 10, "context": 8, "matmul-other": 0})


def test_host_trace_splits_matmul_self_time(tmp_path):
    """CPU-only: each matmul op's self time goes to its role (linear's child addmm is a projection)."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    b.op("aten::linear", 1, 20)
    b.op("aten::addmm", 2, 15)  # self 15; linear self 5
    b.op("aten::bmm", 30, 8)["args"]["Input Dims"] = [[64, 128, 64], [64, 64, 128]]
    b.op("aten::bmm", 40, 6)["args"]["Input Dims"] = [[64, 128, 128], [64, 128, 64]]
    a = _attr(tmp_path, b)
    assert a.time_base == "host"
    assert a.blocks[0].categories["matmul"] == pytest.approx(34)
    assert a.totals.matmul_roles == pytest.approx({"projection": 20, "score": 8, "context": 6, "matmul-other": 0})


def test_check_refuses_roles_that_do_not_add_up(tmp_path):
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    _gemm(b, "aten::bmm", 1, 1000, 10, [[64, 512, 64], [64, 64, 512]])
    host_core(b, 50)
    a = _attr(tmp_path, b)
    a.blocks[0].matmul_roles = {"projection": 0.0, "score": 9.0, "context": 0.0, "matmul-other": 0.0}
    with pytest.raises(InvariantError):
        a.check()
    a.blocks[0].matmul_roles = {"score": 10.0}
    with pytest.raises(InvariantError):
        a.check()


def test_op_roles_api_and_rules_are_named_data(tmp_path):
    """op_roles(tr, links) -> list[str | None]: a role for every product op, None for everything else."""
    assert list(inspect.signature(op_roles).parameters) == ["tr", "links"]
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    _gemm(b, "aten::bmm", 1, 1000, 10, [[64, 512, 64], [64, 64, 512]])
    b.op("aten::softmax", 10, 2)
    tr = load_trace(b.write(tmp_path / "t.json"))
    roles = op_roles(tr, link(tr))
    assert len(roles) == len(tr.host)
    assert {tr.host[i].name: r for i, r in enumerate(roles)} == {
        "layer0.attention": None, "aten::bmm": "score", "aten::softmax": None}
    assert RoleFinder(tr, link(tr)).role(roles.index("score")) == "score"
    for rules in (NAME_RULES, SHAPE_RULES):
        assert len({r.name for r in rules}) == len(rules) and all(r.why and r.role in MATMUL_ROLES for r in rules)


# -- real traces ------------------------------------------------------------------------------------


def _h200_traces() -> list[Path]:
    return sorted(p.parent for p in H200.rglob("*.pt.trace.json.gz")) if H200.is_dir() else []


@pytest.mark.slow
@pytest.mark.parametrize("path", real_trace_files() + _h200_traces(), ids=lambda p: str(p).split("traces/")[-1])
def test_roles_partition_matmul_on_every_real_trace(path):
    a = analyze(path).check()
    for b in a.blocks + [a.totals]:  # type: ignore[operator]
        assert b.matmul_roles is not None and list(b.matmul_roles) == list(MATMUL_ROLES)
        assert sum(b.matmul_roles.values()) == pytest.approx(b.categories["matmul"], abs=1e-6)


def _raw(folder: Path) -> list[dict]:
    (f,) = folder.glob("*.pt.trace.json.gz")
    return read_events(f)


def _launched_under(events: list[dict], ranges: set[str], inside_ops: str | None = None,
                    cats: tuple[str, ...] = ("kernel", "gpu_memset", "gpu_memcpy")) -> tuple[float, int]:
    """Device µs (and count) of events (of the ``cats`` given) whose runtime launch lies inside a user_annotation
    named in ``ranges`` (same pid/tid, start within it) and, when given, inside a cpu_op named ``inside_ops`` too.
    Matmul time is the GEMM ops' kernels only: their cuBLAS workspace memsets are fills, memory (issue 22)."""
    def spans(pred) -> list[tuple]:
        return [(e["pid"], e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events if pred(e)]

    anns = spans(lambda e: e.get("cat") == "user_annotation" and e.get("name") in ranges)
    ops = spans(lambda e: e.get("cat") == "cpu_op" and e.get("name") == inside_ops) if inside_ops else None
    dev = {e["args"]["correlation"]: e["dur"] for e in events
           if e.get("cat") in cats and e.get("ph") == "X"}
    total, n = 0.0, 0
    for r in events:
        if r.get("cat") not in ("cuda_runtime", "cuda_driver") or r["args"].get("correlation") not in dev:
            continue
        key = (r["pid"], r["tid"])
        if not any(s[:2] == key and s[2] <= r["ts"] <= s[3] for s in anns):
            continue
        if ops is not None and not any(s[:2] == key and s[2] <= r["ts"] <= s[3] for s in ops):
            continue
        total += dev[r["args"]["correlation"]]
        n += 1
    return total, n


@requires_h200
@pytest.mark.parametrize("impl", ["sparse_4096", "sparse_512"])
def test_sparse_matmul_is_all_projection(impl):
    """The issue's case: sparse_4096's matmul (60.7% of the block) is the qkv/out projections' GEMMs, no score."""
    folder = H200 / "sparse" / impl
    a = analyze(folder).check()
    ev = _raw(folder)
    proj_us, n = _launched_under(ev, {"qkv_proj", "out_proj"}, cats=("kernel",))
    block_us, _ = _launched_under(ev, {f"layer{i}.attention" for i in range(4)})
    assert n > 0
    t = a.totals
    tol = 0.002 * n + 0.01
    assert t.matmul_roles["projection"] == pytest.approx(proj_us, abs=tol)
    assert t.categories["matmul"] == pytest.approx(proj_us, abs=tol)
    assert t.matmul_roles["score"] == t.matmul_roles["context"] == t.matmul_roles["matmul-other"] == 0
    if impl == "sparse_4096":  # the issue's 60.7% counted the projections' workspace memsets as matmul
        assert proj_us / block_us == pytest.approx(0.6026, abs=0.0005)


@requires_h200
@pytest.mark.parametrize("folder", [p for p in _h200_traces() if p.name.startswith("eager_")],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_eager_score_and_context_are_the_bmm_kernels_under_their_ranges(folder):
    """Score = device time of what aten::bmm launched inside qk_matmul; context: inside pv_matmul."""
    a = analyze(folder).check()
    ev = _raw(folder)
    for role, rng in (("score", "qk_matmul"), ("context", "pv_matmul")):
        us, n = _launched_under(ev, {rng}, inside_ops="aten::bmm", cats=("kernel",))
        assert n > 0 and us > 0
        assert a.totals.matmul_roles[role] == pytest.approx(us, abs=0.002 * n + 0.01), role
    proj, n = _launched_under(ev, {"qkv_proj", "out_proj"}, inside_ops="aten::addmm", cats=("kernel",))
    assert a.totals.matmul_roles["projection"] == pytest.approx(proj, abs=0.002 * n + 0.01)
    assert a.totals.matmul_roles["matmul-other"] == 0


@requires_h200
def test_sdpa_math_products_found_by_shape():
    """The SDPA math backend has no qk/pv ranges: its bmm's shapes say score and context."""
    a = analyze(H200 / "sweep" / "sdpa-math_512").check()
    r = a.totals.matmul_roles
    assert r["score"] > 0 and r["context"] > 0 and r["matmul-other"] == 0


@requires_h200
def test_terminal_and_json_show_the_split():
    folder = H200 / "sparse" / "sparse_4096"
    out = run_cli("attribute", folder, check=True).stdout
    out = out.replace("\n    ", " ").replace("\n  ", " ")  # the terminal wraps long lines with an indent
    assert "matmul by role (share of matmul):" in out
    assert "projection 1.61 ms 100.0% · score 0 · context 0 · matmul-other 0" in out
    md = run_cli("attribute", folder, "--format", "markdown", check=True).stdout
    assert "- matmul by role, layer*.attention: projection 1,607.6 µs (100.0%) · score 0.0 µs (0.0%)" in md
    doc = orjson.loads(run_cli("attribute", folder, "--format", "json", check=True).stdout)
    for b in doc["blocks"] + [doc["totals"]]:
        assert list(b["matmul_roles"]) == list(MATMUL_ROLES)
        assert sum(b["matmul_roles"].values()) == pytest.approx(b["categories"]["matmul"], abs=0.005)


@requires_h200
def test_diff_compares_roles_on_the_headline_basis():
    """eager → flash: score and context go to 0, projections stay; with 2 steps the median step is their mean,
    so 'before' is half of what aten::bmm launched under qk_matmul / pv_matmul in the whole trace."""
    from tracekit.run.api import diff_paths
    from tracekit.renderers.jsonrenderer import diff_to_dict

    before, after = H200 / "sweep" / "eager_4096", H200 / "sweep" / "sdpa-flash_4096"
    r = diff_paths(before, after).check()
    assert r.basis == "median_step" and len(r.steps_before) == 2
    fb, fa = r.before_figures.matmul_roles, r.after_figures.matmul_roles
    assert fb is not None and fa is not None
    ev = _raw(before)
    for role, rng in (("score", "qk_matmul"), ("context", "pv_matmul")):
        us, n = _launched_under(ev, {rng}, inside_ops="aten::bmm", cats=("kernel",))
        assert fb[role] == pytest.approx(us / 2, abs=0.002 * n + 0.01)
        assert fa[role] == 0
    assert fa["projection"] == pytest.approx(r.after_figures.categories["matmul"], abs=1e-6) and fa["projection"] > 0
    doc = diff_to_dict(r, "t")
    assert doc["matmul_roles"]["score"] == {"before_us": round(fb["score"], 3), "after_us": 0.0,
                                            "delta_us": round(-fb["score"], 3)}
    assert list(doc["before"]["matmul_roles"]) == list(MATMUL_ROLES)  # the whole-trace totals carry them too
    out = run_cli("diff", before, after, check=True).stdout
    assert "matmul by role: projection " in out and " · score " in out


# ---------------------------------------------------------------------------------------------
# Which two recorded inputs of a product op are its matrices. The bias comes first in addmm(bias, a, b) and its
# batched kin, so their operands are inputs 1 and 2; every other product's are inputs 0 and 1 (ATen's schemas).
# Through the attribution an aten::addmm is a linear layer by name before its shapes are read (roles rule 2), so
# only a direct call shows its operand order

BIAS, A, B = [16], [4, 8], [8, 16]


@pytest.mark.parametrize("op", ["aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation"])
def test_bias_first_ops_take_inputs_one_and_two(op):
    # addmm(bias [16], mat1 [4, 8], mat2 [8, 16], beta, alpha): the matrices are mat1 and mat2.
    assert _operands(op, [BIAS, A, B, [], []]) == (A, B)


@pytest.mark.parametrize("op", ["aten::mm", "aten::bmm", "aten::matmul", "aten::linear"])
def test_other_products_take_inputs_zero_and_one(op):
    assert _operands(op, [A, B, BIAS]) == (A, B)


def test_a_vector_bias_in_first_place_is_never_an_operand():
    """Read as inputs 0 and 1, addmm's [16] bias would make no matrix pair at all: None. That is what a wrong
    offset gives; the right one gives the pair."""
    assert _operands("aten::mm", [BIAS, A, B]) is None
    assert _operands("aten::addmm", [BIAS, A, B]) == (A, B)


@pytest.mark.parametrize("op,dims", [
    ("aten::addmm", [BIAS, A]),  # one operand recorded
    ("aten::mm", [A]),
    ("aten::einsum", [[], [A, B]]),  # the equation decides
    ("aten::mm", [A, [8]]),  # a vector
    ("aten::mm", [A, "x"]),
    ("aten::mm", [[4, None], B]),
])
def test_no_pair(op, dims):
    assert _operands(op, dims) is None


# ---------------------------------------------------------------------------------------------
# Roles from recorded shapes (rule 2): the operands of baddbmm/addbmm are its second and third inputs; an L×L output
# over a head dimension up to 1024 is a score product, an L×L input a context product; a vector operand decides
# nothing. Hand-built blocks: one product of 10 µs in an eager block

def roles(tmp_path, op, dims):
    """An annotated eager block whose first product is ``op`` with ``dims`` (10 µs of GEMM); then softmax and a
    PV bmm with no shapes (matmul-other, 10 µs)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.annotation("layer0.attention", 0, 60)
    first = b.op(op, 1, 8)
    first["args"]["Input Dims"] = dims
    first["args"]["Input type"] = ["c10::BFloat16" if d else "" for d in dims]
    b.launch(GEMM, 2, 1, 100, 10)
    b.op("aten::_softmax", 20, 6)
    b.launch(SOFTMAX, 21, 2, 111, 5)
    b.op("aten::bmm", 40, 8)
    b.launch(GEMM, 41, 2, 117, 10)
    (blk,) = analyze(b.write(tmp_path / "t.json")).check().blocks
    return {k: v for k, v in blk.matmul_roles.items() if v}


L, D = 256, 64


@pytest.mark.parametrize("op,dims,role", [
    # baddbmm(bias [B, L, L], q [B, L, D], kᵀ [B, D, L]): an L×L output: score.
    ("aten::baddbmm", [[2, L, L], [2, L, D], [2, D, L], [], []], "score"),
    # baddbmm(bias [B, L, D], p [B, L, L], v [B, L, D]): an L×L input: context.
    ("aten::baddbmm", [[2, L, D], [2, L, L], [2, L, D], [], []], "context"),
    # addbmm(bias [L, L], q [B, L, D], kᵀ [B, D, L]): score.
    ("aten::addbmm", [[L, L], [2, L, D], [2, D, L], [], []], "score"),
    # A head dimension of exactly 1024 (the largest taken for one): still a score / context product.
    ("aten::bmm", [[2, L, 1024], [2, 1024, L]], "score"),
    ("aten::bmm", [[2, L, L], [2, L, 1024]], "context"),
    # 2-D operands are matrices too.
    ("aten::mm", [[L, D], [D, L]], "score"),
    # Only the matrix dimensions must be integers: a symbolic (unrecorded) batch size does not matter.
    ("aten::bmm", [[None, L, D], [2, D, L]], "score"),
    ("aten::bmm", [[2, L, D], [None, D, L]], "score"),
])
def test_role_from_shapes(tmp_path, op, dims, role):
    assert roles(tmp_path, op, dims) == {role: 10, "matmul-other": 10}


@pytest.mark.parametrize("op,dims", [
    ("aten::matmul", [[D], [D, L]]),  # a vector operand
    ("aten::bmm", [[2, L, D], [2, None, L]]),  # a matrix dimension that is not an integer
    ("aten::matmul", [[2, None, D], [D, 32]]),
])
def test_operands_that_decide_no_role(tmp_path, op, dims):
    assert roles(tmp_path, op, dims) == {"matmul-other": 20}


# ---------------------------------------------------------------------------------------------
# Roles by name, by enclosing range and by shapes, on hand-built blocks



BF = "c10::BFloat16"


def test_only_matrix_products_have_a_matmul_role(tmp_path: Path) -> None:
    """The counted ops are the two mm calls and the softmax. Matmul roles split the matmul category only, so the
    role figures hold the two mm calls (2·2·3·4 + 2·2·4·5 = 128 FLOPs) and never the softmax."""
    b = TraceBuilder()
    two_fp32_products(b)
    [blk] = attribute_built(tmp_path, b).blocks
    by = blk.efficiency_by_category
    roles = {k: e for k, e in by.items() if k in {r.value for r in MatmulRole}}
    assert roles and sum(e.ops for e in roles.values()) == 2
    assert sum(e.flops for e in roles.values()) == by["matmul"].flops == 128.0
    assert by["softmax"].ops == 1


def _roles(tmp_path: Path, b: TraceBuilder, t: float) -> dict[str, float]:
    """Close layer0.attention's pattern with a softmax at ``t`` µs and a product after it; the block's matmul roles."""
    b.op("aten::_softmax", t, 2)
    b.op("aten::bmm", t + 10, 8)
    [blk] = attribute_built(tmp_path, b).blocks
    return blk.matmul_roles


def test_a_module_name_with_an_index_suffix_gives_its_role(tmp_path: Path) -> None:
    """The only name that says a role is the module ``nn.Module: Linear_0`` (with_modules names classes and numbers
    their instances): read as a module (prefix and ``_0`` dropped) it is Linear, a projection, so its mm's 20 µs
    GEMM is projection time. Read as raw text, the anchored class rule matches nothing, and the walk up the names
    would be skipped: the 20 µs would be matmul-other."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.module("Linear_0", 5, 20)
    b.op("aten::mm", 10, 8)
    b.launch(GEMM, 11, 1, 1000, 20)
    assert _roles(tmp_path, b, 30).get("projection") == pytest.approx(20)


def test_a_kernel_launched_under_a_range_inside_a_product_takes_the_products_role(tmp_path: Path) -> None:
    """A GEMM kernel whose launch sits in a range (``inner``, no role in its name) inside aten::bmm: the op that
    launched it is the bmm, whose recorded operands [4,32,16]·[4,16,32] make a square [32, 32] from a contracted 16
    (a head dim): Q·Kᵀ, so its 20 µs are score time. Starting from the range instead finds no product: matmul-other."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    with_dims(b.op("aten::bmm", 10, 20), [[4, 32, 16], [4, 16, 32]], [BF, BF])
    b.annotation("inner", 12, 10)
    b.launch(GEMM, 13, 1, 1000, 20)
    assert _roles(tmp_path, b, 40).get("score") == pytest.approx(20)


def test_two_products_under_one_named_range_both_take_its_role(tmp_path: Path) -> None:
    """Two bmm calls (no recorded shapes) inside the range ``qk_matmul`` (a score name), each launching a 10 µs
    GEMM: both kernels are score time (20 µs), the second found through the range the first already resolved."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.annotation("qk_matmul", 5, 40)
    b.op("aten::bmm", 10, 8)
    b.launch(GEMM, 11, 1, 1000, 10)
    b.op("aten::bmm", 25, 8)
    b.launch(GEMM, 26, 1, 1020, 10)
    assert _roles(tmp_path, b, 60).get("score") == pytest.approx(20)


def test_input_dims_that_are_not_a_list_give_no_role_from_shapes(tmp_path: Path) -> None:
    """A bmm whose Input Dims is a JSON string (a damaged record): no shapes, so its GEMM's 20 µs are matmul-other,
    and nothing fails."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 10, 8)["args"].update({"Input Dims": "[[4, 32, 16], [4, 16, 32]]", "Input type": [BF, BF]})
    b.launch(GEMM, 11, 1, 1000, 20)
    b.op("aten::_softmax", 30, 2)
    b.op("aten::bmm", 40, 8)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.matmul_roles.get("matmul-other") == pytest.approx(20)


# ---------------------------------------------------------------------------------------------
# An einsum's operands come from its equation, never its dims

def test_an_einsum_has_no_matmul_role_from_its_dims():
    """The equation decides an einsum's operands; even dims shaped like Q·Kᵀ operands give no role from shapes."""
    from tracekit.analysis.roles import _operands
    assert _operands("aten::einsum", [[2, 8, 128, 64], [2, 8, 64, 128]]) is None
    assert _operands("aten::matmul", [[2, 8, 128, 64], [2, 8, 64, 128]]) == ([2, 8, 128, 64], [2, 8, 64, 128])
