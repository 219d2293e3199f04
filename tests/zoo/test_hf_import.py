"""HuggingFace config.json import: synthetic configs for each family, and one-line errors."""
from __future__ import annotations

import json

import pytest
import yaml

from heterosim.config import ModelConfig
from heterosim.errors import ConfigError
from heterosim.zoo import load_hf_config
from heterosim.zoo.hf_import import hf_config_to_model, hf_to_zoo_yaml


def _write(tmp_path, cfg, sub="m"):
    d = tmp_path / sub
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d / "config.json"


LLAMA = {"model_type": "llama", "_name_or_path": "org/tiny-llama", "num_hidden_layers": 4, "hidden_size": 256,
         "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 688, "vocab_size": 32000,
         "max_position_embeddings": 4096, "hidden_act": "silu", "tie_word_embeddings": False}


def test_llama(tmp_path):
    f = hf_config_to_model(_write(tmp_path, LLAMA))
    assert f == {**f, "name": "tiny-llama", "num_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
                 "num_kv_heads": 2, "ffn_hidden_size": 688, "vocab_size": 32000, "max_seq_length": 4096,
                 "activation": "swiglu", "tie_embeddings": False}
    ModelConfig(**f)
    assert load_hf_config(tmp_path / "m") == f  # folder path works too, through the zoo entry point


def test_gpt2_aliases_and_defaults(tmp_path):
    cfg = {"model_type": "gpt2", "n_layer": 6, "n_embd": 384, "n_head": 6, "n_inner": None, "vocab_size": 50257,
           "n_positions": 1024, "activation_function": "gelu_new"}
    f = hf_config_to_model(_write(tmp_path, cfg, "gpt2-small"))
    assert f["name"] == "gpt2-small"
    assert (f["num_layers"], f["hidden_size"], f["num_attention_heads"], f["ffn_hidden_size"]) == (6, 384, 6, 1536)
    assert (f["max_seq_length"], f["activation"], f["tie_embeddings"]) == (1024, "gelu", True)
    assert "num_kv_heads" not in f


def test_mixtral(tmp_path):
    cfg = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 1, "intermediate_size": 448, "vocab_size": 1000, "max_position_embeddings": 512,
           "hidden_act": "silu", "num_local_experts": 8, "num_experts_per_tok": 2}
    f = hf_config_to_model(_write(tmp_path, cfg))
    assert (f["num_experts"], f["moe_top_k"], f["moe_ffn_hidden_size"], f["activation"]) == (8, 2, 448, "swiglu")
    assert f["tie_embeddings"] is False
    ModelConfig(**f)


def test_gpt_neox_and_gptj(tmp_path):
    neox = {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 256, "vocab_size": 500, "max_position_embeddings": 2048, "hidden_act": "gelu"}
    assert hf_config_to_model(_write(tmp_path, neox, "a"))["tie_embeddings"] is False
    gptj = {"model_type": "gptj", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 500, "n_positions": 2048,
            "activation_function": "gelu_new"}
    assert hf_config_to_model(_write(tmp_path, gptj, "b"))["ffn_hidden_size"] == 256


def test_zoo_yaml_snippet_round_trips(tmp_path):
    text = hf_to_zoo_yaml(_write(tmp_path, LLAMA), "my-llama")
    data = yaml.safe_load(text)
    assert list(data) == ["my-llama"]
    m = ModelConfig(name="my-llama", **data["my-llama"])
    assert m.kv_heads == 2 and m.source and "org/tiny-llama" in m.source


def test_unknown_model_type_names_file_field_value(tmp_path):
    p = _write(tmp_path, {**LLAMA, "model_type": "bert"})
    with pytest.raises(ConfigError) as ei:
        hf_config_to_model(p)
    msg = str(ei.value)
    assert str(p) in msg and "model_type = 'bert'" in msg and "\n" not in msg


def test_missing_required_field(tmp_path):
    cfg = dict(LLAMA)
    del cfg["num_hidden_layers"]
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        hf_config_to_model(_write(tmp_path, cfg))


def test_bad_values_are_user_errors(tmp_path):
    with pytest.raises(ConfigError, match="hidden_size = -1"):
        hf_config_to_model(_write(tmp_path, {**LLAMA, "hidden_size": -1}, "a"))
    with pytest.raises(ConfigError, match="num_kv_heads"):  # 8 heads are not a multiple of 3 kv heads
        hf_config_to_model(_write(tmp_path, {**LLAMA, "num_key_value_heads": 3}, "b"))
    with pytest.raises(ConfigError, match="hidden_act = 'tanh'"):
        hf_config_to_model(_write(tmp_path, {**LLAMA, "hidden_act": "tanh"}, "c"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON"):
        hf_config_to_model(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        hf_config_to_model(tmp_path / "missing.json")


def test_qwen3_moe_head_dim_and_dropout(tmp_path):
    # Qwen/Qwen3-30B-A3B config.json fields (head_dim 128 on a 2048 hidden size with 32 heads)
    cfg = {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 32,
           "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
           "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "max_position_embeddings": 40960,
           "hidden_act": "silu", "tie_word_embeddings": False, "attention_dropout": 0.0}
    f = hf_config_to_model(_write(tmp_path, cfg))
    assert (f["head_dim"], f["moe_ffn_hidden_size"], f["num_experts"], f["moe_top_k"]) == (128, 768, 128, 8)
    assert f["hidden_dropout"] == 0.0  # no hidden-state dropout in the file: the family's default, 0
    assert ModelConfig(**f).q_dim == 4096
    # head_dim equal to hidden/heads is not repeated; GPT-2's resid_pdrop is read
    same = {**LLAMA, "head_dim": 32}
    assert "head_dim" not in hf_config_to_model(_write(tmp_path, same, "same"))
    gpt2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 500, "resid_pdrop": 0.2}
    assert hf_config_to_model(_write(tmp_path, gpt2, "g"))["hidden_dropout"] == 0.2
