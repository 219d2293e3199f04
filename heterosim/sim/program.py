"""One training iteration as an engine-neutral *program*: static arrays that two engines can run.

:func:`export_program` turns a prepared scenario (IR + system) into a :class:`Program`: a DAG of nodes with
AND semantics (a node is ready when every predecessor has finished) and three kinds of node:

* ``JOIN``: zero duration (a lane posting a communication op, a collective instance starting when every lane
  has posted it, an op ending when all its instances have);
* ``DELAY``: a fixed duration (compute ops, TP collectives inside a node, collectives confined to one node,
  zero-byte transfers); compute ops keep their unscaled time and their lane so that a variant can scale them;
* ``FLOW``: a network (or intra-node NVLink/PCIe) message, posted ``pre_ns`` after it is ready, carried by
  max-min fair sharing of its links, finishing ``ceil(drain) + latency`` (``netbackend/flow.py``'s model).

The coordinator's execution semantics (``heterosim/sim/coordinator.py``), made explicit here:

* stream order: an op's predecessors are the op before it on its stream and its ``deps``;
* a collective instance starts when every lane of its group has posted the op (a JOIN over their posts); a
  lane's op ends when every instance its ranks sit in has ended;
* pipeline send/recv: one instance per (sender lane, receiver lane, tag), started when both have posted;
* a flow schedule (comm planner) runs its transfers in dependency order, each ``latency_ns`` after its deps;
* connection order: messages of one (src, dst, connection) are carried one at a time in posting order; this
  one is dynamic (the engine keeps per-connection queues), not a static edge.

The program is built with the coordinator's own helpers (its lanes, local duration tables, planned schedules,
intra-node closed forms, read through its public accessors), with every lane executed (no symmetry reduction):
the engines reproduce that run of the flow backend. Compute contention (``simulation.compute_contention:
sm_share``, the default; heterosim/sim/contention.py) is program data too (:class:`_Contention`): SM holds taken
at a collective instance's start (and by a local TP collective running alone) and given back at the lane's op
end, and compute nodes whose members the engine re-times in integer ns whenever their lane's count changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from heterosim.errors import UserError

JOIN, DELAY, FLOW = 0, 1, 2
"""Node kinds."""

FANOUT = 8
"""Successors per node in the padded successor table; wider fan-outs go through trees of JOIN nodes (an engine
then spends one extra round per tree level at the same instant, nothing else changes)."""

_REDUCE_DEPTH = 6
"""Edges u -> w beside a path of at most this many edges from u to w are dropped (a local transitive reduction:
an op, its TP collectives and the next op on the stream form such diamonds)."""
_REDUCE_FANOUT = 4
"""Only nodes with at most this many successors are reduced (the diamonds are an op's; a collective's start
fans out to hundreds of transfers, whose searches cost quadratic time and find nothing)."""
_REDUCE_SEEN = 64
"""Nodes one search visits at most."""
MAX_MEMBERS = 8
"""Members of a merged DELAY under compute contention: the engine walks a node's members in a loop of this many
steps when it re-times one (without contention chains merge without bound: a stage's forward is 147 ops)."""
EFF_WIDTH = 4
"""SM holds/releases per node in the padded effect table; a collective instance's start holds SMs on every lane
of its group, so wider lists go to JOINs after it (:meth:`_Builder._split_effects`)."""
CONTENTION_MODELS = ("none", "sm_share")
"""``simulation.compute_contention`` models the program and the engine reproduce (heterosim/sim/contention.py)."""
_ANCESTOR_SEEN = 200_000
"""Ops one ancestor search of the chain analysis visits at most (:func:`_local_holds`)."""


@dataclass
class Program:
    """The iteration as static arrays (module docstring). N nodes, F flows, L links (+1 dummy at index L)."""

    kind: np.ndarray
    """int8[N]: JOIN | DELAY | FLOW."""
    member_ptr: np.ndarray
    """int64[N+1]: a DELAY node's members (ops merged into one chain) are ``member_ptr[n]:member_ptr[n+1]``."""
    member_ns: np.ndarray
    """int64[M]: a member's duration when it is not a compute op, else its unscaled time
    (``ComputeModel.op_time_ns``): its duration is then ``round(member_ns * slowdown of its lane)``, as the
    coordinator computes it."""
    member_lane: np.ndarray
    """int32[M]: the lane of a compute member, -1 for a fixed duration."""
    pre_ns: np.ndarray
    """int64[N]: a FLOW is posted this long after it is ready (the transfer's ``latency_ns``)."""
    flow: np.ndarray
    """int32[N]: a FLOW node's flow index (else -1)."""
    succ: np.ndarray
    """int32[N, FANOUT]: successors, -1 padded."""
    indeg: np.ndarray
    """int32[N]: predecessors of each node."""
    # flows
    flow_node: np.ndarray
    size_bytes: np.ndarray
    wire_bytes: np.ndarray
    """int64[F]: payload + headers (``header_bytes`` per packet of up to ``mtu_bytes``)."""
    tail_bytes: np.ndarray
    """int64[F]: the last packet with its header (store-and-forward latency)."""
    path: np.ndarray
    """int32[F]: the flow's path (flows of one (src, dst, ECMP key) share one)."""
    links: np.ndarray
    """int32[NP, P]: links a path loads (NIC caps included), padded with the dummy link L."""
    lat_links: np.ndarray
    """int32[NP, P]: real links after the first (their 1/capacity sum times ``tail_bytes`` is the latency's
    store-and-forward part), padded with L."""
    prop_ns: np.ndarray
    """int64[NP]: propagation delay of the path."""
    hops: np.ndarray
    """int64[NP]: switches on the path of a network flow (0 for intra-node flows: no switch pipeline)."""
    self_loop: np.ndarray
    """bool[F]: src == dst (completes when posted, no network)."""
    conn: np.ndarray
    """int32[F]: connection index (-1: a connection of its own)."""
    # links
    link_gbps: np.ndarray
    """float64[Lr]: line rate of every real directed link (network links first, then intra-node ones)."""
    link_names: list
    """Lr names ``a->b`` (intra-node links prefixed ``intra:``)."""
    link_undirected: np.ndarray
    """int32[Lr]: the undirected fabric link (index in ``net.links``) of each network link, -1 for intra-node."""
    nic_links: np.ndarray
    """int32[V]: index (>= Lr) of each NIC cap virtual link."""
    nic_gbps: np.ndarray
    """float64[V]: its NIC's rate."""
    nic_access: list
    """V lists of the real links whose capacity sum the NIC must be below to bind (flow backend's rule)."""
    num_links: int
    """L: real links + NIC caps (the dummy is L)."""
    # lanes and meaning
    lane_ranks: list
    """Lane -> its GPU ranks (a compute op's duration scales with its lane's slowest GPU)."""
    rank_slowdown: np.ndarray
    """float64[R]: each GPU's slowdown in the scenario."""
    gpu_names: list
    hop_ns: int
    """The network's ``per_hop_latency_ns``."""
    meta: dict = field(default_factory=dict)
    reroute: object = None
    """``reroute(system, scenario, seed)`` -> path tables (links, lat_links, prop, hops) under another ECMP seed."""
    # compute contention (``sm_share``; all None under ``none``): heterosim/sim/contention.py's model made explicit
    c_lane: np.ndarray | None = None
    """int32[N]: the lane of a compute op's node (its time depends on the SMs communication holds there), else -1."""
    member_share: np.ndarray | None = None
    """float64[M, 2]: a compute member's (compute-bound ns, all ns) of its kernels: its compute-bound part is
    ``round(duration * member_share[0] / member_share[1])`` (``ContentionTracker._compute_part``); (0, 1) for a
    fixed member. A node's members run one after the other, each re-timed on its own, as the coordinator's runs."""
    lane_sm: np.ndarray | None = None
    """int64[lanes]: SMs of each lane's GPUs (0: the device has no SM count, no contention)."""
    eff: np.ndarray | None = None
    """int32[N, EFF_WIDTH]: holds a node's end takes or gives back (-1 padded)."""
    eff_sign: np.ndarray | None = None
    """int8[N, EFF_WIDTH]: +1 take the hold (if not held yet), -1 give it back (if held)."""
    hold_lane: np.ndarray | None = None
    """int32[H]: the lane of each hold (a (lane, communication op) pair, or a local TP collective running alone)."""
    hold_sms: np.ndarray | None = None
    """int64[H]: its SMs (NCCL channels the comm planner gives the collective; userbuffers' ``num_sm``)."""
    probe: np.ndarray | None = None
    """int32[N]: the probe id of a node whose end the engine records (-1: none; None: no probes). Probes are JOINs
    without successors ending when an op of a lane ends or starts (:class:`DecisionChecks`)."""
    checks: "DecisionChecks | None" = None
    """The chain decisions taken from the baseline run (timing-dependent), as tests on probe times."""

    @property
    def contention(self) -> bool:
        return self.c_lane is not None

    @property
    def num_nodes(self) -> int:
        return len(self.kind)

    @property
    def num_flows(self) -> int:
        return len(self.flow_node)


class _Builder:
    """Node tables filled by :func:`export_program`, reduced to the engine's arrays by :meth:`arrays`."""

    def __init__(self, max_members: int = 0) -> None:
        self.max_members = max_members
        """Members a merged DELAY takes at most (0: no bound; the engine walks them one by one under contention)."""
        self.kind: list[int] = []
        self.dur: list[int] = []
        self.cns: list[int] = []
        self.lane: list[int] = []
        self.pre: list[int] = []
        self.flow: list[int] = []
        self.clane: list[int] = []
        self.cshare: list[tuple[float, float]] = []
        self.eff: list[list[tuple[int, int]]] = []
        self.preds: list[list[int]] = []
        self.probe: list[int] = []
        """Probe id of a node whose end the engine records (-1: none); such a JOIN is never removed."""

    _COLUMNS = (("kind", JOIN), ("dur", 0), ("cns", -1), ("lane", -1), ("pre", 0), ("flow", -1), ("clane", -1),
                ("cshare", (0.0, 1.0)), ("probe", -1))
    """Per-node columns and their values on an appended JOIN."""

    def node(self, kind: int, preds, dur: int = 0, cns: int = -1, lane: int = -1, pre: int = 0,
             flow: int = -1, clane: int = -1, cshare: tuple[float, float] = (0.0, 1.0), eff=None,
             probe: int = -1) -> int:
        self.kind.append(kind)
        self.dur.append(int(dur))
        self.cns.append(int(cns))
        self.lane.append(lane)
        self.pre.append(int(pre))
        self.flow.append(flow)
        self.clane.append(clane)
        self.cshare.append(cshare)
        self.eff.append(list(eff or ()))
        self.probe.append(probe)
        self.preds.append(preds if type(preds) is list else list(preds))  # (a list given is kept: filled later)
        return len(self.kind) - 1

    def arrays(self):
        """(succ [N', FANOUT], indeg [N']): the DAG reduced without changing any start (:meth:`_split_effects`,
        :meth:`_reduce_edges`, :meth:`_drop_joins`, :meth:`_merge_delays`, :meth:`_compact`, :meth:`_fan_out`);
        the node columns are rewritten to the kept nodes."""
        self._split_effects()
        preds, succs = self._reduce_edges()
        removed = self._drop_joins(preds, succs)
        members = self._merge_delays(preds, succs, removed)
        succs = self._compact(succs, members, removed)
        return self._fan_out(succs)

    def _split_effects(self) -> None:
        """A node with more SM holds/releases than ``EFF_WIDTH`` keeps the first ones; the others go to JOINs
        right after it (ending at the same instant: the engine applies every change of an instant before a
        compute op's time is final, so their order within it does not matter)."""
        for u in range(len(self.kind)):
            e = self.eff[u]
            if len(e) > EFF_WIDTH:
                self.eff[u] = e[:EFF_WIDTH]
                for i in range(EFF_WIDTH, len(e), EFF_WIDTH):
                    self.node(JOIN, [u], eff=e[i:i + EFF_WIDTH])

    def _reduce_edges(self) -> tuple[list[list[int]], list[list[int]]]:
        """(preds, succs) without duplicate edges and without an edge u -> w beside a path u -> v -> w: neither
        changes a start (durations are >= 0, so v ends no earlier than u): an op and the TP collective between it
        and the next op, say."""
        n = len(self.kind)
        preds = [list(dict.fromkeys(ps)) for ps in self.preds]
        succs: list[list[int]] = [[] for _ in range(n)]
        for v, ps in enumerate(preds):
            for u in ps:
                succs[u].append(v)
        for u in range(n):
            su = succs[u]
            if not 2 <= len(su) <= _REDUCE_FANOUT:
                continue
            sset = set(su)
            drop = set()
            for v in su:  # paths of up to _REDUCE_DEPTH edges from u's other successors
                front, seen = [v], {v}
                for _ in range(_REDUCE_DEPTH):
                    nxt = []
                    for x in front:
                        for w in succs[x]:
                            if w in sset and w != v:
                                drop.add(w)
                            if w not in seen and len(seen) < _REDUCE_SEEN:
                                seen.add(w)
                                nxt.append(w)
                    front = nxt
            if drop:
                succs[u] = [w for w in su if w not in drop]
                for w in drop:
                    preds[w].remove(u)
        return preds, succs

    def _drop_joins(self, preds, succs) -> list[bool]:
        """JOINs with one predecessor or one successor removed, their neighbours wired to each other (the same AND
        semantics, fewer rounds). A JOIN that holds or releases SMs ends when that happens: removed only with one
        predecessor (ending at the same instant) that takes its holds over."""
        n = len(self.kind)
        removed = [False] * n
        for j in range(n):
            if self.kind[j] != JOIN or self.probe[j] >= 0:
                continue
            pj, sj = preds[j], succs[j]
            if self.eff[j]:
                if len(pj) != 1 or pj[0] == j or self.eff[pj[0]]:  # (a node's own hold and release: one round)
                    continue
                self.eff[pj[0]], self.eff[j] = self.eff[j], []
            if len(pj) == 1 and pj[0] != j:
                u = pj[0]
                succs[u].remove(j)
                succs[u].extend(sj)
                for v in sj:
                    pv = preds[v]
                    pv[pv.index(j)] = u
            elif len(sj) == 1 and pj:
                v = sj[0]
                pv = preds[v]
                pv.remove(j)
                pv.extend(pj)
                for u in pj:
                    su = succs[u]
                    su[su.index(j)] = v
            else:
                continue
            removed[j] = True
            preds[j], succs[j] = [], []
        return removed

    def _mergeable(self, u: int) -> bool:
        """A DELAY that changes no SM count (a node's end is when its holds are taken or given back)."""
        return self.kind[u] == DELAY and not self.eff[u]

    def _merge_delays(self, preds, succs, removed) -> list[list[int]]:
        """Chains of DELAYs (each the only successor of the one before, which is its only predecessor) as one DELAY
        whose duration is the sum of its members' (the coordinator's chains: the same ends). Node -> its members."""
        n = len(self.kind)
        members: list[list[int]] = [[i] if self.kind[i] == DELAY else [] for i in range(n)]
        for u in range(n):
            if removed[u] or not self._mergeable(u):
                continue
            while len(succs[u]) == 1:
                v = succs[u][0]
                if v == u or not self._mergeable(v) or len(preds[v]) != 1 or removed[v]:
                    break
                if self.max_members and len(members[u]) + len(members[v]) > self.max_members:
                    break
                cu, cv = self.clane[u], self.clane[v]
                if cu >= 0 and cv >= 0 and cu != cv:  # (one lane's SM count per node)
                    break
                if cu < 0:
                    self.clane[u] = cv
                members[u].extend(members[v])
                succs[u] = succs[v]
                for w in succs[v]:
                    pw = preds[w]
                    pw[pw.index(v)] = u
                removed[v] = True
                preds[v], succs[v], members[v] = [], [], []
        return members

    def _compact(self, succs, members, removed) -> list[list[int]]:
        """The kept nodes renumbered; their columns and members (``self.members``) rewritten; their successors."""
        keep = [i for i in range(len(self.kind)) if not removed[i]]
        new_id = {o: k for k, o in enumerate(keep)}
        out = [[new_id[v] for v in succs[o]] for o in keep]
        self.members = [[(self.cns[m], self.dur[m], self.lane[m], self.cshare[m]) for m in members[o]] for o in keep]
        for name, _ in self._COLUMNS + (("eff", None),):
            col = getattr(self, name)
            setattr(self, name, [col[o] for o in keep])
        return out

    def _fan_out(self, succs):
        """Fan-outs wider than FANOUT through JOIN trees (appended nodes: ids above every original one); the
        padded successor table and the in-degrees."""
        for u in range(len(succs)):
            s = succs[u]
            while len(s) > FANOUT:
                groups = [s[i:i + FANOUT] for i in range(0, len(s), FANOUT)]
                s = []
                for g in groups:
                    j = self._append(JOIN)
                    succs.append(g)
                    s.append(j)
            succs[u] = s
        n = len(self.kind)
        succ = np.full((n, FANOUT), -1, np.int32)
        indeg = np.zeros(n, np.int32)
        for u in range(n):
            s = succs[u]
            if s:
                succ[u, :len(s)] = s
                for v in s:
                    indeg[v] += 1
        return succ, indeg

    def _append(self, kind: int) -> int:
        self.members.append([])
        for name, v in self._COLUMNS:
            getattr(self, name).append(kind if name == "kind" else v)
        self.eff.append([])
        return len(self.kind) - 1

    def effect_table(self) -> tuple[np.ndarray, np.ndarray]:
        """(hold ids int32[N, EFF_WIDTH], signs int8[N, EFF_WIDTH]: +1 hold, -1 release; -1 / 0 padded)."""
        n = len(self.kind)
        ids = np.full((n, EFF_WIDTH), -1, np.int32)
        sg = np.zeros((n, EFF_WIDTH), np.int8)
        for u, e in enumerate(self.eff):
            for i, (h, s) in enumerate(e):
                ids[u, i], sg[u, i] = h, s
        return ids, sg


def check_batchable(scenario, file: str | None = None) -> None:
    """One line for a scenario the batch engine cannot run as is (the normal path can)."""
    sim = getattr(scenario, "simulation", None)
    if sim is not None and sim.compute_contention not in CONTENTION_MODELS:
        raise UserError(f"the batch engine reproduces compute contention {' and '.join(CONTENTION_MODELS)} only (use "
                        "heterosim run)", file=file, field="simulation.compute_contention",
                        value=sim.compute_contention)
    if scenario.network.backend != "flow":
        raise UserError("the batch engine reproduces the flow backend only", file=file, field="network.backend",
                        value=scenario.network.backend)
    if scenario.network.background is not None:
        raise UserError("background traffic is random per run; the batch engine does not take it", file=file,
                        field="network.background", value="set")


def export_program(prepared) -> Program:
    """The prepared scenario's iteration (the last of ``training.iterations``, whose seed it routes with) as a
    :class:`Program`. Raises :class:`UserError` (one line) where the batch engine cannot reproduce the run.

    Passes: every lane's ops (:func:`_lane_nodes`), collective instances (:func:`_instances`), pipeline pairs
    (:func:`_pipeline_pairs`), in the order the coordinator's semantics are listed in the module docstring; then
    the reduced arrays (:meth:`_Builder.arrays`)."""
    from heterosim.pipeline import intra_config
    from heterosim.sim.coordinator import Coordinator
    from heterosim.sim.intra import effective_intra
    from netbackend.routing import Router

    sc, system, ir = prepared.scenario, prepared.system, prepared.ir
    check_batchable(sc, prepared.file)
    if any(op.peer_bytes is not None for p in ir.programs for op in p.ops):
        # uneven MoE routing's dispatch / combine: all-to-allvs with per-pair sizes (Op.peer_bytes), which the
        # coordinator runs as such; the program's collectives are uniform (collective, size) instances
        par = sc.parallelism
        field, value = (("parallelism.moe_load_imbalance", par.moe_load_imbalance) if par.moe_rank_load is None
                        else ("parallelism.moe_rank_load", par.moe_rank_load))
        raise UserError("uneven MoE routing runs all-to-allvs with per-pair sizes, which the batch engine does not "
                        "take (use heterosim run)", file=prepared.file, field=field, value=value)
    seed = sc.seed + sc.training.iterations - 1
    net_cfg, intra_cfg = sc.network, intra_config(sc)
    coord = Coordinator(ir, system, prepared.compute, _NoNet(system.net, net_cfg, seed), None,
                        precision=sc.training.precision, comm_options=sc.comm.model_dump(), record_messages=False,
                        symmetry=False, contention="none")
    intra_topo = effective_intra(system.intra)
    coord.intra = _NoNet(intra_topo, intra_cfg, seed)  # (the coordinator sends intra-node pieces as flows)
    routers = {"net": Router.shared(system.net, net_cfg.ecmp, seed), "intra": Router.shared(intra_topo,
                                                                                          intra_cfg.ecmp, seed)}
    nets = _Links(routers["net"], routers["intra"], system.net, intra_topo)
    b = _Builder(MAX_MEMBERS if sc.simulation.compute_contention != "none" else 0)
    flows = _Flows(nets, net_cfg, intra_cfg)
    cont = _Contention(coord, prepared) if sc.simulation.compute_contention != "none" and prepared.compute is not None \
        else None

    lanes = coord.lanes
    instances: dict[tuple, dict] = {}
    p2p: dict[tuple, dict] = {}
    for lane in lanes:  # pass 1: every lane's ops
        _lane_nodes(b, coord, prepared, cont, lane, instances, p2p)
    _instances(b, coord, flows, cont, instances)  # pass 2: collective instances
    _pipeline_pairs(b, coord, flows, cont, p2p)  # pass 3: pipeline send/recv pairs
    checks = _decision_checks(b, cont) if cont is not None else None  # pass 4: baseline decisions as tests
    succ, indeg = b.arrays()
    fl = flows.arrays()
    flow_of = np.asarray(b.flow, np.int32)
    flow_node = np.full(len(fl["size"]), -1, np.int32)
    idx = np.nonzero(flow_of >= 0)[0]
    flow_node[flow_of[idx]] = idx
    mem = b.members
    ptr = np.zeros(len(mem) + 1, np.int64)
    ptr[1:] = np.cumsum([len(m) for m in mem])
    flat = [x for m in mem for x in m]
    member_ns = np.array([c if c >= 0 else d for c, d, _, _ in flat], np.int64)
    member_lane = np.array([l if c >= 0 else -1 for c, _, l, _ in flat], np.int32)
    extra = {}
    if cont is not None:
        eff, sign = b.effect_table()
        extra = {"c_lane": np.asarray(b.clane, np.int32),
                 "member_share": np.array([x[3] for x in flat], np.float64).reshape(-1, 2),
                 "lane_sm": np.array([cont.sm(l) for l in lanes], np.int64), "eff": eff, "eff_sign": sign,
                 "hold_lane": np.array(cont.hold_lane, np.int32).reshape(-1),
                 "hold_sms": np.array(cont.hold_sms, np.int64).reshape(-1)}
        if checks is not None:
            extra["checks"] = checks
            if checks.num_probes:
                extra["probe"] = np.asarray(b.probe, np.int32)
    return Program(
        kind=np.asarray(b.kind, np.int8), member_ptr=ptr, member_ns=member_ns, member_lane=member_lane,
        pre_ns=np.asarray(b.pre, np.int64), flow=flow_of, succ=succ, indeg=indeg, flow_node=flow_node,
        size_bytes=fl["size"], wire_bytes=fl["wire"], tail_bytes=fl["tail"],
        path=fl["path"], links=fl["links"], lat_links=fl["lat_links"], prop_ns=fl["prop"], hops=fl["hops"],
        self_loop=fl["self"], conn=fl["conn"], link_gbps=nets.gbps, link_names=nets.names,
        link_undirected=nets.undirected, nic_links=nets.nic_links, nic_gbps=nets.nic_gbps,
        nic_access=nets.nic_access, num_links=nets.num_links,
        lane_ranks=[tuple(l.ranks) for l in lanes],
        rank_slowdown=np.array([g.slowdown for g in system.gpus], np.float64),
        gpu_names=[g.name for g in system.gpus], hop_ns=int(net_cfg.per_hop_latency_ns),
        meta={"scenario": sc.name, "seed": seed, "connections": flows.num_conns,
              "contention": sc.simulation.compute_contention if cont is not None else "none",
              "holds_from_baseline_lanes": cont.timing_decided if cont is not None else 0,
              "decision_checks": checks.count if checks is not None else 0,
              "compute_slots": max(1, cont.slots) if cont is not None else 0,
              "mtu_bytes": net_cfg.mtu_bytes, "header_bytes": net_cfg.header_bytes},
        reroute=lambda system, scenario, s, failed=(), width=fl["links"].shape[1]: flows.reroute(
            system, scenario, s, width, failed),
        **extra)


def _lane_nodes(b: _Builder, coord, prepared, cont, lane, instances: dict, p2p: dict) -> None:
    """Pass 1 for one lane: local ops as DELAYs (compute ops with their unscaled time; under contention with their
    compute-bound share, a TP collective running alone between a JOIN taking its SMs and its own end giving them
    back), communication ops as a post (JOIN) and an end (JOIN, its predecessors added by passes 2 and 3); stream
    order and ``deps`` as edges. Collective posts go to ``instances``, pipeline ones to ``p2p``."""
    from heterosim.hardware import get_device

    sc, ir = prepared.scenario, coord.ir
    prog = coord.programs[lane.program]
    lane.prog = prog
    table = coord.local_durations(lane)
    device = get_device(lane.device) if prepared.compute is not None else None
    local_holds = cont.local_holds(lane, table) if cont is not None else None
    if cont is not None:  # (compute nodes of a lane in flight at once: one per stream its compute ops use)
        cont.slots += len({op.stream for op in prog.ops if op.kind == "compute" and table[op.id] >= 0})
    end_of: dict[int, int] = {}
    prev_on_stream: dict[int, int] = {}
    wait: list[tuple[int, list]] = []
    for op in prog.ops:
        s = prog.stream_of[op.id]
        preds: list[int] = []  # (filled once every op of the lane has its nodes: deps may point forward)
        wait.append((op, preds))
        if s in prev_on_stream:
            preds.append(prev_on_stream[s])
        d = table[op.id]
        if d >= 0:
            ck = cont.compute_node(lane, op, device) if cont is not None and op.kind == "compute" else {}
            if op.kind == "compute" and op.duration_ns < 0 and device is not None:
                base = prepared.compute.op_time_ns(op, device, sc.training.precision)
                end = b.node(DELAY, preds, dur=0, cns=base, lane=lane.id, **ck)
            elif local_holds is not None and local_holds[op.id] and cont.local_hold(lane, op) >= 0:
                hid = cont.local_hold(lane, op)  # (runs alone: holds SMs meanwhile)
                end = b.node(DELAY, [b.node(JOIN, preds, eff=[(hid, 1)])], dur=d, eff=[(hid, -1)])
            else:
                end = b.node(DELAY, preds, dur=d, **ck)
        else:
            post = b.node(JOIN, preds)
            end = b.node(JOIN, [])
            if op.collective in ("send", "recv"):
                peer = coord.lane_of_rank[ir.peer_of(lane.ranks[0], op.peer_offset)]
                key = (lane.id, peer, op.tag) if op.collective == "send" else (peer, lane.id, op.tag)
                side = p2p.setdefault(key, {})
                if op.collective in side:
                    raise UserError("a pipeline send/recv tag repeats between two lanes; the batch engine "
                                    "matches them by tag", field="workload", value=op.tag)
                side[op.collective] = (lane.id, op.id, post, end)
            else:
                for gid in sorted({ir.group_id(r, op.group) for r in lane.ranks}):
                    inst = instances.setdefault((op.group, gid, op.tag),
                                                {"op": op, "posts": [], "ends": [], "lanes": []})
                    inst["posts"].append(post)
                    inst["ends"].append(end)
                    inst["lanes"].append((lane.id, op.id, end))
        end_of[op.id] = end
        prev_on_stream[s] = end
    for op, preds in wait:
        preds.extend(end_of[d] for d in op.deps)
    if cont is not None and lane.id in cont.timing_lanes:  # (the nodes its baseline decisions are tested on)
        cont.timing_lanes[lane.id] = (lane, end_of, {op.id: preds for op, preds in wait})


def _instances(b: _Builder, coord, flows: "_Flows", cont, instances: dict) -> None:
    """Each collective instance starts at the JOIN of its lanes' posts (where it takes its SMs under contention);
    every lane's op end waits for its schedule (:func:`export_program`, pass 2)."""
    ir = coord.ir
    for (dim, gid, tag), inst in instances.items():
        op = inst["op"]
        ranks = ir.groups[dim][gid]
        need = len({coord.lane_of_rank[r] for r in ranks})
        if len(set(inst["posts"])) != need:
            raise UserError("a collective instance is not posted by every lane of its group", field="workload",
                            value=f"{dim}:{gid}:{tag}")
        start = b.node(JOIN, inst["posts"])
        if cont is not None:  # (every lane of the instance holds its channels' SMs until its own op ends)
            cont.instance_holds(b, start, op.collective, tuple(ranks), op.size_bytes, inst["lanes"])
        done = _schedule(b, coord, flows, op.collective, tuple(ranks), op.size_bytes, start)
        for e in inst["ends"]:
            b.preds[e].extend(done)


def _pipeline_pairs(b: _Builder, coord, flows: "_Flows", cont, p2p: dict) -> None:
    """Each pipeline send/recv pair is one instance started when both sides have posted; its transfers (one per
    TP rank pair, or the re-sharding between TP groups of different degree) end both ops (pass 3)."""
    from heterosim.sim.coordinator import reshard_transfers

    lanes = coord.lanes
    for key, side in p2p.items():
        if set(side) != {"send", "recv"}:
            raise UserError("a pipeline send has no matching receive", field="workload", value=str(key[2]))
        sl, sop_id, spost, send_end = side["send"]
        rl, rop_id, rpost, recv_end = side["recv"]
        src_lane, dst_lane = lanes[sl], lanes[rl]
        sop = coord.programs[src_lane.program].ops[sop_id]
        rsize = coord.programs[dst_lane.program].ops[rop_id].size_bytes
        start = b.node(JOIN, [spost, rpost])
        if cont is not None:
            cont.instance_holds(b, start, "send", (src_lane.ranks[0], dst_lane.ranks[0]), sop.size_bytes,
                                [(sl, sop_id, send_end), (rl, rop_id, recv_end)])
        done = []
        if len(src_lane.ranks) == len(dst_lane.ranks):
            size = max(sop.size_bytes, rsize)
            for a, c in zip(src_lane.ranks, dst_lane.ranks):
                done += _schedule(b, coord, flows, "send", (a, c), size, start)
        else:
            for a, c, nbytes in reshard_transfers(src_lane.ranks, sop.size_bytes, dst_lane.ranks, rsize):
                done += _schedule(b, coord, flows, "send", (a, c), nbytes, start)
        fin = b.node(JOIN, done or [start])
        b.preds[send_end].append(fin)
        b.preds[recv_end].append(fin)


def _schedule(b: _Builder, coord, flows: "_Flows", collective: str, ranks: tuple, size: int, start: int) -> list[int]:
    """Nodes of one flow schedule started by ``start``; the nodes whose ends end it (the coordinator's
    ``_launch_schedule``: one-node groups in closed form, else the planned transfers)."""
    if coord.one_node(ranks):
        return [b.node(DELAY, [start], dur=coord.intra_collective_ns(collective, ranks, size))]
    xfers, struct, _ = coord.planned(collective, ranks, size)
    if not xfers:
        return [start]
    _, ndeps, dependents = struct
    nodes = [-1] * len(xfers)
    preds: list[list[int]] = [[] for _ in xfers]
    for i in range(len(xfers)):
        for j in dependents[i]:
            preds[j].append(i)
    order = _topo(len(xfers), preds)
    for i in order:
        x = xfers[i]
        p = [nodes[j] for j in preds[i]] or [start]
        if x.size_bytes <= 0:
            nodes[i] = b.node(DELAY, p, dur=int(x.latency_ns))
        else:
            f = flows.add(x)
            nodes[i] = b.node(FLOW, p, pre=int(x.latency_ns), flow=f)
    return nodes


def _topo(n: int, preds: list[list[int]]) -> list[int]:
    done, out = [False] * n, []
    for i in range(n):
        stack = [(i, 0)]
        while stack:
            v, k = stack.pop()
            if done[v]:
                continue
            if k < len(preds[v]):
                stack.append((v, k + 1))
                u = preds[v][k]
                if not done[u]:
                    stack.append((u, 0))
                continue
            done[v] = True
            out.append(v)
    return out


class _NoNet:
    """Stands in for a backend while the coordinator's helpers plan (nothing is sent)."""

    name = "none"

    def __init__(self, topology, config, seed):
        self.topology, self.config, self.seed = topology, config, seed


class _Links:
    """The link index space: network links, intra-node links, NIC caps (virtual links), the dummy."""

    def __init__(self, net_router, intra_router, net_topo, intra_topo) -> None:
        self.routers = {"net": net_router, "intra": intra_router}
        self.offset = {"net": 0, "intra": net_router.num_links}
        names, gbps, und = [], [], []
        for kind, r in self.routers.items():
            for lid in range(r.num_links):
                a, c = r.link_name(lid)
                names.append(f"{a}->{c}" if kind == "net" else f"intra:{a}->{c}")
                gbps.append(r.link_rate_gbps[lid])
                und.append(lid // 2 if kind == "net" else -1)
        self.names, self.gbps, self.undirected = names, np.array(gbps), np.array(und, np.int32)
        lr = len(names)
        nic_links, nic_gbps, nic_access = [], [], []
        self.nic_tx: dict[tuple[str, int], int] = {}
        self.nic_rx: dict[tuple[str, int], int] = {}
        for kind, topo in (("net", net_topo), ("intra", intra_topo)):
            r, off = self.routers[kind], self.offset[kind]
            outs: dict[int, list[int]] = {}
            ins: dict[int, list[int]] = {}
            for lid in range(r.num_links):
                if r.link_src[lid] < r.num_hosts:
                    outs.setdefault(r.link_src[lid], []).append(off + lid)
                if r.link_dst[lid] < r.num_hosts:
                    ins.setdefault(r.link_dst[lid], []).append(off + lid)
            for h, name in enumerate(topo.hosts):
                rate = topo.host_rate_gbps.get(name)
                if rate is None:
                    continue
                for side, acc, table in (("tx", outs.get(h, []), self.nic_tx), ("rx", ins.get(h, []), self.nic_rx)):
                    table[(kind, h)] = lr + len(nic_links)
                    nic_links.append(lr + len(nic_links))
                    nic_gbps.append(float(rate))
                    nic_access.append(acc)
        self.nic_links, self.nic_gbps, self.nic_access = np.array(nic_links, np.int32), np.array(nic_gbps), \
            nic_access
        self.num_links = lr + len(nic_links)


class _Flows:
    """Flows and the paths they take (a path per (src, dst, ECMP key): many flows share one)."""

    def __init__(self, nets: _Links, net_cfg, intra_cfg) -> None:
        self.nets = nets
        self.cfg = {"net": net_cfg, "intra": intra_cfg}
        self.rows: list[tuple] = []
        self.path_ids: dict[tuple, int] = {}
        self.path_keys: list[tuple] = []
        self.path_hits: list[tuple] = []
        self.conns: dict[tuple, int] = {}

    @property
    def num_conns(self) -> int:
        return len(self.conns)

    def _route(self, key: tuple, routers: dict, remap: dict | None = None) -> tuple:
        """(links with NIC caps, real links after the first, propagation ns, switches, src == dst) of a path
        (``remap``: per kind, the program's id of each link of a router over a fabric with links removed)."""
        kind, src, dst, fkey = key
        if src == dst:
            return (), (), 0, 0, True
        r = routers[kind]
        nodes, links = r.route(src, dst, fkey)
        delays = [r.link_delay_ns[l] for l in links]
        if remap is not None and kind in remap:
            links = [remap[kind][l] for l in links]
        off = self.nets.offset[kind]
        full = [off + l for l in links]
        s, d = nodes[0], nodes[-1]
        if (kind, s) in self.nets.nic_tx:
            full = [self.nets.nic_tx[(kind, s)]] + full
        if (kind, d) in self.nets.nic_rx:
            full = full + [self.nets.nic_rx[(kind, d)]]
        prop = sum(delays)
        hops = (len(nodes) - 2) if kind == "net" else 0
        return tuple(full), tuple(off + l for l in links[1:]), prop, hops, False

    def add(self, x) -> int:
        kind = "net" if x.link == "net" else "intra"
        r = self.nets.routers[kind]
        cfg = self.cfg[kind]
        key = (kind, x.src_ep, x.dst_ep, x.flow_key if r.mode != "rail" else 0)
        pid = self.path_ids.get(key)
        if pid is None:
            pid = self.path_ids[key] = len(self.path_keys)
            self.path_keys.append(key)
            self.path_hits.append(self._route(key, self.nets.routers))
        hit = self.path_hits[pid]
        size = int(x.size_bytes)
        mtu, hdr = cfg.mtu_bytes, cfg.header_bytes
        npkt = -(-size // mtu)
        conn = -1
        if x.connection >= 0 and not hit[4]:
            conn = self.conns.setdefault((kind, x.src_ep, x.dst_ep, x.connection), len(self.conns))
        self.rows.append((size, size + npkt * hdr, size - (npkt - 1) * mtu + hdr, pid, hit[4], conn))
        return len(self.rows) - 1

    def tables(self, hits: list[tuple], width: int | None = None) -> dict:
        """Path tables (links [NP, P], latency links [NP, P], propagation, switches) of ``hits``."""
        lnull = self.nets.num_links
        p = width or max([len(h[0]) for h in hits] + [1])
        links = np.full((len(hits), p), lnull, np.int32)
        lat = np.full((len(hits), p), lnull, np.int32)
        for i, h in enumerate(hits):
            if len(h[0]) > p:
                raise UserError("a re-routed path is longer than the program's (not an equal-cost alternative)",
                                field="seed", value=len(h[0]))
            links[i, :len(h[0])] = h[0]
            lat[i, :len(h[1])] = h[1]
        return {"links": links, "lat_links": lat, "prop": np.array([h[2] for h in hits], np.int64),
                "hops": np.array([h[3] for h in hits], np.int64)}

    def reroute(self, system, scenario, seed: int, width: int, failed: tuple[int, ...] = ()) -> dict:
        """The path tables with the routers of scenario seed ``seed`` (the ECMP hash's salts), over the fabric
        without the ``failed`` fabric links (indices in ``system.net.links``: flows take the shortest paths left,
        as the flow backend routes on a fabric without them). One line where a path is gone or grew longer."""
        from heterosim.pipeline import intra_config
        from heterosim.sim.intra import effective_intra
        from hscommon.errors import NetworkError
        from netbackend.routing import Router
        from netbackend.topo import NetTopology

        s = seed + scenario.training.iterations - 1
        net, remap = system.net, None
        if failed:
            gone = set(failed)
            kept = [k for k in range(len(net.links)) if k not in gone]
            net = NetTopology(hosts=list(net.hosts), switches=list(net.switches),
                              links=[net.links[k] for k in kept], host_rate_gbps=dict(net.host_rate_gbps))
            remap = {"net": [2 * k + d for k in kept for d in (0, 1)]}  # (Router: link k -> directed 2k, 2k + 1)
        routers = {"net": Router(net, scenario.network.ecmp, s),
                   "intra": Router(effective_intra(system.intra), intra_config(scenario).ecmp, s)}
        try:
            hits = [self._route(k, routers, remap) for k in self.path_keys]
        except NetworkError as exc:  # (no path left)
            if not failed:
                raise
            gone = [system.net.links[k] for k in failed]
            raise UserError(f"a failed link leaves no path ({exc.args[0] if exc.args else exc})", field="--vary fail",
                            value=", ".join(f"{l.a}<->{l.b}" for l in gone)) from None
        return self.tables(hits, width)

    def arrays(self) -> dict:
        rows = self.rows
        col = lambda k, t: np.array([r[k] for r in rows], t)  # noqa: E731
        return {"size": col(0, np.int64), "wire": col(1, np.int64), "tail": col(2, np.int64), "path": col(3, np.int32),
                "self": col(4, bool), "conn": col(5, np.int32), **self.tables(self.path_hits)}


class _Contention:
    """Compute contention (``sm_share``, heterosim/sim/contention.py) as program data: which nodes are compute ops
    whose time depends on the SMs held on their lane, and which node ends take or give back a hold.

    The coordinator's rules (``ContentionTracker``), made explicit:

    * a collective instance (or a pipeline send/recv pair) starting to move holds its NCCL channels' SMs on every
      lane in it (a lane holds once per op: ``comm_moving``) until that lane's op ends (``op_done``);
    * a local TP collective holds its SMs while it runs when it starts a run of its own, alone
      (``start_local``; inside a chain after compute ops, the compute stream waits on it and it is not counted:
      :func:`_local_holds` decides which, from the coordinator's chain rules);
    * a compute op's compute-bound part runs at (S - k) / S while k of its GPU's S SMs are held, re-timed in
      integer ns whenever k changes (the engine: ``heterosim/batch/engine.py`` ``_retime``)."""

    def __init__(self, coord, prepared) -> None:
        from heterosim.sim.contention import MODELS, ContentionTracker

        self.coord, self.prepared = coord, prepared
        self.baseline: set | None = None
        self.baseline_runs: dict[int, list[list[int]]] = {}
        """Lane id -> the runs (op ids started as one step) of the baseline run, in their order."""
        self.timing_decided = 0
        """Lanes whose local holds were taken from the baseline run (chains whose links depend on timing)."""
        self.timing_lanes: dict[int, object] = {}
        """Those lanes: id -> (lane, its ops' end nodes, its ops' input nodes) once pass 1 has made them."""
        self.slots = 0
        """Compute nodes that can be in flight at once, all lanes (the engine's per-round compute slots)."""
        self.ct = ContentionTracker(coord, MODELS["sm_share"])  # (its NCCL channel counts: ``_sms``)
        self.hold_lane: list[int] = []
        self.hold_sms: list[int] = []
        self.hold_of: dict[tuple, int] = {}
        self._sm: dict[str, int] = {}
        self._holds_memo: dict[tuple, list[bool]] = {}
        self._share_memo: dict[int, tuple] = {}

    def sm(self, lane) -> int:
        """SMs of the lane's GPUs (``ContentionTracker._make_kind``), 0 without an SM count."""
        v = self._sm.get(lane.device)
        if v is None:
            from heterosim.hardware import get_device

            v = self._sm[lane.device] = int(getattr(get_device(lane.device), "sm_count", 0) or 0)
        return v

    def compute_node(self, lane, op, device) -> dict:
        """Node columns of a compute op: its lane and compute-bound share (``ContentionTracker._compute_part``:
        the GEMM and attention kernels' share of its kernels' times; without kernels, or recorded, all of it
        for a compute-bound class, else none)."""
        if self.sm(lane) <= 1:
            return {}
        c = self.coord
        k = op.kernels
        if not k or op.duration_ns >= 0 or not hasattr(c.compute, "kernel_time_ns"):
            from heterosim.sim.contention import COMPUTE_BOUND_CLASSES

            share = (1.0, 1.0) if op.op_class in COMPUTE_BOUND_CLASSES else (0.0, 1.0)
        else:
            hit = self._share_memo.get(id(k))
            if hit is None or hit[0] is not k:
                comp = mem = 0.0
                for cls, flops, nbytes, mnk in k:
                    t = c.compute.kernel_time_ns(cls, flops, nbytes, mnk, device, c.precision)
                    if cls in ("gemm", "attention"):
                        comp += t
                    else:
                        mem += t
                hit = self._share_memo[id(k)] = (k, (comp, comp + mem) if comp + mem > 0 else (0.0, 1.0))
            share = hit[1]
        if share[0] == 0.0:  # (no compute-bound part: contention never changes its time)
            return {}
        return {"clane": lane.id, "cshare": share}

    def _hold(self, key: tuple, lane, sms: int) -> int:
        """The hold id of ``key`` (-1 where it holds nothing: no SMs, or a GPU without an SM count)."""
        if sms <= 0 or self.sm(lane) <= 1:
            return -1
        h = self.hold_of.get(key)
        if h is None:
            h = self.hold_of[key] = len(self.hold_lane)
            self.hold_lane.append(lane.id)
            self.hold_sms.append(int(sms))
        elif self.hold_sms[h] != sms:
            raise UserError("compute contention: the instances of one op hold different SM counts on one lane; the "
                            "batch engine cannot tell which holds first (use heterosim run)", field="workload",
                            value=str(key))
        return h

    def local_hold(self, lane, op) -> int:
        return self._hold(("local", lane.id, op.id), lane, self.ct._local_sms(lane, op))

    def instance_holds(self, b: "_Builder", start: int, collective: str, ranks: tuple, size: int, lane_ops) -> None:
        """Holds taken at ``start`` (an instance starting to move) on each (lane, op, end node) of ``lane_ops``,
        given back at the op's end node."""
        sms = self.ct._sms(collective, ranks, size)
        lanes = self.coord.lanes
        for lane_id, oid, end in lane_ops:
            h = self._hold(("comm", lane_id, oid), lanes[lane_id], sms)
            if h < 0:
                continue
            b.eff[start].append((h, 1))
            if (h, -1) not in b.eff[end]:
                b.eff[end].append((h, -1))

    def local_holds(self, lane, table: list[int]) -> list[bool]:
        """Per op of the lane: whether it is a local TP collective that holds SMs while it runs (:func:`_local_holds`
        where the chain rules decide it at export; else as in the baseline run, :func:`_baseline_local_holds`)."""
        key = (lane.program, id(table))
        hit = self._holds_memo.get(key, False)
        if hit is False:
            hit = self._holds_memo[key] = _local_holds(lane.prog, table)
        if hit is not None:
            return hit
        if self.baseline is None:
            self.baseline, self.baseline_runs = _baseline_local_holds(self.prepared)
            self.timing_decided = 0
        self.timing_decided += 1
        self.timing_lanes[lane.id] = None
        held = self.baseline
        return [(lane.id, o) in held for o in range(len(table))]


@dataclass
class DecisionChecks:
    """The chain decisions a program takes from the baseline run (:func:`_baseline_local_holds`) where they depend
    on timing, as tests on the times the engine records at probes (``Program.probe``).

    The coordinator starts a run at op ``r`` and takes the next op ``z`` after ``cur`` into it (``start_local``)
    only if every op ``z`` waits on besides ``cur`` has ended when ``r`` starts; where such an op is no ancestor of
    ``r`` (a ZeRO all-gather, say), that depends on timing. Check ``c`` is one such link of a possible run: it is
    taken iff every probe ``wait[wait_ptr[c]:wait_ptr[c+1]]`` (an op's end) comes before probe ``start[c]`` (``r``'s
    start: the end of its last input). ``base`` are the checks of the baseline's own runs, ``taken`` their outcome
    there. ``lanes`` replays the coordinator's runs of each such lane from the checks' outcomes under a variant
    (:func:`replay_holds`): a variant whose local TP collectives would hold SMs otherwise than the program's
    (the baseline's) is found by :func:`heterosim.batch.decisions.flipped`. Links the chain rules decide at export
    are not checks (the same in every variant)."""

    start: np.ndarray
    """int32[C]: probe id of the run's first op's start."""
    wait_ptr: np.ndarray
    """int64[C+1]."""
    wait: np.ndarray
    """int32[W]: probe ids of the ends the link waits on."""
    base: np.ndarray
    """int32[K]: the checks of the baseline run's links."""
    taken: np.ndarray
    """bool[K]: whether the baseline run took each."""
    labels: list
    """C lines naming the lane and ops of each check."""
    lanes: list
    """Per lane whose holds come from the baseline: a dict (``lane`` id, ``local`` ops in order, ``comp`` per op,
    ``links``: cur -> (z, z's other deps, the op before z on its stream or -1) where the
    chain rules may take the link, ``check_of``: (run start, z) -> check (-1: always taken from that start),
    ``holds``: the ops holding SMs in the program, ``can_hold``: ops that hold SMs where they run alone)."""
    num_probes: int = 0

    @property
    def count(self) -> int:
        return len(self.start)


def replay_holds(lane: dict, outcome) -> tuple[set | None, int]:
    """The ops of one lane that hold SMs (a TP collective whose run stays one op long, among ``can_hold``) when
    each check ``c`` comes out ``outcome(c)`` (True taken, False not, None a tie: the coordinator's order of events
    decides): (holds, -1); (None, c) at the first tie met, (None, -2) at a link no check was made for.
    ``_local_holds``' walk (the coordinator's ``start_local``) with the timing links decided by ``outcome``."""
    comp, links, check_of, can = lane["comp"], lane["links"], lane["check_of"], lane["can_hold"]
    chained: set = set()
    holds: set = set()
    for r in lane["local"]:
        if r in chained:
            continue
        run, cur, has = [r], r, comp[r]
        while True:
            hit = links.get(cur)
            if hit is None:  # (no next op, not local, or never taken: _chain_waits' None)
                break
            z, others, w = hit
            if not comp[z] and not has:
                break
            if w >= 0 and w not in run:
                others = others + (w,)
            if others:
                c = check_of.get((r, z), -2)
                ok = True if c == -1 else (outcome(c) if c >= 0 else None)
                if ok is None:
                    return None, c
                if not ok:
                    break
            chained.add(z)
            run.append(z)
            has = has or comp[z]
            cur = z
        if len(run) == 1 and not comp[r] and r in can:
            holds.add(r)
    return holds, -1


MAX_BACK = 4_096
"""Ops a search back along a lane's chain links visits at most (:func:`_decision_checks`: the runs that may reach
a timing-dependent link); a link reached from further back has no check, and a variant that meets it is flagged."""


def _decision_checks(b: "_Builder", cont: "_Contention") -> DecisionChecks | None:
    """Probes (JOINs with no successor, never removed) and checks for every timing-dependent link of a run that may
    start at a local op of the lanes whose holds come from the baseline (searched back from each link that waits on
    more than its chain), and the baseline runs' links among them (:class:`DecisionChecks`)."""
    if not cont.timing_lanes:
        return None
    probes: dict[tuple, int] = {}
    start, ptr, wait, labels = [], [0], [], []
    base, taken, lanes = [], [], []

    def probe(key, preds) -> int:
        k = probes.get(key)
        if k is None:
            k = probes[key] = len(probes)
            b.node(JOIN, list(preds), probe=k)
        return k

    for lid, hit in cont.timing_lanes.items():
        lane, end_of, inputs = hit
        prog = lane.prog
        dur = cont.coord.local_durations(lane)
        ops, nxt = prog.ops, prog.chain_next
        comp = [op.kind == "compute" for op in ops]
        local = [o for o in range(len(ops)) if dur[o] >= 0]
        links: dict[int, tuple] = {}  # cur -> (z, its other deps, the op before z on its stream or -1)
        back: dict[int, list[int]] = {}
        for cur in local:
            z = nxt[cur]
            if z < 0 or dur[z] < 0 or ops[z].deps.count(cur) != 1:
                continue
            sc, sz, pos = prog.stream_of[cur], prog.stream_of[z], prog.stream_pos[z]
            if sz == sc and pos != prog.stream_pos[cur] + 1:
                continue
            w = prog.streams[sz][pos - 1] if sz != sc and pos > 0 else -1
            links[cur] = (z, tuple(d for d in ops[z].deps if d != cur), w)
            back.setdefault(z, []).append(cur)
        check_of: dict[tuple, int] = {}
        complete = True
        for cur, (z, others0, w) in links.items():
            if not others0 and w < 0:
                continue
            # run starts that may reach cur through chain links, searched back from it: per op, whether the run
            # from it to cur holds a compute op and runs w
            info = {cur: (comp[cur], cur == w)}
            front = [cur]
            while front and len(info) < MAX_BACK:
                nf = []
                for x in front:
                    hx, wx = info[x]
                    for y in back.get(x, ()):
                        if y not in info:
                            info[y] = (comp[y] or hx, wx or y == w)
                            nf.append(y)
                front = nf
            complete = complete and not any(y not in info for x in front for y in back.get(x, ()))
            for r, (has, w_in) in info.items():
                if r != cur and not comp[r] and not comp[nxt[r]]:
                    continue  # (a TP collective after a TP collective: the run from r stops before cur)
                if not (has or comp[z]):
                    continue
                others = others0 + ((w,) if w >= 0 and not w_in else ())
                if not others:
                    continue
                miss = sorted(_missing_ancestors(prog, r, set(others)))
                if not miss:
                    check_of[(r, z)] = -1
                    continue
                check_of[(r, z)] = len(start)
                start.append(probe(("start", lid, r), inputs[r]))
                wait.extend(probe(("end", lid, o), [end_of[o]]) for o in miss)
                ptr.append(len(wait))
                labels.append(f"lane {lid}: {ops[z].name} (op {z}) after {ops[cur].name} in the run from "
                              f"{ops[r].name} (op {r}), waiting on " + ", ".join(f"{ops[o].name} (op {o})"
                                                                                 for o in miss))
        for run in cont.baseline_runs.get(lid, []):  # the baseline's decisions: its runs' timing-dependent links
            for i, cur in enumerate(run):
                took = i + 1 < len(run)
                c = check_of.get((run[0], nxt[cur]), -1) if cur in links else -1
                if c >= 0:
                    base.append(c)
                    taken.append(took)
                if not took:
                    break
        can = {o for o in local if not comp[o] and cont.sm(lane) > 1 and cont.ct._local_sms(lane, ops[o]) > 0}
        lanes.append({"lane": lid, "local": local, "comp": comp, "links": links, "check_of": check_of,
                      "can_hold": can, "holds": {o for o in can if (lid, o) in cont.baseline},
                      "names": {o: ops[o].name for o in can}, "complete": complete})
    return DecisionChecks(np.array(start, np.int32), np.array(ptr, np.int64), np.array(wait, np.int32),
                          np.array(base, np.int32), np.array(taken, bool), labels, lanes, len(probes))


def _local_holds(prog, dur: list[int]) -> list[bool] | None:
    """Per op: whether it is a local communication op (a TP collective inside a node) that holds SMs while it runs:
    it starts a run of the coordinator's (``ContentionTracker.start_local``) and the run stays one op long.

    The coordinator builds a run when its first op starts: after op ``cur`` it takes ``z = chain_next[cur]`` while
    ``z`` is local, waits on ``cur`` alone (its other inputs done), is not a TP collective before any compute op of
    the run, and may start on its stream (``chain_step``). Those tests are decided here at export: an input of ``z``
    other than ``cur`` is done when it is an ancestor of the run's first op (else the run may or may not take ``z``
    depending on timing: None is returned, and the caller takes the baseline run's decisions)."""
    ops, nxt = prog.ops, prog.chain_next
    n = len(ops)
    is_comp = [op.kind == "compute" for op in ops]
    comp_streams = {ops[i].stream for i in range(n) if is_comp[i] and dur[i] >= 0}
    chains = len(comp_streams) <= 1  # (ContentionTracker._make_kind: one compute stream, else no chains)
    holds = [False] * n
    chained = [False] * n
    for r in range(n):
        if dur[r] < 0 or chained[r]:
            continue
        run, cur, has_compute = [r], r, is_comp[r]
        z = nxt[cur] if chains else -1
        while z >= 0 and dur[z] >= 0:
            if not is_comp[z] and not has_compute:
                break
            ok = _chain_link(prog, run, cur, z)
            if ok is None:
                return None
            if not ok:
                break
            chained[z] = True
            run.append(z)
            has_compute = has_compute or is_comp[z]
            cur = z
            z = nxt[cur]
        if not is_comp[r] and len(run) == 1:
            holds[r] = True
    return holds


def _chain_link(prog, run: list[int], cur: int, z: int):
    """Whether the run started at ``run[0]`` (now at ``cur``) takes ``z``: True, False, or None (timing decides)."""
    w = _chain_waits(prog, run, cur, z)
    if w is None:
        return False
    return None if w else True


def _chain_waits(prog, run: list[int], cur: int, z: int) -> list[int] | None:
    """The ops the link ``cur -> z`` of the run started at ``run[0]`` waits on whose end may come after the run's
    start (the link is taken iff each of them has ended when ``run[0]`` starts: ``remaining[z] == 1`` and
    ``chain_step``'s idle stream); [] where none may (taken), None where the link is never taken."""
    ops = prog.ops
    deps = ops[z].deps
    if deps.count(cur) != 1:
        return None  # (remaining[z] counts a repeated input twice: never 1 while cur runs)
    others = [d for d in deps if d != cur]
    sc, sz = prog.stream_of[cur], prog.stream_of[z]
    pos = prog.stream_pos[z]
    if sz == sc:
        if pos != prog.stream_pos[cur] + 1:
            return None
    elif pos > 0:
        w = prog.streams[sz][pos - 1]
        if w not in run:
            others.append(w)  # (its stream is idle at z only once w has ended)
    if not others:
        return []
    return sorted(_missing_ancestors(prog, run[0], set(others)))


def _all_ancestors(prog, r: int, need: set) -> bool:
    """Whether every op of ``need`` ends before ``r`` starts (:func:`_missing_ancestors`)."""
    return not _missing_ancestors(prog, r, need)


def _missing_ancestors(prog, r: int, need: set) -> set:
    """The ops of ``need`` not found to end before ``r`` starts (an input of r, or of one of those, or on a stream
    before one of those; the search stops after ``_ANCESTOR_SEEN`` ops)."""
    ops, streams, stream_of, stream_pos = prog.ops, prog.streams, prog.stream_of, prog.stream_pos
    need = set(need)
    seen = {r}
    stack = [r]
    while stack and need and len(seen) < _ANCESTOR_SEEN:
        v = stack.pop()
        ins = list(ops[v].deps)
        if stream_pos[v] > 0:
            ins.append(streams[stream_of[v]][stream_pos[v] - 1])
        for u in ins:
            if u not in seen:
                seen.add(u)
                need.discard(u)
                stack.append(u)
    return need


def _baseline_local_holds(prepared) -> tuple[set, dict]:
    """(lane id, op id) of the local TP collectives that held SMs in the scenario's own run (the flow backend, every
    lane simulated), recorded from ``ContentionTracker.start_local``, and each lane's runs (the ops it started as
    one step). Used where the coordinator's chain of local ops depends on timing (an input of a chained op, a ZeRO
    all-gather say, may or may not have ended when the run starts): a variant takes the same decisions unless one
    of them would go the other way under its own times, which the engine detects (:class:`DecisionChecks`)."""
    from heterosim import pipeline
    from heterosim.sim import contention

    held: set = set()
    runs: dict[int, list[list[int]]] = {}
    orig = contention.ContentionTracker.start_local

    def start_local(self, lane, oid):
        orig(self, lane, oid)
        if (lane.id, oid) in self.holds:
            held.add((lane.id, oid))
        runs.setdefault(lane.id, []).append(list(self.runs[lane.id][-1].ops))

    contention.ContentionTracker.start_local = start_local
    try:
        pipeline.simulate(prepared, symmetry=False, record_messages=False)
    finally:
        contention.ContentionTracker.start_local = orig
    return held, runs
