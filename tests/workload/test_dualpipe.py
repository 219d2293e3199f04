"""DualPipe (DeepSeek-V3 technical report, arXiv 2412.19437, Sec. 3.2.1, Table 2): order, placement, iteration time
and memory against the report, worked out by hand here.

Table 2 (F forward chunk, B full backward chunk, W weight-gradient chunk, F&B two mutually overlapped forward and
backward chunks; one chunk = one pipeline stage's layers):

    1F1B      bubble (PP - 1)(F + B)          parameters 1x   activations PP
    ZB1P      bubble (PP - 1)(F + B - 2W)     parameters 1x   activations PP
    DualPipe  bubble (PP/2 - 1)(F&B + B - 3W) parameters 2x   activations PP + 1

HeteroSim runs the F&B chunk as F then the full backward on one compute stream (no communication time here, so
F&B = F + B + W with B the input-gradient pass alone). DeepSeek's order then gives, working through its steps with
every pass starting once its rank is free and its input has arrived, an iteration of m (F + B + W) +
(PP/2 - 1)(2F + B - W), which is Table 2's (PP/2 - 1)(F + 2(B + W) - 3W) exactly when F = B (the report's formula
leaves F - B out); both are asserted.
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
from heterosim.workload.dualpipe import as_plain, dualpipe
from heterosim.workload.memory import activation_bytes_per_layer, memory_for_plan
from heterosim.workload.plan import resolve_plan
from heterosim.workload.verify import verify_ir
from heterosim.workload.zero_bubble import peak_retained

from wl_factory import gpt, scenario

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from schedule_bubbles import iteration_with_pass_times  # noqa: E402


def _steps(spec: str):
    """'f0 F4 b4 ...' -> steps; letter = phase (f fwd, p fb, B bwd_full, b bwd, w w), number = micro-batch, chunk =
    its direction (ids 0..m/2-1 forward direction, chunk 0; the rest reverse, chunk 1), with m/2 = 4 here."""
    phase = {"f": "fwd", "p": "fb", "B": "bwd_full", "b": "bwd", "w": "w"}
    return [(phase[x[0]], int(x[1:]), int(int(x[1:]) >= 4)) for x in spec.split()]


# ----------------------------------------------------------------------------------------------- order

def test_order_pp4_m8_by_hand():
    # rank 0 (half_rank 0, not a middle rank; phase 0 = forward direction): step 1: 2 F0; step 2: F0 F1; step 3:
    # B1 (W deferred) W F1; step 4 (one round): F0&B1, F1&B0; step 5: B1, F1&B0; step 6: full B1, then B0 with
    # its W deferred; step 7: W, B0 deferred; step 8: W.
    assert dualpipe(4, 8, 0) == _steps("f0 f1 f2 f4 b4 w4 f5 p3 B5 w5 p6 B0 w0 B6 w6 p7 B1 w1 B7 w7 b2 w2 b3 w3")
    # rank 1 (half_rank 1, a middle rank): step 2 twice; step 4 twice, its first pair not overlapped (F0 then the
    # full B1); step 6 twice, the second time with the W deferred (half_rank odd: switched before B1); step 8.
    assert dualpipe(4, 8, 1) == _steps("f0 f4 f1 f5 f2 B4 w4 p6 B0 w0 p3 B5 w5 p7 B1 w1 B6 w6 B2 w2 b7 b3 w7 w3")


@pytest.mark.parametrize("p,m", [(4, 8), (4, 12), (8, 16), (6, 14), (2, 4)])
def test_every_pass_once_in_order_and_mirrored(p, m):
    half = m // 2
    for rank in range(p):
        steps = dualpipe(p, m, rank)
        plain = as_plain(steps)
        assert sorted(plain) == sorted((ph, k, int(k >= half)) for ph in ("fwd", "bwd", "w") for k in range(m))
        pos = {s: i for i, s in enumerate(plain)}
        for k in range(m):
            c = int(k >= half)
            assert pos[("fwd", k, c)] < pos[("bwd", k, c)] < pos[("w", k, c)]
        for i, s in enumerate(steps):  # an F&B chunk is a forward then a full backward
            if s[0] == "fb":
                assert steps[i + 1][0] == "bwd_full" and steps[i + 2] == ("w",) + steps[i + 1][1:]
        # rank pp-1-i runs rank i's order with the directions swapped
        mirror = [(ph, (k + half) % m, 1 - c) for ph, k, c in dualpipe(p, m, p - 1 - rank)]
        assert steps == mirror


@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (8, 16), (6, 12)])
def test_activation_peak_is_pp_plus_1_on_every_rank(p, m):
    """Table 2: PP + 1 chunks of activations (1F1B's rank 0: PP), whatever W keeps (M_W <= M_B)."""
    for rank in range(p):
        for x in (0.0, 32 / 34, 1.0):
            assert peak_retained(as_plain(dualpipe(p, m, rank)), [1.0, 1.0], [x, x]) == p + 1


# ----------------------------------------------------------------------------------------------- time

def _uniform(schedule: str, p: int, m: int, F: int, B: int, W: int) -> int:
    """Iteration (ns) of p one-layer stages whose layer ops take F, B, W per micro-batch (1F1B: B + W as one
    backward), every other op 0 ns and every message 0 bytes."""
    sc = Scenario(model=gpt(layers=p, hidden=64, heads=4, vocab=128, seq=128, tie_embeddings=False),
                  training=TrainingConfig(global_batch_size=m, micro_batch_size=1, seq_length=128),
                  parallelism=ParallelConfig(pp=p, schedule=schedule),
                  cluster=ClusterConfig(groups=[DeviceGroup(name="g", node_type="dgx-h100", num_nodes=1,
                                                            overrides={"gpus_per_node": p})]))
    dur = {"attn": F // 2, "mlp": F - F // 2, "attn_bwd": B // 2, "mlp_bwd": B - B // 2, "layer_wgrad": W}
    if schedule == "1f1b":
        dur.update(attn_bwd=(B + W) // 2, mlp_bwd=B + W - (B + W) // 2)
    return iteration_with_pass_times(api.prepare(sc), lambda stage: dur)


@pytest.mark.parametrize("p,m,F,B,W", [(4, 8, 100_000, 100_000, 100_000), (4, 16, 100_000, 100_000, 50_000),
                                       (8, 16, 100_000, 100_000, 100_000), (6, 12, 200_000, 200_000, 50_000),
                                       (2, 4, 100_000, 100_000, 40_000)])
def test_bubble_is_table_2_when_f_equals_b(p, m, F, B, W):
    full = B + W  # Table 2's B: the full backward
    fb = F + full  # F&B: the pair, run one after the other
    assert _uniform("dualpipe", p, m, F, B, W) == m * (F + B + W) + (p // 2 - 1) * (fb + full - 3 * W)


@pytest.mark.parametrize("p,m,F,B,W", [(4, 8, 200_000, 100_000, 100_000), (8, 16, 150_000, 100_000, 50_000)])
def test_bubble_when_f_differs_from_b(p, m, F, B, W):
    t = _uniform("dualpipe", p, m, F, B, W)
    assert t == m * (F + B + W) + (p // 2 - 1) * (2 * F + B - W)
    assert t != m * (F + B + W) + (p // 2 - 1) * (F + 2 * (B + W) - 3 * W)  # Table 2 misses (PP/2-1)(F - B)


def test_against_zb_h1_at_pp8():
    t = 100_000
    busy = 16 * 3 * t
    assert _uniform("dualpipe", 8, 16, t, t, t) - busy == 3 * 2 * t  # (PP/2 - 1)(2F + B - W)
    assert _uniform("zb-h1", 8, 16, t, t, t) - busy == 7 * t          # (PP - 1)(F + B - W)


# ----------------------------------------------------------------------------------------------- IR

def test_two_copies_directions_and_copy_gradient_sum():
    p, m = 4, 8
    model = gpt(layers=8, tie_embeddings=False)
    ir = compile_workload(scenario(model, gbs=m, pp=p, schedule="dualpipe"), p)
    assert ir.groups["dual"] == [(0, 3), (1, 2)]
    for stage in range(p):
        ops = ir.program_of(stage).ops
        layers = {(o.chunk, o.layer) for o in ops if o.layer >= 0}
        assert {lay for c, lay in layers if c == 0} == {2 * stage, 2 * stage + 1}  # forward direction: stage i
        assert {lay for c, lay in layers if c == 1} == {2 * (p - 1 - stage), 2 * (p - 1 - stage) + 1}
        sends = {(o.chunk, o.phase, o.peer_offset) for o in ops if o.collective == "send"}
        expect = set()
        if stage < p - 1:
            expect |= {(0, "fwd", +1), (1, "bwd", +1)}
        if stage > 0:
            expect |= {(0, "bwd", -1), (1, "fwd", -1)}
        assert sends == expect
        # both end ranks embed (their direction's input) and compute a loss (the other direction's output)
        n_embed = sum(o.name == "embedding" for o in ops)
        n_loss = sum(o.name == "lm_head_loss" for o in ops)
        assert (n_embed, n_loss) == ((m // 2, m // 2) if stage in (0, p - 1) else (0, 0))
        dual = [o for o in ops if o.name == "dualpipe_copy_allreduce"]
        assert [o.tag for o in dual] == [f"dual:vs{v}" for v in sorted({stage, p - 1 - stage})]
        for o in dual:  # waits for the chunk's last W; the DP buckets (if any) wait for it
            assert {ops[d].name for d in o.deps} <= {"layer_wgrad", "lm_head_wgrad", "embedding_bwd"}
    assert verify_ir(ir) == sum(len(ir.ops_of(r)) for r in range(p))


def test_f_and_b_halves_interleave_on_the_compute_stream():
    """The F&B chunk (report Fig. 4): its two halves' blocks alternate on the compute stream (F attention, B MLP
    backward, F MLP, B attention backward, ...) so one half's TP collectives run beside the other's compute; W
    follows the pair and both sends go after it."""
    p, m = 4, 8
    ir = compile_workload(scenario(gpt(layers=8, tie_embeddings=False), gbs=m, pp=p, tp=2, sequence_parallel=True,
                                   schedule="dualpipe"), 2 * p)
    assert verify_ir(ir) == sum(len(ir.ops_of(r)) for r in range(2 * p))
    for stage in range(p):
        ops = next(pr for pr in ir.programs if pr.stage == stage).ops  # TP 2: rank 2 s is stage s
        steps = dualpipe(p, m, stage)
        pairs = [(steps[i][1:], steps[i + 1][1:]) for i, s in enumerate(steps) if s[0] == "fb"]
        assert pairs
        for (fmb, fc), (bmb, bc) in pairs:
            half = [("F" if o.phase == "fwd" else "B") for o in ops if o.kind == "compute" and not
                    o.name.endswith("wgrad") and ((o.phase, o.microbatch, o.chunk) in
                                                  (("fwd", fmb, fc), ("bwd", bmb, bc)))]
            k = min(half.count("F"), half.count("B"))
            assert half[:2 * k] == ["F", "B"] * k
            in_pair = lambda o: (o.phase, o.microbatch, o.chunk) == ("fwd", fmb, fc) or (  # noqa: E731
                o.phase, o.microbatch, o.chunk) == ("bwd", bmb, bc)
            ids = [o.id for o in ops if o.kind == "compute" and in_pair(o)]
            sends = [o for o in ops if o.collective == "send" and in_pair(o)]
            last_w = max(o.id for o in ops if o.name.endswith("wgrad") and (o.microbatch, o.chunk) == (bmb, bc))
            assert all(last_w in o.deps for o in sends) and max(ids) == last_w


REPLAY = {
    "tp_sp_zero1_dp": (dict(tp=2, pp=2, sequence_parallel=True, zero_stage=1), 8, {}),
    "tp_comm_overlap": (dict(tp=2, pp=2, sequence_parallel=True, tp_comm_overlap=True), 4, {}),
    "cp_full_recompute": (dict(tp=2, cp=2, pp=2, recompute="full"), 8, {}),
    "pp4_selective_no_overlap": (dict(pp=4, recompute="selective", overlap_grad_reduce=False), 4, {}),
    "uneven_split": (dict(pp=2), 4, dict(split=[4, 6])),
    "moe_ep": (dict(pp=2, ep=2), 4, {"model": gpt(layers=8, num_experts=4, moe_top_k=2, tie_embeddings=False)}),
}


@pytest.mark.parametrize("name", list(REPLAY))
def test_ir_replays_without_deadlock(name):
    par, world, kw = REPLAY[name]
    kw.setdefault("model", gpt(layers=8, tie_embeddings=False))
    ir = compile_workload(scenario(gbs=16 if "split" not in kw else 10, schedule="dualpipe", **par, **kw), world)
    assert verify_ir(ir) == sum(len(ir.ops_of(r)) for r in range(world))


# ----------------------------------------------------------------------------------------------- memory

def test_parameters_twice_activations_pp_plus_1():
    p, m, L = 4, 8, 16
    model = gpt(layers=L, hidden=256, heads=8, vocab=256, tie_embeddings=False)

    def mem(schedule):
        sc = scenario(model, gbs=m, pp=p, schedule=schedule)
        plan = resolve_plan(sc, p)
        return memory_for_plan(sc, plan), activation_bytes_per_layer(model, plan, "bf16")

    dp, act = mem("dualpipe")
    one, _ = mem("1f1b")
    for stage in (1, 2):  # no embedding, no head: two stages' layers, (PP + 1) stages of activations
        for k in ("params", "grads", "optimizer"):
            assert dp[(stage, m)][k] == pytest.approx(2 * one[(stage, m)][k], rel=1e-12)
        assert dp[(stage, m)]["activations"] == pytest.approx((p + 1) * (L // p) * act, rel=1e-12)


# ----------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("par,gbs,world,field,value", [
    (dict(pp=3), 12, 3, "parallelism.pp", "3"),
    (dict(pp=4), 6, 4, "training.global_batch_size", "6"),
    (dict(pp=4), 9, 4, "training.global_batch_size", "9"),
    (dict(pp=2, zero_stage=2), 8, 2, "parallelism.zero_stage", "2"),
    (dict(pp=2, virtual_stages=3), 8, 2, "parallelism.virtual_stages", "3"),
    (dict(stage_tp=[2, 1], dp=1), 8, 3, "parallelism.stage_tp", "[2, 1]"),
    (dict(stage_dp=[2, 1]), 8, 3, "parallelism.stage_dp", "[2, 1]"),
])
def test_not_combinable_is_refused_naming_field_and_value(par, gbs, world, field, value):
    with pytest.raises(PlanError) as err:
        resolve_plan(scenario(gpt(layers=12, tie_embeddings=False), gbs=gbs, schedule="dualpipe", **par), world)
    assert str(err.value).startswith(f"{field} = {value}:") and "\n" not in str(err.value)


def test_tied_embeddings_refused():
    with pytest.raises(PlanError, match=r"^model.tie_embeddings = True: DualPipe is modelled without tied"):
        resolve_plan(scenario(gpt(layers=8, tie_embeddings=True), gbs=8, pp=2, schedule="dualpipe"), 2)


# ----------------------------------------------------------------------------------------------- scenario

def test_shipped_scenario_runs_and_beats_zb_h1_and_1f1b():
    path = ROOT / "scenarios" / "schedules" / "dualpipe.yaml"
    dp = api.run(api.load(path)).summary
    h1 = api.run(api.load(path, ["parallelism.schedule=zb-h1"])).summary
    one = api.run(api.load(path, ["parallelism.schedule=1f1b"])).summary
    assert dp["iteration_time_ns"] < h1["iteration_time_ns"] < one["iteration_time_ns"]


def test_cli_refusal_is_one_line_exit_2(tmp_path):
    # 6 micro-batches < 2 pp = 8
    validate_refuses(ROOT / "scenarios" / "schedules" / "dualpipe.yaml",
                     lambda src: src["training"].update(global_batch_size=6), tmp_path,
                     "training.global_batch_size = 6", ">= 2 pp = 8")


def test_same_layer_work_as_1f1b_and_twice_the_optimizer():
    """Each micro-batch passes every stage once (half of them the other way): the passes' FLOPs equal 1F1B's; the
    optimizer steps both copies of every stage (parameters 2x)."""
    model = gpt(layers=8, tie_embeddings=False)
    irs = [compile_workload(scenario(model, gbs=8, pp=4, schedule=s), 4) for s in ("1f1b", "dualpipe")]

    def flops(ir, opt):
        return sum(o.flops for r in range(ir.world_size) for o in ir.ops_of(r)
                   if o.kind == "compute" and (o.name == "optimizer_step") == opt)
    assert flops(irs[1], False) == pytest.approx(flops(irs[0], False), rel=1e-12)
    assert flops(irs[1], True) == pytest.approx(2 * flops(irs[0], True), rel=1e-12)


def _replay(p: int, m: int, F: int, B: int, W: int) -> int:
    """An independent timeline of DeepSeek's order (reference for the closed form): each rank runs its steps in
    order, a pass starts when its rank is free and its input is there (forward: the previous stage's forward of
    that micro-batch; backward: the next stage's backward, or the forward at the loss stage; W: its own B); an F&B
    pair starts when both halves' inputs are there and publishes both outputs when its W ends, a full backward its
    input gradient when its W ends."""
    half = m // 2
    orders = {r: dualpipe(p, m, r) for r in range(p)}
    stage = lambda r, c: r if c == 0 else p - 1 - r  # noqa: E731
    out: dict = {}  # ("F" | "B", mb, stage) -> time the output is available to the neighbour
    pos, free = [0] * p, [0] * p
    pending: list = [[] for _ in range(p)]  # outputs published at the next W

    def need(kind, k, s):
        last = p - 1
        if kind == "F":
            return [] if s == 0 else [("F", k, s - 1)]
        return [("F", k, s)] if s == last else [("B", k, s + 1)]

    progress = True
    while progress:
        progress = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                ph, k, c = orders[r][pos[r]]
                s = stage(r, c)
                deps = []
                if ph in ("fwd", "fb"):
                    deps = need("F", k, s)
                    if ph == "fb":
                        _, k2, c2 = orders[r][pos[r] + 1]
                        deps += need("B", k2, stage(r, c2))
                elif ph in ("bwd", "bwd_full"):
                    deps = [d for d in need("B", k, s) if d[0] == "B"]
                if any(d not in out for d in deps) or (ph in ("bwd", "bwd_full") and s == p - 1 and
                                                       ("Floc", k, s) not in out):
                    break
                start = max([free[r]] + [out[d] for d in deps] + ([out[("Floc", k, s)]] if ph in (
                    "bwd", "bwd_full") and s == p - 1 else []))
                free[r] = start + {"fwd": F, "fb": F, "bwd": B, "bwd_full": B, "w": W}[ph]
                if ph in ("fwd", "fb"):
                    out[("Floc", k, s)] = free[r]
                    if ph == "fwd":
                        out[("F", k, s)] = free[r]
                    else:
                        pending[r].append(("F", k, s))
                elif ph == "bwd":
                    out[("B", k, s)] = free[r]
                elif ph == "bwd_full":
                    pending[r].append(("B", k, s))
                else:
                    for key in pending[r]:
                        out[key] = free[r]
                    pending[r].clear()
                pos[r] += 1
                progress = True
    assert pos == [len(orders[r]) for r in range(p)] and half
    return max(free)


@pytest.mark.parametrize("p,m,F,B,W", [(4, 8, 100_000, 100_000, 100_000), (4, 8, 200_000, 100_000, 100_000),
                                       (8, 16, 150_000, 100_000, 50_000), (6, 12, 100_000, 120_000, 70_000)])
def test_closed_form_against_an_independent_replay(p, m, F, B, W):
    ref = _replay(p, m, F, B, W)
    assert ref == m * (F + B + W) + (p // 2 - 1) * (2 * F + B - W)
    assert _uniform("dualpipe", p, m, F, B, W) == ref
