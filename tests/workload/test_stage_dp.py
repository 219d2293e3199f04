"""A different DP degree per pipeline stage (parallelism.stage_dp): iteration time by hand, deadlock-free replay,
re-sharding sends, per-stage memory and gradient reduction, one-line plan errors, the shipped example."""
from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest
from wl_factory import gpt, scenario

from heterosim import api
from heterosim.config import ClusterConfig, DeviceGroup, ParallelConfig, Scenario, TrainingConfig
from heterosim.errors import PlanError
from heterosim.workload.compiler import compile_workload
from heterosim.workload.plan import resolve_plan
from heterosim.workload.stage_dp import replica_steps, stage_warmups
from heterosim.workload.verify import verify_ir

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from schedule_bubbles import iteration_with_pass_times  # noqa: E402


# ----------------------------------------------------------------------------------------- iteration time

def _timed(stage_dp: list[int], m: int, fb: list[tuple[int, int]]) -> int:
    """Iteration time (ns) of a pipeline with one layer per stage, stage s's forward and backward of one
    micro-batch set to fb[s] = (F_s, B_s), embedding / head / optimizer 0 ns and every message (pipeline and
    DP) 0 bytes, so that only the schedule and the routing decide."""
    p = len(stage_dp)
    sc = Scenario(model=gpt(layers=p, hidden=64, heads=4, vocab=128, seq=128, tie_embeddings=False),
                  training=TrainingConfig(global_batch_size=m, micro_batch_size=1, seq_length=128),
                  parallelism=ParallelConfig(pp=p, stage_dp=stage_dp),
                  cluster=ClusterConfig(groups=[DeviceGroup(name="g", node_type="dgx-h100", num_nodes=1,
                                                            overrides={"gpus_per_node": sum(stage_dp)})]))
    def names(stage: int) -> dict:
        F, B = fb[stage]
        return {"attn": F // 2, "mlp": F - F // 2, "attn_bwd": B // 2, "mlp_bwd": B - B // 2}
    return iteration_with_pass_times(api.prepare(sc), names)


def test_two_stages_dp_2_1_equal_passes_by_hand():
    """stage_dp [2, 1], m = 4, every pass F (forward) or B (backward) on both stages, no communication time.
    Stage 0's replicas run {0, 2} and {1, 3}, each 1F1B with warm-up 1: F F B B; stage 1's one replica runs
    F0 B0 F1 B1 F2 B2 F3 B3. Stage 1 starts at F (stage 0's first forward, both replicas at once) and never
    waits: micro-batch 2's forward is ready on replica 0 at F (F0) + F (F2) = 2F <= its turn at 3F + 2B. It ends
    at F + 4(F + B); stage 0's replica 1 then runs B3:  T = F + m (F + B) + B = 5F + 5B."""
    F, B = 300_000, 400_000
    assert _timed([2, 1], 4, [(F, B), (F, B)]) == F + 4 * (F + B) + B


def test_slow_wide_stage_keeps_up_by_hand():
    """The heterogeneous case the plan class is for: stage 0 on 2 replicas of a GPU half as fast (2F, 2B per
    micro-batch), stage 1 on 1 fast replica (F, B), m = 4, F = B = t. Stage 0 replica 0: F0 [0, 2t], F2 [2t, 4t];
    stage 1: F0 [2t, 3t], B0, F1, B1 until 6t, F2 (ready at 4t) [6t, 7t], B2, F3, B3 until 10t; stage 0 runs
    B0 at max(4t, 4t) = [4t, 6t], B1 [6t, 8t] (replica 1), B2 [8t, 10t], B3 [10t, 12t]:
    T = 2F + m (F + B) + 2B = 12t. A uniform pipeline of one slow and one fast replica would take
    (m + 1)(2F + 2B) = 20t."""
    t = 250_000
    assert _timed([2, 1], 4, [(2 * t, 2 * t), (t, t)]) == 12 * t


def test_narrow_first_stage_by_hand():
    """stage_dp [1, 2], m = 4, every pass t: stage 0 alone runs F0 F1 B0 F2 B1 F3 B2 B3 (warm-up 1), stage 1's
    replicas F0 B0 F2 B2 and F1 B1 F3 B3. Stage 0: F0 [0, t], F1 [t, 2t], B0 waits for stage 1's B0 (F0 [t, 2t],
    B0 [2t, 3t]) [3t, 4t], F2 [4t, 5t], B1 (stage 1: F1 [2t, 3t], B1 [3t, 4t]) [5t, 6t], F3 [6t, 7t], B2 (stage 1:
    F2 [5t, 6t], B2 [6t, 7t]) [7t, 8t], B3 (stage 1: F3 [7t, 8t], B3 [8t, 9t]) [9t, 10t]: T = 10t = (m + 1)(F + B)."""
    t = 300_000
    assert _timed([1, 2], 4, [(t, t), (t, t)]) == 5 * 2 * t


# ----------------------------------------------------------------------------------------- schedule / replay

def test_warmups_fall_and_equal_degrees_give_plain_1f1b():
    assert stage_warmups([3, 3, 3, 3]) == [9, 6, 3, 0]  # /3 = 3, 2, 1, 0 = p - s - 1
    # by hand from the last stage back, W_s = d_s * ceil((W_{s+1} + 1) / d_s): [8, 2, 2] -> W2 = 0,
    # W1 = 2 * ceil(1 / 2) = 2, W0 = 8 * ceil(3 / 8) = 8; [1, 4, 1] -> 0, 4 * ceil(1 / 4) = 4, 1 * 5 = 5
    assert stage_warmups([8, 2, 2]) == [8, 2, 0]
    assert stage_warmups([1, 4, 1]) == [5, 4, 0]
    # replica 1 of stage 0 at [2, 1]: micro-batches 1, 3 with local warm-up 2 // 2 = 1
    assert replica_steps("1f1b", [2, 1], 4, 0, 1) == [("fwd", 1, 0), ("fwd", 3, 0), ("bwd", 1, 0), ("bwd", 3, 0)]
    assert replica_steps("gpipe", [1, 2], 4, 1, 0) == [("fwd", 0, 0), ("fwd", 2, 0), ("bwd", 0, 0), ("bwd", 2, 0)]


SHAPES = [([2, 1], 1), ([1, 2], 2), ([8, 2, 2], 1), ([1, 2, 1, 1], 1), ([2, 3, 1, 1], 1), ([4, 1, 2], 2),
          ([3, 1, 2, 1], 1),
          # deadlocked under the earlier rule (warm-ups counted from the first stage; found by the planner)
          ([4, 4, 4, 4, 1, 1, 1, 1], 16), ([3, 4, 1, 2, 2, 2], 2)]


@pytest.mark.parametrize("sdp,mult", SHAPES)
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_replay_is_deadlock_free(sdp, mult, schedule):
    """Rendezvous replay (verify.replay: every send waits for its receive, streams in order) runs to the end.
    [1, 2, 1, 1] deadlocks under the naive rule (each replica warms up p - s - 1 of its own micro-batches);
    [2, 3, 1, 1] deadlocks with warm-ups that do not fall from stage to stage."""
    p = len(sdp)
    m = math.lcm(*sdp) * mult
    layers = 4 if p <= 4 else p
    model = gpt(layers=layers, hidden=64, heads=4, vocab=256)
    ir = compile_workload(scenario(model, gbs=m, seq=64, stage_dp=sdp, pp=p, schedule=schedule,
                                   layer_partition=None if layers % p == 0 else [2, 1, 1]), sum(sdp))
    assert verify_ir(ir) > 0


def test_replay_every_small_shape():
    """Every stage_dp over {1, 2, 3} for 2 and 3 stages, m = lcm and 2 lcm."""
    model = gpt(layers=6, hidden=64, heads=4, vocab=256)
    n = 0
    for p in (2, 3):
        for sdp in itertools.product([1, 2, 3], repeat=p):
            if len(set(sdp)) == 1:
                continue
            for m in (math.lcm(*sdp), 2 * math.lcm(*sdp)):
                assert verify_ir(compile_workload(scenario(model, gbs=m, seq=64, stage_dp=list(sdp), pp=p),
                                                  sum(sdp))) > 0
                n += 1
    assert n == 2 * (6 + 24)


def test_uneven_tp_and_cp_verify_moe_refused():
    ir = compile_workload(scenario(gbs=8, stage_dp=[2, 1], stage_tp=[2, 4], sequence_parallel=True), 8)
    assert verify_ir(ir) > 0 and ir.meta["stage_dp"] == [2, 1]
    ir = compile_workload(scenario(gbs=4, stage_dp=[1, 2], pp=2, cp=2, tp=2, zero_stage=1), 12)
    assert verify_ir(ir) > 0
    moe = gpt(layers=4, hidden=128, heads=4, vocab=512, num_experts=4, moe_top_k=2)
    with pytest.raises(PlanError, match="without expert parallelism"):
        resolve_plan(scenario(moe, gbs=8, seq=128, stage_dp=[4, 2], pp=2, ep=2), 6)


# ----------------------------------------------------------------------------------------- re-sharding sends

@pytest.mark.parametrize("sdp,tp,sp", [([2, 1], 1, False), ([1, 2], 1, False), ([4, 2, 1], 2, True)])
def test_resharding_sends_route_and_bytes(sdp, tp, sp):
    """Micro-batch k's activation leaves replica k mod d_s of stage s for replica k mod d_{s+1}, and its gradient
    comes back the same way; each message is one micro-batch's activation, b*s*h bf16 elements (/tp with
    sequence parallelism), so an iteration moves 2 m (p - 1) of them whatever the degrees."""
    b, seq, h, m = 2, 128, 256, 4 * math.lcm(*sdp)
    p = len(sdp)
    ir = compile_workload(scenario(gpt(layers=2 * p), gbs=b * m, mbs=b, seq=seq, stage_dp=sdp, pp=p, tp=tp,
                                   sequence_parallel=sp), tp * sum(sdp))
    plan_layout = resolve_plan(scenario(gpt(layers=2 * p), gbs=b * m, mbs=b, seq=seq, stage_dp=sdp, pp=p, tp=tp,
                                        sequence_parallel=sp), tp * sum(sdp)).layout
    msg = b * seq * h * 2 // (tp if sp else 1)
    total = 0
    for r in range(ir.world_size):
        me = plan_layout.coords(r)
        for op in ir.ops_of(r):
            if op.collective != "send":
                continue
            peer = plan_layout.coords(ir.peer_of(r, op.peer_offset))
            to = me["pp"] + (1 if op.name == "pp_send_act" else -1)
            assert me["dp"] == op.microbatch % sdp[me["pp"]]
            assert (peer["pp"], peer["dp"], peer["tp"]) == (to, op.microbatch % sdp[to], me["tp"])
            assert op.size_bytes == msg
            total += op.size_bytes
    assert total == 2 * m * (p - 1) * msg * tp


# ----------------------------------------------------------------------------------------- DP and memory

def test_each_stage_reduces_over_its_own_replicas_and_shards_over_them():
    """[2, 1] with ZeRO-1: stage 0's buckets are reduce-scattered over 2 ranks, stage 1 (one replica) has no DP
    collective; stage 0's optimizer state is half of what the one-replica stage 0 holds."""
    kw = dict(gbs=8, zero_stage=1)
    ir = compile_workload(scenario(stage_dp=[2, 1], pp=2, **kw), 3)
    dp0 = [op for op in ir.ops_of(0) if op.comm_kind == "dp" and op.group == "dp"]
    assert dp0 and all(len(ir.group_of(0, "dp")) == 2 for _ in dp0)
    assert not [op for op in ir.ops_of(2) if op.group in ("dp", "dp_cp")]
    ref2 = compile_workload(scenario(pp=2, dp=2, **kw), 4).meta["memory_breakdown"]
    ref1 = compile_workload(scenario(pp=2, dp=1, **kw), 2).meta["memory_breakdown"]
    br = ir.meta["memory_breakdown"]
    assert br["stage0/mb4"]["optimizer"] == ref2["stage0/mb4"]["optimizer"]
    assert br["stage1/mb8"]["optimizer"] == ref1["stage1/mb8"]["optimizer"]


def test_activation_memory_follows_each_stage_micro_batch_count():
    """[2, 1], 1F1B, m = 8: a stage-0 replica runs 4 micro-batches with warm-up W_0 / 2 = 1, so it holds at most
    2 in flight; the single stage-1 replica runs 8 with warm-up 0: 1 in flight. One micro-batch's activations of
    each stage are those of a one-micro-batch uniform pipeline (m = 1: one in flight)."""
    ir = compile_workload(scenario(stage_dp=[2, 1], pp=2, gbs=8), 3)
    one = compile_workload(scenario(pp=2, gbs=1), 2).meta["memory_breakdown"]
    br = ir.meta["memory_breakdown"]
    assert set(br) == {"stage0/mb4", "stage1/mb8"}
    assert br["stage0/mb4"]["activations"] == pytest.approx(2 * one["stage0/mb1"]["activations"], rel=1e-12)
    assert br["stage1/mb8"]["activations"] == pytest.approx(one["stage1/mb1"]["activations"], rel=1e-12)


def test_work_is_the_uniform_plans():
    """Every micro-batch is computed once per stage: the GEMM/attention flops equal a uniform plan's."""
    model = gpt(layers=4, hidden=128, heads=4, vocab=512)
    a = compile_workload(scenario(model, gbs=12, seq=128, stage_dp=[3, 2, 1], pp=3,
                                  layer_partition=[2, 1, 1]), 6)
    u = compile_workload(scenario(model, gbs=12, seq=128), 1)
    gemm = lambda ir_: sum(k[1] for r in range(ir_.world_size) for op in ir_.ops_of(r) for k in op.kernels
                           if k[0] in ("gemm", "attention"))
    assert gemm(a) == pytest.approx(gemm(u), rel=1e-9)


# ----------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("kw,world,match", [
    (dict(stage_dp=[2, 1], pp=3), 3, "one entry per pipeline stage"),
    (dict(stage_dp=[2, 1], stage_tp=[2, 2, 2]), 6, "one entry per stage_tp entry"),
    (dict(stage_dp=[2, 0], pp=2), 2, "one DP degree >= 1"),
    (dict(stage_dp=[2, 1], pp=2), 4, "GPU count mismatch"),
    (dict(stage_dp=[2, 1], pp=2, tp=2), 4, "GPU count mismatch"),
    (dict(stage_dp=[3, 1], pp=2), 4, "divisible by every stage's DP degree"),
    (dict(stage_dp=[2, 1], pp=2, dp=2), 3, "leave dp unset"),
    (dict(stage_dp=[2, 1], pp=2, schedule="interleaved", virtual_stages=2), 3, "1f1b or gpipe"),
    (dict(stage_dp=[2, 1], pp=2, zero_stage=3), 3, "zero_stage 0 or 1"),
    (dict(stage_dp=[2, 1], pp=2, order="tp-pp-dp"), 3, "stage-major"),
])
def test_plan_errors(kw, world, match):
    with pytest.raises(PlanError, match=match) as e:
        resolve_plan(scenario(gbs=8, **kw), world)
    assert "parallelism." in str(e.value) and "\n" not in str(e.value)


def test_equal_degrees_are_the_plain_plan():
    a = compile_workload(scenario(gbs=8, stage_dp=[2, 2], pp=2), 4)
    b = compile_workload(scenario(gbs=8, dp=2, pp=2), 4)
    assert a.rank_program == b.rank_program and [p.ops for p in a.programs] == [p.ops for p in b.programs]
    assert a.groups == b.groups


# ----------------------------------------------------------------------------------------- example

def test_example_scenario_runs():
    res = api.run(api.load(ROOT / "scenarios" / "stage-dp.yaml", ["output.trace=false", "output.plots=false"]))
    ir = res.prepared.ir
    assert ir.meta["stage_dp"] == [8, 4]
    assert res.summary["iteration_time_s"] > 0
    assert {l.device for l in res.sim.lanes if ir.program_of(l.ranks[0]).stage == 1} == {"GH200"}
