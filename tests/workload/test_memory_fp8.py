"""FP8 activation storage (Transformer Engine), the per-GPU allowance's named parts, and Megatron's own
memory formulas, each against a hand calculation written out here."""
import pytest

from heterosim.config import ModelConfig
from heterosim.config.loader import scenario_from_dict
from heterosim.errors import PlanError
from heterosim.workload.memory import activation_bytes_per_layer, check_plan, memory_for_plan
from heterosim.workload.plan import resolve_plan

from wl_factory import gpt, scenario

MiB = 2**20
# one NCCL connection's receive buffers: LL 8 lines x 512 threads x 8 steps x 16 B, LL128 120 x 640 x 8 x 8 B,
# Simple 4 MiB (NCCL src/init.cc); a ring communicator has 16 channels
RING = 16 * (8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + 4 * MiB)
P2P_PEER = 2 * 512 * 1024 * 8  # 2 channels x NCCL_P2P_NVL_CHUNKSIZE x NCCL_STEPS


def _layer(sc, world, precision, recompute=None):
    plan = resolve_plan(sc, world)
    return activation_bytes_per_layer(sc.model, plan, precision, recompute=recompute, attention=sc.training.attention)


def test_fp8_layer_per_saved_tensor_no_sp_fused_attention():
    h, s, b, t = 1024, 512, 2, 2
    sc = scenario(gpt(layers=4, hidden=h, heads=16, seq=s), gbs=4, mbs=b, seq=s, tp=t, precision="fp8")
    n = s * b  # tokens of one micro-batch
    # not split by TP (no SP): norm1 input bf16 2, QKV input (norm1 output, written in fp8 by TE's LayerNormLinear) 1,
    # dropout mask after proj 1, norm2 input 2, fc1 input (fp8) 1, dropout mask after fc2 1
    replicated = n * h * (2 + 1 + 1 + 2 + 1 + 1)
    # split by TP: Q 2h, K and V 2h each (MHA), attention output kept bf16 by the fused kernel (2) plus proj's fp8
    # copy (1), fc1 output 4h bf16 (kept for GeLU's backward), fc2 input 4h in fp8
    sharded = n * (2 * h + 2 * 2 * h + (2 + 1) * h + 2 * 4 * h + 1 * 4 * h)
    assert _layer(sc, t * 2, "fp8") == pytest.approx(replicated + sharded / t)
    # the same layer in bf16 is Korthikanti's 10 sbh + 24 sbh / t
    assert _layer(sc, t * 2, "bf16") == pytest.approx(n * h * (10 + 24 / t))


def test_fp8_layer_sp_selective_swiglu_gqa():
    h, a, kv, f, s, b, t = 2048, 16, 4, 5632, 1024, 1, 4
    model = ModelConfig(name="llama-fp8", num_layers=4, hidden_size=h, num_attention_heads=a, num_kv_heads=kv,
                        ffn_hidden_size=f, vocab_size=32000, max_seq_length=s, activation="swiglu",
                        tie_embeddings=False)
    sc = scenario(model, gbs=4, mbs=b, seq=s, tp=t, sequence_parallel=True, recompute="selective", precision="fp8")
    n, kvd = s * b, kv * (h // a)
    # selective recompute re-runs attention: its bf16 output is not kept, only proj's fp8 copy (1 B)
    per_token = ((2 + 1 + 1 + 2 + 1 + 1) * h          # norms, GEMM inputs in fp8, masks
                 + 2 * h + 2 * 2 * kvd + 1 * h          # Q, K, V bf16; proj input fp8
                 + 2 * (2 * f) + 1 * f)                 # gate+up output bf16 (SwiGLU's input), fc2 input fp8
    assert _layer(sc, t, "fp8") == pytest.approx(n * per_token / t)  # SP splits everything by t


def test_fp8_full_recompute_keeps_the_bf16_layer_input():
    sc = scenario(gpt(layers=4, hidden=512, heads=8, seq=256), gbs=2, mbs=1, seq=256, tp=2, sequence_parallel=True,
                  recompute="full", precision="fp8")
    assert _layer(sc, 2, "fp8") == pytest.approx(2 * 256 * 512 / 2)


def test_fp8_weight_cache_adds_two_bytes_per_parameter():
    sc = scenario(gpt(layers=4, hidden=512, heads=8, seq=256), gbs=4, mbs=1, seq=256, tp=2, precision="fp8")
    plan = resolve_plan(sc, 2)
    primary = memory_for_plan(sc, plan)[(0, 4)]
    sc.training.fp8_primary_weights = False
    cached = memory_for_plan(sc, plan)[(0, 4)]
    # bf16 weights 2 B + TE's fp8 weight and transpose 2 B (Hopper), grads and optimizer unchanged
    assert cached["params"] == pytest.approx(2 * primary["params"])
    assert (cached["grads"], cached["optimizer"]) == (primary["grads"], primary["optimizer"])


def test_overhead_is_a_sum_of_named_parts():
    # TP2 PP2 DP2, untied embeddings: TP ring, DP ring, pipeline p2p to two peers, no embedding group
    model = gpt(layers=4, hidden=512, heads=8, seq=256, tie_embeddings=False)
    sc = scenario(model, gbs=8, mbs=1, seq=256, tp=2, pp=2)
    plan = resolve_plan(sc, 8)
    st = memory_for_plan(sc, plan)[(0, 4)]
    fixed = 723 * MiB + 2 * 32 * MiB + 2 * RING + 2 * P2P_PEER
    assert st["overhead"] == pytest.approx(fixed + 0.05 * st["activations"])
    # tied embeddings add the first/last-stage all-reduce ring
    sc.model.tie_embeddings = True
    assert memory_for_plan(sc, plan)[(0, 4)]["overhead"] == pytest.approx(st["overhead"] + RING)
    # one GPU: no communicator at all
    one = scenario(model, gbs=2, mbs=1, seq=256)
    st1 = memory_for_plan(one, resolve_plan(one, 1))[(0, 2)]
    assert st1["overhead"] == pytest.approx(723 * MiB + 64 * MiB + 0.05 * st1["activations"])
    # a measured total replaces every part, the activation reserve included
    sc.training.memory_overhead_bytes = 5 * 10**9
    assert memory_for_plan(sc, plan)[(0, 4)]["overhead"] == 5 * 10**9


def test_megatron_weight_and_optimizer_formula():
    # megatron/training/theoretical_memory_usage.py compute_weight_and_optimizer_memory, by hand: GQA + SwiGLU,
    # RMSNorm, no biases, untied, distributed optimizer (6 + 12/dp B/param); most loaded shard = first stage
    h, a, g, f, L, V, t, p, d = 2048, 16, 4, 5632, 8, 32000, 2, 2, 4
    model = ModelConfig(name="m", num_layers=L, hidden_size=h, num_attention_heads=a, num_kv_heads=g,
                        ffn_hidden_size=f, vocab_size=V, max_seq_length=1024, activation="swiglu",
                        tie_embeddings=False)
    sc = scenario(model, gbs=16, mbs=1, seq=1024, tp=t, pp=p, zero_stage=1)
    st = memory_for_plan(sc, resolve_plan(sc, t * p * d))[(0, 4)]
    kv_channels = h // a
    attention = 2 * h * h * ((1 + g / a) * (kv_channels * a / h))
    mlp = 2 * h * f * 3 / 2
    norms = 2 * h * 1  # RMSNorm: norm_size 1
    Vp = 32000  # Megatron pads to a multiple of 128 * t = 256: 32000 already is one
    tp_sharded = (attention + mlp) * L / p / t + h * Vp / t
    replicated = norms * L / p  # Megatron also spreads the final norm (h) over the stages: h/p, left out here
    assert st["params"] + st["grads"] + st["optimizer"] == pytest.approx((tp_sharded + replicated) * (6 + 12 / d))


def test_megatron_activation_formula_bf16_any_ffn_width():
    # compute_activation_memory (SP + selective): s*b*h*(18 + 4*ffn/h) per layer, / t
    h, f, s, b, t = 1024, 3072, 512, 2, 4
    model = ModelConfig(name="m", num_layers=4, hidden_size=h, num_attention_heads=8, ffn_hidden_size=f,
                        vocab_size=4096, max_seq_length=s)
    sc = scenario(model, gbs=2, mbs=b, seq=s, tp=t, sequence_parallel=True, recompute="selective")
    assert _layer(sc, t, "bf16") == pytest.approx(s * b * h * (18 + 4 * f / h) / t)


def _nemo_175b(gpus, gbs, mbs, tp, pp, v, **tr):
    return scenario_from_dict({
        "name": "nemo", "model": "gpt3-175b",
        "parallelism": {"tp": tp, "pp": pp, "schedule": "interleaved" if v > 1 else "1f1b", "virtual_stages": v,
                        "sequence_parallel": tp > 1, "recompute": "selective", "zero_stage": 1},
        "training": {"global_batch_size": gbs, "micro_batch_size": mbs, "seq_length": 2048, "precision": "fp8", **tr},
        "cluster": {"groups": [{"name": "h100", "node_type": "dgx-h100", "num_nodes": gpus // 8}]}})


def test_nemo_gpt3_175b_512_gpus_fits_and_175b_on_8_gpus_does_not():
    # NeMo 24.07 performance summary: GPT3-175B on 512 H100, FP8, TP4 PP8 VP6, micro-batch 2 - it ran.
    # Korthikanti's 16-bit count put its first stage at 82 GiB (> 74.5 GiB of an H100); TE's fp8 storage does not.
    check_plan(_nemo_175b(512, 2048, 2, 4, 8, 6), 512, ["H100-SXM"] * 512)
    # 175B on one DGX (TP8, no pipeline): 18 B/param of 175e9/8 parameters alone is ~370 GiB
    with pytest.raises(PlanError, match="out of memory"):
        check_plan(_nemo_175b(8, 8, 1, 8, 1, 1), 8, ["H100-SXM"] * 8)
