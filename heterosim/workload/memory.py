"""Per-rank HBM footprint of a parallel plan, and the plan checks that use it.

Model states (mixed precision with Adam, Megatron-LM's accounting, its
``theoretical_memory_usage.py`` / Korthikanti et al. 2022 / Rajbhandari et al. 2020):
bf16/fp16 parameters 2 B, the main-grad buffer 4 B (fp32, ``grad_reduce_dtype``; 2 B
for bf16), optimizer 12 B (fp32 master copy + Adam m and v) = 18 B/param; the
distributed optimizer (ZeRO-1) shards the 12 B over the data-parallel (x
context-parallel) ranks: 6 + 12/dp B/param. fp32 training: 4 + 4 + 8 B. The
vocabulary is Megatron's padded one.

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

Beyond the tensors, ``training.memory_overhead_bytes`` is reserved per GPU (CUDA
context, NCCL buffers, allocator fragmentation): a documented field, not a hidden
constant.
The number of micro-batches whose activations a stage holds at once comes from the
schedule itself (1F1B: pp - stage; interleaved: Megatron's warm-up; GPipe: all).
"""
from __future__ import annotations

from heterosim.errors import PlanError
from heterosim.workload.costs import ACT_ELEM_BYTES, embedding_params, head_params, layer_params, padded_vocab
from heterosim.workload.plan import Plan, resolve_plan
from heterosim.workload.schedules import peak_in_flight, schedule_for

GiB = 1 << 30


def state_bytes_per_param(precision: str, grad_reduce_dtype: str = "fp32") -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter."""
    if precision == "fp32":
        return 4, 4, 8
    return 2, (2 if grad_reduce_dtype == "bf16" else 4), 12


def activation_bytes_per_layer(model, plan: Plan, precision: str, recompute: str | None = None,
                               attention: str = "auto") -> float:
    """Activation bytes one layer keeps for one micro-batch on one rank (Korthikanti et al. 2022, generalised)."""
    recompute = plan.recompute if recompute is None else recompute
    t, b, sl, s, h = plan.tp, plan.micro_batch, plan.seq_local, plan.seq, model.hidden_size
    scale = ACT_ELEM_BYTES[precision] / 2  # the paper's coefficients assume 2-byte activations
    sbh = sl * b * h
    sp_div = t if plan.sp else 1
    if recompute == "full":
        return 2 * sbh / sp_div * scale
    kvd = model.kv_heads * model.head_dim
    # not split by TP (only by SP): QKV input 2, attention dropout mask 1, MLP input 2, MLP dropout mask 1,
    # two norm inputs 2 + 2  -> 10 sbh
    replicated = 10 * sbh
    # split by TP: Q 2sbh, K and V 2*s*b*kvd each, projection input 2sbh
    sharded = 4 * sbh + 4 * sl * b * kvd
    nf = 6 if model.activation == "swiglu" else 4  # FFN activations: fc1 output(s) + activation output
    if model.is_moe:
        fe = model.moe_ffn_hidden_size or model.ffn_hidden_size
        k = model.moe_top_k
        replicated += k * 2 * sbh  # permuted expert inputs
        sharded += k * nf * sl * b * fe
    else:
        sharded += nf * sl * b * model.ffn_hidden_size
    unfused = attention == "unfused"
    attn_matrix = 5.0 * model.num_attention_heads * sl * s * b if unfused and recompute != "selective" else 0.0
    return (replicated / sp_div + (sharded + attn_matrix) / t) * scale


def _stage_params(model, plan: Plan, stage: int) -> tuple[float, float]:
    """(dense, expert) parameters held by one rank of ``stage``."""
    lp = layer_params(model, plan.tp, plan.ep)
    dense = expert = 0.0
    last_vs = plan.num_vstages - 1
    for c in range(plan.chunks):
        vs = c * plan.pp + stage
        n = len(plan.vstage_layers[vs])
        dense += n * lp.dense
        expert += n * lp.expert
        if vs == 0:
            dense += embedding_params(model, plan.tp)
        if vs == last_vs:
            dense += head_params(model, plan.tp, plan.pp)
    return dense, expert


def memory_for_plan(scenario, plan: Plan) -> dict[tuple[int, int], dict[str, float]]:
    """Memory breakdown (bytes) per (stage, micro-batch count) program."""
    model, tr = scenario.model, scenario.training
    prec = tr.precision
    pb, gb, ob = state_bytes_per_param(prec, tr.grad_reduce_dtype)
    attn = tr.attention
    overhead = float(tr.memory_overhead_bytes)
    zero = plan.zero_stage == 1
    dp_dense = plan.dp * plan.cp
    dp_expert = dp_dense // plan.ep
    scale = ACT_ELEM_BYTES[prec] / 2
    sbh = plan.seq_local * plan.micro_batch * model.hidden_size
    last_vs = plan.num_vstages - 1
    out: dict[tuple[int, int], dict[str, float]] = {}
    whole = plan
    for stage in range(whole.pp):
        plan = whole.for_stage(stage)  # its own TP degree with parallelism.stage_tp
        act_layer = activation_bytes_per_layer(model, plan, prec, attention=attn)
        sp_div = plan.tp if plan.sp else 1
        dense, expert = _stage_params(model, plan, stage)
        params = (dense + expert) * pb
        grads = (dense + expert) * gb
        opt = dense * ob / (dp_dense if zero else 1) + expert * ob / (dp_expert if zero else 1)
        weights = []
        for c in range(plan.chunks):
            vs = c * plan.pp + stage
            w = len(plan.vstage_layers[vs]) * act_layer
            if vs == 0:
                w += sbh / sp_div  # embedding dropout mask (1 byte per element)
            if vs == last_vs:
                # final norm input + fp32 logits kept by the vocab-parallel cross-entropy
                w += (2 * sbh / sp_div * scale
                      + 4.0 * plan.seq_local * plan.micro_batch * padded_vocab(model, plan.tp) / plan.tp)
            weights.append(w)
        for m in sorted(set(plan.microbatches)):
            steps = schedule_for(plan.schedule, plan.pp, m, stage, plan.chunks)
            acts = peak_in_flight(steps, weights)
            if plan.recompute == "full" and plan.stage_layer_count(stage):
                acts += activation_bytes_per_layer(model, plan, prec, recompute="none", attention=attn)
            out[(stage, m)] = {"params": params, "grads": grads, "optimizer": opt, "activations": acts,
                               "overhead": overhead, "total": params + grads + opt + acts + overhead}
    return out


def memory_per_rank(scenario, world_size: int, file: str | None = None) -> list[float]:
    """Bytes each rank needs (parameters, gradients, optimizer state, peak activations)."""
    plan = resolve_plan(scenario, world_size, file)
    mem = memory_for_plan(scenario, plan)
    out = []
    for r in range(world_size):
        c = plan.layout.coords(r)
        out.append(mem[(c["pp"], plan.microbatches[c["dp"]])]["total"])
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
        need = mem[(c["pp"], plan.microbatches[c["dp"]])]["total"]
        if need > have and (worst is None or need / have > worst[0]):
            where = f"{label}, group {rank_groups[r]}" if rank_groups else label
            worst = (need / have, r, c["pp"], need, have, where)
    if worst is not None:
        _, r, stage, need, have, label = worst
        terms = mem[(stage, plan.microbatches[plan.layout.coords(r)["dp"]])]
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
