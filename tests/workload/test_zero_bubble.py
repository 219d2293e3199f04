"""Zero-bubble ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): order, B/W split, memory and
iteration time against the paper's formulas, worked out by hand here.

Bubble of a pipeline of p equal stages with per-stage pass times F (forward), B (input gradient) and W
(weight gradient), no communication time (the paper's Sec. 3.1):

* 1F1B, backward B + W in one pass: iteration = m (F + B + W) + (p - 1)(F + B + W);
* ZB-H1: iteration = m (F + B + W) + (p - 1)(F + B - W), 1/3 of 1F1B's bubble when F = B = W.
  (The DeepSeek-V3 report writes the same as (PP - 1)(F + B' - 2W) with B' = B + W the full backward.)
"""
from __future__ import annotations

from pathlib import Path

import pytest

from heterosim import api
from heterosim.config import ClusterConfig, DeviceGroup, ParallelConfig, Scenario, TrainingConfig
from heterosim.errors import PlanError
from heterosim.workload.compiler import compile_workload
from heterosim.workload.memory import memory_for_plan
from heterosim.workload.plan import resolve_plan
from heterosim.workload.schedules import one_f_one_b, schedule_for
from heterosim.workload.verify import verify_ir
from heterosim.workload.zero_bubble import zb_h1

from wl_factory import compute_passes, gpt, scenario

ROOT = Path(__file__).parents[2]


def _fmt(steps):
    return " ".join({"fwd": "F", "bwd": "B", "w": "W"}[p] + str(m) for p, m, _ in steps)


# ----------------------------------------------------------------------------------------------- order

def test_zb_h1_order_p4_m8_by_hand():
    # The authors' ZeroBubbleH1Pipeline (exact semantics): rank i runs p-i-1 forwards, i x (F, B) with the W
    # deferred, then F B W until the forwards are done, then B W, then the i deferred W passes.
    assert _fmt(zb_h1(4, 8, 0)) == "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7"
    assert _fmt(zb_h1(4, 8, 1)) == "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7"
    assert _fmt(zb_h1(4, 8, 3)) == ("F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 "
                                    "W5 W6 W7")


@pytest.mark.parametrize("p,m", [(4, 8), (4, 4), (4, 2), (3, 7), (8, 16), (1, 3)])
def test_zb_h1_every_pass_once_and_in_order(p, m):
    for rank in range(p):
        steps = zb_h1(p, m, rank)
        assert sorted(steps) == sorted((ph, k, 0) for ph in ("fwd", "bwd", "w") for k in range(m))
        pos = {s: i for i, s in enumerate(steps)}
        for k in range(m):
            assert pos[("fwd", k, 0)] < pos[("bwd", k, 0)] < pos[("w", k, 0)]
        # F and B in the same order as 1F1B (same warm-up): only the W passes move
        assert [s for s in steps if s[0] != "w"] == one_f_one_b(p, m, rank)


def test_zb_h1_is_dispatched_and_refuses_virtual_stages():
    assert schedule_for("zb-h1", 4, 8, 2) == zb_h1(4, 8, 2)
    with pytest.raises(PlanError, match=r"parallelism.virtual_stages = 2: virtual stages need schedule: "
                                        r"interleaved \(schedule is zb-h1\)"):
        resolve_plan(scenario(gbs=8, pp=2, schedule="zb-h1", virtual_stages=2), 2)


# ----------------------------------------------------------------------------------------------- IR

REPLAY = {
    "pp4": (dict(pp=4), 4, None),
    "tp_sp_zero1": (dict(tp=2, pp=2, sequence_parallel=True, zero_stage=1), 8, None),
    "tp_comm_overlap": (dict(tp=2, pp=2, sequence_parallel=True, tp_comm_overlap=True), 8, None),
    "zero2": (dict(pp=2, zero_stage=2), 8, None),
    "zero3": (dict(pp=2, zero_stage=3), 8, None),
    "cp_full_recompute": (dict(tp=2, cp=2, pp=2, recompute="full"), 16, None),
    "selective_no_overlap": (dict(pp=2, recompute="selective", overlap_grad_reduce=False), 4, None),
    "uneven_split": (dict(pp=2), 8, "split"),
}


@pytest.mark.parametrize("name", list(REPLAY))
def test_ir_replays_without_deadlock(name):
    par, world, extra = REPLAY[name]
    kw = dict(split=[1, 3, 5, 7]) if extra == "split" else {}
    ir = compile_workload(scenario(gbs=16, schedule="zb-h1", **par, **kw), world)
    assert verify_ir(ir) == sum(len(ir.ops_of(r)) for r in range(world))


def test_compute_order_follows_zb_h1_and_w_holds_the_wgrad_gemms():
    p, m = 4, 8
    zb = compile_workload(scenario(gbs=m, pp=p, schedule="zb-h1"), p)
    ref = compile_workload(scenario(gbs=m, pp=p), p)
    for stage in range(p):
        ops = zb.program_of(stage).ops
        assert compute_passes(ops) == [({"fwd": "F", "bwd": "B", "w": "W"}[ph], k) for ph, k, _ in zb_h1(p, m, stage)]
        for o in ops:
            if o.name.endswith("wgrad"):
                assert {k[3][3] for k in o.kernels} == {"wgrad"}
                b = ops[o.deps[0]]
                assert (b.name, b.microbatch, b.layer) == (
                    ("attn_bwd" if o.name == "layer_wgrad" else "lm_head_loss_bwd"), o.microbatch, o.layer)
            elif o.phase == "bwd" and o.kind == "compute":
                assert all(k[0] != "gemm" or k[3][3] == "dgrad" for k in o.kernels), o.name
        # the split moves work, it adds none: same FLOPs and bytes per stage as 1F1B
        flops = lambda prog: sum(o.flops for o in prog.ops)  # noqa: E731
        assert flops(zb.program_of(stage)) == pytest.approx(flops(ref.program_of(stage)), rel=1e-12)


def test_dp_bucket_waits_for_the_last_w_of_its_layers():
    ir = compile_workload(scenario(gbs=16, pp=2, schedule="zb-h1"), 4)
    for prog in ir.programs:
        ops = prog.ops
        for o in (o for o in ops if o.name.startswith("grad_allreduce")):
            prod = ops[o.deps[0]]
            assert prod.name in ("layer_wgrad", "lm_head_wgrad", "embedding_bwd")
            last_mb = max(x.microbatch for x in ops if x.name == "layer_wgrad")
            assert prod.microbatch == last_mb


# ----------------------------------------------------------------------------------------------- time

def _uniform(schedule: str, p: int, m: int, F: int, B: int, W: int) -> int:
    """Iteration time (ns) of a p-stage pipeline whose every stage takes F, B, W per micro-batch: one layer
    per stage, its forward/B ops and its W op set to those durations, embedding/head/optimizer 0 ns and
    every message 0 bytes (no communication time), so that only the schedule decides."""
    sc = Scenario(model=gpt(layers=p, hidden=64, heads=4, vocab=128, seq=128, tie_embeddings=False),
                  training=TrainingConfig(global_batch_size=m, micro_batch_size=1, seq_length=128),
                  parallelism=ParallelConfig(pp=p, schedule=schedule),
                  cluster=ClusterConfig(groups=[DeviceGroup(name="g", node_type="dgx-h100", num_nodes=1,
                                                            overrides={"gpus_per_node": p})]))
    prep = api.prepare(sc)
    names = {"attn": F // 2, "mlp": F - F // 2, "attn_bwd": B // 2, "mlp_bwd": B - B // 2, "layer_wgrad": W}
    if schedule != "zb-h1":  # one backward pass: B and W together
        names.update(attn_bwd=(B + W) // 2, mlp_bwd=B + W - (B + W) // 2)
    for prog in prep.ir.programs:
        for op in prog.ops:
            if op.kind == "comm":
                op.size_bytes = 0
            elif op.layer >= 0:
                op.duration_ns = names[op.name]
            else:
                op.duration_ns = 0
    return api.simulate(prep, record_messages=False).summary["iteration_time_ns"]


@pytest.mark.parametrize("p,m,F,B,W", [(4, 8, 300_000, 300_000, 300_000), (4, 8, 400_000, 300_000, 200_000),
                                       (2, 4, 300_000, 300_000, 300_000), (4, 12, 200_000, 300_000, 100_000)])
def test_iteration_time_matches_the_papers_bubble(p, m, F, B, W):
    zb = _uniform("zb-h1", p, m, F, B, W)
    one = _uniform("1f1b", p, m, F, B, W)
    assert one == m * (F + B + W) + (p - 1) * (F + B + W)
    assert zb == m * (F + B + W) + (p - 1) * (F + B - W)


def test_equal_passes_zb_h1_bubble_is_a_third_of_1f1b():
    p, m, t = 4, 8, 300_000
    busy = m * 3 * t
    assert _uniform("zb-h1", p, m, t, t, t) - busy == 3 * t  # (p-1) t
    assert _uniform("1f1b", p, m, t, t, t) - busy == 9 * t   # (p-1) 3t


# ----------------------------------------------------------------------------------------------- memory

def test_w_retention_is_32_sbh_per_gpt_layer():
    # Qi et al. 2024 Table 1: M_W = 32 sbh (16-bit) per layer, the weight GEMMs' inputs (QKV, projection,
    # fc1 2 sbh each, fc2 8 sbh) and their output gradients (6 + 2 + 8 + 2 sbh)
    from heterosim.workload.costs import LayerShapes
    from heterosim.workload.zero_bubble import w_retained_bytes

    sc = scenario(gpt(layers=4, hidden=256, heads=8), gbs=8, seq=256, pp=2, schedule="zb-h1")
    plan = resolve_plan(sc, 2)
    sh = LayerShapes.of(sc.model, plan, "bf16")
    assert w_retained_bytes(sh.attn_all() + sh.mlp(), sh.gemm_eb, sh.act_eb) == 32 * 256 * 1 * 256


def _with_attention(sc, attention):
    return sc.model_copy(update={"training": sc.training.model_copy(update={"attention": attention})})


@pytest.mark.parametrize("attention", ["flash", "unfused"])
@pytest.mark.parametrize("p,m", [(4, 8), (4, 4), (2, 6)])
def test_peak_activations_by_hand(p, m, attention):
    """With m >= p, stage i holds (p - i) M_B + i M_W at its peak (the paper's Table 1 accounting: its
    p - i - 1 warm-up forwards and the next forward in flight, i micro-batches past B waiting for their W):
    rank 0 holds p M_B, 1F1B's rank-0 peak. With the paper's M_B = 34 sbh + 5 as^2 b (unfused attention)
    no rank exceeds that; with flash attention M_B is 34 sbh, M_W / M_B = 32/34, and the last rank (which
    also keeps the LM head's logit gradients for its W) may exceed it -- reported, not hidden."""
    model = gpt(layers=2 * p, hidden=256, heads=8, vocab=256)
    osc = _with_attention(scenario(model, gbs=m, pp=p), attention)
    zsc = _with_attention(scenario(model, gbs=m, pp=p, schedule="zb-h1"), attention)
    one = memory_for_plan(osc, resolve_plan(osc, p))
    zb = memory_for_plan(zsc, resolve_plan(zsc, p))
    s = h = 256
    for i in range(p):
        mb = one[(i, m)]["activations"] / (p - i)  # M_B of this stage: 1F1B holds p - i micro-batches
        mw = 2 * 32 * s * h  # two layers per stage, 32 sbh bytes each
        if i == p - 1:
            mw += 2 * s * (h + 256)  # LM head: its input (s x h) and the logits' gradient (s x v), 2 B each
        assert zb[(i, m)]["activations"] == pytest.approx((p - i) * mb + i * mw, rel=1e-12)
    assert zb[(0, m)]["activations"] == one[(0, m)]["activations"]
    if attention == "unfused":
        assert max(zb[(i, m)]["activations"] for i in range(p)) == one[(0, m)]["activations"]


# ----------------------------------------------------------------------------------------------- scenario

def test_shipped_scenario_runs_and_beats_1f1b():
    path = ROOT / "scenarios" / "schedules" / "zb-h1.yaml"
    zb = api.run(api.load(path)).summary
    one = api.run(api.load(path, ["parallelism.schedule=1f1b"])).summary
    assert zb["iteration_time_ns"] < one["iteration_time_ns"]
    assert zb["breakdown"]["bubble"] < one["breakdown"]["bubble"]
