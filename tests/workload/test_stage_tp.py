"""Uneven TP degree per pipeline stage (parallelism.stage_tp): layout, compiler, plan errors, full run."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wl_factory import gpt, scenario

from heterosim import api
from heterosim.errors import PlanError, UserError
from heterosim.workload.compiler import compile_workload
from heterosim.workload.groups import StageTPLayout
from heterosim.workload.memory import memory_per_rank
from heterosim.workload.plan import resolve_plan
from heterosim.workload.verify import verify_ir

ROOT = Path(__file__).resolve().parents[2]


def _covers(groups, world):
    flat = sorted(r for g in groups for r in g)
    return flat == list(range(world))


def test_layout_8_4_dp2():
    lay = StageTPLayout([8, 4], dp=2)
    g = lay.groups()
    assert lay.world_size == 24
    assert g["tp"] == [tuple(range(0, 8)), tuple(range(8, 16)), (16, 17, 18, 19), (20, 21, 22, 23)]
    assert g["dp"][:2] == [(0, 8), (1, 9)] and g["dp"][-1] == (19, 23)
    # leaders pair with leaders of the neighbouring stage, same replica
    assert (0, 16) in g["pp"] and (8, 20) in g["pp"]
    assert (5,) in g["pp"]  # tp index beyond stage 1's degree: alone
    for dim, groups in g.items():
        assert _covers(groups, 24), dim
    assert lay.coords(21) == {"tp": 1, "cp": 0, "dp": 1, "pp": 1, "ep": 0, "edp": 1}
    assert g["mp"][0] == tuple(range(8)) + (16, 17, 18, 19)


def _stage_flops(ir, stage):
    return sum(sum(op.flops for op in ir.program_of(r).ops) for r in range(ir.world_size)
               if ir.program_of(r).stage == stage)


@pytest.mark.parametrize("sp", [False, True])
def test_each_stage_matches_its_uniform_counterpart(sp):
    """A stage at TP t does exactly the work (all its ranks together) of that stage in a uniform TP-t plan."""
    kw = dict(gbs=8, sequence_parallel=sp, zero_stage=1)
    ir = compile_workload(scenario(stage_tp=[8, 4], dp=2, **kw), 24)
    u8 = compile_workload(scenario(tp=8, pp=2, dp=2, **kw), 32)
    u4 = compile_workload(scenario(tp=4, pp=2, dp=2, **kw), 16)
    assert _stage_flops(ir, 0) == pytest.approx(_stage_flops(u8, 0), rel=1e-12)
    assert _stage_flops(ir, 1) == pytest.approx(_stage_flops(u4, 1), rel=1e-12)
    assert ir.meta["model_flops_per_iteration"] == u8.meta["model_flops_per_iteration"]
    assert ir.meta["stage_tp"] == [8, 4]
    # per-rank kernel shapes and memory follow the stage's degree
    assert ir.meta["memory_bytes"][0] == u8.meta["memory_bytes"][0]
    assert ir.meta["memory_bytes"][16] == u4.meta["memory_bytes"][8]
    send0 = next(op for op in ir.program_of(0).ops if op.name == "pp_send_act")
    recv1 = next(op for op in ir.program_of(16).ops if op.name == "pp_recv_act")
    if sp:
        assert send0.size_bytes * 8 == recv1.size_bytes * 4
    else:
        assert send0.size_bytes == recv1.size_bytes


@pytest.mark.parametrize("kw,world", [
    (dict(stage_tp=[8, 4], dp=2, gbs=8), 24),
    (dict(stage_tp=[4, 8], dp=1, gbs=8, sequence_parallel=True, zero_stage=1), 12),
    (dict(stage_tp=[4, 8, 2], dp=1, gbs=6, schedule="interleaved", virtual_stages=2, layer_partition=[2, 2, 4]), 14),
    (dict(stage_tp=[2, 4], cp=2, gbs=8), 12),
])
def test_ir_verifies(kw, world):
    ir = compile_workload(scenario(**kw), world)
    assert verify_ir(ir) > 0
    assert len(memory_per_rank(scenario(**kw), world)) == world


def test_uniform_stage_tp_equals_tp():
    """stage_tp=[4, 4] is the uniform TP4 plan: same programs, same groups."""
    a = compile_workload(scenario(stage_tp=[4, 4], dp=2, gbs=8), 16)
    b = compile_workload(scenario(tp=4, pp=2, dp=2, gbs=8), 16)
    assert a.rank_program == b.rank_program
    assert [p.ops for p in a.programs] == [p.ops for p in b.programs]
    for dim in ("tp", "dp", "pp", "embd"):
        assert sorted(a.groups[dim]) == sorted(b.groups[dim]), dim


@pytest.mark.parametrize("kw,world,match", [
    (dict(stage_tp=[8, 4], dp=2), 16, "sum\\(stage_tp\\)"),
    (dict(stage_tp=[8, 3]), 11, "num_attention_heads"),
    (dict(stage_tp=[8, 4], pp=3), 12, "one entry per pipeline stage"),
    (dict(stage_tp=[8, 4], order="tp-pp-dp"), 12, "stage-major"),
    (dict(stage_tp=[8, 4], tp=4), 12, "leave tp at 1"),
    (dict(stage_tp=[8, 0]), 8, "one TP degree"),
    (dict(stage_tp=[8, 4], dp=1, sequence_parallel=True), 12, None),
])
def test_plan_errors(kw, world, match):
    sc = scenario(model=gpt(seq=4096), gbs=8, seq=256, **kw)
    if match is None:
        assert resolve_plan(sc, world).stage_tp == [8, 4]
        return
    with pytest.raises(PlanError, match=match) as e:
        resolve_plan(sc, world)
    assert "parallelism." in str(e.value) and "\n" not in str(e.value)


def _hetero(stage_tp, groups, extra=()):
    return api.load(ROOT / "scenarios" / "quickstart.yaml", overrides=[
        "training.global_batch_size=4", "training.seq_length=512", "output.trace=false", "output.plots=false",
        "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=1", f"parallelism.stage_tp={stage_tp}",
        f"cluster.groups={groups}", *extra])


def test_full_run_tp8_then_tp4():
    """1 DGX H100 (TP8 stage) + 1 GH200 node (4 GPUs, TP4 stage): lanes follow the stages."""
    sc = _hetero("[8, 4]", "[{name: h100, node_type: dgx-h100, num_nodes: 1}, "
                 "{name: gh, node_type: gh200, num_nodes: 1}]")
    res = api.simulate(api.prepare(sc), record_messages=True)  # api.run keeps no per-message records
    lanes = res.sim.lanes
    assert sorted(len(l.ranks) for l in lanes) == [4, 8]
    assert res.summary["iteration_time_s"] > 0
    pp = [m for m in res.sim.messages if m.comm_kind == "pp"]
    assert {m.src for m in pp} == set(range(12))  # every rank of both stages moves pipeline data


def test_tp_group_crossing_nodes_is_a_plan_error():
    sc = _hetero("[4, 8]", "[{name: gh, node_type: gh200, num_nodes: 1}, "
                 "{name: h100, node_type: dgx-h100, num_nodes: 1}]", ["parallelism.dp=null"])
    sc2 = _hetero("[2, 8, 2]", "[{name: h100, node_type: dgx-h100, num_nodes: 1}, "
                  "{name: gh, node_type: gh200, num_nodes: 1}]", ["parallelism.schedule=1f1b"])
    api.prepare(sc)  # stage 0 on the 4-GPU node, stage 1 on the 8-GPU node: fine
    with pytest.raises(UserError, match="parallelism.stage_tp") as e:
        api.prepare(sc2)  # stage 1 (ranks 2-9) would straddle both nodes
    assert "\n" not in str(e.value) and "ranks 2-9" in str(e.value)


def test_example_scenario():
    res = api.run(api.load(ROOT / "scenarios" / "stage-tp.yaml",
                           ["training.global_batch_size=4", "output.trace=false", "output.plots=false"]))
    assert sorted(len(l.ranks) for l in res.sim.lanes) == [4, 4, 8]
    assert {l.device for l in res.sim.lanes if len(l.ranks) == 4} == {"GH200"}
    assert res.prepared.ir.meta["stage_tp"] == [8, 4, 4]


@st.composite
def uneven_plans(draw):
    pp = draw(st.sampled_from([2, 3]))
    stp = [draw(st.sampled_from([1, 2, 4])) for _ in range(pp)]
    cp = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2]))
    schedule = draw(st.sampled_from(["1f1b", "gpipe", "interleaved"]))
    v = 2 if schedule == "interleaved" else 1
    m = pp * draw(st.integers(1, 2)) if schedule == "interleaved" else draw(st.integers(1, 4))
    par = dict(stage_tp=stp, dp=dp, cp=cp, schedule=schedule, virtual_stages=v,
               sequence_parallel=draw(st.booleans()), recompute=draw(st.sampled_from(["none", "full"])),
               zero_stage=draw(st.sampled_from([0, 1])), tp_comm_overlap=draw(st.booleans()),
               grad_bucket_bytes=draw(st.sampled_from([200_000, 40_000_000])))
    return par, m


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(uneven_plans())
def test_random_uneven_plans_replay_and_keep_the_work(p):
    par, m = p
    dp, world = par["dp"], sum(par["stage_tp"]) * par["cp"] * par["dp"]
    model = gpt(layers=12, hidden=128, heads=4, vocab=512)
    ir = compile_workload(scenario(model, gbs=dp * m, seq=128, **par), world)
    assert verify_ir(ir) > 0
    ref = compile_workload(scenario(model, gbs=dp * m, seq=128, recompute=par["recompute"]), dp)
    gemm = lambda ir_: sum(k[1] for r in range(ir_.world_size) for op in ir_.ops_of(r) for k in op.kernels
                           if k[0] in ("gemm", "attention"))
    assert gemm(ir) == pytest.approx(gemm(ref), rel=1e-9)


def test_moe_with_uneven_tp_verifies():
    model = gpt(layers=4, hidden=128, heads=4, vocab=512, num_experts=4, moe_top_k=2)
    ir = compile_workload(scenario(model, gbs=8, seq=128, stage_tp=[4, 2], dp=2, ep=2), 12)
    assert verify_ir(ir) > 0
    assert {len(g) for g in ir.groups["ep"]} == {2}


def test_planner_suggestion_runs():
    from heterosim.planner.mapping import apply_overrides
    from heterosim.planner.stage_tp import suggest_stage_tp

    sc = api.load(ROOT / "scenarios" / "stage-tp.yaml", ["training.global_batch_size=4", "output.trace=false",
                                                          "output.plots=false"])
    ov = suggest_stage_tp(sc)
    assert ov["parallelism.stage_tp"] == [8, 4, 4]
    assert ov["parallelism.layer_partition"][0] > ov["parallelism.layer_partition"][1]  # the TP8 stage gets more
    res = api.run(apply_overrides(sc, ov))
    assert res.summary["iteration_time_s"] > 0
    with pytest.raises(PlanError, match="whole stages"):
        suggest_stage_tp(sc, dp=3)
