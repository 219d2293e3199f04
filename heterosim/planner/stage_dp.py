"""Per-stage data parallelism in the planner (``parallelism.stage_dp``, issue 38): candidate mappings and their
closed-form estimate.

Candidates. Where the cluster's device groups differ in size (e.g. 4 DGX A100 nodes + 1 DGX H100 node, 32 vs 8
GPUs), a uniform plan must give every stage tp*dp GPUs, so a stage either spans device types or the small group
limits dp. A per-stage-DP plan instead gives every group g ``k_g >= 1`` consecutive pipeline stages (the groups
in one of the orders :func:`heterosim.planner.mapping.candidate_mappings` tries), and each of those stages all of
its share of the group: ``d_i = gpus(g_i) / (k_g * tp)`` replicas. The layout is stage-major (what
``parallelism.stage_dp`` requires), so stage i is the contiguous block of ``tp * d_i`` ranks and sits on one
group. Kept only where the degrees are not all equal (equal degrees are a uniform stage-major plan, which the
uniform search already scores) and every ``d_i`` divides the global micro-batch count m. Only searched when
the groups differ in size (:func:`groups_differ`): on equal-sized groups the planner's results are unchanged.

Estimate (stage i: ``t_i`` = per-micro-batch forward + backward time of its ``L_i`` layers on its device, plus
the embedding on the first and the head on the last stage; ``m_i = m / d_i`` micro-batches per replica;
``h_i`` = time of one pipeline message between stages i and i+1)::

    c_i  = max(t_i, h_{i-1}, h_i, R_i / (w_i + 1))
    R_i  = sum_{k >= i} t_k + 2 sum_{k >= i} h_k       (a micro-batch's round trip from stage i to the end)
    T_pipe = max_i ( m_i * c_i + sum_{k != i} t_k ) + 2 * sum_i h_i

the bottleneck stage is busy ``m_i c_i`` and the other stages' one pass each fills and drains the pipeline. A
replica cannot cycle faster than its messages, nor than its in-flight micro-batches allow: with local warm-up
``w_i = W_i // d_i`` (:func:`heterosim.workload.stage_dp.stage_warmups`) it holds ``w_i + 1`` micro-batches, each
taking a round trip ``R_i``. That term matters where degrees grow along the pipeline (``W_i`` is capped by the
stage before, so a wide stage after a narrow one warms up little); with non-increasing degrees ``w_i = p - i - 1``
as in plain 1F1B. With equal degrees this is the uniform estimate's ``m * t_max + (sum t - t_max)`` (v = 1). It is exact on the hand
calculations of ``tests/workload/test_stage_dp.py`` (no communication): [2, 1], m = 4, passes F and B:
``F + m (F + B) + B``; stage 0 twice as slow: 12t; [1, 2]: 10t (``tests/planner/test_stage_dp_planner.py``).
After the pipeline, as in :func:`heterosim.planner.estimate.estimate`: stage i ends its last backward
``sum_{k<i} (b_k + h_k)`` before the pipeline does, then its gradient reduction over its own d_i replicas
(exposed beyond the backward it overlaps), the tied-embedding sync, the optimizer step on its
``params / d_i`` ZeRO-1 shard, the ZeRO-1 all-gather; the iteration is the latest stage end.

Memory: the workload memory model (:func:`heterosim.workload.memory.memory_for_plan`) of the candidate's own
resolved plan, so every stage has its own micro-batch count, warm-up and ZeRO-1 shard.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from heterosim.planner.estimate import GRAD_BYTES, Estimate, _optimizer_ns
from heterosim.planner.mapping import Cell, GroupInfo, Mapping, index_runs
from heterosim.workload.costs import embedding_params, head_params, layer_params, padded_vocab
from heterosim.workload.stage_dp import stage_warmups

MAX_ALLOCATIONS = 64
"""Most stage-to-group allocations tried per (tp, pp, group order): the search's cost stays bounded (the
allocations are taken in order of how evenly they spread GPU throughput over stages, see
:func:`stage_dp_mappings`)."""


@dataclass
class StageDPMapping(Mapping):
    """A stage-major mapping with its own replica count per stage: ``cells[s]`` has ``stage_dp[s]`` cells."""

    stage_dp: tuple[int, ...] = ()

    @property
    def replica_devices(self) -> list[tuple[str, ...]]:
        return [tuple(sorted({row[0].device for row in self.cells}))]

    def describe(self) -> str:
        """e.g. ``stage-dp: stages 0-1 A100-80 x8 | 2 H100-SXM x8``."""
        return "stage-dp: stages " + index_runs([f"{row[0].device} x{len(row)}" for row in self.cells])

    def overrides(self, scenario) -> dict:
        out = super().overrides(scenario)
        out["parallelism.stage_dp"] = list(self.stage_dp)
        out["parallelism.dp"] = None
        return out


def groups_differ(groups: list[GroupInfo]) -> bool:
    """Whether per-stage DP candidates are searched: the device groups do not all have the same GPU count."""
    return len({g.gpus for g in groups}) > 1


def _allocations(lanes: list[int], pp: int) -> list[tuple[int, ...]]:
    """Stages per group (each >= 1, summing to pp, dividing the group's TP lanes), most even first: by the
    spread of lanes per stage (max / min), so the first tried give every stage similar GPU counts."""
    n = len(lanes)
    if pp < n:
        return []
    out = []
    for k in product(*[[c for c in range(1, min(pp - n + 1, lanes[g]) + 1) if lanes[g] % c == 0]
                       for g in range(n)]):
        if sum(k) == pp:
            out.append(k)
    out.sort(key=lambda k: max(lanes[g] / k[g] for g in range(n)) / min(lanes[g] / k[g] for g in range(n)))
    return out


def stage_dp_mappings(groups: list[GroupInfo], tp: int, pp: int, microbatches: int,
                      orders: list[list[str]]) -> list[StageDPMapping]:
    """Per-stage-DP mappings of (tp, pp) on ``groups`` (module docstring): every group order in ``orders`` x
    allocation of stages to groups, degrees not all equal, each dividing ``microbatches``."""
    by_name = {g.name: g for g in groups}
    if any(g.gpus_per_node % tp for g in groups):
        return []
    out: list[StageDPMapping] = []
    seen: set = set()
    for order in orders:
        ordered = [by_name[n] for n in order]
        lanes = [g.gpus // tp for g in ordered]
        for alloc in _allocations(lanes, pp)[:MAX_ALLOCATIONS]:
            sdp = [lanes[g] // alloc[g] for g in range(len(ordered)) for _ in range(alloc[g])]
            if len(set(sdp)) == 1 or any(microbatches % d for d in sdp):
                continue
            cells: list[list[Cell]] = []
            node0 = 0
            s = 0
            for g, k in zip(ordered, alloc):
                per_node = g.gpus_per_node // tp
                for j in range(k):
                    d = lanes[ordered.index(g)] // k
                    cells.append([Cell(stage=s, replica=r, group=g.name, device=g.device, slowdown=g.slowdown,
                                       node=node0 + (j * d + r) // per_node) for r in range(d)])
                    s += 1
                node0 += g.num_nodes
            m = StageDPMapping(strategy="stage-dp", order="tp-cp-ep-dp-pp", group_order=tuple(order), tp=tp,
                               pp=pp, dp=max(sdp), cells=cells, stage_dp=tuple(sdp))
            key = m.key() + m.stage_dp
            if key not in seen:
                seen.add(key)
                out.append(m)
    return out


def stage_times(costs, layers: list[int]) -> tuple[list[float], list[float]]:
    """Per stage: forward + backward time of one micro-batch ``t_i`` and its backward part ``b_i`` (ns)."""
    pp = len(layers)
    t, b = [], []
    for s, c in enumerate(costs):
        x = layers[s] * c.layer_ns + (c.embed_ns if s == 0 else 0.0) + (c.head_ns if s == pp - 1 else 0.0)
        bb = layers[s] * c.layer_bwd_ns + (c.head_ns * 0.5 if s == pp - 1 else 0.0)
        t.append(x)
        b.append(bb)
    return t, b


def pipeline_ns(t: list[float], hops: list[float], per_replica: list[int], stage_dp: list[int]) -> float:
    """``max_i (m_i * c_i + sum_{k != i} t_k) + 2 sum h`` with c_i = max(t_i, h_{i-1}, h_i, R_i / (w_i + 1))
    (module docstring)."""
    total = sum(t)
    warm = stage_warmups(list(stage_dp))
    best = 0.0
    for i, ti in enumerate(t):
        rtt = sum(t[i:]) + 2 * sum(hops[i:])
        c = max([ti, rtt / (warm[i] // stage_dp[i] + 1)] + hops[max(i - 1, 0):i + 1])
        best = max(best, per_replica[i] * c + total - ti)
    return best + 2 * sum(hops)


def estimate_stage_dp(cm, mapping: StageDPMapping, costs, layers: list[int], microbatches: int, *,
                      mbs: int = 1) -> Estimate:
    """Estimated iteration time of a per-stage-DP ``mapping`` with per-stage ``costs[s]`` (StageCost of the
    stage's device), ``layers`` per stage and ``microbatches`` global micro-batches (module docstring)."""
    sc = cm.scenario
    model, par = sc.model, sc.parallelism
    pp, tp, cells, sdp = mapping.pp, mapping.tp, mapping.cells, mapping.stage_dp
    act_b = 2 if sc.training.precision != "fp32" else 4
    sp = par.sequence_parallel and tp > 1
    pp_bytes = mbs * sc.training.seq_length * model.hidden_size * act_b / (tp if sp else 1)
    t, b = stage_times(costs, layers)
    # one message between stages s and s+1: the slower of the pairs of replicas it can run between
    hops = [max(cm.p2p_ns(cells[s][r % len(cells[s])], cells[s + 1][r % len(cells[s + 1])], pp_bytes)
                for r in range(max(len(cells[s]), len(cells[s + 1])))) for s in range(pp - 1)]
    per_replica = [microbatches // d for d in sdp]
    T = pipeline_ns(t, hops, per_replica, list(sdp))
    busy = sum(per_replica[s] * t[s] for s in range(pp))
    bottleneck = max(range(pp), key=lambda s: per_replica[s] * t[s])

    lp = layer_params(model, tp, 1)
    emb = embedding_params(model, tp)
    head = head_params(model, tp, pp)
    zero = par.zero_stage == 1
    end = dp_exposed_crit = tail_crit = 0.0
    lag = 0.0
    for s in range(pp):
        start = T - lag
        lag += b[s] + (hops[s - 1] if s > 0 else 0.0)
        params = layers[s] * lp.dense + (emb if s == 0 else 0.0) + (head if s == pp - 1 else 0.0)
        gbytes = params * GRAD_BYTES
        row = cells[s]
        d = len(row)
        if d > 1:
            red = cm.dp_ns(row, gbytes, "reducescatter" if zero else "allreduce")
            window = b[s] if par.overlap_grad_reduce else 0.0
            last_bucket = red * min(1.0, par.grad_bucket_bytes / max(gbytes, 1.0))
            exposed = max(red - window, last_bucket)
        else:
            exposed = 0.0
        tail = exposed
        if pp > 1 and model.tie_embeddings and s in (0, pp - 1):
            nb = padded_vocab(model, tp) // tp * model.hidden_size * GRAD_BYTES
            tail += max(cm.p2p_ns(cells[0][r % len(cells[0])], cells[pp - 1][r % len(cells[pp - 1])], nb)
                        for r in range(max(len(cells[0]), len(cells[pp - 1]))))
        tail += _optimizer_ns(cm, row[0].group, params / (d if zero and d > 1 else 1))
        if zero and d > 1:
            tail += cm.dp_ns(row, params * act_b, "allgather")
        if start + tail > end:
            end, dp_exposed_crit, tail_crit = start + tail, exposed, tail
    return Estimate(time_ns=end, pipe_ns=[T], bubble=1.0 - busy / (pp * T) if T else 0.0,
                    dp_exposed_ns=dp_exposed_crit, tail_ns=tail_crit, bottleneck=(bottleneck, 0))
