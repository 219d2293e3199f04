"""IR structure: tags pair up, deps acyclic, programs shared, schedules and grad sync wired as specified."""
import dataclasses

import pytest

from heterosim.config import ModelConfig
from heterosim.errors import SimulationError
from heterosim.workload.compiler import compile_workload
from heterosim.workload.ir import IR, Program
from heterosim.workload.schedules import interleaved, one_f_one_b
from heterosim.workload.verify import check_acyclic, check_tags, replay, verify_ir

from wl_factory import gpt, scenario

MOE = ModelConfig(name="moe", num_layers=4, hidden_size=128, num_attention_heads=4, num_kv_heads=2,
                  ffn_hidden_size=256, vocab_size=512, max_seq_length=256, activation="swiglu", num_experts=4,
                  moe_top_k=2)

CASES = {
    "dp": (dict(), 4),
    "tp_pp_1f1b": (dict(tp=2, pp=4), 16),
    "gpipe_sp_full": (dict(tp=2, pp=2, schedule="gpipe", sequence_parallel=True, recompute="full"), 8),
    "interleaved_zero1": (dict(tp=2, pp=2, schedule="interleaved", virtual_stages=2, zero_stage=1), 8),
    "interleaved_v4_partition": (dict(pp=2, schedule="interleaved", virtual_stages=4,
                                      layer_partition=[1, 1, 2, 0, 1, 1, 1, 1]), 4),
    "cp_tp_overlap": (dict(tp=2, cp=2, pp=2, sequence_parallel=True, tp_comm_overlap=True), 16),
    "no_overlap_selective": (dict(pp=2, overlap_grad_reduce=False, recompute="selective"), 4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_ir_is_consistent_and_replays(name):
    par, world = CASES[name]
    ir = compile_workload(scenario(gbs=16, **par), world)
    n = verify_ir(ir)
    assert n == sum(len(ir.ops_of(r)) for r in range(world))


def test_moe_and_nonuniform_split_replay():
    ir = compile_workload(scenario(MOE, gbs=16, tp=2, ep=2, pp=2, sequence_parallel=True, zero_stage=1), 16)
    verify_ir(ir)
    names = {op.name for op in ir.programs[0].ops}
    assert {"ep_dispatch", "ep_combine", "ep_dispatch_bwd", "moe_experts_bwd"} <= names
    assert any(op.group == "edp" for op in ir.programs[0].ops)
    ir = compile_workload(scenario(gbs=20, split=[2, 3, 5, 10], pp=2), 8)
    verify_ir(ir)
    assert len(ir.programs) == 8 and ir.meta["microbatches_per_replica"] == [2, 3, 5, 10]


def test_programs_shared_per_stage_and_tp_members_identical():
    ir = compile_workload(scenario(gpt(layers=16), gbs=64, tp=4, pp=4, sequence_parallel=True), 64)
    assert len(ir.programs) == 4
    for grp in ir.groups["tp"]:
        assert len({ir.rank_program[r] for r in grp}) == 1
    for grp in ir.groups["pp"]:
        assert [ir.program_of(r).stage for r in grp] == [0, 1, 2, 3]
    assert ir.meta["layers_per_stage"] == [4, 4, 4, 4]


def test_pipeline_tags_pair_across_stages():
    ir = compile_workload(scenario(gbs=8, pp=2), 2)
    s0, s1 = ir.program_of(0).ops, ir.program_of(1).ops
    sends0 = [(o.tag, o.size_bytes) for o in s0 if o.collective == "send"]
    recvs1 = [(o.tag, o.size_bytes) for o in s1 if o.collective == "recv"]
    assert sorted(t for t in sends0 if t[0].startswith("pp:f")) == sorted(t for t in recvs1 if t[0].startswith("pp:f"))
    assert all(o.peer_offset == 1 for o in s0 if o.collective == "send")
    assert all(o.peer_offset == -1 for o in s1 if o.collective == "recv" and o.tag.startswith("pp:f"))
    assert all(o.stream in ("pp_send", "pp_recv") and o.comm_kind == "pp" for o in s0 if o.peer_offset)


def test_compute_follows_schedule_and_bwd_waits_for_gradient():
    pp, m = 4, 8
    ir = compile_workload(scenario(gbs=m, pp=pp), pp)
    for stage in range(pp):
        ops = ir.program_of(stage).ops
        seq = []
        for o in ops:
            if o.kind == "compute" and o.layer >= 0 and o.name in ("attn", "attn_bwd"):
                step = ("fwd" if o.name == "attn" else "bwd", o.microbatch, o.chunk)
                if not seq or seq[-1] != step:
                    seq.append(step)
        assert seq == one_f_one_b(pp, m, stage)
        if stage < pp - 1:
            for o in ops:
                if o.name == "mlp_bwd":
                    recv = next(x for x in ops if x.name == "pp_recv_grad" and x.microbatch == o.microbatch)
                    if o.layer == max(x.layer for x in ops if x.name == "mlp_bwd"):
                        assert recv.id in o.deps
    ir = compile_workload(scenario(gbs=8, pp=2, schedule="interleaved", virtual_stages=2), 2)
    seq = []
    for o in ir.program_of(1).ops:
        if o.name in ("attn", "attn_bwd"):
            step = ("fwd" if o.name == "attn" else "bwd", o.microbatch, o.chunk)
            if not seq or seq[-1] != step:
                seq.append(step)
    assert seq == interleaved(2, 8, 1, 2)


def test_tp_comm_blocking_and_overlap():
    ir = compile_workload(scenario(gbs=4, tp=2), 2)
    ops = ir.programs[0].ops
    mlp = next(o for o in ops if o.name == "mlp")
    ar = ops[mlp.deps[0]]
    assert ar.collective == "allreduce" and ar.stream == "tp" and ar.comm_kind == "tp"
    assert ar.size_bytes == 256 * 1 * 256 * 2  # b*s*h bf16
    ir = compile_workload(scenario(gbs=4, tp=2, sequence_parallel=True), 2)
    colls = [o.collective for o in ir.programs[0].ops if o.stream == "tp" and o.layer == 0 and o.phase == "fwd"
             and o.microbatch == 0]
    assert colls == ["allgather", "reducescatter", "allgather", "reducescatter"]
    # userbuffers need sequence parallelism (Megatron asserts it): without SP tp_comm_overlap changes nothing
    plain = compile_workload(scenario(gbs=4, tp=2), 2).programs[0].ops
    ub = compile_workload(scenario(gbs=4, tp=2, tp_comm_overlap=True), 2).programs[0].ops
    assert [(o.name, o.deps) for o in ub] == [(o.name, o.deps) for o in plain]
    for sc in (scenario(gbs=4, tp=2, pp=2, tp_comm_overlap=True, sequence_parallel=True),
               scenario(gbs=4, tp=2, pp=2, tp_comm_overlap=True)):
        ir = compile_workload(sc, 4)
        for prog in ir.programs:
            used = {d for o in prog.ops for d in o.deps}
            # every TP result is consumed by someone (lagged, not dropped), pipeline sends included
            assert all(o.id in used for o in prog.ops if o.stream == "tp")


def test_grad_buckets_depend_on_last_microbatch_and_optimizer_after_all():
    sc = scenario(gpt(layers=4, hidden=512), gbs=16, grad_bucket_bytes=4 * 3_200_000)
    ir = compile_workload(sc, 2)
    ops = ir.programs[0].ops
    buckets = [o for o in ops if o.name.startswith("grad_")]
    assert len(buckets) >= 2 and all(o.stream == "dp" and o.group == "dp" for o in buckets)
    last_mb = max(o.microbatch for o in ops)
    for b in buckets:
        prod = ops[b.deps[0]]
        assert prod.phase == "bwd" and prod.microbatch == last_mb and prod.kind == "compute"
    # the first bucket is ready before the last backward op: overlap is possible
    assert buckets[0].deps[0] < max(o.id for o in ops if o.phase == "bwd" and o.kind == "compute")
    assert sum(b.size_bytes for b in buckets) == pytest.approx(4 * ir.meta["total_params"], rel=1e-6)
    opt = next(o for o in ops if o.op_class == "optimizer")
    assert set(opt.deps) == {b.id for b in buckets}
    # ZeRO-1 without overlap_param_gather: reduce-scatter, then parameter all-gathers after the optimizer
    ir = compile_workload(scenario(gpt(layers=4, hidden=512), gbs=16, zero_stage=1, overlap_param_gather=False), 2)
    ops = ir.programs[0].ops
    opt = next(o for o in ops if o.op_class == "optimizer")
    assert all(o.collective == "reducescatter" for o in ops if o.name.startswith("grad_"))
    gathers = [o for o in ops if o.name == "zero_param_allgather"]
    assert gathers and all(o.deps == (opt.id,) for o in gathers)


def test_overlapped_param_gather_gates_each_layers_first_forward():
    # Megatron-Core DDP (overlap_param_gather): the all-gathers start the iteration, in forward order, and
    # a layer's first forward waits for its own bucket only (small buckets: several per program)
    sc = scenario(gpt(layers=4, hidden=512), gbs=16, zero_stage=1, grad_bucket_bytes=4 * 3_200_000)
    ops = compile_workload(sc, 2).programs[0].ops
    gathers = [o for o in ops if o.name == "zero_param_allgather"]
    assert len(gathers) >= 2 and all(o.deps == () and o.stream == "dp" for o in gathers)
    assert max(g.id for g in gathers) < min(o.id for o in ops if o.kind == "compute")
    gated = {g.id: [o for o in ops if g.id in o.deps] for g in gathers}
    assert all(len(users) >= 1 and all(u.microbatch == 0 and u.phase == "fwd" for u in users)
               for users in gated.values())
    # the first gather feeds the embedding; a later one only a later layer (overlap with earlier layers)
    first_user = gated[gathers[0].id][0]
    assert first_user.name == "embedding" or first_user.layer == 0
    assert max(u.id for u in gated[gathers[-1].id]) > first_user.id


def test_meta():
    ir = compile_workload(scenario(gbs=32, mbs=2, seq=256, tp=2, pp=2), 8)
    m = ir.meta
    assert m["tokens_per_iteration"] == 32 * 256 and m["microbatches"] == 8 and m["dp"] == 2
    assert len(m["memory_bytes"]) == 8 and m["schedule"] == "1f1b" and m["precision"] == "bf16"
    assert m["hardware_flops"] >= m["model_flops_per_iteration"]


def test_verifier_catches_deadlock_and_tag_mismatch():
    ir = compile_workload(scenario(gbs=4, pp=2), 2)
    check_acyclic(ir)
    # swap two receives on stage 1: the stream now waits for micro-batch 1 before 0 ... still fine under
    # rendezvous only if stage 0 sends in that order; it does not -> deadlock
    ops = list(ir.programs[1].ops)
    recvs = [i for i, o in enumerate(ops) if o.name == "pp_recv_act"]
    a, b = recvs[0], recvs[1]
    ta, tb = ops[a].tag, ops[b].tag
    ops[a] = dataclasses.replace(ops[a], tag=tb)
    ops[b] = dataclasses.replace(ops[b], tag=ta)
    bad = IR(world_size=2, programs=[ir.programs[0], Program(id=1, ops=ops, stage=1)], rank_program=[0, 1],
             groups=ir.groups)
    with pytest.raises(SimulationError, match="deadlock"):
        replay(bad)
    ops2 = list(ir.programs[1].ops)
    ops2[a] = dataclasses.replace(ops2[a], tag="pp:f:mb99:vs0")
    bad2 = IR(world_size=2, programs=[ir.programs[0], Program(id=1, ops=ops2, stage=1)], rank_program=[0, 1],
              groups=ir.groups)
    with pytest.raises(SimulationError, match="unmatched"):
        check_tags(bad2)
    cyc = list(ir.programs[0].ops)
    x = next(o for o in cyc if o.deps)
    cyc[x.deps[0]] = dataclasses.replace(cyc[x.deps[0]], deps=(x.id,))
    with pytest.raises(SimulationError, match="cycle"):
        check_acyclic(IR(world_size=2, programs=[Program(id=0, ops=cyc), ir.programs[1]], rank_program=[0, 1],
                         groups=ir.groups))


def test_ir_json_roundtrip_keeps_microbatch_and_layer_zero():
    ir = compile_workload(scenario(gbs=4, pp=2), 2)
    back = IR.from_dict(ir.to_dict())
    assert [(o.microbatch, o.layer) for o in back.programs[0].ops] == \
        [(o.microbatch, o.layer) for o in ir.programs[0].ops]


def test_tp_comm_overlap_userbuffers_structure():
    # tp = 2, SP, one micro-batch of 256 tokens, hidden 256, ffn 1024 (bf16): the forward MLP block is
    # LN -> [all-gather 256 x 256 x 2 B = 131,072 B | FC1 on the local 128-token chunk] -> FC1 on the received
    # chunk, GeLU, FC2 on the first 128 tokens -> [reduce-scatter of 65,536 B | FC2 on the other 128 tokens,
    # dropout-add] -> reduce-scatter of the last 65,536 B
    sc = scenario(gpt(layers=2), gbs=1, tp=2, sequence_parallel=True, tp_comm_overlap=True)
    ops = compile_workload(sc, 2).programs[0].ops
    blk = [o for o in ops if o.phase == "fwd" and o.layer == 0 and o.name.startswith(("mlp", "tp_"))][-7:]
    head, ag, g1, mid, rs0, g2, rs1 = blk
    assert [o.name for o in blk] == ["mlp_head", "tp_allgather_ub", "mlp_gemm_chunks", "mlp_last_chunk",
                                     "tp_reducescatter_ub", "mlp_gemm_chunks_rs", "tp_reducescatter_ub"]
    assert (ag.collective, ag.size_bytes, ag.deps) == ("allgather", 131_072, (head.id,))
    assert g1.deps == (head.id,) and set(mid.deps) == {g1.id, ag.id}
    assert (rs0.size_bytes, rs0.deps, g2.deps) == (65_536, (mid.id,), (mid.id,))
    assert (rs1.size_bytes, set(rs1.deps)) == (65_536, {g2.id, rs0.id})
    fc1 = ("gemm", 2.0 * 128 * 512 * 256)  # 128-token chunk x (1024 / tp = 512) x 256
    assert [(k[0], k[1], k[3]) for k in g1.kernels] == [(*fc1, (128, 512, 256, "fwd"))]
    assert [k[3] for k in mid.kernels if k[0] == "gemm"] == [(128, 512, 256, "fwd"), (128, 256, 512, "fwd")]
    # the split keeps the block's work: same FLOPs as the blocking block
    plain = compile_workload(scenario(gpt(layers=2), gbs=1, tp=2, sequence_parallel=True), 2).programs[0].ops
    mlp = next(o for o in plain if o.name == "mlp" and o.layer == 0)
    assert sum(o.flops for o in (head, g1, mid, g2)) == pytest.approx(mlp.flops)
    # backward: the first GEMM after the all-gather is FC2's dgrad, the reduce-scattered one FC1's dgrad
    bwd = [o for o in ops if o.phase == "bwd" and o.layer == 0 and o.name.startswith("mlp_bwd")]
    assert bwd[1].kernels[0][3] == (128, 1024 // 2, 256, "dgrad")  # FC2 dgrad: (tokens/2, ffn/tp, h)
    assert any(k[3][3] == "wgrad" for k in bwd[-1].kernels)           # FC1 wgrad overlaps the reduce-scatter


def test_tp_comm_overlap_with_context_parallelism_keeps_userbuffers_around_the_kv_exchange():
    # tp = 2, cp = 2, SP, one micro-batch of 256 tokens (128 per cp rank), hidden 256, 8 heads of 32 (bf16).
    # Forward attention: LN -> [all-gather of 128 x 256 x 2 B = 65,536 B | QKV on the local 64-token chunk] ->
    # QKV on the received chunk -> K/V all-gather over cp (2 x 128 tokens x 128 (K and V of 4 local heads x 32)
    # x 2 B x cp 2 = 131,072 B) -> attention core -> [proj on the first 64 tokens] -> reduce-scatter of the first
    # 32,768 B beside proj on the other 64 tokens + dropout-add -> reduce-scatter of the last 32,768 B.
    sc = scenario(gpt(layers=2), gbs=1, tp=2, cp=2, sequence_parallel=True, tp_comm_overlap=True)
    ir = compile_workload(sc, 4)
    verify_ir(ir)
    ops = ir.programs[0].ops
    blk = [o for o in ops if o.phase == "fwd" and o.layer == 0 and o.name.startswith(("attn", "tp_", "cp_"))][:9]
    assert [o.name for o in blk] == ["attn_qkv_head", "tp_allgather_ub", "attn_qkv_gemm_chunks", "attn_qkv_last_chunk",
                                     "cp_allgather_kv", "attn_core", "attn_out_first_chunk", "tp_reducescatter_ub",
                                     "attn_out_gemm_chunks_rs"]
    head, ag, g1, last, kv, core, first, rs0, g2 = blk
    assert (ag.size_bytes, ag.deps, g1.deps, set(last.deps)) == (65_536, (head.id,), (head.id,), {g1.id, ag.id})
    assert [k[3] for k in g1.kernels] == [(64, 256 // 2 * 3, 256, "fwd")]  # 64 tokens x (q+k+v of 4 heads) x h
    assert (kv.collective, kv.group, kv.size_bytes, kv.deps) == ("allgather", "cp", 131_072, (last.id,))
    assert set(core.deps) == {kv.id, last.id} and [k[0] for k in core.kernels] == ["attention"]
    assert (rs0.size_bytes, rs0.deps, g2.deps) == (32_768, (first.id,), (first.id,))
    rs1 = next(o for o in ops if o.deps == tuple(sorted((g2.id, rs0.id))) or set(o.deps) == {g2.id, rs0.id})
    assert rs1.size_bytes == 32_768 and rs1.collective == "reducescatter"
    # the split keeps the work: the same FLOPs per layer and pass as the blocking context-parallel layer
    plain = compile_workload(scenario(gpt(layers=2), gbs=1, tp=2, cp=2, sequence_parallel=True), 4).programs[0].ops
    for phase in ("fwd", "bwd"):
        assert sum(o.flops for o in ops if o.kind == "compute" and o.layer == 0 and o.phase == phase) == \
            pytest.approx(sum(o.flops for o in plain if o.kind == "compute" and o.layer == 0 and o.phase == phase))
    # backward mirrored: proj dgrad after the all-gather of the gradient, dK/dV reduce-scatter over cp, then QKV's
    # dgrad chunks beside the pipelined reduce-scatter (QKV's wgrad and the LN backward with them)
    bwd = [o.name for o in ops if o.phase == "bwd" and o.layer == 0 and o.name.startswith(("attn", "cp_"))]
    assert bwd == ["attn_out_bwd_head", "attn_out_bwd_gemm_chunks", "attn_out_bwd_last_chunk", "attn_core_bwd",
                   "cp_reducescatter_dkv", "attn_qkv_bwd_first_chunk", "attn_qkv_bwd_gemm_chunks_rs"]
    # zero-bubble schedules keep the blocking collectives around context-parallel attention
    zb = compile_workload(scenario(gpt(layers=2), gbs=4, tp=2, cp=2, pp=2, sequence_parallel=True,
                                   tp_comm_overlap=True, schedule="zb-h1"), 8)
    verify_ir(zb)
    assert not any(o.name == "attn_qkv_gemm_chunks" for o in zb.programs[0].ops)


def test_moe_allgather_dispatcher_gathers_the_expert_group_and_reduce_scatters_back():
    # MOE (hidden 128, top-2, 4 experts) at ep = 2 on 4 ranks, one micro-batch of 256 tokens, bf16.
    # alltoall (default): each rank sends its 256 tokens x top-2 x 128 x 2 B = 131,072 B per all-to-all.
    # allgather (Megatron-Core 0.8's MoEAllGatherTokenDispatcher): the ep group's hidden states are gathered,
    # 256 tokens x 128 x 2 B x ep 2 = 131,072 B of output, and the experts' output reduce-scattered from the
    # same size; backward: the combine's transpose is an all-gather, the dispatch's a reduce-scatter.
    def comms(**kw):
        ir = compile_workload(scenario(MOE, gbs=4, ep=2, **kw), 4)
        verify_ir(ir)
        return [(o.name, o.collective, o.size_bytes) for o in ir.programs[0].ops if o.stream == "ep" and o.layer == 0
                and o.microbatch == 0]
    assert comms() == [("ep_dispatch", "alltoall", 131_072), ("ep_combine", "alltoall", 131_072),
                       ("ep_combine_bwd", "alltoall", 131_072), ("ep_dispatch_bwd", "alltoall", 131_072)]
    assert comms(moe_dispatcher="allgather") == [
        ("ep_dispatch", "allgather", 131_072), ("ep_combine", "reducescatter", 131_072),
        ("ep_combine_bwd", "allgather", 131_072), ("ep_dispatch_bwd", "reducescatter", 131_072)]
    # top-1 halves what the all-to-all carries, not what the all-gather does (hidden states travel once)
    top1 = MOE.model_copy(update={"moe_top_k": 1})
    ir = compile_workload(scenario(top1, gbs=4, ep=2, moe_dispatcher="allgather"), 4)
    assert {o.size_bytes for o in ir.programs[0].ops if o.stream == "ep"} == {131_072}
