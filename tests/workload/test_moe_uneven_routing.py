"""Uneven token routing (``parallelism.moe_load_imbalance`` / ``moe_rank_load``): the load pattern, per-EP-rank
programs whose expert GEMMs scale with the rank's tokens, the dispatch / combine's size by the largest receiver,
memory of the most loaded rank, one-line refusals, and a layer whose time a hand calculation gives: the most
loaded rank's expert time plus four all-to-alls bounded by the largest receiver."""
from __future__ import annotations

from pathlib import Path

import pytest
from wl_factory import gpt, scenario

from heterosim import api
from heterosim.comm import intra_time_ns, plan_collective
from heterosim.comm.alltoallv import largest_receiver_bytes, routing_matrix
from heterosim.config import ClusterConfig, DeviceGroup, ParallelConfig, Scenario, TrainingConfig
from heterosim.errors import PlanError
from heterosim.workload.compiler import compile_workload
from heterosim.workload.memory import memory_for_plan
from heterosim.workload.plan import resolve_plan

ROOT = Path(__file__).resolve().parents[2]
H, E, K, FE, SEQ = 256, 8, 2, 1024, 256


def moe(layers: int = 1):
    return gpt(layers=layers, hidden=H, num_experts=E, moe_top_k=K, moe_ffn_hidden_size=FE)


def test_hot_rank_pattern():
    """moe_load_imbalance x on ep ranks: EP coordinate 0 gets x, the other ep - 1 share ep - x evenly."""
    plan = resolve_plan(scenario(moe(), gbs=8, ep=4, moe_load_imbalance=2.5), 8)
    assert plan.expert_load == (2.5, 0.5, 0.5, 0.5)
    plan = resolve_plan(scenario(moe(), gbs=8, ep=4, moe_rank_load=[3, 1, 1, 1]), 8)
    assert plan.expert_load == (2.0, 2 / 3, 2 / 3, 2 / 3)  # normalised to mean 1: 3 x 4 / 6, 1 x 4 / 6
    assert resolve_plan(scenario(moe(), gbs=8, ep=4, moe_rank_load=[2, 2, 2, 2]), 8).expert_load is None


def _expert_gemm_flops(ir, rank: int) -> float:
    op = next(o for o in ir.ops_of(rank) if o.name == "moe_experts")
    return sum(k[1] for k in op.kernels if k[0] == "gemm")


def test_per_rank_programs_scale_expert_compute():
    """8 GPUs, tp 1, ep 8 (one expert per rank), b s = 256 tokens, top-2, load 2.0: the hot rank's expert gets
    256 x 2 x 2.0 = 1024 token copies, the others round(512 x 6/7) = 439. Forward GEMM FLOPs: 2 GEMMs of
    2 x tokens x 1024 x 256. Ranks with the same EP coordinate share a program (EP coordinate = rank mod 8 here:
    tp 1, so the expert layout's ep digit is the fastest): 8 programs, the 7 cold ones alike but for their
    all-to-allv rows (each rank's own share sits at its own place, tests/workload/test_moe_alltoallv_run.py)."""
    ir = compile_workload(scenario(moe(), gbs=8, ep=8, moe_load_imbalance=2.0), 8)
    assert len(ir.programs) == 8 and sorted(ir.rank_program) == list(range(8))
    assert _expert_gemm_flops(ir, 0) == 2 * (2.0 * 1024 * FE * H)
    assert _expert_gemm_flops(ir, 1) == 2 * (2.0 * 439 * FE * H)
    assert ir.meta["moe_expert_load"] == [2.0] + [6 / 7] * 7
    even = compile_workload(scenario(moe(), gbs=8, ep=8), 8)
    assert _expert_gemm_flops(even, 0) == 2 * (2.0 * 512 * FE * H)
    # the unpermute after the combine restores this rank's own 256 x 2 token copies, whatever its experts' load
    for r in (0, 1):
        op = next(o for o in ir.ops_of(r) if o.name == "moe_experts")
        assert [k[1] for k in op.kernels if k[0] == "elementwise" and k[3] is None] == [256 * K * H]


def test_dispatch_sized_by_largest_receiver():
    """Each rank sends 256 x 2 x 256 x 2 B = 262,144 B; with loads [2, 6/7 x 7] rank 0 receives 2 x that:
    each all-to-allv op's size_bytes is 524,288 B (the comm planner's largest receiver of the all-to-allv; its
    per-pair rows: tests/workload/test_moe_alltoallv_run.py)."""
    ir = compile_workload(scenario(moe(), gbs=8, ep=8, moe_load_imbalance=2.0), 8)
    sizes = {o.size_bytes for r in (0, 1) for o in ir.ops_of(r) if o.group == "ep"}
    assert sizes == {524288}
    # the same as the comm planner's largest receiver where the per-pair sizes are whole bytes (load 2.5 on 4)
    ir = compile_workload(scenario(moe(), gbs=8, ep=4, moe_load_imbalance=2.5), 8)
    sizes = {o.size_bytes for o in ir.ops_of(0) if o.group == "ep"}
    assert sizes == {655360} == {largest_receiver_bytes(routing_matrix(262144, [2.5, 0.5, 0.5, 0.5]))}


def test_memory_is_the_most_loaded_ranks():
    """The experts' saved activations (permuted input k h, fc1 output k fe, fc2 input k fe per token with GELU,
    16-bit: 2 B each) grow by (x - 1) on the most loaded rank: +1.0 x 256 tokens x (2 x 256 + 1024 + 1024) x 2 B
    per layer and micro-batch, at load 2.0."""
    mem = []
    for x in (1.0, 2.0):
        sc = scenario(moe(), gbs=8, ep=8, moe_load_imbalance=x)
        mem.append(memory_for_plan(sc, resolve_plan(sc, 8))[(0, 1)]["activations"])
    assert mem[1] - mem[0] == pytest.approx(1.0 * SEQ * (K * H + K * FE + K * FE) * 2)


def _timed(load: float) -> tuple[int, dict]:
    """One MoE layer on 8 GPUs of a DGX H100 (tp 1, ep 8, one micro-batch per replica): every compute op 0 ns
    except the experts, which take their GEMM FLOPs at 1,000 FLOP/ns; every message 0 bytes except the EP
    all-to-alls (analytic NVLink model)."""
    sc = Scenario(model=moe(), training=TrainingConfig(global_batch_size=8, micro_batch_size=1, seq_length=SEQ),
                  parallelism=ParallelConfig(ep=8, moe_load_imbalance=load),
                  cluster=ClusterConfig(groups=[DeviceGroup(name="g", node_type="dgx-h100", num_nodes=1)]))
    prep = api.prepare(sc)
    for prog in prep.ir.programs:
        for op in prog.ops:
            if op.kind == "comm":
                if op.group != "ep":
                    op.size_bytes = 0
            else:
                gemm = sum(k[1] for k in op.kernels if k[0] == "gemm") if op.name.startswith("moe_experts") else 0
                op.duration_ns = int(round(gemm / 1000))
    return api.simulate(prep, record_messages=False).summary["iteration_time_ns"], prep


@pytest.mark.parametrize("load", [1.0, 2.0, 3.5])
def test_layer_time_by_hand(load):
    """Dispatch (all ranks post at 0) ends at A; the experts end at A + X on the most loaded rank, the combine
    waits for it and ends at 2A + X; backward: the combine's transpose 3A + X, the experts' backward (2 GEMMs per
    forward GEMM: 2X) 3A + 3X, the dispatch's transpose 4A + 3X. X = 2 x 2 x (256 x 2 x load) x 1024 x 256 FLOPs
    at 1,000 FLOP/ns; A = the all-to-allv's time, on one node (analytic NVLink model) that of the all-to-all of
    the largest receiver's bytes, 262,144 x load B, on 8 NVLink GPUs (the busiest ingress binds both:
    tests/comm/test_alltoallv.py)."""
    t, prep = _timed(load)
    tokens = int(round(SEQ * K * load))
    X = round(2 * 2 * tokens * FE * H / 1000)
    A = intra_time_ns(plan_collective("alltoall", list(range(8)), int(round(262144 * load)), prep.system),
                      prep.system)
    assert t == 4 * A + X + 2 * X


@pytest.mark.parametrize("kw, msg", [
    (dict(ep=1, moe_load_imbalance=1.5), "parallelism.moe_load_imbalance = 1.5: uneven routing needs expert "
                                         "parallelism (ep > 1)"),
    (dict(ep=4, moe_load_imbalance=4.5), "parallelism.moe_load_imbalance = 4.5: max/mean tokens per EP rank cannot "
                                         "exceed ep (4)"),
    (dict(ep=4, moe_rank_load=[1, 2]), "parallelism.moe_rank_load = [1.0, 2.0]: needs one entry per expert-parallel "
                                       "rank (ep = 4), got 2"),
    (dict(ep=2, moe_rank_load=[0, 0]), "parallelism.moe_rank_load = [0.0, 0.0]: at least one entry must be > 0"),
])
def test_plan_errors_one_line(kw, msg):
    with pytest.raises(PlanError) as ei:
        compile_workload(scenario(moe(), gbs=8, **kw), 8)
    assert "\n" not in str(ei.value) and str(ei.value).startswith(msg), str(ei.value)


def test_cli_refusal_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys

    import yaml

    src = yaml.safe_load((ROOT / "scenarios" / "moe" / "uneven-routing.yaml").read_text())
    src["parallelism"]["moe_load_imbalance"] = 9.0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(src))
    r = subprocess.run([str(Path(sys.executable).parent / "heterosim"), "validate", str(path)], capture_output=True,
                       text=True, cwd=ROOT)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 2 and "Traceback" not in out and len(out.splitlines()) == 1, out
    assert str(path) in out and "parallelism.moe_load_imbalance = 9.0" in out


def test_shipped_scenario_waits_for_the_hot_rank():
    """scenarios/moe/uneven-routing.yaml: slower than the same plan with even routing."""
    path = ROOT / "scenarios" / "moe" / "uneven-routing.yaml"
    hot = api.run(api.load(path)).summary["iteration_time_ns"]
    even = api.run(api.load(path, ["parallelism.moe_load_imbalance=1.0"])).summary["iteration_time_ns"]
    assert hot > even


def test_uneven_routing_with_expert_tp_a_multiple_of_tp():
    """tp 2, expert_tp 4, ep 2 on 8 GPUs: expert rank = etp + 4 ep, so ranks 0-3 are EP rank 0 (load 1.5) and
    4-7 EP rank 1 (0.5); each TP group holds one. SP: 128 tokens per rank, 128 x 2 x 256 x 2 B = 131,072 B sent
    per rank, all-to-all sized by the largest receiver: 131,072 x 1.5 = 196,608 B; the hot expert-TP group
    all-gathers 4 x 131,072 x 1.5 = 786,432 B and its 4 local experts get 4 x 128 x 2 x 1.5 / 4 = 384 token
    copies each (fc1 1024 / 4 = 256 wide); the cold group all-gathers 4 x 131,072 x 0.5 = 262,144 B."""
    ir = compile_workload(scenario(moe(), gbs=8, tp=2, sequence_parallel=True, ep=2, expert_tp=4,
                                   moe_load_imbalance=1.5), 8)
    assert [ir.rank_program[r] for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    sizes = {o.name: o.size_bytes for o in ir.ops_of(0) if o.group in ("ep", "etp")}
    assert sizes == {"ep_dispatch": 196608, "ep_combine": 196608, "ep_combine_bwd": 196608,
                     "ep_dispatch_bwd": 196608, "etp_allgather": 786432, "etp_reducescatter": 786432}
    fc1 = next(k for k in next(o for o in ir.ops_of(0) if o.name == "moe_experts").kernels if k[0] == "gemm")
    assert fc1[3] == (384, 256, H, "fwd")
    cold = {o.name: o.size_bytes for o in ir.ops_of(4) if o.group == "etp"}
    assert cold == {"etp_allgather": 262144, "etp_reducescatter": 262144}
