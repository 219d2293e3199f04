"""Every zoo entry validates, and the headline architectures have their published sizes."""
from __future__ import annotations

import pytest

from heterosim.config import ModelConfig
from heterosim.errors import ConfigError
from heterosim.zoo import zoo_model, zoo_names

REQUIRED = ["gpt3-1.7b", "gpt3-3.6b", "gpt3-7.5b", "gpt3-18.4b", "gpt3-39.1b", "gpt3-76.1b", "gpt3-145.6b",
            "gpt3-310.1b", "gpt3-529.6b", "gpt3-1t", "gpt3-175b", "llama1-65b", "llama2-7b", "llama2-13b",
            "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b"]


def _params(m: ModelConfig) -> float:
    """Parameter count (matmul weights + embeddings; norms/biases are < 0.1%)."""
    h, kv = m.hidden_size, m.kv_heads * m.head_size
    ffn = (3 if m.activation == "swiglu" else 2) * h * (m.moe_ffn_hidden_size or m.ffn_hidden_size) * max(1, m.num_experts)
    per_layer = h * (h + 2 * kv) + h * h + ffn
    emb = m.vocab_size * h * (1 if m.tie_embeddings else 2)
    return m.num_layers * per_layer + emb


@pytest.mark.parametrize("name", zoo_names())
def test_every_zoo_entry_validates_and_has_a_source(name):
    m = ModelConfig(**zoo_model(name))
    assert m.name == name
    assert m.source


def test_required_models_present():
    assert set(REQUIRED) <= set(zoo_names())


@pytest.mark.parametrize("name,billions,tol", [
    ("gpt3-1.7b", 1.7, 0.05), ("gpt3-7.5b", 7.5, 0.02), ("gpt3-18.4b", 18.4, 0.01), ("gpt3-39.1b", 39.1, 0.01),
    ("gpt3-76.1b", 76.1, 0.01), ("gpt3-145.6b", 145.6, 0.01), ("gpt3-310.1b", 310.1, 0.01),
    ("gpt3-529.6b", 529.6, 0.01), ("gpt3-1t", 1008.0, 0.01), ("gpt3-175b", 175.0, 0.01),
    ("llama2-7b", 6.74, 0.01), ("llama2-13b", 13.0, 0.01), ("llama2-70b", 69.0, 0.01), ("llama1-65b", 65.2, 0.01),
    ("llama3-8b", 8.03, 0.01), ("llama3-70b", 70.6, 0.01), ("llama3-405b", 405.8, 0.01),
    ("mixtral-8x7b", 46.7, 0.01),
])
def test_parameter_counts_match_publications(name, billions, tol):
    got = _params(ModelConfig(**zoo_model(name))) / 1e9
    assert abs(got - billions) / billions < tol, got


def test_gqa_and_moe_fields():
    assert ModelConfig(**zoo_model("llama2-70b")).kv_heads == 8
    assert ModelConfig(**zoo_model("llama3-405b")).vocab_size == 128256
    mx = ModelConfig(**zoo_model("mixtral-8x7b"))
    assert (mx.num_experts, mx.moe_top_k, mx.activation, mx.kv_heads) == (8, 2, "swiglu", 8)
    g = ModelConfig(**zoo_model("gpt3-175b"))
    assert (g.num_layers, g.hidden_size, g.num_attention_heads, g.ffn_hidden_size, g.vocab_size,
            g.max_seq_length) == (96, 12288, 96, 4 * 12288, 51200, 2048)


def test_unknown_zoo_name_is_user_error():
    with pytest.raises(ConfigError, match="gpt5"):
        zoo_model("gpt5")
