"""The batch being trained on in one iteration."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

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
    attention: Literal["auto", "flash", "fused", "unfused"] = "auto"
    """Attention kernel: ``unfused`` (baddbmm + fused scale-mask-softmax + dropout + bmm, Megatron-LM on
    A100 in 2021-22: s^2 score traffic and activations), ``flash`` (FlashAttention-2), ``fused`` (cuDNN
    fused attention, what Transformer Engine runs on Hopper). ``auto`` picks per device generation:
    fused on Hopper and newer, flash on Ampere/Ada/AMD, unfused on Volta (hardware.compute.attention_impl)."""
    grad_reduce_dtype: Literal["fp32", "bf16"] = "fp32"
    """Precision of the gradient buffer and its data-parallel reduction. Megatron-LM keeps fp32 main
    grads and reduces them in fp32 for bf16/fp16 training unless told otherwise
    (``--accumulate-allreduce-grads-in-fp32``, default on with the distributed optimizer)."""
    memory_overhead_bytes: int | None = Field(None, ge=0)
    """Per-GPU memory beyond the model's tensors (Megatron's theoretical formula leaves it out). None
    (default): the sum of named, cited parts that scales with what the run creates
    (heterosim.workload.memory.overhead_parts: CUDA context, cuBLAS workspaces, NCCL buffers of each
    communicator the rank uses, and an allocator/temporaries reserve of 5% of activations, Megatron's
    own ``overhead_factor``). A number replaces all of them: set it from your runs'
    torch.cuda.max_memory_reserved() minus the theoretical footprint."""
    fp8_primary_weights: bool = True
    """With precision fp8: the model's weights are stored in fp8 (Megatron ``--fp8-param-gather`` /
    ``fp8_param``, TE ``quantized_model_init``), so the 1 B fp8 weight and its 1 B transpose replace the
    2 B bf16 weight. False: bf16 weights plus Transformer Engine's cached fp8 weight and transpose
    (``is_first_microbatch`` workspace), +2 B per GEMM parameter. Default from NVIDIA's FP8 performance
    recipes (Megatron-Bridge perf configs set ``fp8_param_gather = True``, "perf-optimal, = MLM")."""
    framework: str | None = None
    """A framework preset (heterosim/config/frameworks.yaml; docs/framework-presets.md): megatron-lm-2021,
    megatron-core, nemo, megatron-bridge, megatron-bridge-perf (its scripts/performance configs), torchtitan (FSDP2),
    deepspeed, deepspeed-zero2, deepspeed-zero3.
    It fills the attention kernel, gradient dtype and bucket, overlaps, distributed optimizer, sequence
    parallelism and vocabulary padding the framework uses, each cited, wherever the scenario gives no value
    (an explicit value wins). None: no preset (every field at its own default)."""
    iterations: Bounded(int, 1, ITERATIONS_MAX) = 1
    """Iterations to simulate (results report the last / mean)."""
    microbatch_split: list[Bounded(int, 0, BATCH_MAX)] | None = None
    """Micro-batches per data-parallel replica (non-uniform); None = equal split."""

    @field_validator("framework")
    @classmethod
    def _known_framework(cls, v: str | None) -> str | None:
        from heterosim.config.frameworks import known_or_reason

        why = known_or_reason(v)
        if why:
            raise ValueError(why)
        return v

    @model_validator(mode="after")
    def _check(self):
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(f"global_batch_size ({self.global_batch_size}) must be a multiple of micro_batch_size ({self.micro_batch_size})")
        return self
