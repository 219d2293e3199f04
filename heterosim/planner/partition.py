"""Non-uniform layer partitioning and micro-batch splitting, and the analytic cost model behind them.

The cost model uses the same ingredients as the simulator, so that a partition
balanced here is balanced there:

* compute: the very kernel lists the compiler emits (``LayerShapes`` from
  ``heterosim.workload.costs``) timed by ``ComputeModel.op_time_ns`` on each
  stage's device, times the group's ``slowdown``;
* TP communication: the comm planner's schedule for a TP group of that node
  type, timed by ``intra_time_ns`` (what the coordinator does for TP); with
  ``tp_comm_overlap`` the dense blocks are the compiler's userbuffers pieces
  (``ub_split``) timed along the critical path of the ops it emits (``ub_block_ns``);
* pipeline / DP traffic: bytes over the per-GPU NIC share (closed form, not
  simulated; see :meth:`CostModel.p2p_ns`, :meth:`CostModel.dp_ns`);
* memory: ``memory_for_plan`` (the workload memory model) evaluated at 0 and 1
  layer per chunk, which is exact because the footprint is linear in a stage's
  layer count for a fixed schedule.

``balance_layers`` minimises the slowest stage's per-micro-batch time (min-max,
greedy and optimal for separable increasing costs) under per-stage layer caps;
``split_microbatches`` gives faster replicas more micro-batches so replicas
finish together (greedy min-max, also optimal).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from types import SimpleNamespace

from heterosim.errors import PlanError
from heterosim.workload.costs import (ACT_ELEM_BYTES, LayerShapes, bwd_kernels, embedding_params, head_params,
                                      layer_params, padded_vocab)
from heterosim.workload.ir import Op

NET_EFFICIENCY = 0.85
"""Achieved fraction of NIC line rate for large RDMA transfers (RoCE headers, DCQCN); closed-form only."""
NET_LATENCY_NS = 5_000
"""Per-message latency of an inter-node transfer (NIC + switches), closed-form only."""
NVLINK_EFFICIENCY = 0.81
"""As ``heterosim.comm.intranode.LINK_EFFICIENCY['nvlink']``."""


# ----------------------------------------------------------------------------- stage costs

@dataclass(frozen=True, slots=True)
class StageCost:
    """Per-micro-batch times (ns) of one TP group (a cell) for one layer / the extras."""

    layer_fwd_ns: float
    layer_bwd_ns: float
    """Backward incl. recomputation."""
    embed_ns: float
    """Embedding forward + backward (first stage only)."""
    head_ns: float
    """Final norm, LM head, loss, their backward (last stage only)."""

    @property
    def layer_ns(self) -> float:
        return self.layer_fwd_ns + self.layer_bwd_ns


class CostModel:
    """Times of one layer / embedding / head per (group, tp, micro-batch, recompute), memoised."""

    def __init__(self, scenario, system, compute=None) -> None:
        from heterosim.hardware import ComputeModel, get_device

        self.scenario = scenario
        self.system = system
        self.compute = compute or ComputeModel()
        self.precision = scenario.training.precision
        self._get_device = get_device
        self._memo: dict[tuple, StageCost] = {}
        self._tp_memo: dict[tuple, float] = {}
        self._first_node = {}
        for node in system.nodes:
            self._first_node.setdefault(node.group, node)
        self._groups = {g.name: g for g in scenario.cluster.groups}

    # -- pieces -------------------------------------------------------------------------------------------------
    def _shapes(self, tp: int, mbs: int) -> LayerShapes:
        sc = self.scenario
        plan = SimpleNamespace(micro_batch=mbs, seq=sc.training.seq_length, seq_local=sc.training.seq_length,
                               tp=tp, sp=sc.parallelism.sequence_parallel and tp > 1, ep=1)
        return LayerShapes.of(sc.model, plan, self.precision, sc.training.attention)

    def _op_ns(self, kernels: list, device) -> float:
        op = Op(id=0, kind="compute", name="planner", op_class="layer", kernels=tuple(kernels),
                flops=sum(k[1] for k in kernels), bytes=sum(k[2] for k in kernels))
        return float(self.compute.op_time_ns(op, device, self.precision))

    def tp_ns(self, group: str, tp: int, collective: str, size: int) -> float:
        """One TP collective on a node of ``group`` (comm planner schedule, analytic intra-node time)."""
        if tp <= 1 or size <= 0:
            return 0.0
        key = (group, tp, collective, size)
        t = self._tp_memo.get(key)
        if t is None:
            from heterosim.comm import intra_time_ns, plan_collective

            node = self._first_node[group]
            ranks = node.gpu_ranks[:tp]
            t = float(intra_time_ns(plan_collective(collective, ranks, size, self.system), self.system))
            self._tp_memo[key] = t
        return t

    def _ub_ns(self, group: str, tp: int, hid: int, kernels: list, bwd: bool, device) -> float:
        """One dense block under ``tp_comm_overlap``: the compiler's userbuffers pieces (``ub_split``) timed
        as the coordinator times ops, combined along the critical path of the ops it emits (``ub_block_ns``)."""
        from heterosim.workload.compiler import ub_block_ns, ub_reducescatter_bytes, ub_split

        pieces = tuple(self._op_ns(list(piece[2]), device) if piece[2] else 0.0
                       for piece in ub_split(kernels, tp, bwd))
        rs = tuple(self.tp_ns(group, tp, "reducescatter", b) for b in ub_reducescatter_bytes(hid, tp))
        return ub_block_ns(pieces, self.tp_ns(group, tp, "allgather", hid), rs, bwd)

    def stage_cost(self, group: str, tp: int, mbs: int, recompute: str) -> StageCost:
        key = (group, tp, mbs, recompute)
        c = self._memo.get(key)
        if c is not None:
            return c
        if self.scenario.model.is_moe:
            raise PlanError("the planner handles dense models only", field="model.num_experts",
                            value=self.scenario.model.num_experts)
        sh = self._shapes(tp, mbs)
        node = self._first_node[group]
        device = self._get_device(node.spec.gpu)
        slow = self._groups[group].slowdown
        eb = sh.gemm_eb
        attn, mlp = sh.attn_all(), sh.mlp()
        fwd = self._op_ns(attn, device) + self._op_ns(mlp, device)
        attn_b = bwd_kernels(attn, eb)
        if recompute == "selective":
            attn_b = sh.attn_core() + attn_b
        bwd = self._op_ns(attn_b, device) + self._op_ns(bwd_kernels(mlp, eb), device)
        # TP collectives per layer and pass: SP = 2 all-gathers + 2 reduce-scatters, else 2 all-reduces
        hid = sh.hidden_bytes(full=True)
        if tp > 1:
            if sh.sp:
                tpc = 2 * (self.tp_ns(group, tp, "allgather", hid) + self.tp_ns(group, tp, "reducescatter", hid))
                pre = self.tp_ns(group, tp, "allgather", hid)
                post = self.tp_ns(group, tp, "reducescatter", hid)
            else:
                tpc = 2 * self.tp_ns(group, tp, "allreduce", hid)
                pre, post = 0.0, self.tp_ns(group, tp, "allreduce", hid)
        else:
            tpc = pre = post = 0.0
        fwd_t = fwd + tpc
        bwd_t = bwd + tpc
        if self.scenario.parallelism.tp_comm_overlap and sh.sp:
            # userbuffers (as the compiler emits them): each dense block's all-gather and reduce-scatters
            # overlap chunks of its GEMMs; the block takes its ops' critical path
            fwd_t = self._ub_ns(group, tp, hid, attn, False, device) + self._ub_ns(group, tp, hid, mlp, False, device)
            bwd_t = (self._ub_ns(group, tp, hid, bwd_kernels(mlp, eb), True, device)
                     + self._ub_ns(group, tp, hid, attn_b, True, device))
        if recompute == "full":
            bwd_t += fwd_t
        emb = sh.embedding()
        embed = self._op_ns(emb, device) + self._op_ns(bwd_kernels(emb, eb), device) + post
        head = sh.head()
        loss = self.tp_ns(group, tp, "allreduce", 3 * sh.tokens * 4) if tp > 1 else 0.0
        head_t = self._op_ns(head, device) + self._op_ns(bwd_kernels(head, eb), device) + pre + post + loss
        c = StageCost(fwd_t * slow, bwd_t * slow, embed * slow, head_t * slow)
        self._memo[key] = c
        return c

    # -- network (closed form) ------------------------------------------------------------------------------------
    def nic_GBps(self, group: str) -> float:
        """Effective NIC bandwidth per GPU when every GPU of a node sends (GB/s)."""
        spec = self._first_node[group].spec
        return spec.nic_gbps * spec.nics_per_node / spec.gpus_per_node / 8 * NET_EFFICIENCY

    def p2p_ns(self, cell_a, cell_b, nbytes: float) -> float:
        """One pipeline message between two TP groups (each TP rank sends its part in parallel)."""
        if nbytes <= 0:
            return 0.0
        if cell_a.node == cell_b.node:
            spec = self._first_node[cell_a.group].spec
            bw = (spec.nvlink_gBps or spec.pcie_gBps) * NVLINK_EFFICIENCY
            return nbytes / bw + 1_000
        bw = min(self.nic_GBps(cell_a.group), self.nic_GBps(cell_b.group))
        return nbytes / bw + NET_LATENCY_NS

    def dp_ns(self, cells, nbytes: float, op: str = "allreduce") -> float:
        """A DP collective of ``nbytes`` (nccl-tests size) over the replicas of one stage (ring model)."""
        n = len(cells)
        if n <= 1 or nbytes <= 0:
            return 0.0
        factor = 2.0 * (n - 1) / n if op == "allreduce" else (n - 1) / n
        nodes = {c.node for c in cells}
        if len(nodes) == 1:
            spec = self._first_node[cells[0].group].spec
            bw = (spec.nvlink_gBps or spec.pcie_gBps) * NVLINK_EFFICIENCY
            return factor * nbytes / bw
        bw = min(self.nic_GBps(c.group) for c in cells)
        bw /= self.oversubscription(len(nodes))
        return factor * nbytes / bw + 2 * (n - 1) * NET_LATENCY_NS

    def oversubscription(self, nodes: int) -> float:
        """Leaf oversubscription applies once a ring spans more nodes than one leaf holds."""
        fab = self.scenario.fabric
        over = getattr(fab, "oversubscription", 1.0)
        per_leaf = getattr(fab, "hosts_per_leaf", None) or getattr(fab, "nodes_per_block", None)
        nics = max(n.spec.nics_per_node for n in self.system.nodes)
        if per_leaf is None or nodes * nics <= per_leaf:
            return 1.0
        return over


# ----------------------------------------------------------------------------- memory

class MemoryModel:
    """Per-rank memory of every (stage, micro-batch count) for any layer partition, fast.

    The same accounting as ``heterosim.workload.memory.memory_for_plan`` (tests assert equality), but
    the schedule walk is cached: the activation peak is ``max_t sum_c k_c(t) * w_c`` over the
    in-flight count vectors ``k(t)`` of the schedule, which depend only on (schedule, pp, m, stage,
    chunks), so they are computed once and reused for every partition."""

    _vectors: dict[tuple, list[tuple[int, ...]]] = {}

    def __init__(self, scenario, plan) -> None:
        from heterosim.workload.memory import (activation_bytes_per_layer, activation_reserve_fraction,
                                               fp8_weight_cache, overhead_parts, state_bytes_per_param)

        self.scenario, self.plan = scenario, plan
        model, tr = scenario.model, scenario.training
        prec = tr.precision
        self.pb, self.gb, self.ob = state_bytes_per_param(prec, tr.grad_reduce_dtype, fp8_weight_cache(tr))
        self.act_layer = activation_bytes_per_layer(model, plan, prec, attention=tr.attention)
        self.act_full = activation_bytes_per_layer(model, plan, prec, recompute="none", attention=tr.attention)
        self.overhead = sum(overhead_parts(scenario, plan).values())
        self.reserve = activation_reserve_fraction(tr)
        self.lp = layer_params(model, plan.tp, plan.ep)
        self.emb = embedding_params(model, plan.tp)
        self.head = head_params(model, plan.tp, plan.pp)
        scale = ACT_ELEM_BYTES[prec] / 2
        sp_div = plan.tp if plan.sp else 1
        sbh = plan.seq_local * plan.micro_batch * model.hidden_size
        self.embed_act = sbh / sp_div if model.hidden_dropout > 0 else 0.0  # embedding dropout mask (memory_for_plan)
        self.head_act = 2 * sbh / sp_div * scale + 4.0 * plan.seq_local * plan.micro_batch * padded_vocab(model, plan.tp) / plan.tp
        self.zero_div = plan.dp * plan.cp if plan.zero_stage == 1 else 1
        from heterosim.workload.sharding import sharding_of

        self.sh = sharding_of(scenario, plan)
        """ZeRO-2/3 sharding (None for stages 0/1): states then come from ``memory.zero_states``."""
        self.ms = sorted(set(plan.microbatches))
        self._need_memo: dict[tuple, float] = {}
        self._cap_memo: dict[tuple, int] = {}

    @classmethod
    def vectors(cls, schedule: str, pp: int, m: int, stage: int, chunks: int) -> list[tuple[int, ...]]:
        """Non-dominated in-flight count vectors (per chunk) over the schedule."""
        from heterosim.workload.schedules import schedule_for

        key = (schedule, pp, m, stage, chunks)
        vs = cls._vectors.get(key)
        if vs is None:
            cur = [0] * chunks
            seen = set()
            for phase, _, c in schedule_for(schedule, pp, m, stage, chunks):
                cur[c] += 1 if phase == "fwd" else -1
                if phase == "fwd":
                    seen.add(tuple(cur))
            vs = [v for v in seen if not any(o != v and all(a >= b for a, b in zip(o, v)) for o in seen)]
            if len(cls._vectors) > 20000:
                cls._vectors.clear()
            cls._vectors[key] = vs
        return vs

    def stage_need(self, stage: int, m: int, chunk_layers: list[int]) -> float:
        """Bytes one rank of ``stage`` needs with ``chunk_layers[c]`` layers in chunk c and m micro-batches."""
        plan = self.plan
        pp, v = plan.pp, plan.chunks
        last = pp * v - 1
        n = sum(chunk_layers)
        dense = n * self.lp.dense
        weights = []
        for c in range(v):
            vs = c * pp + stage
            w = chunk_layers[c] * self.act_layer
            if vs == 0:
                dense += self.emb
                w += self.embed_act
            if vs == last:
                dense += self.head
                w += self.head_act
            weights.append(w)
        if self.sh is None:
            states = dense * (self.pb + self.gb) + dense * self.ob / self.zero_div
        else:  # FSDP units: each layer, the embedding and the head (memory.sharded_model_states)
            from heterosim.workload.memory import zero_states

            units = [(i, self.lp.dense) for i in range(n)]
            units += [("embed", self.emb)] if stage == 0 else []
            units += [("head", self.head)] if any(c * pp + stage == last for c in range(v)) else []
            z = zero_states(self.scenario, self.sh, dense, 0.0, units)
            states = z["params"] + z["grads"] + z["optimizer"] + z["zero_buffers"]
        acts = max(sum(k * w for k, w in zip(vec, weights))
                   for vec in self.vectors(plan.schedule, pp, m, stage, v))
        if plan.recompute == "full" and n:
            acts += self.act_full
        return states + acts * (1 + self.reserve) + self.overhead

    def need(self, stage: int, m: int, layers: int) -> float:
        """Bytes with ``layers`` layers spread over the stage's chunks as ``vstage_partition`` does."""
        key = (stage, m, layers)
        hit = self._need_memo.get(key)
        if hit is None:
            v = self.plan.chunks
            per_chunk = [layers // v + (1 if c < layers % v else 0) for c in range(v)]
            hit = self._need_memo[key] = self.stage_need(stage, m, per_chunk)
        return hit

    def cap(self, stage: int, hbm_bytes: float, ms: list[int] | None = None) -> int:
        """Most layers stage ``stage`` can hold within ``hbm_bytes`` for every micro-batch count in ``ms``
        (-1 if not even an empty stage fits)."""
        best = 1 << 30
        L = self.scenario.model.num_layers
        for m in (ms or self.ms):
            key = (stage, m, hbm_bytes)
            n = self._cap_memo.get(key)
            if n is None:
                n0 = self.need(stage, m, 0)
                if n0 > hbm_bytes:
                    n = -1
                else:
                    # nearly linear in the layer count: jump to the linear guess, then step to the exact edge
                    v = self.plan.chunks
                    slope = max((self.need(stage, m, v) - n0) / v, 1.0)
                    n = min(L, int((hbm_bytes - n0) // slope))
                    while n > 0 and self.need(stage, m, n) > hbm_bytes:
                        n -= 1
                    while n < L and self.need(stage, m, n + 1) <= hbm_bytes:
                        n += 1
                self._cap_memo[key] = n
            best = min(best, n)
        return best


# ----------------------------------------------------------------------------- balancing

def balance_layers(num_layers: int, per_layer_ns: list[float], extra_ns: list[float],
                   caps: list[int] | None = None, multiple: int = 1, min_layers: int | None = None) -> list[int]:
    """Layers per stage minimising max_s(n_s * per_layer_ns[s] + extra_ns[s]) with n_s <= caps[s].

    ``multiple``: every count a multiple of it (interleaving with per-stage counts). Raises PlanError
    when the caps cannot hold the model."""
    pp = len(per_layer_ns)
    caps = list(caps) if caps is not None else [num_layers] * pp
    lo = multiple if min_layers is None else min_layers
    if num_layers % multiple:
        raise PlanError(f"{num_layers} layers cannot be split in multiples of {multiple}",
                        field="parallelism.layer_partition")
    n = [lo] * pp
    if any(c < lo for c in caps) or sum(min(c - c % multiple, num_layers) for c in caps) < num_layers:
        raise PlanError(f"the model's {num_layers} layers do not fit: per-stage layer caps {caps}",
                        field="parallelism.layer_partition", value=caps)
    left = num_layers - lo * pp
    if left < 0:
        raise PlanError(f"{pp} stages need at least {lo * pp} layers, the model has {num_layers}",
                        field="parallelism.pp", value=pp)
    heap = [((n[s] + multiple) * per_layer_ns[s] + extra_ns[s], s) for s in range(pp) if n[s] + multiple <= caps[s]]
    heapq.heapify(heap)
    while left > 0:
        if not heap:
            raise PlanError(f"the model's {num_layers} layers do not fit: per-stage layer caps {caps}",
                            field="parallelism.layer_partition", value=caps)
        _, s = heapq.heappop(heap)
        n[s] += multiple
        left -= multiple
        if n[s] + multiple <= caps[s]:
            heapq.heappush(heap, ((n[s] + multiple) * per_layer_ns[s] + extra_ns[s], s))
    return n


def split_microbatches(total: int, per_mb_ns: list[float], fill_ns: list[float], multiple: int = 1) -> list[int]:
    """Micro-batches per replica minimising max_r(fill_ns[r] + m_r * per_mb_ns[r]), each m_r >= multiple
    and a multiple of it (interleaving needs m % pp == 0)."""
    dp = len(per_mb_ns)
    if total % multiple or total < dp * multiple:
        raise PlanError(f"{total} micro-batches cannot give {dp} replicas a multiple of {multiple} each",
                        field="training.microbatch_split", value=total)
    m = [multiple] * dp
    left = total - multiple * dp
    heap = [(fill_ns[r] + (m[r] + multiple) * per_mb_ns[r], r) for r in range(dp)]
    heapq.heapify(heap)
    while left > 0:
        _, r = heapq.heappop(heap)
        m[r] += multiple
        left -= multiple
        heapq.heappush(heap, (fill_ns[r] + (m[r] + multiple) * per_mb_ns[r], r))
    return m


def vstage_partition(stage_layers: list[int], chunks: int) -> list[int]:
    """Per-virtual-stage counts (vs = chunk*pp + stage) spreading each stage's layers over its chunks."""
    pp = len(stage_layers)
    out = [0] * (pp * chunks)
    for s, n in enumerate(stage_layers):
        for c in range(chunks):
            out[c * pp + s] = n // chunks + (1 if c < n % chunks else 0)
    return out
