"""How the job is split across GPUs (Megatron-LM vocabulary)."""
from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from heterosim.config.base import Bounded, Strict
from heterosim.config.model import LAYERS_MAX
from hscommon.bounds import CLUSTER_GPUS_MAX, GPUS_PER_NODE_MAX

Degree = Bounded(int, 1, CLUSTER_GPUS_MAX)


class ParallelConfig(Strict):
    tp: Bounded(int, 1, GPUS_PER_NODE_MAX) = 1
    """Tensor-parallel size (kept inside a node)."""
    pp: Bounded(int, 1, LAYERS_MAX) = 1
    """Pipeline-parallel stages."""
    dp: Degree | None = None
    """Data-parallel size; None = GPUs / (tp*pp*cp)."""
    cp: Degree = 1
    """Context-parallel size (splits the sequence; ring attention)."""
    ep: Degree = 1
    """Expert-parallel size (MoE only); carved out of the data-parallel ranks."""
    sequence_parallel: bool = False
    """Megatron SP: TP all-reduce becomes reduce-scatter + all-gather, activations sharded."""
    schedule: Literal["1f1b", "interleaved", "gpipe"] = "1f1b"
    virtual_stages: Bounded(int, 1, LAYERS_MAX) = 1
    """Model chunks per pipeline rank for the interleaved schedule."""
    zero_stage: Literal[0, 1] = 0
    """1 = distributed optimizer (ZeRO-1): grads reduce-scattered, params all-gathered."""
    recompute: Literal["none", "selective", "full"] = "none"
    order: str = "tp-cp-ep-dp-pp"
    """Rank layout, fastest-varying first (Megatron's RankGenerator order)."""
    layer_partition: list[Bounded(int, 0, LAYERS_MAX)] | None = None
    """Layers per pipeline stage (non-uniform); None = equal split."""
    stage_tp: list[Bounded(int, 0, GPUS_PER_NODE_MAX)] | None = None  # 0: the plan says "one TP degree >= 1"
    """TP degree of each pipeline stage (uneven TP across device groups, e.g. [8, 4]); None = ``tp``
    everywhere. Needs dp given or derivable; world = dp * cp * sum(stage_tp); each entry must divide the
    attention heads and TP groups stay inside one node. Layout is stage-major (pp slowest); ``tp`` stays 1
    (or max(stage_tp)), ``pp`` 1 or len(stage_tp)."""
    overlap_grad_reduce: bool = True
    """DP gradient reduction overlaps the backward pass (bucketed)."""
    overlap_param_gather: bool = True
    """ZeRO-1 parameter all-gather overlaps the next forward."""
    tp_comm_overlap: bool = False
    """Megatron-LM's ``--tp-comm-overlap`` (default off): Transformer Engine userbuffers overlap the
    sequence-parallel all-gather with the block's first GEMM (ring exchange, tp chunks) and pipeline the
    reduce-scatter behind its closing GEMM. Needs sequence_parallel (as in Megatron); ignored without it."""
    grad_bucket_bytes: Bounded(int, 1, 1 << 40, unit="bytes") = 40_000_000
    """DP gradient bucket size (Megatron default: 40M elements ~ we use bytes)."""

    @model_validator(mode="after")
    def _no_empty_stage(self):
        """Every pipeline stage holds a layer (a virtual stage of an interleaved schedule may hold none)."""
        part, pp = self.layer_partition, self.pp
        if part is None or self.stage_tp is not None:
            return self
        per_stage = part if len(part) == pp else (
            [sum(part[c * pp + s] for c in range(len(part) // pp)) for s in range(pp)]
            if len(part) == pp * self.virtual_stages else None)
        if per_stage is not None and 0 in per_stage:
            raise ValueError(f"pipeline stage {per_stage.index(0)} has no layers: layer_partition {part}")
        return self

    @field_validator("order")
    @classmethod
    def _order(cls, v: str) -> str:
        dims = v.split("-")
        if sorted(dims) != sorted(["tp", "cp", "ep", "dp", "pp"]) and sorted(dims) != sorted(["tp", "cp", "dp", "pp"]) \
                and sorted(dims) != sorted(["tp", "dp", "pp"]):
            raise ValueError(f"order must be a permutation of tp-cp-ep-dp-pp, got {v!r}")
        return v
