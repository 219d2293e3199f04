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
    """Expert-parallel size (MoE only); carved out of the data-parallel ranks (ep divides dp), or with
    ``expert_tp`` apart from tp folded out of tp x cp x dp (expert_tp * ep divides tp * cp * dp)."""
    moe_dispatcher: Literal["alltoall", "allgather"] = "alltoall"
    """How MoE tokens reach their experts (Megatron-Core ``moe_token_dispatcher_type``): ``alltoall`` sends each
    token to the ranks of its top-k experts and back (two all-to-alls per pass); ``allgather`` all-gathers the
    expert-parallel group's hidden states, lets each rank pick its experts' tokens, and reduce-scatters the
    experts' output (Megatron-Core 0.8's default, transformer_config.py line 256 at core_r0.8.0). Default
    alltoall: what Megatron-Bridge's MoE models set (deepseek_provider.py line 76, qwen_provider.py line 395,
    commit 5776a6d)."""
    expert_tp: Bounded(int, 1, GPUS_PER_NODE_MAX) | None = None
    """Expert tensor-parallel size (Megatron-Core ``--expert-tensor-parallel-size``, MoE only): the experts'
    GEMMs are split over ``expert_tp`` ranks instead of ``tp``. None = ``tp`` (Megatron-Core's default,
    parallel_state.initialize_model_parallel: "expert_tensor_parallel_size (default = tp_size)") and today's
    layout. With a value != tp the expert groups are folded out of tp x cp x dp as Megatron-Core's "MoE
    parallel folding" does (a second RankGenerator with tp = expert_tp, ep, dp = world / (expert_tp * ep * pp),
    cp = 1, the same order): expert_tp * ep must divide tp * cp * dp; each TP rank dispatches its own
    sequence-parallel token shard (sequence_parallel required when tp > 1, as in Megatron-Core); the tokens
    received are all-gathered over the expert-TP group and the experts' output reduce-scattered over it.
    Not with stage_tp / stage_dp. See docs/moe.md."""
    moe_load_imbalance: Bounded(float, 1.0, float(CLUSTER_GPUS_MAX)) = 1.0
    """Uneven token routing: tokens routed to the most loaded expert-parallel rank over the mean (max/mean,
    1.0 = even, today's model). HeteroSim's deterministic pattern: the EP rank with ep coordinate 0 of every EP
    group receives ``moe_load_imbalance`` x the mean, the other ep - 1 ranks share the rest evenly
    ((ep - x)/(ep - 1) x the mean each); every rank sends its own tokens (top-k x its tokens) in proportion.
    Needs ep > 1 and a value <= ep. Ignored when ``moe_rank_load`` is given. See docs/moe.md."""
    moe_rank_load: list[Bounded(float, 0.0, 1e6)] | None = None
    """Uneven token routing given per EP rank: relative token loads of EP coordinates 0..ep-1 (normalised to
    mean 1, e.g. [3, 1, 1, 1] = 2x, 0.67x, 0.67x, 0.67x), the same in every EP group; one entry per EP rank,
    at least one > 0. None = ``moe_load_imbalance``'s pattern."""
    sequence_parallel: bool = False
    """Megatron SP: TP all-reduce becomes reduce-scatter + all-gather, activations sharded."""
    schedule: Literal["1f1b", "interleaved", "gpipe", "zb-h1", "zb-v", "dualpipe"] = "1f1b"
    """Pipeline schedule: 1F1B (PipeDream-flush), interleaved 1F1B (``virtual_stages``), GPipe, zb-h1
    (zero-bubble ZB-H1, Qi et al. ICLR 2024: backward split into input- and weight-gradient passes, the
    latter filling bubbles) or zb-v (zero-bubble ZB-V, the same paper's Sec. 6: two chunks per rank in a V,
    rank i holding virtual stages i and 2 pp - 1 - i; needs pp >= 2, no ZeRO-3 or stage_dp) or dualpipe
    (DeepSeek-V3 report Sec. 3.2.1: bidirectional, rank i holding stage i and a copy of stage pp - 1 - i, half the
    micro-batches fed from each end, forward and backward chunks paired; needs pp even, micro-batches per replica
    even and >= 2 pp, zero_stage 0-1, untied embeddings). See docs/pipeline-schedules.md."""
    virtual_stages: Bounded(int, 1, LAYERS_MAX) = 1
    """Model chunks per pipeline rank for the interleaved schedule."""
    zero_stage: Literal[0, 1, 2, 3] = 0
    """ZeRO stage (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
    Parameter Models", Sec. 5; Megatron-Core ``--data-parallel-sharding-strategy`` no_shard / optim /
    optim_grads / optim_grads_params; DeepSpeed ``zero_optimization.stage``):
    0 = replicated data parallelism (DDP): gradient buckets all-reduced;
    1 = distributed optimizer (Megatron ``--use-distributed-optimizer``): optimizer states sharded over the
    DP group, gradient buckets reduce-scattered once after the last micro-batch, updated parameters
    all-gathered (``overlap_param_gather``);
    2 = optimizer states and gradients sharded: gradient buckets reduce-scattered during every
    micro-batch's backward (DeepSpeed ZeRO-2 and FSDP keep only their gradient shard, so gradient
    accumulation reduces each micro-batch), parameters all-gathered after the step as with 1;
    3 = parameters sharded too (ZeRO-3, PyTorch FSDP/FSDP2 ``fully_shard``, Megatron-FSDP): each unit
    (embedding, every transformer layer, final norm + output layer) is all-gathered before its forward
    and again before its backward (``reshard_after_forward``) with the next unit's all-gather
    prefetched behind the current unit's compute (FSDP's default one-unit forward/backward prefetch),
    and its gradients reduce-scattered after its backward. See docs/fsdp.md."""
    shard_size: Degree | None = None
    """Hybrid sharding (HSDP): ZeRO-2/3 states are sharded inside groups of ``shard_size`` data-parallel
    ranks (consecutive DP coordinates, x cp with context parallelism) and replicated across the
    dp / shard_size groups, which all-reduce their gradient shards after each reduce-scatter (PyTorch
    FSDP ``ShardingStrategy.HYBRID_SHARD``; FSDP2 ``fully_shard`` on a 2-D (replicate, shard) DeviceMesh;
    torchtitan ``data_parallel_shard_degree`` x ``data_parallel_replicate_degree``). None = shard over the
    whole DP group. Needs zero_stage 2 or 3 and must divide dp."""
    reshard_after_forward: bool = True
    """ZeRO-3: FSDP2 ``fully_shard(reshard_after_forward=True)`` (its default; FSDP1 FULL_SHARD) frees each
    unit's gathered parameters after its forward and all-gathers them again before its backward; False
    keeps them from forward to backward (FSDP1 SHARD_GRAD_OP, ZeRO-2-like: one all-gather less per unit
    and micro-batch, the whole stage's parameters unsharded at the peak). Only with zero_stage 3."""
    fp8_param_allgather: bool = False
    """ZeRO-3 with fp8 training: all-gather the transformer layers' weights in float8, 1 byte per parameter
    instead of 2 (torchtitan ``float8.enable_fsdp_float8_all_gather``, Float8Linear weights; the embedding and
    the output layer, which torchtitan leaves out of float8, stay 16-bit). Needs zero_stage 3 and
    training.precision fp8."""
    recompute: Literal["none", "selective", "full"] = "none"
    order: str = "tp-cp-ep-dp-pp"
    """Rank layout, fastest-varying first (Megatron's RankGenerator order)."""
    layer_partition: list[Bounded(int, 0, LAYERS_MAX)] | None = None
    """Layers per pipeline stage (non-uniform); None = equal split."""
    account_for_embedding_in_pipeline_split: bool = False
    """Megatron-Core's option of the same name: the embedding counts as one layer when the layers are split
    over the (virtual) pipeline stages, so the first virtual stage builds one layer fewer (Megatron-Core
    ``transformer_block.get_num_layers_to_build``: num_layers + 1, split evenly, first chunk less one). Used
    by Megatron-Bridge's large recipes (e.g. Llama 3.1 405B at PP8 VP8: 126 + 2 = 128 = 64 x 2). Ignored when
    ``layer_partition`` is given."""
    account_for_loss_in_pipeline_split: bool = False
    """The same for the output layer and loss: the last virtual stage builds one layer fewer."""
    stage_tp: list[Bounded(int, 0, GPUS_PER_NODE_MAX)] | None = None  # 0: the plan says "one TP degree >= 1"
    """TP degree of each pipeline stage (uneven TP across device groups, e.g. [8, 4]); None = ``tp``
    everywhere. Needs dp given or derivable; world = dp * cp * sum(stage_tp); each entry must divide the
    attention heads and TP groups stay inside one node. Layout is stage-major (pp slowest); ``tp`` stays 1
    (or max(stage_tp)), ``pp`` 1 or len(stage_tp)."""
    stage_dp: list[Bounded(int, 0, CLUSTER_GPUS_MAX)] | None = None  # 0: the plan says "one DP degree >= 1"
    """Data-parallel degree of each pipeline stage (heterogeneous device groups, e.g. [8, 2, 2]: stage 0 on 8
    V100 replicas, stages 1-2 on 2 A100 replicas each, as Metis / HexiScale plans place them); None = ``dp``
    everywhere. World = cp * sum(stage_tp[i] (or tp) * stage_dp[i]); the global batch's micro-batches are split
    evenly over each stage's replicas (global_batch_size / micro_batch_size must be divisible by every entry),
    micro-batch k runs on replica k mod stage_dp[i] of stage i and its activations move to replica
    k mod stage_dp[i+1] of the next stage; each stage reduces its gradients over its own replicas. Schedules
    1f1b and gpipe, zero_stage 0 or 1, ``dp`` left unset (see heterosim/workload/stage_dp.py and
    docs/heterogeneous.md). ``pp`` stays 1 or len(stage_dp)."""
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
        if part is None or self.stage_tp is not None or self.stage_dp is not None:
            return self
        per_stage = part if len(part) == pp else (
            [sum(part[c * pp + s] for c in range(len(part) // pp)) for s in range(pp)]
            if len(part) == pp * self.virtual_stages else None)
        if per_stage is not None and 0 in per_stage:
            raise ValueError(f"pipeline stage {per_stage.index(0)} has no layers: layer_partition {part}")
        return self

    @model_validator(mode="after")
    def _sharding_fields(self):
        """The FSDP fields only mean something with the ZeRO stage that has them."""
        if self.shard_size is not None and self.zero_stage < 2:
            raise ValueError(f"shard_size {self.shard_size} (hybrid sharding) needs zero_stage 2 or 3, "
                             f"zero_stage is {self.zero_stage}")
        if not self.reshard_after_forward and self.zero_stage != 3:
            raise ValueError(f"reshard_after_forward: false needs zero_stage 3 (sharded parameters), "
                             f"zero_stage is {self.zero_stage}")
        if self.fp8_param_allgather and self.zero_stage != 3:
            raise ValueError(f"fp8_param_allgather needs zero_stage 3 (sharded parameters), "
                             f"zero_stage is {self.zero_stage}")
        return self

    @field_validator("order")
    @classmethod
    def _order(cls, v: str) -> str:
        dims = v.split("-")
        if sorted(dims) != sorted(["tp", "cp", "ep", "dp", "pp"]) and sorted(dims) != sorted(["tp", "cp", "dp", "pp"]) \
                and sorted(dims) != sorted(["tp", "dp", "pp"]):
            raise ValueError(f"order must be a permutation of tp-cp-ep-dp-pp, got {v!r}")
        return v
