"""The batch being trained on in one iteration."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from heterosim.config.base import Strict


class TrainingConfig(Strict):
    global_batch_size: int = Field(gt=0)
    """Sequences per iteration, all data-parallel replicas together."""
    micro_batch_size: int = Field(1, gt=0)
    seq_length: int = Field(2048, gt=0)
    precision: Literal["fp32", "bf16", "fp16", "fp8"] = "bf16"
    """Compute precision of GEMMs (master weights and optimizer state stay fp32)."""
    iterations: int = Field(1, gt=0)
    """Iterations to simulate (results report the last / mean)."""
    microbatch_split: list[int] | None = None
    """Micro-batches per data-parallel replica (non-uniform); None = equal split."""

    @model_validator(mode="after")
    def _check(self):
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(f"global_batch_size ({self.global_batch_size}) must be a multiple of micro_batch_size ({self.micro_batch_size})")
        return self
