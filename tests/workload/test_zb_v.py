"""Zero-bubble ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 6): two chunks per rank in a
V (rank i: virtual stages i and 2p - 1 - i), backward split into B and W as in ZB-H1. Order, placement, iteration
time and memory against the paper's statements, worked out by hand here.

The paper (and the authors' summary table: bubble rate 0, activation memory 1x 1F1B when T_F = T_B = T_W):
with equal pass times ZB-V has no bubble inside its parallelogram, i.e. rank i, which receives its first
micro-batch after i chunk forwards, then never waits. A synchronous iteration (HeteroSim waits for every rank
before the optimizer step; the paper's optimizer post-validation, which would let the next iteration absorb the
skew, is not modelled) therefore takes, with per-chunk pass times f = b = w = t and m >= 2p - 1 micro-batches,

    iteration = 2 m (f + b + w) + (p - 1) f          (the skew of the last rank, (p - 1) t)

against ZB-H1's m (F + B + W) + (p - 1)(F + B - W) and 1F1B's m (F + B + W) + (p - 1)(F + B + W) with the
stage's pass times F = 2f, B = 2b, W = 2w: bubbles (p - 1) t, 2 (p - 1) t and 6 (p - 1) t.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cli_helpers import validate_refuses
from heterosim import api
from heterosim.config import ClusterConfig, DeviceGroup, ParallelConfig, Scenario, TrainingConfig
from heterosim.errors import PlanError
from heterosim.workload.compiler import compile_workload
from heterosim.workload.memory import activation_bytes_per_layer, memory_for_plan
from heterosim.workload.plan import resolve_plan
from heterosim.workload.schedules import schedule_for
from heterosim.workload.verify import verify_ir
from heterosim.workload.zero_bubble import peak_retained, zb_v

from wl_factory import compute_passes, gpt, scenario

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from schedule_bubbles import iteration_with_pass_times  # noqa: E402


def _fmt(steps):
    """The authors' notation: F B W for chunk 0, f b w for chunk 1, then the micro-batch."""
    return " ".join(({"fwd": "F", "bwd": "B", "w": "W"}[p] if c == 0 else {"fwd": "f", "bwd": "b", "w": "w"}[p])
                    + str(m) for p, m, c in steps)


# ----------------------------------------------------------------------------------------------- order

def test_zb_v_order_p2_m3_by_hand():
    # rank 0: 2p-1 = 3 chunk-0 forwards; no (f, F) pairs; p = 2 triples (f b w); steady: B0 W0 f2 b2 w2 (all F
    # done); cool-down: p = 2 pairs (B, W). rank 1: 1 forward; one (f, F) pair; one triple; steady: F2 B0 W0 f2
    # b1 w1; cool-down: one (B, b) pair with W deferred, one (B, W) pair, then the deferred w then W.
    assert _fmt(zb_v(2, 3, 0)) == "F0 F1 F2 f0 b0 w0 f1 b1 w1 B0 W0 f2 b2 w2 B1 W1 B2 W2"
    assert _fmt(zb_v(2, 3, 1)) == "F0 f0 F1 f1 b0 w0 F2 B0 W0 f2 b1 w1 B1 b2 B2 W1 w2 W2"


@pytest.mark.parametrize("p,m", [(2, 3), (4, 7), (4, 8), (4, 2), (3, 10), (8, 16)])
def test_zb_v_every_pass_once_and_in_order(p, m):
    for rank in range(p):
        steps = zb_v(p, m, rank)
        assert sorted(steps) == sorted((ph, k, c) for ph in ("fwd", "bwd", "w") for k in range(m) for c in (0, 1))
        pos = {s: i for i, s in enumerate(steps)}
        for k in range(m):
            for c in (0, 1):
                assert pos[("fwd", k, c)] < pos[("bwd", k, c)] < pos[("w", k, c)]
            if rank == p - 1:  # the V's turn is local: chunk 0 feeds chunk 1, chunk 1's gradient chunk 0
                assert pos[("fwd", k, 0)] < pos[("fwd", k, 1)] and pos[("bwd", k, 1)] < pos[("bwd", k, 0)]
            if rank == 0:  # the loss is on rank 0's chunk 1
                assert pos[("fwd", k, 1)] < pos[("bwd", k, 1)]
    assert schedule_for("zb-v", p, m, 1) == zb_v(p, m, 1)


@pytest.mark.parametrize("p,m,x", [(2, 3, 0.0), (4, 8, 32 / 34), (4, 16, 1.0), (8, 15, 0.5)])
def test_peak_is_p_stages_of_activations_on_every_rank(p, m, x):
    """The paper's Table 1 accounting per chunk (M_B/2 from F to B, then M_W/2 <= M_B/2 until W): every rank
    peaks at 2p chunk activations = p M_B, 1F1B's rank-0 peak, whatever M_W (m >= 2p - 1)."""
    for rank in range(p):
        assert peak_retained(zb_v(p, m, rank), [1.0, 1.0], [x, x]) == 2 * p


# ----------------------------------------------------------------------------------------------- IR

def test_v_placement_messages_and_order():
    p, m = 4, 8
    sc = scenario(gpt(layers=16), gbs=m, pp=p, schedule="zb-v")
    ir = compile_workload(sc, p)
    assert ir.meta["layers_per_virtual_stage"] == [2] * 8 and ir.meta["layers_per_stage"] == [4] * 4
    for stage in range(p):
        ops = ir.program_of(stage).ops
        assert compute_passes(ops, with_chunk=True) == [({"fwd": "F", "bwd": "B", "w": "W"}[ph], k, c) for ph, k, c in zb_v(p, m, stage)]
        # rank i holds layers of virtual stages i and 2p-1-i
        layers = {(o.chunk, o.layer) for o in ops if o.layer >= 0}
        assert {lay for c, lay in layers if c == 0} == {2 * stage, 2 * stage + 1}
        assert {lay for c, lay in layers if c == 1} == {2 * (2 * p - 1 - stage), 2 * (2 * p - 1 - stage) + 1}
        sends = {(o.chunk, o.phase, o.peer_offset) for o in ops if o.collective == "send"}
        expect = set()
        if stage < p - 1:  # chunk 0 forwards down, chunk 0 gradients come back up: sends to +1 / -1
            expect |= {(0, "fwd", +1), (1, "bwd", +1)}
        if stage > 0:
            expect |= {(0, "bwd", -1), (1, "fwd", -1)}
        assert sends == expect  # the last rank's turn (chunk 0 -> chunk 1) sends nothing
        heads = [o for o in ops if o.name == "lm_head_loss"]
        embeds = [o for o in ops if o.name == "embedding"]
        assert (len(heads), len(embeds)) == ((m, m) if stage == 0 else (0, 0))
    assert verify_ir(ir) == sum(len(ir.ops_of(r)) for r in range(p))


def test_tied_embedding_is_one_weight_on_rank_0():
    # embedding (virtual stage 0) and LM head (2p - 1) are both on rank 0: one shared weight, nothing to sync
    model = gpt(layers=8, vocab=1024, tie_embeddings=True)
    ir = compile_workload(scenario(model, gbs=8, pp=2, schedule="zb-v"), 2)
    assert not any(o.name == "embedding_grad_allreduce" for p in ir.programs for o in p.ops)
    one = compile_workload(scenario(model, gbs=8, pp=2), 2)
    assert any(o.name == "embedding_grad_allreduce" for p in one.programs for o in p.ops)
    zsc = scenario(model, gbs=8, pp=2, schedule="zb-v")
    mem = memory_for_plan(zsc, resolve_plan(zsc, 2))
    h, v = 256, 1024
    # rank 0 - rank 1 parameters (2-byte weights): embedding table once (+ position table, final norm) only
    diff = (mem[(0, 8)]["params"] - mem[(1, 8)]["params"]) / 2
    assert diff == v * h + 2048 * h + 2 * h


REPLAY = {
    "pp4": (dict(pp=4), 4, {}),
    "tp_sp_zero1": (dict(tp=2, pp=2, sequence_parallel=True, zero_stage=1), 8, {}),
    "tp_comm_overlap": (dict(tp=2, pp=2, sequence_parallel=True, tp_comm_overlap=True), 8, {}),
    "zero2": (dict(pp=2, zero_stage=2), 8, {}),
    "cp_full_recompute": (dict(tp=2, cp=2, pp=2, recompute="full"), 16, {}),
    "selective_no_overlap": (dict(pp=2, recompute="selective", overlap_grad_reduce=False), 4, {}),
    "uneven_split": (dict(pp=2), 8, dict(split=[1, 3, 5, 7])),
    "stage_tp": (dict(stage_tp=[2, 1], dp=2), 6, {}),
    "layer_partition_per_virtual_stage": (dict(pp=2, layer_partition=[1, 3, 3, 1]), 2, {}),
    "moe_ep": (dict(pp=2, ep=2), 4, dict(model=gpt(layers=8, num_experts=4, moe_top_k=2))),
}


@pytest.mark.parametrize("name", list(REPLAY))
def test_ir_replays_without_deadlock(name):
    par, world, kw = REPLAY[name]
    ir = compile_workload(scenario(gbs=16, schedule="zb-v", **par, **kw), world)
    assert verify_ir(ir) == sum(len(ir.ops_of(r)) for r in range(world))


def test_layer_partition_per_stage_follows_the_v():
    # [6, 2] per rank: rank 0 holds virtual stages 0 and 3 (3 layers each), rank 1 stages 1 and 2 (1 each)
    plan = resolve_plan(scenario(gbs=4, pp=2, schedule="zb-v", layer_partition=[6, 2]), 2)
    assert [len(x) for x in plan.vstage_layers] == [3, 1, 1, 3]
    assert plan.layers_of(0, 1) == [5, 6, 7] and plan.layers_of(1, 1) == [4]


# ----------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("par,field,value", [
    (dict(pp=1), "parallelism.schedule", "'zb-v'"),
    (dict(pp=2, virtual_stages=3), "parallelism.virtual_stages", "3"),
    (dict(pp=2, zero_stage=3), "parallelism.zero_stage", "3"),
    (dict(stage_dp=[2, 1]), "parallelism.stage_dp", "[2, 1]"),
])
def test_not_combinable_is_refused_naming_field_and_value(par, field, value):
    world = 3 if "stage_dp" in par else par["pp"]
    with pytest.raises(PlanError) as err:
        resolve_plan(scenario(gbs=4, schedule="zb-v", **par), world)
    assert str(err.value).startswith(f"{field} = {value}:") and "\n" not in str(err.value)


def test_cli_refusal_is_one_line_exit_2(tmp_path):
    validate_refuses(ROOT / "scenarios" / "schedules" / "zb-v.yaml",
                     lambda src: src["parallelism"].update(zero_stage=3), tmp_path, "parallelism.zero_stage = 3")


# ----------------------------------------------------------------------------------------------- time

def _uniform(schedule: str, p: int, m: int, f: int, b: int, w: int) -> int:
    """Iteration (ns) of a pipeline of 2p one-layer virtual stages (two per rank) whose layer ops take f, b, w
    per micro-batch (forward, B, W; 1F1B runs B + W as one backward), every other op 0 ns and every message
    0 bytes."""
    sc = Scenario(model=gpt(layers=2 * p, hidden=64, heads=4, vocab=128, seq=128, tie_embeddings=False),
                  training=TrainingConfig(global_batch_size=m, micro_batch_size=1, seq_length=128),
                  parallelism=ParallelConfig(pp=p, schedule=schedule),
                  cluster=ClusterConfig(groups=[DeviceGroup(name="g", node_type="dgx-h100", num_nodes=1,
                                                            overrides={"gpus_per_node": p})]))
    dur = {"attn": f // 2, "mlp": f - f // 2, "attn_bwd": b // 2, "mlp_bwd": b - b // 2, "layer_wgrad": w}
    if schedule == "1f1b":
        dur.update(attn_bwd=(b + w) // 2, mlp_bwd=b + w - (b + w) // 2)
    return iteration_with_pass_times(api.prepare(sc), lambda stage: dur)


def test_hand_timeline_p2_m3():
    """p = 2, m = 3, f = b = w = t = 100 us, the orders of test_zb_v_order_p2_m3_by_hand, each pass starting when
    its rank is free and its input is there (times in t):

        rank 0: F0 0-1  F1 1-2  F2 2-3  f0 3-4 (after rank 1's f0, 2-3)  b0 4-5  w0 5-6  f1 6-7 (rank 1's f1 4-5)
                b1 7-8  w1 8-9  B0 9-10 (rank 1's B0 8-9)  W0 10-11  f2 11-12 (rank 1's f2 10-11)  b2 12-13
                w2 13-14  B1 14-15 (rank 1's B1 13-14)  W1 15-16  B2 16-17 (rank 1's B2 15-16)  W2 17-18
        rank 1: F0 1-2  f0 2-3  F1 3-4  f1 4-5  b0 5-6 (rank 0's b0 4-5)  w0 6-7  F2 7-8  B0 8-9  W0 9-10
                f2 10-11  b1 11-12 (rank 0's b1 7-8)  w1 12-13  B1 13-14  b2 14-15 (rank 0's b2 12-13)  B2 15-16
                W1 16-17  w2 17-18  W2 18-19

    Rank 0 is busy 0-18, rank 1 1-19 without a gap: 19 t = 2 m (f + b + w) + (p - 1) f."""
    t = 100_000
    assert _uniform("zb-v", 2, 3, t, t, t) == 19 * t


@pytest.mark.parametrize("p,m", [(2, 4), (4, 7), (4, 8), (4, 12)])
def test_equal_passes_no_bubble_but_the_skew(p, m):
    t = 100_000
    busy = 2 * m * 3 * t
    assert _uniform("zb-v", p, m, t, t, t) == busy + (p - 1) * t
    # the same model under ZB-H1 and 1F1B (stage passes F = B = W = 2t): 2 (p-1) t and 6 (p-1) t
    assert _uniform("zb-h1", p, m, t, t, t) == busy + 2 * (p - 1) * t
    assert _uniform("1f1b", p, m, t, t, t) == busy + 6 * (p - 1) * t


# ----------------------------------------------------------------------------------------------- memory

@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_memory_model_peak_equals_1f1b_rank_0(attention):
    """Through the memory model: every middle rank (no embedding, no head) holds 2p chunk activations of
    L / 2p layers each = p stages' worth, which is what 1F1B's rank 0 holds in layers (its p in-flight
    micro-batches of L / p layers)."""
    p, m, L = 4, 8, 16
    model = gpt(layers=L, hidden=256, heads=8, vocab=256)

    def mem(schedule):
        sc = scenario(model, gbs=m, pp=p, schedule=schedule)
        sc = sc.model_copy(update={"training": sc.training.model_copy(update={"attention": attention})})
        plan = resolve_plan(sc, p)
        return memory_for_plan(sc, plan), activation_bytes_per_layer(model, plan, "bf16", attention=attention)

    zb, act = mem("zb-v")
    one, _ = mem("1f1b")
    for stage in (1, 2, p - 1):
        assert zb[(stage, m)]["activations"] == pytest.approx(2 * p * (L // (2 * p)) * act, rel=1e-12)
    assert zb[(1, m)]["activations"] == pytest.approx(p * (L // p) * act, rel=1e-12)
    assert one[(1, m)]["activations"] == pytest.approx((p - 1) * (L // p) * act, rel=1e-12)


# ----------------------------------------------------------------------------------------------- scenario

def test_shipped_scenario_runs_and_beats_1f1b_and_zb_h1():
    path = ROOT / "scenarios" / "schedules" / "zb-v.yaml"
    zb = api.run(api.load(path)).summary
    one = api.run(api.load(path, ["parallelism.schedule=1f1b"])).summary
    h1 = api.run(api.load(path, ["parallelism.schedule=zb-h1"])).summary
    assert zb["iteration_time_ns"] < h1["iteration_time_ns"] < one["iteration_time_ns"]


def test_planner_refuses_in_one_line(tmp_path):
    """``heterosim plan`` estimates one chunk per rank; it refuses zb-v / dualpipe scenarios instead of crashing."""
    from heterosim.errors import UserError
    from heterosim.planner.search import plan_report

    for name in ("zb-v", "dualpipe"):
        with pytest.raises(UserError, match=rf"parallelism.schedule = '{name}': the planner estimates"):
            plan_report(api.load(ROOT / "scenarios" / "schedules" / f"{name}.yaml"), simulate=0)


def test_same_work_as_1f1b():
    """The V moves work between ranks, it adds none: total FLOPs and TP bytes equal 1F1B's."""
    model = gpt(layers=8, tie_embeddings=False)
    irs = [compile_workload(scenario(model, gbs=8, pp=4, tp=2, sequence_parallel=True, schedule=s), 8)
           for s in ("1f1b", "zb-v")]
    assert irs[0].meta["hardware_flops"] == pytest.approx(irs[1].meta["hardware_flops"], rel=1e-12)
    tp = [sum(o.size_bytes for p in ir.programs for o in p.ops if o.comm_kind == "tp") for ir in irs]
    assert tp[0] == tp[1]
