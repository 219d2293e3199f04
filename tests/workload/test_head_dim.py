"""model.head_dim set apart from hidden/heads (Qwen3, Gemma): parameter counts against the model card, GEMM
shapes and saved activations by hand, and no change where head_dim equals hidden/heads."""
import pytest

from heterosim.config import ModelConfig
from heterosim.workload.costs import LayerShapes, total_params
from heterosim.workload.memory import saved_tensor_bytes
from heterosim.workload.plan import resolve_plan

from wl_factory import scenario

QWEN3_30B_A3B = dict(name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_attention_heads=32,
                     num_kv_heads=4, head_dim=128, ffn_hidden_size=6144, moe_ffn_hidden_size=768,
                     num_experts=128, moe_top_k=8, vocab_size=151936, activation="swiglu",
                     tie_embeddings=False, hidden_dropout=0.0, max_seq_length=4096)


def test_qwen3_30b_a3b_total_parameters_match_the_model_card():
    # Qwen/Qwen3-30B-A3B model card: "Number of Parameters: 30.5B in total and 3.3B activated"
    m = ModelConfig(**QWEN3_30B_A3B)
    assert m.q_dim == 4096 and m.head_size == 128
    assert total_params(m) == pytest.approx(30.5e9, rel=0.003)
    # by hand: attention h(q + 2kv) + q h = 2048 (4096 + 1024) + 4096 * 2048 per layer
    attn = 2048 * (4096 + 2 * 512) + 4096 * 2048
    experts = 128 * 3 * 2048 * 768
    assert total_params(m) == pytest.approx(48 * (attn + experts + 2048 * 128 + 2 * 2048) + 2 * 151936 * 2048
                                            + 2048, rel=1e-9)


def test_gemm_shapes_and_saved_tensors_use_the_query_width():
    m = ModelConfig(**{**QWEN3_30B_A3B, "num_experts": 0, "ffn_hidden_size": 6144})
    sc = scenario(m, gbs=8, mbs=1, seq=4096, tp=2)
    plan = resolve_plan(sc, 2)
    sh = LayerShapes.of(m, plan, "bf16")
    assert sh.q_dim_local == 4096 // 2 and sh.kv_dim_local == 2 * 128
    qkv = sh.attn_qkv()[1]
    proj = sh.attn_out()[0]
    assert qkv[3][:3] == (4096, 2048 + 2 * 256, 2048)  # tokens x (q + 2 kv on this rank) x hidden
    assert proj[3][:3] == (4096, 2048, 2048)            # tokens x hidden x (q on this rank)
    saved = saved_tensor_bytes(m, plan, "bf16")
    assert saved["tp:q"] == (4096, 2.0) and saved["tp:proj_input"] == (4096, 2.0)
    assert saved["rep:norm1_input"] == (2048, 2.0)


def test_head_dim_equal_to_hidden_over_heads_changes_nothing():
    base = dict(name="m", num_layers=4, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                ffn_hidden_size=14336, vocab_size=32000, activation="swiglu", tie_embeddings=False)
    a, b = ModelConfig(**base), ModelConfig(**base, head_dim=128)
    assert total_params(a) == total_params(b) and a.q_dim == b.q_dim == 4096
    plan = resolve_plan(scenario(a, gbs=8, mbs=1, seq=2048, tp=4), 4)
    assert LayerShapes.of(a, plan, "bf16") == LayerShapes.of(b, plan, "bf16")
