"""Per-rank HBM footprint of a parallel plan, and the plan checks that use it.

Model states (mixed precision with Adam, Megatron-LM's accounting, its
``theoretical_memory_usage.py`` / Korthikanti et al. 2022 / Rajbhandari et al. 2020):
bf16/fp16 parameters 2 B, the main-grad buffer 4 B (fp32, ``grad_reduce_dtype``; 2 B
for bf16), optimizer 12 B (fp32 master copy + Adam m and v) = 18 B/param; the
distributed optimizer (ZeRO-1) shards the 12 B over the data-parallel (x
context-parallel) ranks: 6 + 12/dp B/param. fp32 training: 4 + 4 + 8 B. The
vocabulary is Megatron's padded one. ZeRO-2 and ZeRO-3 / FSDP (Rajbhandari et al. 2020, Figure 1:
P_os (2+2+K)Psi -> 2Psi + 2Psi + K Psi/N_d, P_os+g 2Psi + (2+K)Psi/N_d, P_os+g+p (2+2+K)Psi/N_d with
N_d the ranks sharing the states: the DP group, or HSDP's shard group) shard the gradients, then the
parameters too; beside the shards they hold unsharded working copies (``zero_buffers``, see
:func:`sharded_model_states`).

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", Sec. 4): per layer and micro-batch s*b*h*(34 + 5*a*s/h)
bytes with 16-bit activations; with TP the 24*sbh + 5*a*s^2*b part is divided by
t, with TP+SP everything is; selective recompute drops the 5*a*s^2*b term; full
recompute keeps only the layer input (2*sbh, /t with SP) plus one layer's full
activations while it is recomputed. The 34 is generalised here to GQA (K, V of
kv_heads), any FFN width, SwiGLU and MoE (see ``activation_bytes_per_layer``).
The 5*a*s^2*b term (softmax output, its dropout mask and output) exists only with
the unfused attention kernel: flash / cuDNN fused attention keep no score matrix
(``auto`` counts as fused: only Volta defaults to unfused, and no Volta run fits
anyway without selective recompute).

FP8 (``precision: fp8``, Transformer Engine): which saved activations are fp8 and which stay
16-bit follows TE's modules as Megatron-Core's TE layer spec uses them (see
``activation_bytes_per_layer`` and docs/memory-model.md); with bf16 primary weights TE also caches an
fp8 weight and its transpose across micro-batches (``training.fp8_primary_weights``).

Beyond the tensors, a per-GPU allowance: ``training.memory_overhead_bytes`` when set (a measured
total), otherwise the sum of named parts of ``overhead_parts`` (CUDA context, cuBLAS workspaces,
NCCL buffers per communicator the rank uses) plus a reserve of 5% of the activations (allocator
fragmentation and temporaries, Megatron's ``overhead_factor``), each cited where it is defined.
The number of micro-batches whose activations a stage holds at once comes from the
schedule itself (1F1B: pp - stage; interleaved: Megatron's warm-up; GPipe: all; zero-bubble ZB-H1 and ZB-V:
each micro-batch holds its activations from forward to B, then what its W needs until W, Qi et al. 2024
Table 1, see heterosim/workload/zero_bubble.py; ZB-V's chunks are the two virtual stages of its V).
"""
from __future__ import annotations

from heterosim.errors import PlanError
from heterosim.workload.dualpipe import as_plain
from heterosim.workload.costs import ACT_ELEM_BYTES, embedding_params, head_params, layer_params, padded_vocab
from heterosim.workload.plan import Plan, resolve_plan
from heterosim.workload.schedules import peak_in_flight, schedule_for
from heterosim.workload.stage_dp import replica_steps
from heterosim.workload.zero_bubble import V_SCHEDULES, peak_retained, splits_w, w_retained_bytes

GiB = 1 << 30


def state_bytes_per_param(precision: str, grad_reduce_dtype: str = "fp32",
                          fp8_weight_cache: bool = False) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter.

    ``fp8_weight_cache``: fp8 training with bf16 primary weights, where Transformer Engine keeps the
    quantized weight of every fp8 GEMM across micro-batches (Megatron passes ``is_first_microbatch``,
    TE ``module/linear.py`` ``quantize_weight(..., cache=...)``) with both row-wise and column-wise
    usage, i.e. the fp8 weight and its transpose on Hopper (TE docs, "Performance considerations /
    Memory usage": "2 MB (weight) + 1 MB (weight in FP8)" for forward only, plus the column-wise copy
    once the input needs a gradient): +2 B. Counted on every parameter of the rank (norms, biases and
    embeddings are not fp8 GEMM weights: an overcount of under 0.1% of layer parameters, plus the
    embedding share on the first and last stage)."""
    if precision == "fp32":
        return 4, 4, 8
    return 2 + (2 if fp8_weight_cache else 0), (2 if grad_reduce_dtype == "bf16" else 4), 12


def fp8_weight_cache(training) -> bool:
    """Whether TE keeps fp8 weight copies beside bf16 weights (see ``state_bytes_per_param``)."""
    return training.precision == "fp8" and not training.fp8_primary_weights


def saved_tensor_bytes(model, plan: Plan, precision: str, recompute: str | None = None,
                       attention: str = "auto") -> dict[str, tuple[float, float]]:
    """Each tensor one layer saves for backward, per micro-batch: name -> (elements per token on one
    rank before the TP/SP split, bytes per element), and whether it is split by TP (key prefix ``tp:``)
    or only by SP (``rep:``).

    16-bit: Korthikanti et al. 2022, Sec. 4.1 (34 sbh with h=4h FFN and MHA): each norm keeps its input,
    each GEMM its input, attention its Q, K, V (and, fused/flash, its output), the FFN its fc1 output
    (activation input) and activation output (fc2 input), dropout its 1-byte mask (only when
    ``model.hidden_dropout`` > 0: at p = 0 PyTorch's dropout returns its input and keeps nothing).
    FP8 (Transformer Engine, Megatron-Core's TE spec: TELayerNormColumnParallelLinear for QKV and fc1,
    TERowParallelLinear for proj and fc2, TEDotProductAttention): TE saves the *quantized* input of every
    fp8 GEMM for the weight gradient, 1 byte per element, column-wise only (``module/linear.py``:
    "Discard row-wise data since it is not needed in backward pass"; with sequence parallelism the
    local shard, row-wise, to re-gather: ``layernorm_linear.py`` ``ln_out_needs_gather``) and the norm
    of a LayerNormLinear writes its output directly in fp8 (``with_quantized_norm``), so
      - norm outputs feeding QKV and fc1: 1 B (were 2); the norm inputs (residual stream) stay 2 B;
      - fc2 input (activation output): 1 B; fc1 output (activation input, kept by Megatron's own
        activation function for its backward) stays 2 B;
      - Q, K, V stay 2 B (fp8 attention, ``fp8_dpa``, is off by default in Megatron);
      - the attention output: fused/flash attention keeps its bf16 output for its own backward and
        proj keeps its fp8 copy besides (TE docs, "Memory usage": the quantized copy "may lead to
        increased memory usage, if the high precision tensor also needs to be saved for backward - for
        example if it is the attention output"), 2 + 1 B; with selective recompute the attention is
        recomputed, so only proj's 1 B copy stays; with the unfused kernel proj's 1 B copy only;
      - dropout masks stay 1 B.
    fp32: 4 B per element, masks 1 B. The fp32 per-token norm statistics (mu, rsigma: 8 B per token
    per norm, < 0.1% at h >= 2048) are left out, as Korthikanti does."""
    recompute = plan.recompute if recompute is None else recompute
    h = model.hidden_size
    e = float(ACT_ELEM_BYTES[precision]) if precision != "fp8" else 2.0
    fp8 = precision == "fp8"
    q = 1.0 if fp8 else e  # input of an fp8 GEMM, saved quantized
    kvd = model.kv_heads * model.head_size
    qd = model.q_dim  # = h unless head_dim is set apart
    fused = attention != "unfused"
    if not fp8:
        proj_in = e
    else:
        proj_in = (e + 1.0) if (fused and recompute == "none") else 1.0
    out = {
        "rep:norm1_input": (h, e), "rep:qkv_input": (h, q),
        "rep:norm2_input": (h, e), "rep:fc1_input": (h, q),
        "tp:q": (qd, e), "tp:k_v": (2 * kvd, e), "tp:proj_input": (qd, proj_in),
    }
    if model.hidden_dropout > 0:  # at p == 0 PyTorch's dropout is the identity and keeps no mask
        out["rep:attn_dropout_mask"] = (h, 1.0)
        out["rep:mlp_dropout_mask"] = (h, 1.0)
    fc1_width = 2 if model.activation == "swiglu" else 1  # gate and up projections
    if model.is_moe:
        fe = model.moe_ffn_hidden_size or model.ffn_hidden_size
        k = model.moe_top_k
        # uneven routing: the most loaded EP rank's experts keep load x the mean (the memory the plan must fit);
        # folded expert TP: the fc1 input is the expert-TP group's all-gathered tokens (expert_tp x this rank's
        # dispatched shard), fc1/fc2 activations split by expert_tp: per rank the same as split by tp
        load = max(plan.expert_load) if getattr(plan, "expert_load", None) else 1.0
        gathered = plan.etp if getattr(plan, "folded", False) else 1
        out["rep:expert_inputs"] = (k * h * gathered * load, q)  # permuted tokens, the experts' fc1 input
        out["tp:fc1_output"] = (k * fc1_width * fe * load, e)
        out["tp:fc2_input"] = (k * fe * load, q)
    else:
        out["tp:fc1_output"] = (fc1_width * model.ffn_hidden_size, e)
        out["tp:fc2_input"] = (model.ffn_hidden_size, q)
    return out


def activation_bytes_per_layer(model, plan: Plan, precision: str, recompute: str | None = None,
                               attention: str = "auto") -> float:
    """Activation bytes one layer keeps for one micro-batch on one rank (Korthikanti et al. 2022,
    generalised to GQA, any FFN width, SwiGLU, MoE and Transformer Engine's fp8 storage)."""
    recompute = plan.recompute if recompute is None else recompute
    t, b, sl, s = plan.tp, plan.micro_batch, plan.seq_local, plan.seq
    tokens = sl * b
    sp_div = t if plan.sp else 1
    e = float(ACT_ELEM_BYTES[precision]) if precision != "fp8" else 2.0
    if recompute == "full":
        return e * tokens * model.hidden_size / sp_div  # the checkpointed layer input
    rep = shard = 0.0
    for name, (width, nbytes) in saved_tensor_bytes(model, plan, precision, recompute, attention).items():
        if name.startswith("rep:"):
            rep += width * nbytes
        else:
            shard += width * nbytes
    # softmax output 2, its dropout mask 1, dropout output 2 bytes per score (16-bit; x2 in fp32):
    # only the unfused kernel keeps the score matrix, selective recompute drops it
    unfused = attention == "unfused"
    attn_matrix = (5.0 * e / 2 * model.num_attention_heads * sl * s * b
                   if unfused and recompute != "selective" else 0.0)
    return tokens * rep / sp_div + (tokens * shard + attn_matrix) / t


def _stage_params(model, plan: Plan, stage: int) -> tuple[float, float]:
    """(dense, expert) parameters held by one rank of ``stage``."""
    lp = layer_params(model, plan.tp, plan.ep, plan.etp)
    dense = expert = 0.0
    last_vs = plan.num_vstages - 1
    for c in range(plan.chunks):
        vs = plan.vstage(stage, c)
        n = len(plan.vstage_layers[vs])
        dense += n * lp.dense
        expert += n * lp.expert
        if vs == 0:
            dense += embedding_params(model, plan.tp)
        if vs == last_vs:
            dense += head_params(model, plan.tp, 1 if plan.schedule in V_SCHEDULES else plan.pp)
    return dense, expert


# --------------------------------------------------------------------------- the per-GPU allowance

CUDA_CONTEXT_BYTES = 723 * 2**20
"""CUDA context of a PyTorch process: GPU memory in use after the first CUDA tensor, measured at
723 MiB (PyTorch forums, "What is the reason for pytorch's GPU memory floor?", discuss.pytorch.org/t/73021;
the context and the loaded kernel modules). CUDA >= 12.2 loads modules lazily (CUDA Programming Guide,
"Lazy Loading"), which lowers it: an upper figure for recent stacks."""

CUBLAS_WORKSPACE_BYTES = 2 * (32 * 2**20)
"""cuBLAS workspaces: 32 MiB each on Hopper and newer (cuBLAS docs, cublasSetWorkspace, recommended
size; PyTorch's per-handle/stream cuBLASLt workspace, pytorch#120925; Transformer Engine's own,
``cpp_extensions/gemm.py`` ``get_cublas_workspace_size_bytes``): one PyTorch + one TE workspace.
Pre-Hopper they are 4 MiB: 56 MiB too much there."""

NCCL_CONNECTION_BYTES = 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + (1 << 22)
"""Receive buffers of one NCCL connection, all three protocols (NCCL ``src/init.cc`` computeBuffSizes):
LL 8 lines x 512 threads x 8 steps x 16 B = 512 KiB, LL128 120 x 640 threads x 8 steps x 8 B =
4.69 MiB, Simple NCCL_BUFFSIZE 4 MiB: 9.19 MiB."""

NCCL_COLL_CHANNELS = 16
"""Channels of a collective (ring) communicator: NCCL's target of 60 GB/s per channel on sm90
(``src/graph/search.cc`` sm90SpeedArrayIntra) over an H100's ~450 GB/s of NVLink per direction gives
8 rings, which NCCL duplicates (ncclTopoPostset): 16. One ring connection (receive side) per channel;
NVLink SHARP and tree buffers are not counted (NeMo/Megatron runs reduce-scatter / all-gather, which
use rings). Bound: NCCL's maximum of 64 channels (MAXCHANNELS) would be 4x this part."""

NCCL_P2P_PEER_BYTES = 2 * (1 << 19) * 8
"""Point-to-point buffers per peer (pipeline send/recv, context-parallel ring, expert all-to-all):
Simple protocol only, NCCL_P2P_NVL_CHUNKSIZE 512 KiB x NCCL_STEPS 8 (``src/init.cc``,
``src/include/device.h``) on 2 channels per peer (NCCL_NCHANNELS_PER_NET_PEER's historical default)."""

ACTIVATION_RESERVE_FRACTION = 0.05
"""Caching-allocator fragmentation and short-lived temporaries, as a fraction of the activations:
Megatron-LM's theoretical memory estimator adds "buffer for optimizer and miscellaneous temporaries
(5% overhead)", ``overhead_factor = 1.05`` (megatron/training/theoretical_memory_usage.py)."""


def nccl_communicators(model, plan: Plan) -> dict[str, float]:
    """NCCL buffer bytes per communicator one rank of ``plan`` uses. NCCL connects lazily
    (NCCL_RUNTIME_CONNECT, default on since 2.22): a group that never communicates costs nothing."""
    coll = NCCL_COLL_CHANNELS * NCCL_CONNECTION_BYTES
    out: dict[str, float] = {}
    if plan.tp > 1:
        out["tp"] = coll
    if plan.dp * plan.cp > 1:
        out["dp"] = coll  # gradient reduce-scatter / all-reduce, parameter all-gather
    if plan.cp > 1:
        out["cp"] = 2 * NCCL_P2P_PEER_BYTES  # ring attention: previous and next rank
    if plan.ep > 1:
        out["ep"] = (plan.ep - 1) * NCCL_P2P_PEER_BYTES  # token all-to-all
    if getattr(plan, "folded", False) and plan.etp > 1:
        out["etp"] = coll  # expert-TP all-gather / reduce-scatter of the dispatched tokens
    if plan.pp > 1:
        out["pp"] = 2 * NCCL_P2P_PEER_BYTES  # activations to the next stage, gradients to the previous
        if model.tie_embeddings and plan.schedule not in V_SCHEDULES:  # ZB-V: both on rank 0, one weight
            out["embedding"] = coll  # first and last stage all-reduce the tied embedding's gradient
        if plan.schedule == "dualpipe":
            out["dual"] = coll  # the two copies of a stage (ranks s, pp - 1 - s) sum their gradients
    return out


def overhead_parts(scenario, plan: Plan) -> dict[str, float]:
    """The fixed part of the per-GPU allowance, by name (bytes). A set
    ``training.memory_overhead_bytes`` replaces all of it (and the activation reserve): {"measured": x}."""
    tr = scenario.training
    if tr.memory_overhead_bytes is not None:
        return {"measured": float(tr.memory_overhead_bytes)}
    parts = {"cuda_context": float(CUDA_CONTEXT_BYTES), "cublas_workspace": float(CUBLAS_WORKSPACE_BYTES)}
    for name, nbytes in nccl_communicators(scenario.model, plan).items():
        parts[f"nccl_{name}"] = nbytes
    return parts


def activation_reserve_fraction(training) -> float:
    """Allocator/temporaries reserve per activation byte: 0 when a measured overhead is given."""
    return 0.0 if training.memory_overhead_bytes is not None else ACTIVATION_RESERVE_FRACTION


def _unit_params(model, plan: Plan, stage: int) -> list[tuple[object, float]]:
    """(key, parameters) of each FSDP unit a rank of ``stage`` holds: embedding, layers, head."""
    lp = layer_params(model, plan.tp, plan.ep, plan.etp)
    out: list[tuple[object, float]] = []
    last_vs = plan.num_vstages - 1
    for c in range(plan.chunks):
        vs = plan.vstage(stage, c)
        out += [(layer, lp.dense + lp.expert) for layer in plan.vstage_layers[vs]]
        if vs == 0:
            out.append(("embed", embedding_params(model, plan.tp)))
        if vs == last_vs:
            out.append(("head", head_params(model, plan.tp, 1 if plan.schedule in V_SCHEDULES else plan.pp)))
    return out


def sharded_model_states(scenario, plan: Plan, stage: int, sh) -> dict[str, float]:
    """ZeRO-2/3 model states of one rank of ``stage`` (bytes): the ZeRO paper's Figure 1 per stage with
    N_d = ``sh.dense_n`` (``sh.expert_n`` for expert parameters), plus the unsharded working copies:

    * ZeRO-2 (P_os+g): full parameters, gradient and optimizer shards; ``zero_buffers`` = one gradient
      bucket being reduce-scattered unsharded (``grad_bucket_bytes``, DeepSpeed's ``reduce_bucket_size``),
      at most the stage's gradients;
    * ZeRO-3 (P_os+g+p): parameter shards too (16-bit; TE's fp8 weight cache is not kept under FSDP);
      ``zero_buffers`` = the gathered parameters of the two largest units (the one computing and the one
      prefetched, in the all-gather's bytes per parameter) plus one unit's unsharded gradients before its
      reduce-scatter; with ``reshard_after_forward: false`` every unit of the stage stays gathered from its
      forward to its backward, so the gathered part is the whole stage's parameters."""
    dense, expert = _stage_params(scenario.model, plan, stage)
    return zero_states(scenario, sh, dense, expert, _unit_params(scenario.model, plan, stage))


def zero_states(scenario, sh, dense: float, expert: float, units: list[tuple[object, float]]) -> dict[str, float]:
    """:func:`sharded_model_states` of a rank holding ``dense`` and ``expert`` parameters in FSDP ``units``
    ((key, parameters): layer index, ``"embed"``, ``"head"``); the planner calls it for layer counts it tries."""
    from heterosim.workload.sharding import allgather_bytes_per_param

    tr = scenario.training
    pb, gb, ob = state_bytes_per_param(tr.precision, tr.grad_reduce_dtype, fp8_weight_cache(tr))
    shard = dense / sh.dense_n + expert / sh.expert_n
    if sh.stage == 2:
        return {"params": (dense + expert) * pb, "grads": shard * gb, "optimizer": shard * ob,
                "zero_buffers": min(float(scenario.parallelism.grad_bucket_bytes), (dense + expert) * gb)}
    base_pb = 4 if tr.precision == "fp32" else 2
    held = sorted((n * allgather_bytes_per_param(sh, key, tr.precision) for key, n in units), reverse=True)
    gathered = sum(held[:2]) if sh.reshard_after_forward else sum(held)
    return {"params": shard * base_pb, "grads": shard * gb, "optimizer": shard * ob,
            "zero_buffers": gathered + max(n for _, n in units) * gb}


def memory_for_plan(scenario, plan: Plan) -> dict[tuple[int, int], dict[str, float]]:
    """Memory breakdown (bytes) per (stage, micro-batch count) program."""
    from heterosim.workload.sharding import sharding_of

    model, tr = scenario.model, scenario.training
    try:
        sh = sharding_of(scenario, plan)
    except PlanError as err:
        f = getattr(scenario, "_source_file", None)
        raise err.with_file(f) if f else err
    prec = tr.precision
    pb, gb, ob = state_bytes_per_param(prec, tr.grad_reduce_dtype, fp8_weight_cache(tr))
    attn = tr.attention
    fixed = sum(overhead_parts(scenario, plan).values())
    reserve = activation_reserve_fraction(tr)
    zero = plan.zero_stage == 1
    scale = ACT_ELEM_BYTES[prec] / 2
    sbh = plan.seq_local * plan.micro_batch * model.hidden_size
    last_vs = plan.num_vstages - 1
    out: dict[tuple[int, int], dict[str, float]] = {}
    whole = plan
    for stage in range(whole.pp):
        plan = whole.for_stage(stage)  # its own TP degree (stage_tp), DP degree and micro-batches (stage_dp)
        dp_dense = plan.dp * plan.cp
        dp_expert = plan.edp
        act_layer = activation_bytes_per_layer(model, plan, prec, attention=attn)
        sp_div = plan.tp if plan.sp else 1
        dense, expert = _stage_params(model, plan, stage)
        params = (dense + expert) * pb
        grads = (dense + expert) * gb
        opt = dense * ob / (dp_dense if zero else 1) + expert * ob / (dp_expert if zero else 1)
        states = sharded_model_states(scenario, plan, stage, sh) if sh is not None else None
        if states is not None:
            params, grads, opt = states["params"], states["grads"], states["optimizer"]
        weights = []
        for c in range(plan.chunks):
            vs = plan.vstage(stage, c)
            w = len(plan.vstage_layers[vs]) * act_layer
            if vs == 0 and model.hidden_dropout > 0:
                w += sbh / sp_div  # embedding dropout mask (1 byte per element)
            if vs == last_vs:
                # final norm input + fp32 logits kept by the vocab-parallel cross-entropy
                w += (2 * sbh / sp_div * scale
                      + 4.0 * plan.seq_local * plan.micro_batch * padded_vocab(model, plan.tp) / plan.tp)
            weights.append(w)
        w_weights = _w_weights(model, plan, stage, prec, attn) if splits_w(plan.schedule) else None
        for m in sorted(set(plan.microbatches)):
            steps = as_plain(schedule_for(plan.schedule, plan.pp, m, stage, plan.chunks)) if whole.stage_dp is None else \
                replica_steps(plan.schedule, whole.stage_dp, whole.global_microbatches, stage)
            acts = peak_in_flight(steps, weights) if w_weights is None else peak_retained(steps, weights, w_weights)
            if plan.recompute == "full" and plan.stage_layer_count(stage):
                acts += activation_bytes_per_layer(model, plan, prec, recompute="none", attention=attn)
            overhead = (fixed if whole.stage_dp is None else sum(overhead_parts(scenario, plan).values())) \
                + reserve * acts  # stage_dp: NCCL's DP communicator only where the stage has replicas
            out[(stage, m)] = {"params": params, "grads": grads, "optimizer": opt, "activations": acts,
                               "overhead": overhead, "total": params + grads + opt + acts + overhead}
            if states is not None:
                out[(stage, m)]["zero_buffers"] = states["zero_buffers"]
                out[(stage, m)]["total"] += states["zero_buffers"]
    return out


def _w_weights(model, plan: Plan, stage: int, prec: str, attention: str) -> list[float]:
    """Zero-bubble schedules: bytes one micro-batch keeps per chunk from its B to its W (the weight GEMMs'
    inputs and output gradients, ``zero_bubble.w_retained_bytes``; Qi et al. 2024's M_W)."""
    from heterosim.workload.costs import LayerShapes

    sh = LayerShapes.of(model, plan, prec, attention)
    layer = sh.attn_all() + (sh.moe_router() + sh.moe_experts() if model.is_moe else sh.mlp())
    per_layer = w_retained_bytes(layer, sh.gemm_eb, sh.act_eb)
    last_vs = plan.num_vstages - 1
    out = []
    for c in range(plan.chunks):
        vs = plan.vstage(stage, c)
        w = len(plan.vstage_layers[vs]) * per_layer
        if vs == last_vs:
            w += w_retained_bytes(sh.head(), sh.gemm_eb, sh.act_eb)
        out.append(w)
    return out


def memory_per_rank(scenario, world_size: int, file: str | None = None) -> list[float]:
    """Bytes each rank needs (parameters, gradients, optimizer state, peak activations)."""
    plan = resolve_plan(scenario, world_size, file)
    mem = memory_for_plan(scenario, plan)
    out = []
    for r in range(world_size):
        c = plan.layout.coords(r)
        out.append(mem[(c["pp"], plan.mb_count(c))]["total"])
    return out


def _default_hbm(name: str) -> tuple[float, str]:
    from heterosim.hardware import get_device

    dev = get_device(name)
    return float(dev.hbm_bytes), dev.name


def check_plan(scenario, world_size: int, rank_devices: list[str], file: str | None = None,
               hbm_of=None, rank_groups: list[str] | None = None) -> dict[tuple[int, int], dict[str, float]]:
    """Raise PlanError if the plan cannot run: divisibility rules, then memory per rank.

    ``hbm_of(name) -> (hbm_bytes, display_name)`` defaults to the hardware catalog;
    ``rank_groups`` (the device group of each rank) lets the message name the group.
    Returns the memory breakdown per (stage, micro-batch count) when the plan fits."""
    file = file if file is not None else getattr(scenario, "_source_file", None)
    plan = resolve_plan(scenario, world_size, file)
    if len(rank_devices) != world_size:
        raise PlanError(f"{len(rank_devices)} device names for {world_size} ranks", file=file, field="cluster",
                        value=len(rank_devices))
    hbm_of = hbm_of or _default_hbm
    cache: dict[str, tuple[float, str]] = {}
    mem = memory_for_plan(scenario, plan)
    worst = None  # (ratio, rank, stage, need, have, device)
    for r, dev in enumerate(rank_devices):
        if dev not in cache:
            cache[dev] = hbm_of(dev)
        have, label = cache[dev]
        c = plan.layout.coords(r)
        need = mem[(c["pp"], plan.mb_count(c))]["total"]
        if need > have and (worst is None or need / have > worst[0]):
            where = f"{label}, group {rank_groups[r]}" if rank_groups else label
            worst = (need / have, r, c["pp"], need, have, where)
    if worst is not None:
        _, r, stage, need, have, label = worst
        terms = mem[(stage, plan.mb_count(plan.layout.coords(r)))]
        big = max((k for k in terms if k != "total"), key=lambda k: terms[k])
        par = scenario.parallelism
        tps = f"stage_tp={plan.stage_tp}" if plan.stage_tp is not None else f"tp={plan.tp}"
        summary = (f"{tps} pp={plan.pp} dp={plan.dp} cp={plan.cp} zero_stage={plan.zero_stage} "
                   f"recompute={plan.recompute} micro_batch={plan.micro_batch}")
        hint = []
        if par.recompute != "full":
            hint.append("recompute")
        if plan.zero_stage == 0 and plan.dp * plan.cp > 1:
            hint.append("zero_stage: 1")
        hint.append("more tp/pp")
        raise PlanError(f"out of memory: rank {r} (stage {stage}, {label}) needs {need / GiB:.1f} GiB but has "
                        f"{have / GiB:.1f} GiB, largest term {big} {terms[big] / GiB:.1f} GiB "
                        f"(try {', '.join(hint)})", file=file, field="parallelism",
                        value=summary)
    return mem
