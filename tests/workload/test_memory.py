"""Per-rank memory against hand computations (Korthikanti et al. 2022; 18 B/param mixed-precision Adam)."""
import pytest

from heterosim.config import ModelConfig
from heterosim.workload.memory import memory_per_rank
from heterosim.workload.plan import resolve_plan
from heterosim.workload.memory import memory_for_plan

from wl_factory import gpt, scenario


def _breakdown(sc, world):
    plan = resolve_plan(sc, world)
    return memory_for_plan(sc, plan), plan


def test_gpt3_175b_tp8_pp16_sp_selective():
    h, s, t, V = 12288, 2048, 8, 51200
    model = gpt(layers=96, hidden=h, heads=96, vocab=V, seq=s)
    sc = scenario(model, gbs=1536, mbs=1, seq=s, tp=t, pp=16, sequence_parallel=True, recompute="selective")
    mem, plan = _breakdown(sc, 1024)
    # one layer on one TP rank: QKV (h x 3h/t) + bias, out-proj (h/t x h) + bias (replicated), LN 2h;
    # MLP fc1 (h x 4h/t) + bias, fc2 (4h/t x h) + bias (replicated), LN 2h
    attn = h * (3 * h // t) + (h // t) * h + 3 * h // t + h + 2 * h
    mlp = h * (4 * h // t) + (4 * h // t) * h + 4 * h // t + h + 2 * h
    layer = attn + mlp
    # selective recompute + SP: 34*s*b*h/t bytes per layer and micro-batch (Korthikanti Table 2)
    act_layer = 34 * s * 1 * h / t
    # stage 1: 6 layers, 1F1B keeps pp - 1 = 15 micro-batches in flight, 18 B per parameter
    st1 = mem[(1, 192)]
    assert st1["params"] + st1["grads"] + st1["optimizer"] == pytest.approx(18 * 6 * layer)
    assert st1["activations"] == pytest.approx(15 * 6 * act_layer)
    # stage 0 adds the vocab-parallel embedding and learned positions; 16 in flight, + embedding dropout mask
    embed = V // t * h + s * h
    st0 = mem[(0, 192)]
    assert st0["params"] == pytest.approx(2 * (6 * layer + embed))
    assert st0["activations"] == pytest.approx(16 * (6 * act_layer + s * h / t))
    # + the per-GPU allowance: CUDA context 723 MiB, two 32 MiB cuBLAS workspaces, NCCL rings for TP, DP and the
    # tied embedding (16 channels x (LL 512 KiB + LL128 120*640*8*8 B + Simple 4 MiB) each), pipeline p2p to two
    # peers (2 channels x 512 KiB x 8 steps each), and 5% of the activations (Megatron's overhead_factor 1.05)
    acts0 = 16 * (6 * act_layer + s * h / t)
    ring = 16 * (512 * 1024 + 120 * 640 * 8 * 8 + 4 * 2**20)
    fixed = 723 * 2**20 + 64 * 2**20 + 3 * ring + 2 * 2 * 512 * 1024 * 8
    assert st0["overhead"] == pytest.approx(fixed + 0.05 * acts0)
    assert st0["total"] / 2**30 == pytest.approx((18 * (6 * layer + embed) + 1.05 * acts0 + fixed) / 2**30)
    assert 30 < st0["total"] / 2**30 < 40  # sanity: fits an 80 GB H100, not a 40 GB A100 by much


def test_llama_like_gqa_swiglu_zero1_no_sp():
    h, a, kv, f, V, s, b, t, dp = 1024, 16, 4, 2816, 32000, 1024, 2, 2, 4
    model = ModelConfig(name="llama-test", num_layers=4, hidden_size=h, num_attention_heads=a, num_kv_heads=kv,
                        ffn_hidden_size=f, vocab_size=V, max_seq_length=s, activation="swiglu", tie_embeddings=False)
    sc = scenario(model, gbs=16, mbs=b, seq=s, tp=t, pp=1, zero_stage=1)
    sc.training.attention = "unfused"  # Korthikanti's formula with its 5as^2b score term
    mem, plan = _breakdown(sc, t * dp)
    hd = h // a
    kv_local = kv // t * hd
    layer = h * (h // t + 2 * kv_local) + (h // t) * h + h + 3 * h * (f // t) + h  # no biases, RMSNorm
    params = 4 * layer + V // t * h + (h + V // t * h)  # layers + embedding + untied head and final norm
    st = mem[(0, 2)]
    # 2 B bf16 weights + 4 B fp32 grads, 12 B optimizer sharded over dp=4 (ZeRO-1)
    assert st["params"] + st["grads"] == pytest.approx(6 * params)
    assert st["optimizer"] == pytest.approx(12 * params / dp)
    sbh = s * b * h
    per_layer = 10 * sbh + (4 * sbh + 4 * s * b * kv * hd + 6 * s * b * f) / t + 5 * a * s * s * b / t
    # pp = 1: one micro-batch in flight; + embedding dropout mask, final-norm input and fp32 logits
    acts = 4 * per_layer + sbh + 2 * sbh + 4 * s * b * V / t
    assert st["activations"] == pytest.approx(acts)


def test_full_recompute_gpipe_last_stage():
    h, a, V, s = 256, 8, 1024, 256
    model = gpt(layers=8, hidden=h, heads=a, vocab=V, seq=s)
    sc = scenario(model, gbs=8, mbs=1, seq=s, pp=2, schedule="gpipe", recompute="full")
    sc.training.attention = "unfused"  # Korthikanti's formula with its 5as^2b score term
    mem, _ = _breakdown(sc, 2)
    st = mem[(1, 8)]
    layer = (h * 3 * h + h * h + 3 * h + h + 2 * h) + (2 * h * 4 * h + 4 * h + h + 2 * h)
    head = 2 * h + V * h  # tied head is a copy on the last stage when pp > 1
    assert st["params"] == pytest.approx(2 * (4 * layer + head))
    sbh = s * h
    # GPipe holds all 8 micro-batches: layer inputs (2sbh each) + head activations; one layer fully recomputed
    acts = 8 * (4 * 2 * sbh + 2 * sbh + 4 * s * V) + (34 * sbh + 5 * a * s * s)
    assert st["activations"] == pytest.approx(acts)


def test_memory_per_rank_follows_stage_and_replica():
    sc = scenario(gbs=12, split=[1, 11], pp=2, tp=2)
    per = memory_per_rank(sc, 8)
    # ranks 0,1: stage 0 replica 0; 2,3: stage 0 replica 1; 4..7 stage 1
    assert per[0] == per[1] and per[2] == per[3] and per[4] == per[5]
    assert per[0] < per[2]  # replica 0 runs 1 micro-batch: stage 0 holds 1 in flight, not pp = 2
    assert per[0] != per[4]


def test_no_dropout_keeps_no_masks():
    """hidden_dropout 0 (Llama, Mixtral, Nemotron, MPT): PyTorch's dropout at p == 0 returns its input, so
    neither the two 1-byte masks per layer (after attention and after the MLP) nor the embedding's exist.
    Korthikanti's 34 s*b*h/t per layer with SP (selective recompute) becomes 32 s*b*h/t."""
    h, s, t = 4096, 2048, 4
    with_dropout = gpt(layers=8, hidden=h, heads=32, vocab=51200, seq=s)
    without = with_dropout.model_copy(update={"hidden_dropout": 0.0})
    mems = {}
    for name, model in (("0.1", with_dropout), ("0", without)):
        sc = scenario(model, gbs=8, mbs=1, seq=s, tp=t, pp=2, sequence_parallel=True, recompute="selective")
        mems[name], _ = _breakdown(sc, 2 * t)
    # stage 1: 4 layers + the last stage's final-norm input (2 B) and fp32 vocab-parallel logits, 1 in flight;
    # stage 0: 4 layers + the embedding's dropout mask, 2 in flight (1F1B: pp - stage)
    head = 2 * s * h / t + 4 * s * 51200 / t
    assert mems["0.1"][(1, 8)]["activations"] == pytest.approx(1 * (4 * 34 * s * h / t + head))
    assert mems["0"][(1, 8)]["activations"] == pytest.approx(1 * (4 * 32 * s * h / t + head))
    assert mems["0.1"][(0, 8)]["activations"] == pytest.approx(2 * (4 * 34 * s * h / t + s * h / t))
    assert mems["0"][(0, 8)]["activations"] == pytest.approx(2 * 4 * 32 * s * h / t)
