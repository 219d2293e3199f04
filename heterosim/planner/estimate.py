"""Closed-form iteration time of one candidate plan: the planner's fast scoring pass.

Not a simulation. Per TP group (cell) the per-micro-batch stage time comes from
:class:`~heterosim.planner.partition.CostModel` (the simulator's own compute and
TP-collective models); the pipeline, DP and optimizer are composed in closed form:

* replica r (1F1B / interleaved with v chunks): ``T_r = m_r * max_s t_sr
  + (sum_s t_sr - max_s t_sr) / v + 2 v * (pipeline hop times)``, with the
  per-micro-batch cycle never shorter than one hop (slow links);
* stage s finishes its last backward ``sum_{k<s} b_k`` before the replica ends;
  its DP gradient reduction overlaps that tail (bucketed, ``overlap_grad_reduce``)
  and whatever exceeds it is exposed, then the tied-embedding all-reduce, the
  optimizer step (timed by the compute model) and the ZeRO-1 all-gather;
* ZeRO (``parallelism.zero_stage``, as the compiler emits it): from stage 1 the optimizer runs on the rank's
  1/dp shard and gradients are reduce-scattered (ZeRO-2 as ZeRO-1: the last backward's buckets are what
  shows); ZeRO-3 also all-gathers the parameters before every forward and backward of every micro-batch
  (no all-gather after the optimizer): the per-micro-batch cycle is at least the DP stream's two all-gathers
  and one reduce-scatter, and only the first layer's reduce-scatter follows the last backward. ZeRO-1/2's
  parameter all-gather with ``overlap_param_gather`` runs beside the first forward (what exceeds it, or at
  least the first bucket, shows);
* iteration = the latest stage end over all replicas.

The planner simulates its best candidates with the real coordinator and reports
the ratio simulated / estimated, so the estimate's error is visible.
"""
from __future__ import annotations

from dataclasses import dataclass

from heterosim.workload.costs import embedding_params, head_params, layer_params, padded_vocab

GRAD_BYTES = 4
"""fp32 gradient reduction, as the compiler."""


@dataclass
class Estimate:
    time_ns: float
    pipe_ns: list[float]
    """Pipeline time of every replica."""
    bubble: float
    """Idle fraction of the pipeline phase, averaged over cells."""
    dp_exposed_ns: float
    tail_ns: float
    """Exposed DP + embedding sync + optimizer + ZeRO all-gather of the critical stage."""
    bottleneck: tuple[int, int]
    """(stage, replica) with the longest per-micro-batch time."""


def estimate(cm, mapping, costs, layers: list[int], split: list[int], *, chunks: int = 1,
             mbs: int = 1) -> Estimate:
    """Estimated iteration time of ``mapping`` with per-cell ``costs[s][r]`` (StageCost),
    ``layers`` per stage and ``split`` micro-batches per replica."""
    sc = cm.scenario
    model, par = sc.model, sc.parallelism
    pp, dp, tp = mapping.pp, mapping.dp, mapping.tp
    cells = mapping.cells
    seq = sc.training.seq_length
    act_b = 2 if sc.training.precision != "fp32" else 4
    sp = par.sequence_parallel and tp > 1
    pp_bytes = mbs * seq * model.hidden_size * act_b / (tp if sp else 1)
    v = chunks

    t = [[0.0] * dp for _ in range(pp)]
    b = [[0.0] * dp for _ in range(pp)]
    for s in range(pp):
        for r in range(dp):
            c = costs[s][r]
            x = layers[s] * c.layer_ns
            bb = layers[s] * c.layer_bwd_ns
            if s == 0:
                x += c.embed_ns
            if s == pp - 1:
                x += c.head_ns
                bb += c.head_ns * 0.5
            t[s][r] = x
            b[s][r] = bb

    # DP, embedding sync, optimizer, ZeRO per stage
    lp = layer_params(model, tp, 1)
    emb = embedding_params(model, tp)
    head = head_params(model, tp, pp)
    zs = par.zero_stage
    stage_params = [layers[s] * lp.dense + (emb if s == 0 else 0.0) + (head if s == pp - 1 else 0.0)
                    for s in range(pp)]
    # ZeRO-3: every micro-batch's parameter all-gathers (forward, backward) and gradient reduce-scatter share the
    # DP stream; the slowest stage's sets a floor under the per-micro-batch cycle
    zero3_mb = [2 * cm.dp_ns(cells[s], stage_params[s] * act_b, "allgather")
                + cm.dp_ns(cells[s], stage_params[s] * GRAD_BYTES, "reducescatter")
                if zs == 3 and dp > 1 else 0.0 for s in range(pp)]

    pipe = []
    finish = [[0.0] * dp for _ in range(pp)]
    busy_sum = 0.0
    span_sum = 0.0
    worst = (0, 0, -1.0)
    for r in range(dp):
        col = [t[s][r] for s in range(pp)]
        hops = [cm.p2p_ns(cells[s][r], cells[s + 1][r], pp_bytes) for s in range(pp - 1)]
        tmax = max(col)
        smax = col.index(tmax)
        if tmax > worst[2]:
            worst = (smax, r, tmax)
        cycle = max(tmax, max(hops, default=0.0), max(zero3_mb))
        m = split[r]
        T = m * cycle + (sum(col) - tmax) / v + 2 * v * sum(hops)
        pipe.append(T)
        tail = 0.0
        for s in range(pp):
            finish[s][r] = T - tail
            tail += b[s][r] + (hops[s - 1] if s > 0 else 0.0)
            busy_sum += m * col[s]
            span_sum += T

    end = 0.0
    dp_exposed_crit = 0.0
    tail_crit = 0.0
    for s in range(pp):
        fwd0 = min(t[s][r] - b[s][r] for r in range(dp))
        exposed, tail = _stage_tail_ns(cm, mapping, s, stage_params[s], layers[s], min(b[s]), fwd0, act_b)
        e = max(finish[s]) + tail
        if e > end:
            end, dp_exposed_crit, tail_crit = e, exposed, tail
    bubble = 1.0 - busy_sum / span_sum if span_sum else 0.0
    return Estimate(time_ns=end, pipe_ns=pipe, bubble=bubble, dp_exposed_ns=dp_exposed_crit, tail_ns=tail_crit,
                    bottleneck=(worst[0], worst[1]))


def _stage_tail_ns(cm, mapping, s: int, params: float, layers: int, last_bwd: float, fwd0: float,
                   pbytes: int) -> tuple[float, float]:
    """(exposed DP reduction, whole tail) of stage ``s`` after its last backward (module docstring): the gradient
    reduction less what hides behind the last backward (``last_bwd``), the tied-embedding sync, the optimizer on
    the rank's shard, ZeRO-1/2's parameter all-gather (beside the first forward, ``fwd0``, when overlapped)."""
    par, model = cm.scenario.parallelism, cm.scenario.model
    pp, dp, tp, cells = mapping.pp, mapping.dp, mapping.tp, mapping.cells
    zs = par.zero_stage
    row = cells[s]
    gbytes = params * GRAD_BYTES
    first_bucket = min(1.0, par.grad_bucket_bytes / max(gbytes, 1.0))  # share of the stage's one bucket
    exposed = 0.0
    if dp > 1:
        red = cm.dp_ns(row, gbytes, "reducescatter" if zs >= 1 else "allreduce")
        exposed = max(red - (last_bwd if par.overlap_grad_reduce else 0.0), red * first_bucket)
        if zs == 3:  # per-unit reduce-scatters (layers, embedding, head): only the first unit's follows
            exposed = red / max(layers + (s == 0) + (s == pp - 1), 1)
    tail = exposed
    if pp > 1 and model.tie_embeddings and s in (0, pp - 1):
        nb = padded_vocab(model, tp) // tp * model.hidden_size * GRAD_BYTES
        tail += max(cm.p2p_ns(cells[0][r], cells[pp - 1][r], nb) for r in range(dp))
    tail += _optimizer_ns(cm, row[0].group, params / (dp if zs >= 1 and dp > 1 else 1))
    if 1 <= zs < 3 and dp > 1:
        ag = cm.dp_ns(row, params * pbytes, "allgather")
        if par.overlap_param_gather:  # at the iteration's start, bucket by bucket beside the first forward
            ag = max(ag * first_bucket, ag - fwd0)
        tail += ag
    return exposed, tail


def _optimizer_ns(cm, group: str, shard_params: float) -> float:
    """The Adam step as the compiler emits it (12 flops, 30 HBM bytes per parameter), on the group's device."""
    from heterosim.workload.compiler import OPTIMIZER_BYTES_PER_PARAM, OPTIMIZER_FLOPS_PER_PARAM

    kern = [("optimizer", OPTIMIZER_FLOPS_PER_PARAM * shard_params, OPTIMIZER_BYTES_PER_PARAM * shard_params, None)]
    node = cm._first_node[group]
    return cm._op_ns(kern, cm._get_device(node.spec.gpu)) * cm._groups[group].slowdown
