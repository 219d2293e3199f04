"""Expert tensor parallelism (``parallelism.expert_tp``, Megatron-Core ``--expert-tensor-parallel-size``) with
Megatron-Core's MoE parallel folding: group membership written out by hand from Megatron's rules, bytes on
the wire per rank from the formulas, expert GEMM shapes, expert states in memory, one-line refusals.

Megatron-Core's folding (megatron/core/parallel_state.py, initialize_model_parallel): the expert groups come
from a second RankGenerator(tp=expert_tp, ep=ep, dp=world/(expert_tp*ep*pp), pp=pp, cp=1) over the same order
string; with order tp-cp-ep-dp-pp a rank's expert coordinates are its digits in the mixed radix
(expert_tp, ep, edp, pp), fastest first. The groups below are those digits varied by hand."""
from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import validate_refuses
from wl_factory import gpt, scenario

from heterosim.errors import PlanError
from heterosim.workload.compiler import compile_workload
from heterosim.workload.costs import layer_params
from heterosim.workload.groups import build_groups
from heterosim.workload.memory import memory_for_plan
from heterosim.workload.plan import resolve_plan

ROOT = Path(__file__).resolve().parents[2]
H, E, K, FE, SEQ = 256, 8, 2, 1024, 256
"""The test model: hidden 256, 8 experts, top-2, expert FFN 1024 (GELU, biases), sequence 256, batch 1."""


def moe(layers: int = 2):
    return gpt(layers=layers, hidden=H, num_experts=E, moe_top_k=K, moe_ffn_hidden_size=FE)


# ------------------------------------------------------------------------------------------ group membership

def test_folded_groups_tp4_etp2_ep2():
    """world 8, tp 4, dp 2, expert_tp 2, ep 2: edp = 8 / (2*2) = 2; rank = etp + 2 (ep + 2 edp)."""
    g = build_groups(8, tp=4, pp=1, dp=2, ep=2, etp=2)
    assert g["etp"] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert g["ep"] == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert g["edp"] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert g["tp"] == [(0, 1, 2, 3), (4, 5, 6, 7)]  # the dense groups do not move


def test_folded_groups_tp2_etp1_ep4_pp2():
    """world 16, tp 2, pp 2, dp 4, expert_tp 1, ep 4: per stage 8 ranks, edp = 16 / (1*4*2) = 2;
    rank = ep + 4 (edp + 2 pp). The pipeline groups are the dense ones (Megatron asserts they agree)."""
    g = build_groups(16, tp=2, pp=2, dp=4, ep=4, etp=1)
    assert g["ep"] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert g["edp"] == [(0, 4), (1, 5), (2, 6), (3, 7), (8, 12), (9, 13), (10, 14), (11, 15)]
    assert g["etp"] == [(r,) for r in range(16)]
    assert g["pp"] == [(r, r + 8) for r in range(8)]


def test_folded_groups_take_in_context_parallelism():
    """world 8, tp 2, cp 2, dp 2, expert_tp 1, ep 4: the expert generator has cp = 1, so EP spans TP and CP ranks
    (ep must divide tp*cp*dp = 8, not dp = 2): rank = ep + 4 edp."""
    g = build_groups(8, tp=2, pp=1, dp=2, cp=2, ep=4, etp=1)
    assert g["ep"] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert g["edp"] == [(0, 4), (1, 5), (2, 6), (3, 7)]


def test_expert_tp_above_tp():
    """world 8, tp 1, dp 8, expert_tp 2, ep 2: edp 2; rank = etp + 2 (ep + 2 edp)."""
    g = build_groups(8, tp=1, pp=1, dp=8, ep=2, etp=2)
    assert g["etp"] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert g["ep"] == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert g["edp"] == [(0, 4), (1, 5), (2, 6), (3, 7)]


def test_expert_tp_equal_to_tp_is_the_default():
    """expert_tp = tp is today's plan: the same IR as leaving it unset (and no ``etp`` group)."""
    a = compile_workload(scenario(moe(), gbs=8, tp=2, sequence_parallel=True, ep=4), 8)
    b = compile_workload(scenario(moe(), gbs=8, tp=2, sequence_parallel=True, ep=4, expert_tp=2), 8)
    assert "etp" not in b.groups and a.groups == b.groups and a.rank_program == b.rank_program
    assert [[(o.name, o.size_bytes, o.kernels) for o in p.ops] for p in a.programs] == \
        [[(o.name, o.size_bytes, o.kernels) for o in p.ops] for p in b.programs]


# ---------------------------------------------------------------------------------------- bytes on the wire

def _moe_comm(ir, rank: int = 0) -> list[tuple[str, str, int]]:
    """(name, group, bytes) of the collectives of the first layer's forward MoE block."""
    ops = ir.ops_of(rank)
    i = next(k for k, o in enumerate(ops) if o.name == "moe_router")
    c = next(k for k in range(i, len(ops)) if ops[k].name == "ep_combine")
    i -= ops[i - 1].name == "tp_allgather"  # the TP all-gather opening the block (expert_tp = tp)
    c += ops[c + 1].name == "tp_reducescatter"  # the TP reduce-scatter closing it
    return [(o.name, o.group, o.size_bytes) for o in ops[i:c + 1] if o.kind == "comm"]


def _wire(coll: str, n: int, size: int) -> float:
    """Bytes one rank sends in a ring / direct collective of nccl-tests size ``size`` over n ranks."""
    return {"alltoall": size * (n - 1) / n, "allgather": size * (n - 1) / n,
            "reducescatter": size * (n - 1) / n}[coll]


def test_bytes_folded_etp1_vs_tp_split():
    """tp 2 with SP, 8 GPUs, 2 bytes per element. T_ew = b s / tp = 128 tokens per TP rank.

    expert_tp 1, ep 8 (folded out of tp x dp): each rank dispatches its own 128 tokens: all-to-all of
    128 x 2 (top-k) x 256 x 2 B = 131,072 B per rank, over 8 ranks; no collective over TP or expert TP in the
    MoE block. Wire bytes per rank for dispatch + combine: 2 x 131072 x 7/8 = 229,376.

    expert_tp = tp = 2, ep 4 (dp 4): TP all-gather of the full hidden state (256 x 256 x 2 = 131,072 B
    output), the same 131,072 B all-to-all over 4 ranks, the experts split by TP, TP reduce-scatter:
    2 x 131072 x 3/4 + 2 x 131072 x 1/2 = 327,680 B per rank."""
    a2a = (SEQ // 2) * K * H * 2
    assert a2a == 131072
    folded = compile_workload(scenario(moe(), gbs=8, tp=2, sequence_parallel=True, ep=8, expert_tp=1), 8)
    assert _moe_comm(folded) == [("ep_dispatch", "ep", a2a), ("ep_combine", "ep", a2a)]
    assert sum(_wire("alltoall", 8, s) for _, _, s in _moe_comm(folded)) == 229376
    split = compile_workload(scenario(moe(), gbs=8, tp=2, sequence_parallel=True, ep=4), 8)
    hid = SEQ * H * 2
    assert _moe_comm(split) == [("tp_allgather", "tp", hid), ("ep_dispatch", "ep", a2a), ("ep_combine", "ep", a2a),
                                ("tp_reducescatter", "tp", hid)]
    wire = 2 * _wire("alltoall", 4, a2a) + _wire("allgather", 2, hid) + _wire("reducescatter", 2, hid)
    assert wire == 327680


def test_bytes_folded_etp2_gathers_the_received_tokens():
    """tp 4 with SP, expert_tp 2, ep 2, 8 GPUs: T_ew = 256 / 4 = 64 tokens; the all-to-all carries
    64 x 2 x 256 x 2 = 65,536 B per rank; the tokens received are all-gathered over the expert-TP group:
    output 2 x 65,536 = 131,072 B, and the experts' output reduce-scattered (input 131,072 B)."""
    ir = compile_workload(scenario(moe(), gbs=8, tp=4, sequence_parallel=True, ep=2, expert_tp=2), 8)
    assert _moe_comm(ir) == [("ep_dispatch", "ep", 65536), ("etp_allgather", "etp", 131072),
                             ("etp_reducescatter", "etp", 131072), ("ep_combine", "ep", 65536)]
    kinds = {o.comm_kind for o in ir.ops_of(0) if o.group == "etp"}
    assert kinds == {"tp"}  # reported with tensor parallelism
    bwd = [o for o in ir.ops_of(0) if o.group in ("ep", "etp") and o.phase == "bwd"]
    assert [o.name for o in bwd[:4]] == ["ep_combine_bwd", "etp_allgather", "etp_reducescatter", "ep_dispatch_bwd"]


# ----------------------------------------------------------------------------------------- expert GEMM shapes

def _expert_gemms(ir) -> list[tuple]:
    op = next(o for o in ir.ops_of(0) if o.name == "moe_experts")
    return [(k[1], k[3]) for k in op.kernels if k[0] == "gemm"]


@pytest.mark.parametrize("tp, etp, ep, per_expert, f", [
    # folded: tokens after the expert-TP all-gather = (256/tp) x 2 x etp, shared by 8/ep local experts
    (4, 2, 2, 256 // 4 * 2 * 2 // (8 // 2), 1024 // 2),  # 64 tokens per expert, fc1 1024/2 = 512
    (2, 1, 8, 256 // 2 * 2 * 1 // (8 // 8), 1024),  # one local expert, 256 tokens, unsplit
    # today's (expert_tp = tp): all b s tokens x top-k, split over 8/ep local experts, fc1 / tp
    (2, 2, 4, 256 * 2 // (8 // 4), 1024 // 2),
])
def test_expert_gemm_shapes(tp, etp, ep, per_expert, f):
    ir = compile_workload(scenario(moe(), gbs=8, tp=tp, sequence_parallel=True, ep=ep, expert_tp=etp), 8)
    local = E // ep
    fc1, fc2 = _expert_gemms(ir)
    assert fc1 == (2.0 * per_expert * f * H * local, (per_expert, f, H, "fwd"))
    assert fc2 == (2.0 * per_expert * H * f * local, (per_expert, H, f, "fwd"))


# ------------------------------------------------------------------------------------------ expert states

def _expert_params_per_layer(etp: int, ep: int) -> int:
    """GELU expert: fc1 (h x fe/etp + bias fe/etp), fc2 (fe/etp x h + bias h), E/ep experts per rank."""
    f = FE // etp
    return (E // ep) * (H * f + f + f * H + H)


def test_expert_params_split_by_expert_tp():
    assert layer_params(moe(), 4, 2, 2).expert == _expert_params_per_layer(2, 2) == 4 * (2 * 256 * 512 + 512 + 256)
    assert layer_params(moe(), 4, 2, 1).expert == _expert_params_per_layer(1, 2)


def test_memory_of_expert_states_per_rank():
    """Two plans on 8 GPUs with tp 2 (the same dense part), ZeRO-1, bf16 (2 B parameters, 4 B fp32 gradients,
    12 B optimizer states per parameter, optimizer sharded over the group holding the same parameters):
    (a) expert_tp 1, ep 4: 2 experts per rank, edp = 8 / 4 = 2; (b) expert_tp 1, ep 2: 4 experts, edp = 4.
    With e = one unsplit expert's parameters and L = 2 layers:
      params  (a) - (b) = 2 B x L x (2 - 4) e;  grads (a) - (b) = 4 B x L x (2 - 4) e;
      optimizer (a) - (b) = 12 B x L x (2e / 2 - 4e / 4) = 0 (an edp of dp*cp/ep = 1 in (a) would give
      12 B x L x e more)."""
    e = _expert_params_per_layer(1, E)
    mems = []
    for ep in (4, 2):
        sc = scenario(moe(), gbs=8, tp=2, sequence_parallel=True, ep=ep, expert_tp=1, zero_stage=1)
        plan = resolve_plan(sc, 8)
        assert plan.edp == 8 // ep
        mems.append(memory_for_plan(sc, plan)[(0, plan.microbatches[0])])
    a, b = mems
    assert a["params"] - b["params"] == pytest.approx(2 * 2 * (2 - 4) * e)
    assert a["grads"] - b["grads"] == pytest.approx(4 * 2 * (2 - 4) * e)
    assert a["optimizer"] - b["optimizer"] == pytest.approx(0.0, abs=1e-6)


def test_expert_grads_reduced_over_the_folded_edp():
    """The expert gradient buckets go to the ``edp`` group (2 ranks: (0, 4) ... for tp 4, etp 2, ep 2), the
    dense ones to ``dp``."""
    ir = compile_workload(scenario(moe(), gbs=8, tp=4, sequence_parallel=True, ep=2, expert_tp=2), 8)
    groups = {o.group for o in ir.ops_of(0) if o.name.startswith("grad_")}
    assert groups == {"dp", "edp"}
    assert ir.group_of(0, "edp") == (0, 4)


# ------------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("kw, msg", [
    (dict(tp=2, sequence_parallel=True, ep=4, expert_tp=4), "parallelism.expert_tp = 4: expert_tp * ep = 16 must "
                                                            "divide tp*cp*dp = 8"),
    (dict(tp=2, sequence_parallel=True, ep=2, expert_tp=3), "parallelism.expert_tp = 3: expert_tp * ep = 6"),
    (dict(tp=2, ep=2, expert_tp=1), "parallelism.expert_tp = 1: an expert TP degree apart from tp = 2 needs "
                                    "sequence_parallel: true"),
    (dict(tp=2, sequence_parallel=True, ep=2, expert_tp=1, moe_dispatcher="allgather"),
     "parallelism.expert_tp = 1: an expert TP degree apart from tp is modelled with moe_dispatcher: alltoall"),
    (dict(tp=2, sequence_parallel=True, ep=2, expert_tp=1, moe_load_imbalance=1.5),
     "parallelism.expert_tp = 1: uneven routing needs one EP coordinate per TP group; TP group 0-1 holds EP ranks "
     "[0, 1]"),
])
def test_plan_errors_one_line(kw, msg):
    with pytest.raises(PlanError) as ei:
        compile_workload(scenario(moe(), gbs=8, **kw), 8)
    assert "\n" not in str(ei.value) and str(ei.value).startswith(msg), str(ei.value)


def test_expert_tp_needs_moe_and_divides_ffn():
    with pytest.raises(PlanError, match=r"^parallelism.expert_tp = 2: expert tensor parallelism needs a mixture"):
        compile_workload(scenario(gpt(layers=2), gbs=8, expert_tp=2), 8)
    m = gpt(layers=2, hidden=H, num_experts=E, moe_top_k=K, moe_ffn_hidden_size=1012)
    with pytest.raises(PlanError, match=r"^parallelism.expert_tp = 8: expert_tp must divide the experts' FFN"):
        compile_workload(scenario(m, gbs=8, tp=1, ep=1, expert_tp=8), 8)


def test_cli_refusal_is_one_line_exit_2(tmp_path):
    validate_refuses(ROOT / "scenarios" / "moe" / "expert-tp.yaml",
                     lambda src: src["parallelism"].update(expert_tp=3), tmp_path, "parallelism.expert_tp = 3")


def test_shipped_scenario_runs_and_folds():
    from heterosim import api

    prep = api.prepare(api.load(ROOT / "scenarios" / "moe" / "expert-tp.yaml"))
    assert prep.ir.meta["expert_tp"] == 1
    assert prep.ir.groups["ep"][0] == tuple(range(8))  # EP 8 over the first node's TP4 x DP2 ranks
    s = api.simulate(prep, record_messages=False).summary
    assert s["iteration_time_ns"] > 0
