"""The transformer being trained (architecture only; no weights)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from heterosim.config.base import Bounded, Strict

# Upper ends ~10x beyond the largest published dense and MoE models (PaLM 540B: 118 layers, d_model 18432,
# 48 heads, d_ff 73728, vocab 256k -- Chowdhery et al. 2022; DeepSeek-V3: 256 routed experts, top-8;
# Switch-C: 2048 experts -- Fedus et al. 2021; context: Llama 4 Scout's 10M tokens).
LAYERS_MAX = 2048
HIDDEN_MAX = 262_144
HEADS_MAX = 4096
VOCAB_MAX = 4_194_304
SEQ_MAX = 16_777_216
EXPERTS_MAX = 16_384


class ModelConfig(Strict):
    name: str
    """Zoo key or free-form label."""
    num_layers: Bounded(int, 1, LAYERS_MAX)
    hidden_size: Bounded(int, 1, HIDDEN_MAX)
    num_attention_heads: Bounded(int, 1, HEADS_MAX)
    num_kv_heads: Bounded(int, 1, HEADS_MAX) | None = None
    """Grouped-query attention; None = num_attention_heads (multi-head)."""
    head_dim: Bounded(int, 1, HIDDEN_MAX) | None = None
    """Width of one attention head (HF ``head_dim``, Megatron's ``kv_channels``); None = hidden_size /
    num_attention_heads. Qwen3 and Gemma set it apart: queries are num_attention_heads x head_dim wide, which
    may differ from hidden_size (the output projection maps them back)."""
    ffn_hidden_size: Bounded(int, 1, 8 * HIDDEN_MAX)
    vocab_size: Bounded(int, 1, VOCAB_MAX)
    max_seq_length: Bounded(int, 1, SEQ_MAX) = 2048
    activation: Literal["gelu", "swiglu"] = "gelu"
    """swiglu has three FFN matrices instead of two."""
    tie_embeddings: bool = True
    """Input embedding and LM head share weights (GPT-3 style)."""
    num_experts: Bounded(int, 0, EXPERTS_MAX) = 0
    """0 = dense model; otherwise a mixture-of-experts FFN in every layer."""
    moe_top_k: Bounded(int, 1, EXPERTS_MAX) = 2
    moe_ffn_hidden_size: Bounded(int, 1, 8 * HIDDEN_MAX) | None = None
    """Per-expert FFN width; None = ffn_hidden_size."""
    make_vocab_size_divisible_by: int = Field(128, gt=0)
    """Megatron-LM pads the vocabulary to a multiple of this times TP (its default: 128); the padded
    size is what the embedding, LM head and loss run on (reported in the summary)."""
    hidden_dropout: Bounded(float, 0.0, 0.99) = 0.1
    """Dropout probability on the attention and MLP outputs and the embedding (Megatron-Core's
    ``TransformerConfig.hidden_dropout``, default 0.1). At 0 no dropout mask is kept for backward
    (PyTorch's dropout returns its input when p == 0: ATen ``native/Dropout.cpp``), which the memory
    model follows. Llama, Mixtral and Nemotron train without it (their zoo entries and sources)."""
    source: str | None = None
    """Where the numbers come from (paper table, HF config)."""

    @model_validator(mode="after")
    def _check(self):
        kv = self.num_kv_heads or self.num_attention_heads
        if self.num_attention_heads % kv:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({kv})")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                             f"({self.num_attention_heads}), or give head_dim")
        if self.num_experts and self.moe_top_k > self.num_experts:
            raise ValueError(f"moe_top_k ({self.moe_top_k}) exceeds num_experts ({self.num_experts})")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """One attention head's width: ``head_dim`` if given, else hidden_size / num_attention_heads."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        """Query width (and the output projection's input): num_attention_heads x head_size."""
        return self.num_attention_heads * self.head_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0
