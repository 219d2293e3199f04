"""How the job is split across GPUs (Megatron-LM vocabulary)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from heterosim.config.base import Strict


class ParallelConfig(Strict):
    tp: int = Field(1, gt=0)
    """Tensor-parallel size (kept inside a node)."""
    pp: int = Field(1, gt=0)
    """Pipeline-parallel stages."""
    dp: int | None = Field(None, gt=0)
    """Data-parallel size; None = GPUs / (tp*pp*cp)."""
    cp: int = Field(1, gt=0)
    """Context-parallel size (splits the sequence; ring attention)."""
    ep: int = Field(1, gt=0)
    """Expert-parallel size (MoE only); carved out of the data-parallel ranks."""
    sequence_parallel: bool = False
    """Megatron SP: TP all-reduce becomes reduce-scatter + all-gather, activations sharded."""
    schedule: Literal["1f1b", "interleaved", "gpipe"] = "1f1b"
    virtual_stages: int = Field(1, gt=0)
    """Model chunks per pipeline rank for the interleaved schedule."""
    zero_stage: Literal[0, 1] = 0
    """1 = distributed optimizer (ZeRO-1): grads reduce-scattered, params all-gathered."""
    recompute: Literal["none", "selective", "full"] = "none"
    order: str = "tp-cp-ep-dp-pp"
    """Rank layout, fastest-varying first (Megatron's RankGenerator order)."""
    layer_partition: list[int] | None = None
    """Layers per pipeline stage (non-uniform); None = equal split."""
    stage_tp: list[int] | None = None
    """TP degree of each pipeline stage (uneven TP across device groups, e.g. [8, 4]); None = ``tp``
    everywhere. Needs dp given or derivable; world = dp * cp * sum(stage_tp); each entry must divide the
    attention heads and TP groups stay inside one node. Layout is stage-major (pp slowest); ``tp`` stays 1
    (or max(stage_tp)), ``pp`` 1 or len(stage_tp)."""
    overlap_grad_reduce: bool = True
    """DP gradient reduction overlaps the backward pass (bucketed)."""
    overlap_param_gather: bool = True
    """ZeRO-1 parameter all-gather overlaps the next forward."""
    tp_comm_overlap: bool = False
    """TP communication hidden behind GEMMs (Megatron's tp-comm-overlap)."""
    grad_bucket_bytes: int = Field(40_000_000, gt=0)
    """DP gradient bucket size (Megatron default: 40M elements ~ we use bytes)."""

    @field_validator("order")
    @classmethod
    def _order(cls, v: str) -> str:
        dims = v.split("-")
        if sorted(dims) != sorted(["tp", "cp", "ep", "dp", "pp"]) and sorted(dims) != sorted(["tp", "cp", "dp", "pp"]) \
                and sorted(dims) != sorted(["tp", "dp", "pp"]):
            raise ValueError(f"order must be a permutation of tp-cp-ep-dp-pp, got {v!r}")
        return v
