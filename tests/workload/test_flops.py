"""IR FLOPs against Narayanan et al. 2021's closed forms."""
import pytest

from heterosim.workload.compiler import compile_workload
from heterosim.workload.costs import model_flops_per_iteration

from wl_factory import gpt, scenario

# (layers, hidden, heads) of GPT-3 sizes (Brown et al. 2020 Table 2.1 / Narayanan et al. 2021 Table 1)
GPT3 = {"125m": (12, 768, 12), "1.3b": (24, 2048, 16), "13b": (40, 5120, 40), "175b": (96, 12288, 96)}
V, S = 51200, 2048


def _narayanan_with_recompute(B, s, l, h, v):
    """Eq. (3) of Narayanan et al. 2021: 4 passes over the layers (full recompute), 3 over the LM head."""
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


@pytest.mark.parametrize("size", list(GPT3))
@pytest.mark.parametrize("tp,pp,cp", [(1, 1, 1), (4, 2, 1), (2, 2, 2)])
def test_total_ir_flops_full_recompute(size, tp, pp, cp):
    l, h, a = GPT3[size]
    B = 16
    sc = scenario(gpt(layers=l, hidden=h, heads=a, vocab=V, seq=S), gbs=B, mbs=1, seq=S, tp=tp, pp=pp, cp=cp,
                  recompute="full", sequence_parallel=True)
    ir = compile_workload(sc, tp * pp * cp * 2)
    ref = _narayanan_with_recompute(B, S, l, h, V)
    assert ir.total_flops() == pytest.approx(ref, rel=0.01)
    assert ir.total_flops() > ref  # elementwise kernels and the optimizer add a little, never subtract


@pytest.mark.parametrize("size", list(GPT3))
def test_model_flops_megatron_formula(size):
    l, h, a = GPT3[size]
    B = 1536
    got = model_flops_per_iteration(gpt(layers=l, hidden=h, heads=a, vocab=V, seq=S), B, S)
    assert got == pytest.approx(72 * B * S * l * h * h * (1 + S / (6 * h) + V / (12 * l * h)), rel=1e-12)


def test_recompute_modes_order_hardware_flops():
    l, h, a = GPT3["1.3b"]
    m = gpt(layers=l, hidden=h, heads=a, vocab=V, seq=S)
    got = {}
    for rc in ("none", "selective", "full"):
        ir = compile_workload(scenario(m, gbs=8, seq=S, tp=2, recompute=rc), 4)
        got[rc] = ir.meta["hardware_flops"]
        assert ir.meta["hardware_flops"] == pytest.approx(ir.total_flops())
    mf = ir.meta["model_flops_per_iteration"]
    assert mf < got["none"] < got["selective"] < got["full"]
    assert got["none"] == pytest.approx(mf, rel=0.01)
    # selective recomputes the attention core: 4*b*s^2*h per layer and sequence
    assert got["selective"] - got["none"] == pytest.approx(4 * 8 * S * S * h * l, rel=1e-6)


def test_gqa_swiglu_moe_model_flops_consistent_with_ir():
    from heterosim.config import ModelConfig
    m = ModelConfig(name="moe", num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=2,
                    ffn_hidden_size=1024, vocab_size=4096, max_seq_length=512, activation="swiglu",
                    num_experts=8, moe_top_k=2)
    sc = scenario(m, gbs=16, seq=512, tp=2, ep=2, sequence_parallel=True)
    ir = compile_workload(sc, 8)
    assert ir.total_flops() == pytest.approx(ir.meta["model_flops_per_iteration"], rel=0.02)
