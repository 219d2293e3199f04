"""The transformer being trained (architecture only; no weights)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from heterosim.config.base import Strict


class ModelConfig(Strict):
    name: str
    """Zoo key or free-form label."""
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int | None = Field(None, gt=0)
    """Grouped-query attention; None = num_attention_heads (multi-head)."""
    ffn_hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_seq_length: int = Field(2048, gt=0)
    activation: Literal["gelu", "swiglu"] = "gelu"
    """swiglu has three FFN matrices instead of two."""
    tie_embeddings: bool = True
    """Input embedding and LM head share weights (GPT-3 style)."""
    num_experts: int = Field(0, ge=0)
    """0 = dense model; otherwise a mixture-of-experts FFN in every layer."""
    moe_top_k: int = Field(2, gt=0)
    moe_ffn_hidden_size: int | None = Field(None, gt=0)
    """Per-expert FFN width; None = ffn_hidden_size."""
    make_vocab_size_divisible_by: int = Field(128, gt=0)
    """Megatron-LM pads the vocabulary to a multiple of this times TP (its default: 128); the padded
    size is what the embedding, LM head and loss run on (reported in the summary)."""
    source: str | None = None
    """Where the numbers come from (paper table, HF config)."""

    @model_validator(mode="after")
    def _check(self):
        kv = self.num_kv_heads or self.num_attention_heads
        if self.num_attention_heads % kv:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({kv})")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads ({self.num_attention_heads})")
        if self.num_experts and self.moe_top_k > self.num_experts:
            raise ValueError(f"moe_top_k ({self.moe_top_k}) exceeds num_experts ({self.num_experts})")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0
