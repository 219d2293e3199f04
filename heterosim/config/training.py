"""The batch being trained on in one iteration."""
from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from heterosim.config.base import Bounded, Strict
from heterosim.config.model import SEQ_MAX

BATCH_MAX = 1_048_576
"""Sequences per iteration: 1M is ~500x the largest published (Llama 3 405B: 16M tokens of 8192 = 2048
sequences, Dubey et al. 2024); a bigger number is a typo that would compile millions of micro-batches."""
ITERATIONS_MAX = 1000
"""Iterations simulated per run: the simulation is deterministic, so a few give the steady state."""


class TrainingConfig(Strict):
    global_batch_size: Bounded(int, 1, BATCH_MAX)
    """Sequences per iteration, all data-parallel replicas together."""
    micro_batch_size: Bounded(int, 1, BATCH_MAX) = 1
    seq_length: Bounded(int, 1, SEQ_MAX) = 2048
    precision: Literal["fp32", "bf16", "fp16", "fp8"] = "bf16"
    """Compute precision of GEMMs (master weights and optimizer state stay fp32)."""
    iterations: Bounded(int, 1, ITERATIONS_MAX) = 1
    """Iterations to simulate (results report the last / mean)."""
    microbatch_split: list[Bounded(int, 0, BATCH_MAX)] | None = None
    """Micro-batches per data-parallel replica (non-uniform); None = equal split."""

    @model_validator(mode="after")
    def _check(self):
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(f"global_batch_size ({self.global_batch_size}) must be a multiple of micro_batch_size ({self.micro_batch_size})")
        return self
