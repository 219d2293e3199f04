"""ZeRO-1/2/3 and FSDP (issue 38): bytes on the wire and model-state memory against the ZeRO paper's
formulas (Rajbhandari et al. 2020, Sec. 7 and Figure 1), computed here by hand from the model's dimensions;
the IR's structure (prefetch overlap, replay without deadlock); one-line errors for plans that cannot run."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
from cli_helpers import cli_in_process, one_line  # noqa: E402
from wl_factory import scenario  # noqa: E402

from heterosim.config import ModelConfig  # noqa: E402
from heterosim.errors import PlanError  # noqa: E402
from heterosim.workload.compiler import compile_workload  # noqa: E402
from heterosim.workload.memory import memory_for_plan  # noqa: E402
from heterosim.workload.plan import resolve_plan  # noqa: E402
from heterosim.workload.verify import verify_ir  # noqa: E402

# A Llama-style model (SwiGLU, RMSNorm, no biases, untied head), vocabulary a multiple of 128 (no padding).
L, H, F, V = 4, 512, 1408, 2048


def llama(**kw) -> ModelConfig:
    args = dict(name="llama-test", num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F,
                vocab_size=V, max_seq_length=1024, activation="swiglu", tie_embeddings=False)
    args.update(kw)
    return ModelConfig(**args)


# Parameter counts by hand (Touvron et al. 2023 layout): per layer q,k,v,o 4h^2, gate/up/down 3hf, two
# RMSNorm weights 2h; input embedding Vh; final RMSNorm h + output layer Vh.
PSI_LAYER = 4 * H * H + 3 * H * F + 2 * H
PSI_EMBED = V * H
PSI_HEAD = H + V * H
PSI = L * PSI_LAYER + PSI_EMBED + PSI_HEAD


def sc(zero: int, dp: int = 8, gbs: int = 8, **par):
    s = scenario(llama(), gbs=gbs, mbs=1, seq=256, zero_stage=zero, **par)
    s.training.grad_reduce_dtype = "bf16"  # the ZeRO paper's fp16 gradients: 2 bytes per element, like params
    return s


def wire_bytes_per_gpu(ir, rank: int = 0) -> float:
    """Bytes rank ``rank`` sends over its data-parallel collectives in one iteration, ring algorithms
    (what NCCL's ring moves per GPU): all-gather / reduce-scatter (N-1)/N of the buffer, all-reduce 2(N-1)/N."""
    total = 0.0
    for op in ir.ops_of(rank):
        if op.kind != "comm" or op.comm_kind != "dp" or op.group == "embd":
            continue
        n = len(ir.group_of(rank, op.group))
        f = (n - 1) / n
        total += op.size_bytes * (2 * f if op.collective == "allreduce" else f)
    return total


def test_test_formula_reproduces_zero_paper_figure1():
    """The formulas used below give Figure 1's numbers (Psi = 7.5B, N_d = 64, K = 12): 120, 31.4, 16.6, 1.88 GB."""
    psi, nd, k = 7.5e9, 64, 12
    got = [(2 + 2 + k) * psi, 2 * psi + 2 * psi + k * psi / nd, 2 * psi + (2 + k) * psi / nd, (2 + 2 + k) * psi / nd]
    assert [round(x / 1e9, 1) for x in got] == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.parametrize("zero,k", [(0, 2), (1, 2), (2, 2), (3, 3)])
def test_wire_bytes_per_stage_match_zero_paper(zero, k):
    """ZeRO paper Sec. 7: DDP all-reduce 2 Psi, ZeRO-1/2 reduce-scatter + all-gather 2 Psi, ZeRO-3 forward
    all-gather + backward all-gather + reduce-scatter 3 Psi (elements per GPU; x 2 bytes; x (N-1)/N for a ring).
    ZeRO-3 exception, by hand: the last unit of the forward pass (final norm + output layer) runs its
    backward right after its forward and is not re-gathered (FSDP2 keeps the root's, torchtitan the last
    block's parameters; DeepSpeed's reuse distance), so its backward all-gather is absent: -Psi_head."""
    n = 8
    ir = compile_workload(sc(zero), n)
    expected = k * PSI - (PSI_HEAD if zero == 3 else 0)
    assert wire_bytes_per_gpu(ir) == pytest.approx(2 * expected * (n - 1) / n, rel=1e-9)


def test_zero3_no_reshard_after_forward_is_two_psi():
    """reshard_after_forward: false (FSDP1 SHARD_GRAD_OP): one all-gather per unit + reduce-scatter = 2 Psi."""
    ir = compile_workload(sc(3, reshard_after_forward=False), 8)
    assert wire_bytes_per_gpu(ir) == pytest.approx(2 * 2 * PSI * 7 / 8, rel=1e-9)


def test_zero3_fp8_allgather_halves_layer_gathers():
    """torchtitan float8 all-gather: layer weights 1 byte in both all-gathers; embedding/head 2 bytes;
    reduce-scatter of bf16 gradients unchanged."""
    s = sc(3, fp8_param_allgather=True)
    s.training.precision = "fp8"
    ir = compile_workload(s, 8)
    ag = 2 * L * PSI_LAYER * 1 + 2 * PSI_EMBED * 2 + PSI_HEAD * 2  # head gathered once (see above)
    rs = PSI * 2
    assert wire_bytes_per_gpu(ir) == pytest.approx((ag + rs) * 7 / 8, rel=1e-9)


def test_gradient_accumulation_reduces_every_microbatch():
    """m = 2 micro-batches (pp = 1, so fwd0 bwd0 fwd1 bwd1): ZeRO-1 reduces once (2 Psi); ZeRO-2 reduce-scatters
    every micro-batch (2 Psi + Psi gather = 3 Psi); ZeRO-3 3 Psi per micro-batch less the head's backward gather
    twice and the embedding's forward gather of micro-batch 1 (its backward of micro-batch 0 ran just before)."""
    per = {1: 2 * PSI, 2: 3 * PSI, 3: 6 * PSI - 2 * PSI_HEAD - PSI_EMBED}
    for zero, expected in per.items():
        ir = compile_workload(sc(zero, gbs=16), 8)
        assert wire_bytes_per_gpu(ir) == pytest.approx(2 * expected * 7 / 8, rel=1e-9), zero


def test_hsdp_bytes_shard_and_replicate():
    """HSDP, 8 ranks as 2 copies x shard 4: ZeRO-3 collectives over the shard group (ring factor 3/4), then
    each gradient shard (Psi/4) all-reduced over the 2-rank replicate group (2 x 1/2)."""
    s = sc(3, shard_size=4)
    ir = compile_workload(s, 8)
    assert len(ir.group_of(0, "shard")) == 4 and len(ir.group_of(0, "replicate")) == 2
    assert sorted(ir.group_of(0, "shard")) == [0, 1, 2, 3] and sorted(ir.group_of(0, "replicate")) == [0, 4]
    expected = 2 * (3 * PSI - PSI_HEAD) * 3 / 4 + 2 * (PSI / 4) * 2 * 1 / 2
    assert wire_bytes_per_gpu(ir) == pytest.approx(expected, rel=1e-9)


# ------------------------------------------------------------------ memory (ZeRO paper, Figure 1)

@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_model_states_match_figure1(zero):
    """params + grads + optimizer per GPU = Figure 1 with K = 12 (fp32 master + Adam m, v), 2-byte grads."""
    nd, k = 8, 12
    expected = {0: (2 + 2 + k) * PSI, 1: 2 * PSI + 2 * PSI + k * PSI / nd, 2: 2 * PSI + (2 + k) * PSI / nd,
                3: (2 + 2 + k) * PSI / nd}[zero]
    s = sc(zero)
    m = memory_for_plan(s, resolve_plan(s, 8))[(0, 1)]
    assert m["params"] + m["grads"] + m["optimizer"] == pytest.approx(expected, rel=1e-12)
    if zero == 3:
        # working copy: the two largest units gathered (computing + prefetched, 2 B) and one unit's 2-byte
        # unsharded gradients; the largest units here are two layers
        units = sorted([PSI_LAYER] * L + [PSI_EMBED, PSI_HEAD], reverse=True)
        assert m["zero_buffers"] == pytest.approx(2 * (units[0] + units[1]) + 2 * units[0], rel=1e-12)
        assert m["total"] == pytest.approx(sum(v for key, v in m.items() if key != "total"), rel=1e-12)
    if zero == 2:
        assert m["zero_buffers"] == min(40_000_000, 2 * PSI)  # one unsharded gradient bucket


def test_memory_hsdp_and_no_reshard():
    """HSDP shards over shard_size ranks (N_d = 4); reshard_after_forward: false holds the stage's whole
    parameters gathered between forward and backward."""
    s = sc(3, shard_size=4)
    m = memory_for_plan(s, resolve_plan(s, 8))[(0, 1)]
    assert m["params"] + m["grads"] + m["optimizer"] == pytest.approx(16 * PSI / 4, rel=1e-12)
    s = sc(3, reshard_after_forward=False)
    m = memory_for_plan(s, resolve_plan(s, 8))[(0, 1)]
    assert m["zero_buffers"] == pytest.approx(2 * PSI + 2 * max(PSI_LAYER, PSI_HEAD), rel=1e-12)


def test_zero3_lets_a_model_fit_that_zero1_does_not():
    """The ordering a user relies on: total memory strictly falls with each stage on 8 ranks."""
    totals = []
    for z in range(4):
        s = sc(z)
        totals.append(memory_for_plan(s, resolve_plan(s, 8))[(0, 1)]["total"])
    assert totals[0] > totals[1] and totals[3] < totals[1]


# ------------------------------------------------------------------ IR structure

def _program_ops(ir, rank=0):
    return ir.ops_of(rank)


def test_prefetch_overlaps_next_unit_with_current_compute():
    """Each layer's forward waits for its own all-gather, and the all-gather of layer i+1 is issued when layer
    i starts (it depends only on what layer i's first op depends on, so it runs beside layer i's compute)."""
    ir = compile_workload(sc(3), 8)
    ops = _program_ops(ir)
    ags = {(op.phase, op.layer): op for op in ops if op.name == "fsdp_param_allgather"}
    first = {}
    for op in ops:
        if op.kind == "compute" and op.phase == "fwd" and op.layer >= 0 and op.layer not in first:
            first[op.layer] = op
    for layer in range(L):
        assert ags[("fwd", layer)].id in first[layer].deps
        if layer + 1 < L:
            nxt = ags[("fwd", layer + 1)]
            assert nxt.id < first[layer].id  # issued before layer's compute...
            assert set(nxt.deps) <= set(first[layer].deps)  # ...waiting on nothing layer's compute produces
    assert all(op.stream == "dp" for op in ags.values())


@pytest.mark.parametrize("par,world,extra", [
    (dict(pp=2, schedule="1f1b"), 8, {}),
    (dict(pp=2, schedule="interleaved", virtual_stages=2), 8, {}),
    (dict(pp=2, schedule="gpipe", recompute="full"), 8, {}),
    (dict(tp=2, sequence_parallel=True, cp=2), 8, {}),
    (dict(pp=2, shard_size=2), 8, {}),
    (dict(pp=2, reshard_after_forward=False), 8, {}),
])
@pytest.mark.parametrize("zero", [2, 3])
def test_ir_replays_without_deadlock(par, world, extra, zero):
    if zero == 2 and "reshard_after_forward" in par:
        pytest.skip("ZeRO-3 only field")
    s = scenario(llama(), gbs=16, mbs=1, seq=256, zero_stage=zero, **par)
    verify_ir(compile_workload(s, world))


def test_moe_experts_sharded_over_edp():
    model = llama(num_experts=4, moe_top_k=2)
    s = scenario(model, gbs=8, mbs=1, seq=256, zero_stage=3, ep=2)
    ir = compile_workload(s, 8)
    verify_ir(ir)
    groups = {op.group for op in ir.ops_of(0) if op.name.startswith("fsdp_")}
    assert groups == {"dp", "edp"}


# ------------------------------------------------------------------ errors

def test_plan_errors_name_the_field():
    with pytest.raises(PlanError, match=r"parallelism\.shard_size = 3: must divide dp \(8\)"):
        compile_workload(sc(3, shard_size=3), 8)
    with pytest.raises(PlanError, match=r"parallelism\.fp8_param_allgather.*precision fp8"):
        compile_workload(sc(3, fp8_param_allgather=True), 8)
    s = scenario(llama(), gbs=12, mbs=1, seq=256, zero_stage=2, split=[1, 1, 1, 1, 1, 1, 2, 4])
    with pytest.raises(PlanError, match=r"training\.microbatch_split.*same number of micro-batches"):
        memory_for_plan(s, resolve_plan(s, 8))


@pytest.mark.parametrize("field,value", [("shard_size", "2"), ("reshard_after_forward", "false"),
                                         ("fp8_param_allgather", "true")])
def test_fields_need_their_stage_cli(tmp_path, capsys, monkeypatch, field, value):
    root = Path(__file__).parents[2]
    code, out, err = cli_in_process(capsys, monkeypatch, root, "validate", "scenarios/fsdp/zero1.yaml",
                                    "--set", f"parallelism.{field}={value}")
    one_line(code, err, "zero1.yaml", "parallelism", "zero_stage", out=out)


def test_cli_shard_size_not_dividing_dp(capsys, monkeypatch):
    root = Path(__file__).parents[2]
    code, out, err = cli_in_process(capsys, monkeypatch, root, "validate", "scenarios/fsdp/hsdp.yaml",
                                    "--set", "parallelism.shard_size=5")
    one_line(code, err, "hsdp.yaml", "parallelism.shard_size = 5", "must divide dp (16)", out=out)
