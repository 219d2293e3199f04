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
intra-node closed forms), with every lane executed (no symmetry reduction) and communication free for
compute (``simulation.compute_contention: none``): the engines reproduce that run of the flow backend.
Compute contention (``sm_share``) couples compute times to the communication in flight and is refused.
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

    @property
    def num_nodes(self) -> int:
        return len(self.kind)

    @property
    def num_flows(self) -> int:
        return len(self.flow_node)


class _Builder:
    def __init__(self) -> None:
        self.kind: list[int] = []
        self.dur: list[int] = []
        self.cns: list[int] = []
        self.lane: list[int] = []
        self.pre: list[int] = []
        self.flow: list[int] = []
        self.preds: list[list[int]] = []

    def node(self, kind: int, preds, dur: int = 0, cns: int = -1, lane: int = -1, pre: int = 0,
             flow: int = -1) -> int:
        self.kind.append(kind)
        self.dur.append(int(dur))
        self.cns.append(int(cns))
        self.lane.append(lane)
        self.pre.append(int(pre))
        self.flow.append(flow)
        self.preds.append(preds if type(preds) is list else list(preds))  # (a list given is kept: filled later)
        return len(self.kind) - 1

    def arrays(self):
        """(succ [N', FANOUT], indeg [N'], kept node ids): JOINs with one predecessor or one successor removed
        (their neighbours wired to each other: the same AND semantics, fewer rounds), wide fan-outs as trees."""
        n = len(self.kind)
        # duplicate edges, and an edge u -> w beside a path u -> v -> w, change no start (durations are >= 0, so
        # v ends no earlier than u): dropped (an op and the TP collective between it and the next op, say)
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
        removed = [False] * n
        for j in range(n):
            if self.kind[j] != JOIN:
                continue
            pj, sj = preds[j], succs[j]
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
        # chains of DELAYs (each the only successor of the one before, which is its only predecessor) are one
        # DELAY whose duration is the sum of its members' (the coordinator's chains: the same ends)
        members: list[list[int]] = [[i] if self.kind[i] == DELAY else [] for i in range(n)]
        for u in range(n):
            if removed[u] or self.kind[u] != DELAY:
                continue
            while len(succs[u]) == 1:
                v = succs[u][0]
                if v == u or self.kind[v] != DELAY or len(preds[v]) != 1 or removed[v]:
                    break
                members[u].extend(members[v])
                succs[u] = succs[v]
                for w in succs[v]:
                    pw = preds[w]
                    pw[pw.index(v)] = u
                removed[v] = True
                preds[v], succs[v], members[v] = [], [], []
        keep = [i for i in range(n) if not removed[i]]
        new_id = {o: k for k, o in enumerate(keep)}
        succs = [[new_id[v] for v in succs[o]] for o in keep]
        self.members = [[(self.cns[m], self.dur[m], self.lane[m]) for m in members[o]] for o in keep]
        for name in ("kind", "dur", "cns", "lane", "pre", "flow"):
            col = getattr(self, name)
            setattr(self, name, [col[o] for o in keep])
        n = len(keep)
        # fan-outs wider than FANOUT go through JOIN trees (appended nodes: ids above every original one)
        for u in range(n):
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
        for name, v in (("kind", kind), ("dur", 0), ("cns", -1), ("lane", -1), ("pre", 0), ("flow", -1)):
            getattr(self, name).append(v)
        return len(self.kind) - 1


def check_batchable(scenario, file: str | None = None) -> None:
    """One line for a scenario the batch engine cannot run as is (the normal path can)."""
    sim = getattr(scenario, "simulation", None)
    if sim is not None and sim.compute_contention != "none":
        raise UserError("the batch engine runs communication free for compute only; set "
                        "simulation.compute_contention=none (or use heterosim run)", file=file,
                        field="simulation.compute_contention", value=sim.compute_contention)
    if scenario.network.backend != "flow":
        raise UserError("the batch engine reproduces the flow backend only", file=file, field="network.backend",
                        value=scenario.network.backend)
    if scenario.network.background is not None:
        raise UserError("background traffic is random per run; the batch engine does not take it", file=file,
                        field="network.background", value="set")


def export_program(prepared) -> Program:
    """The prepared scenario's iteration (the last of ``training.iterations``, whose seed it routes with) as a
    :class:`Program`. Raises :class:`UserError` (one line) where the batch engine cannot reproduce the run.

    (Over 100 lines: its passes — lanes' ops, collective instances, pipeline pairs — fill the same node tables
    and index maps, in the order the coordinator's semantics are listed in the module docstring.)"""
    from heterosim.pipeline import intra_config
    from heterosim.sim.coordinator import Coordinator, reshard_transfers
    from heterosim.sim.intra import effective_intra
    from netbackend.routing import Router

    sc, system, ir = prepared.scenario, prepared.system, prepared.ir
    check_batchable(sc, prepared.file)
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
    b = _Builder()
    flows = _Flows(nets, net_cfg, intra_cfg)
    from heterosim.hardware import get_device

    lanes = coord.lanes
    end_of: dict[tuple[int, int], int] = {}
    instances: dict[tuple, dict] = {}
    p2p: dict[tuple, dict] = {}
    # pass 1: every lane's ops; local ops as DELAY, communication ops as a post (JOIN) and an end (JOIN, preds later)
    for lane in lanes:
        prog = coord.programs[lane.program]
        lane.prog = prog
        table = coord._local_durations(lane)
        device = get_device(lane.device) if prepared.compute is not None else None
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
                if op.kind == "compute" and op.duration_ns < 0 and device is not None:
                    base = prepared.compute.op_time_ns(op, device, sc.training.precision)
                    n = b.node(DELAY, preds, dur=0, cns=base, lane=lane.id)
                else:
                    n = b.node(DELAY, preds, dur=d)
                end = n
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
                    gids = sorted({ir.group_id(r, op.group) for r in lane.ranks})
                    for gid in gids:
                        inst = instances.setdefault((op.group, gid, op.tag), {"op": op, "posts": [], "ends": []})
                        inst["posts"].append(post)
                        inst["ends"].append(end)
            end_of[(lane.id, op.id)] = end
            prev_on_stream[s] = end
        for op, preds in wait:
            preds.extend(end_of[(lane.id, d)] for d in op.deps)
    # pass 2: collective instances
    for (dim, gid, tag), inst in instances.items():
        op = inst["op"]
        ranks = ir.groups[dim][gid]
        need = len({coord.lane_of_rank[r] for r in ranks})
        if len(set(inst["posts"])) != need:
            raise UserError("a collective instance is not posted by every lane of its group", field="workload",
                            value=f"{dim}:{gid}:{tag}")
        start = b.node(JOIN, inst["posts"])
        done = _schedule(b, coord, flows, op.collective, tuple(ranks), op.size_bytes, start)
        for e in inst["ends"]:
            b.preds[e].extend(done)
    for key, side in p2p.items():
        if set(side) != {"send", "recv"}:
            raise UserError("a pipeline send has no matching receive", field="workload", value=str(key[2]))
        sl, sop_id, spost, send_end = side["send"]
        rl, rop_id, rpost, recv_end = side["recv"]
        src_lane, dst_lane = lanes[sl], lanes[rl]
        sop = coord.programs[src_lane.program].ops[sop_id]
        rsize = coord.programs[dst_lane.program].ops[rop_id].size_bytes
        start = b.node(JOIN, [spost, rpost])
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
    member_ns = np.array([c if c >= 0 else d for c, d, _ in flat], np.int64)
    member_lane = np.array([l if c >= 0 else -1 for c, _, l in flat], np.int32)
    return Program(
        kind=np.asarray(b.kind, np.int8), member_ptr=ptr, member_ns=member_ns, member_lane=member_lane,
        pre_ns=np.asarray(b.pre, np.int64), flow=flow_of, succ=succ, indeg=indeg, flow_node=flow_node, size_bytes=fl["size"], wire_bytes=fl["wire"], tail_bytes=fl["tail"],
        path=fl["path"], links=fl["links"], lat_links=fl["lat_links"], prop_ns=fl["prop"], hops=fl["hops"],
        self_loop=fl["self"], conn=fl["conn"], link_gbps=nets.gbps, link_names=nets.names,
        link_undirected=nets.undirected, nic_links=nets.nic_links, nic_gbps=nets.nic_gbps,
        nic_access=nets.nic_access, num_links=nets.num_links,
        lane_ranks=[tuple(l.ranks) for l in lanes],
        rank_slowdown=np.array([g.slowdown for g in system.gpus], np.float64),
        gpu_names=[g.name for g in system.gpus], hop_ns=int(net_cfg.per_hop_latency_ns),
        meta={"scenario": sc.name, "seed": seed, "connections": flows.num_conns,
              "mtu_bytes": net_cfg.mtu_bytes, "header_bytes": net_cfg.header_bytes},
        reroute=lambda system, scenario, s, width=fl["links"].shape[1]: flows.reroute(system, scenario, s, width))


def _schedule(b: _Builder, coord, flows: "_Flows", collective: str, ranks: tuple, size: int, start: int) -> list[int]:
    """Nodes of one flow schedule started by ``start``; the nodes whose ends end it (the coordinator's
    ``_launch_schedule``: one-node groups in closed form, else the planned transfers)."""
    if coord._one_node(ranks):
        return [b.node(DELAY, [start], dur=coord._intra_collective_ns(collective, ranks, size))]
    xfers, struct, _ = coord._planned(collective, ranks, size)
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

    def _route(self, key: tuple, routers: dict) -> tuple:
        """(links with NIC caps, real links after the first, propagation ns, switches, src == dst) of a path."""
        kind, src, dst, fkey = key
        if src == dst:
            return (), (), 0, 0, True
        r = routers[kind]
        nodes, links = r.route(src, dst, fkey)
        off = self.nets.offset[kind]
        full = [off + l for l in links]
        s, d = nodes[0], nodes[-1]
        if (kind, s) in self.nets.nic_tx:
            full = [self.nets.nic_tx[(kind, s)]] + full
        if (kind, d) in self.nets.nic_rx:
            full = full + [self.nets.nic_rx[(kind, d)]]
        prop = sum(r.link_delay_ns[l] for l in links)
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

    def reroute(self, system, scenario, seed: int, width: int) -> dict:
        """The path tables with the routers of scenario seed ``seed`` (the ECMP hash's salts)."""
        from heterosim.pipeline import intra_config
        from heterosim.sim.intra import effective_intra
        from netbackend.routing import Router

        s = seed + scenario.training.iterations - 1
        routers = {"net": Router(system.net, scenario.network.ecmp, s),
                   "intra": Router(effective_intra(system.intra), intra_config(scenario).ecmp, s)}
        return self.tables([self._route(k, routers) for k in self.path_keys], width)

    def arrays(self) -> dict:
        rows = self.rows
        col = lambda k, t: np.array([r[k] for r in rows], t)  # noqa: E731
        return {"size": col(0, np.int64), "wire": col(1, np.int64), "tail": col(2, np.int64), "path": col(3, np.int32),
                "self": col(4, bool), "conn": col(5, np.int32), **self.tables(self.path_hits)}
