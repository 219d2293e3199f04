"""The coordinator: runs every rank's IR program against compute and network time.

Where the layers meet. Each *lane* executes one program: a lane stands for a
tensor-parallel group (its ranks run the same program in lock-step, joined by
TP collectives at every layer, and TP stays inside a node), so 1024 GPUs at TP8
are 128 lanes. Collectives over other dimensions (DP, PP, EP, CP) are launched
for every member rank, so inter-node traffic is simulated for every GPU and NIC.

Execution semantics (as frameworks run on CUDA/NCCL streams):
* ops of one stream run in program order, one at a time;
* an op starts when it heads its stream and all its ``deps`` have completed;
* compute ops take ``ComputeModel.op_time_ns`` on the lane's device, times its
  slowdown (the slowest member of the TP group, since TP syncs them);
* a collective instance starts when every lane of the group has posted it; it
  completes when its last transfer does (flow schedule from the comm planner);
* pipeline send/recv rendezvous: the transfer starts once both sides posted.

A chain of local ops (compute and TP collectives, each the only dependent of the one before) runs in
one step (``_chains``, ``_run_chain``): the same starts and ends, half the events at 1,024 GPUs.

Collectives confined to one node are timed analytically (``intra_time_ns``);
collectives that span nodes are expanded into their flow schedule: ``net``
transfers go to the network backend, intra-node pieces to a flow-level model of
the nodes' NVLink/PCIe fabric.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from heterosim.comm.collnet import SHARP_SWITCH
from heterosim.errors import PlanError, SimulationError
from heterosim.workload.ir import IR, Op
from netbackend.base import Message, NetworkBackend

WARMUP_TRANSFERS = 4
"""Pipeline transfers per pair of lanes a warm-up runs for (``hashed_copies: ops_and_shifted_replicas``): at
512 GPUs (1F1B) the replicas' offsets settle with the first or second transfer after the fill, and a pair
into stage 0 (gradients) starts its 4th transfer only after stage 0's forward sends have settled."""

SHIFT_MERGE_FRACTION = 1 / 16
"""Mirrored replicas whose offsets for a pipeline transfer lie within this fraction of the pair's transfer time
(median in the warm-up) ride as one group flow (:meth:`Coordinator._shift_groups`): their sends overlap
almost wholly in the full run too, and each group flow costs the flow engine its own start and end."""

# event kinds on the coordinator's own heap
_EV_OP_DONE = 0
_EV_XFER_READY = 1


@dataclass
class _ProgramInfo:
    """Per-program precomputation shared by every lane running it."""

    ops: list[Op]
    stream_of: list[int]
    streams: list[list[int]]
    """stream index -> op ids in program order."""
    stream_pos: list[int]
    """op id -> position in its stream."""
    ndeps: list[int]
    dependents: list[list[int]]
    stream_names: list[str]
    chain_next: list[int] = field(default_factory=list)
    """op id -> the op that may run right after it as one step (:func:`_chains`), or -1."""


def _chains(ops: list[Op], streams: list[list[int]], stream_of: list[int], stream_pos: list[int],
            dependents: list[list[int]]) -> list[int]:
    """Per op Y: Z when Z is Y's only dependent and nothing but Y's chain can start the op after Y on its stream.

    Then, once Y (local) runs and Z waits on nothing else, Z's start is Y's end whatever else happens
    meanwhile: no other op's wait count changes when Y ends, and the op that next heads Y's stream
    waits only on ops further down the chain, which run after Y. The coordinator runs such chains of
    local ops (compute and TP collectives: a layer's forward is a dozen of them) in one step and
    queues only the last op's end, with every op's start and end as they would be one by one."""
    n = len(ops)
    nxt = [-1] * n
    for y in range(n - 1, -1, -1):
        deps_of_y = dependents[y]
        if len(deps_of_y) != 1:
            continue
        z = deps_of_y[0]
        stream = streams[stream_of[y]]
        p = stream_pos[y] + 1
        w = stream[p] if p < len(stream) else -1
        if w >= 0 and w != z:
            wd = ops[w].deps
            if not wd:
                continue
            if len(wd) == 1:  # (most: the walk below for one dep, without its set)
                d = wd[0]
                c = z
                while 0 <= c < d:
                    c = nxt[c]
                if c != d:
                    continue
            else:
                need = set(wd)  # w's deps must all lie on the chain from z on (they are before w)
                top = max(wd)
                c = z
                while 0 <= c <= top and need:
                    need.discard(c)
                    c = nxt[c]
                if need:
                    continue
        nxt[y] = z
    return nxt


def _prepare_program(ops: list[Op]) -> _ProgramInfo:
    names: dict[str, int] = {}
    stream_of = []
    streams: list[list[int]] = []
    stream_pos = []
    dependents: list[list[int]] = [[] for _ in ops]
    ndeps = []
    for i, op in enumerate(ops):
        if op.id != i:
            raise SimulationError(f"IR op ids must be 0..n-1 in order (op {op.name!r} has id {op.id} at {i})")
        s = names.setdefault(op.stream, len(names))
        if s == len(streams):
            streams.append([])
        stream_of.append(s)
        stream_pos.append(len(streams[s]))
        streams[s].append(i)
        ndeps.append(len(op.deps))
        for d in op.deps:
            if d >= i and d >= len(ops):
                raise SimulationError(f"op {op.name!r} depends on unknown op id {d}")
            dependents[d].append(i)
    return _ProgramInfo(ops, stream_of, streams, stream_pos, ndeps, dependents, list(names),
                        _chains(ops, streams, stream_of, stream_pos, dependents))


@dataclass
class Lane:
    id: int
    ranks: tuple[int, ...]
    program: int
    device: str
    slowdown: float
    # dynamic state
    remaining: list[int] = field(default_factory=list)
    head: list[int] = field(default_factory=list)
    busy: list[bool] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    dur: list[int] = field(default_factory=list)
    """Duration of each local op (compute, TP collective), -1 for network ops."""
    comm_start_ns: dict[int, int] = field(default_factory=dict)
    """Comm op id -> when its data actually started moving (all peers had posted)."""
    done_count: int = 0
    prog: Any = None
    """Its program's precomputation (set when the run starts)."""


@dataclass
class _Instance:
    """One collective instance (a group of ranks executing one tagged op)."""

    key: tuple
    op: Op
    ranks: tuple[int, ...]
    lanes_needed: int
    lane_ops: dict[int, int] = field(default_factory=dict)
    """Lane id -> the op id it posted (programs of different lanes may differ), in posting order."""
    pending: int = 0
    start_ns: int = -1
    end_ns: int = -1
    link_bytes: dict[str, int] = field(default_factory=dict)
    mirror_start: dict[int, int] | None = None
    """Shifted replicas: mirrored replica -> when its own copy of this instance started moving (its offset, a
    pipeline send's; its own schedule, a replica-local collective's)."""
    mirror_end: dict[int, int] | None = None
    """Mirrored replica -> when its own copy of this instance ended (``mirror_start``'s, once known)."""
    lag_lanes: tuple[int, ...] = ()
    """Lanes whose lag (Coordinator._lag) was taken from this instance."""


class _Shadow:
    """A mirrored replica's own run of a replica-local collective (shifted replicas): a schedule of its copies
    that nothing waits for; its end is that replica's end of the op (Coordinator._launch_shadow)."""

    __slots__ = ("inst", "replica", "pending", "op")

    def __init__(self, inst: _Instance, replica: int) -> None:
        self.inst, self.replica, self.pending, self.op = inst, replica, 1, inst.op


@dataclass
class MessageRecord:
    id: int
    src: int
    dst: int
    src_ep: str
    dst_ep: str
    size_bytes: int
    link: str
    collective: str
    comm_kind: str
    start_ns: int
    end_ns: int = -1
    flow_key: int = 0
    """ECMP entropy of the transfer (with src/dst endpoints, the path both backends route it on)."""


@dataclass
class SimResult:
    iteration_time_ns: int
    lanes: list[Lane]
    programs: list[_ProgramInfo]
    durations: dict[tuple, list[int]]
    messages: list[MessageRecord]
    instances: list[_Instance]
    events: int
    net_stats: Any = None
    intra_stats: Any = None
    net_bytes: int = 0
    """Inter-node payload bytes, every copy counted (what ``messages`` would sum to without reduction)."""
    net_messages: int = 0
    all_messages: int = 0
    """Every transfer (network and intra-node), every copy counted."""
    inter_node_busy_ns: int = 0
    """Time during which some inter-node transfer was in flight."""
    symmetry: dict | None = None
    """What the symmetry reduction did (lanes simulated vs total, replica classes, collective orbits)."""
    contention: dict | None = None
    """What compute contention did (heterosim/sim/contention.py ``summary``); None: ``compute_contention: none``."""


class Coordinator:
    """Merges compute timelines with network timelines for one iteration."""

    def __init__(self, ir: IR, system, compute_model, net: NetworkBackend, intra: NetworkBackend | None = None,
                 *, precision: str = "bf16", plan_collective: Callable | None = None,
                 intra_time_ns: Callable | None = None, comm_options: dict | None = None,
                 progress: Callable[[int, int], None] | None = None, record_messages: bool = True,
                 symmetry: bool = False, message_limit: int | None = None,
                 release_ns: dict[int, int] | None = None, hashed_copies: str | None = None,
                 like: "Coordinator | None" = None, replica_classes: bool = True, contention: str = "none"):
        """``like``: a coordinator of the same IR and system whose precomputation (programs, local op durations,
        planned schedules) this one reuses (a warm-up run beside the main one, :meth:`warm_up`).
        ``replica_classes`` False: every replica simulated, collectives still reduced by orbits (a warm-up
        measures every replica's offsets; finding classes would cost a second of CPU at 1,024 GPUs).
        ``contention``: how communication in flight slows a GPU's compute (heterosim/sim/contention.py): a
        scenario's run passes its ``simulation.compute_contention`` (heterosim.pipeline); built directly (hand IRs,
        multi-job runs, collective benchmarks) a coordinator keeps communication free for compute (none)."""
        if plan_collective is None or intra_time_ns is None:
            from heterosim.comm import intra_time_ns as _intra, plan_collective as _plan

            plan_collective = plan_collective or _plan
            intra_time_ns = intra_time_ns or _intra
        self.ir = ir
        self.system = system
        self.compute = compute_model
        self.net = net
        self.intra = intra
        self.precision = precision
        self.plan = plan_collective
        self.intra_time = intra_time_ns
        self.comm_options = dict(comm_options or {})
        self.progress = progress
        self.record_messages = record_messages
        self.message_limit = message_limit
        self.release_ns = dict(release_ns or {})
        """Lane id -> time before which its program does not start (a job's start offset, heterosim/cluster)."""
        self.programs = like.programs if like is not None else [_prepare_program(p.ops) for p in ir.programs]
        self._build_lanes()
        self._heap: list[tuple[int, int, int, Any]] = []
        self._seq = 0
        self._now = 0
        self._instances: dict[tuple, _Instance] = {}
        self._finished_instances: list[_Instance] = []
        self._p2p_posted: dict[tuple, tuple[int, int]] = {}
        self._msg_seq = 0
        self._msg_owner: dict[int, tuple["_ScheduleState", int]] = {}
        self.messages: list[MessageRecord] = []
        self._dur_tables: dict[tuple, list[int]] = like._dur_tables if like is not None else {}
        self._intra_memo: dict[tuple, int] = like._intra_memo if like is not None else {}
        self._one_node_memo: dict[tuple, bool] = {}
        self._plan_memo: dict[tuple, Any] = like._plan_memo if like is not None else {}
        self._relabel_memo: dict[tuple, list] = {}
        self.events = 0
        # symmetry reduction (heterosim/sim/symmetry.py)
        self.symmetry = symmetry
        if hashed_copies is None:
            from heterosim.config.scenario import SimulationConfig

            hashed_copies = SimulationConfig.model_fields["hashed_copies"].default
        self.hash_slowest = symmetry and hashed_copies in ("ops", "ops_and_replicas", "ops_and_shifted_replicas")
        """Copies whose ECMP-hashed paths differ ride as one group flow at its slowest copy's pace
        (``simulation.hashed_copies``, heterosim/config/scenario.py); else they are never alike."""
        self.hash_replicas = symmetry and hashed_copies in ("ops_and_replicas", "ops_and_shifted_replicas")
        """Replicas whose paths differ only in the hashed links are alike too (else only the copies one op waits
        for: a collective's ring positions, a lane's rails)."""
        self.hashed_copies = hashed_copies if symmetry else "exact"
        self.shift_replicas = symmetry and hashed_copies == "ops_and_shifted_replicas" and not self._rails_pinned()
        """Mirrored replicas' pipeline sends go as their own flows, each replica's shifted by its offset from the
        simulated one as a warm-up of the full run measured it (:meth:`shift_replicas_by`), not in lockstep.
        Not where no path depends on the hash (rails pinned, one switch): replicas alike there are exactly
        alike, in lockstep in the full run, and the exact reduction applies without a warm-up."""
        self._shifts: dict[tuple[int, int], list[tuple[int, dict, int]]] | None = None
        self._lag: dict[int, dict[int, int]] = {}
        """Shifted replicas: lane id -> {mirrored replica: ns its copy of the lane's compute stream runs behind
        this one's} (:meth:`_note_lag`); cross-replica collectives start when the latest copy would post."""
        self._lag_src: dict[int, Any] = {}
        """Lane id -> the instance its lag was last taken from (a mirror's later end updates it only then)."""
        self._ghost_tag: dict[int, tuple] = {}
        """Shifted copy's flow id -> (id of its instance, its replicas): whose own end it helps make."""
        self._ghost_left: dict[tuple, list] = {}
        """(id of an instance, replicas) -> [flows of theirs still moving, the instance, the replicas]."""
        self._ghost_seq = 0
        self._shift_memo: dict[tuple, tuple] = {}
        self._tails: dict[int, tuple[tuple, tuple]] = {}
        """id(t) -> (t, t[1:]) for the memoized endpoint tuples a flow and its copies are split from
        (:meth:`_tail`)."""
        self._p2p_log: dict[tuple[int, int], dict] | None = None
        self._stop = False
        self.sym = None
        self._active = [True] * len(self.lanes)
        self._orbit_memo: dict[tuple, Any] = {}
        self._image_memo: dict[tuple, tuple] = {}
        self._shadow: dict[int, int] = {}
        self._wait: dict[int, int] = {}
        self._profilers: dict[int, Any] = {}
        self._sym_stats = {"orbit_schedules": 0, "orbit_transfers": 0, "orbit_flows": 0, "copies_sent": 0,
                           "merged_rail_groups": 0}
        if self.shift_replicas:
            self._sym_stats.update(shifted_sends=0, shifted_groups=0, shifted_early=0, delayed_collectives=0,
                                   shadow_schedules=0)
        self._merge_memo: dict[tuple, Any] = {}
        self._links_memo: dict[tuple, tuple[int, ...]] = {}
        self._peer_tags: dict[int, dict[str, Op]] = {}
        """Program id -> its all-to-allv ops (``Op.peer_bytes``) by tag (:meth:`_what`)."""
        # what results need even when messages are not recorded
        self.net_bytes = 0
        self.net_messages = 0
        self.all_messages = 0
        self._net_inflight = 0
        self._net_busy_since = 0
        self._net_busy_ns = 0
        if like is not None and (like.symmetry, like.hash_slowest) == (symmetry, self.hash_slowest):
            # a schedule's relabelling, orbits and rail merging depend on these two and the system alone
            self._relabel_memo, self._orbit_memo, self._merge_memo = like._relabel_memo, like._orbit_memo, \
                like._merge_memo
        if symmetry and replica_classes:
            self._detect_symmetry()
        from heterosim.sim.contention import tracker_for

        self._ct = tracker_for(self, contention)
        """Compute slowed by the GPU's communication in flight (None: compute ops take their fixed time)."""

    # ------------------------------------------------------------------ setup
    def _build_lanes(self) -> None:
        ir, system = self.ir, self.system
        tp_groups = ir.groups.get("tp") or [(r,) for r in range(ir.world_size)]
        self.lane_of_rank = [-1] * ir.world_size
        self.lanes: list[Lane] = []
        for g in tp_groups:
            progs = {ir.rank_program[r] for r in g}
            if len(progs) != 1:
                raise PlanError("ranks of one tensor-parallel group must run the same program",
                                field="parallelism.tp", value=list(g))
            nodes = {system.gpus[r].node for r in g}
            if len(nodes) != 1:
                stp = ir.meta.get("stage_tp")
                raise PlanError(f"tensor-parallel group {list(g)[:2] + ['...']} spans nodes {sorted(nodes)}; TP must "
                                f"stay inside a node", field="parallelism.stage_tp" if stp else "parallelism.tp",
                                value=stp if stp else len(g))
            devices = {system.gpus[r].device for r in g}
            lane = Lane(id=len(self.lanes), ranks=tuple(g), program=progs.pop(), device=devices.pop(),
                        slowdown=max(system.gpus[r].slowdown for r in g))
            for r in g:
                self.lane_of_rank[r] = lane.id
            self.lanes.append(lane)
        self._lanes_per_group: dict[tuple[str, int], int] = {}

    def _lanes_in_group(self, dim: str, gid: int) -> int:
        key = (dim, gid)
        n = self._lanes_per_group.get(key)
        if n is None:
            n = len({l for r in self.ir.groups[dim][gid] if self._active[l := self.lane_of_rank[r]]})
            self._lanes_per_group[key] = n
        return n

    # ------------------------------------------------------------- symmetry
    def _detect_symmetry(self) -> None:
        """Find classes of identical dp replicas; only one per class is executed (heterosim/sim/symmetry.py)."""
        from heterosim.sim.symmetry import replica_classes

        used = set()
        for prog in self.programs:
            for op in prog.ops:
                if op.kind == "comm":
                    used.add("pp" if op.collective in ("send", "recv") else op.group)
        canon: dict[tuple, int] = {}
        by_table: dict[int, int] = {}

        def lane_key(g: tuple[int, ...]):
            table = self._local_durations(self.lanes[self.lane_of_rank[g[0]]])  # one list per kind of lane
            k = by_table.get(id(table))
            if k is None:
                k = by_table[id(table)] = canon.setdefault(tuple(table), len(canon))
            return k

        gpus = self.system.gpus
        memo: dict[tuple, tuple] = {}

        hashed = self.hash_replicas  # (ops: replicas on other hashed links stay apart, as with exact)

        def pp_profile(a: int, b: int, rates_only: bool = False):
            key = (a, b, rates_only)
            hit = memo.get(key)
            if hit is not None:
                return hit
            if gpus[a].node_index == gpus[b].node_index:
                hit = ("intra",) if self.intra is None else \
                    ("intra", self._profile(self.intra, gpus[a].name, gpus[b].name, 0, rates_only, hashed))
            else:
                hit = ("net",) + tuple(self._profile(self.net, gpus[a].nic, gpus[b].nic, k, rates_only, hashed)
                                       for k in range(4))
            memo[key] = hit
            return hit

        sym = replica_classes(self.ir, self.system, used, lane_key=lane_key, pp_profile=pp_profile,
                              dp_profile=lambda a, b: pp_profile(a, b, True))
        if sym is None:
            return
        self.sym = sym
        for lane in self.lanes:
            self._active[lane.id] = sym.position[lane.ranks[0]] in sym.rep_replicas
        self._lanes_per_group.clear()

    def needs_warm_up(self) -> bool:
        """Whether :meth:`shift_replicas_by` wants a warm-up's pipeline start times (some replica is mirrored)."""
        return self.shift_replicas and self.sym is not None and self._shifts is None

    def warm_up(self, transfers: int = WARMUP_TRANSFERS, wall_limit_s: float | None = None) -> tuple[dict, dict]:
        """Run (every replica simulated: build this coordinator with ``hashed_copies: ops``) until every pipeline
        pair of lanes has started ``transfers`` transfers (or all it has), then stop; (src lane, dst lane) ->
        {tag: start ns} of every pipeline transfer started so far, and {tag: end ns} of those that ended (what
        :meth:`shift_replicas_by` takes)."""
        need: dict[tuple[int, int], int] = defaultdict(int)
        sends: dict[int, dict[int, int]] = {}  # program -> {peer offset: its sends}, offsets in program order
        for lane in self.lanes:
            if not self._active[lane.id]:
                continue
            per = sends.get(lane.program)
            if per is None:  # (once per program, not per lane: 15k ops each at 1,024 GPUs)
                per = sends[lane.program] = {}
                for op in self.programs[lane.program].ops:
                    if op.kind == "comm" and op.collective == "send":
                        per[op.peer_offset] = per.get(op.peer_offset, 0) + 1
            for off, n in per.items():
                need[(lane.id, self.lane_of_rank[self.ir.peer_of(lane.ranks[0], off)])] += n
        self._p2p_need = {k: min(n, transfers) for k, n in need.items()}
        self._p2p_unsettled = len(self._p2p_need)
        self._p2p_log = {k: {} for k in need}
        self._p2p_end = {k: {} for k in need}
        if need:  # (no pipeline: nothing to measure)
            self.run(wall_limit_s=wall_limit_s)
        return self._p2p_log, self._p2p_end

    def _log_p2p(self, src: int, dst: int, tag, t: int) -> None:
        log = self._p2p_log[(src, dst)]
        log[tag] = t
        if len(log) == self._p2p_need[(src, dst)]:
            self._p2p_unsettled -= 1
            if self._p2p_unsettled == 0:
                self._stop = True

    def shift_replicas_by(self, warm: tuple[dict, dict]) -> None:
        """Offsets of the mirrored replicas' pipeline sends, from a warm-up's start times (:meth:`warm_up`).

        In the full run under hashed ECMP the replicas do not send in lockstep: their own collisions during
        the pipeline fill put each at a fixed offset from the others (0.4-2.6 ms at 512 GPUs, several send
        durations), kept afterwards (benchmarks/hash_replica_offsets.py), so their sends rarely meet. Per
        class, the replica whose pipeline transfers start earliest is simulated (a send cannot be moved
        into the past); each mirror's copy of a transfer goes as its own group flow, nobody waiting for it,
        at the simulated one's start plus the offset measured for that transfer (same pair of lanes, same
        tag) in the warm-up, or past the warm-up the offset of the pair's last transfer measured. ``warm``:
        (src lane, dst lane) -> {tag: start ns}, and the same for the ends (:meth:`warm_up`)."""
        starts, ends = warm
        sym = self.sym
        lane_of, lanes = self.lane_of_rank, self.lanes

        def mirror_pair(pair: tuple[int, int], d: int) -> tuple[int, int]:
            return (lane_of[sym.image(lanes[pair[0]].ranks[0], d)], lane_of[sym.image(lanes[pair[1]].ranks[0], d)])

        def offsets(pair, mpair) -> tuple[dict, int]:
            base, other = starts.get(pair, {}), starts.get(mpair, {})
            common = [t for t in base if t in other]
            if not common:
                return {}, 0
            last = max(common, key=lambda t: base[t])
            return {t: other[t] - base[t] for t in common}, other[last] - base[last]

        for cls in sym.classes:
            if len(cls) < 2:
                continue
            pairs = [p for p in starts if sym.position[lanes[p[0]].ranks[0]] == cls[0]]
            lead = {d: sum(offsets(p, mirror_pair(p, d))[1] for p in pairs) if d != cls[0] else 0 for d in cls}
            rep = min(cls, key=lambda d: (lead[d], d))
            cls.sort(key=lambda d: d != rep)  # (stable: the others keep their order)
        sym.rep_replicas = {c[0] for c in sym.classes}
        for lane in lanes:
            self._active[lane.id] = sym.position[lane.ranks[0]] in sym.rep_replicas
        self._lanes_per_group.clear()
        self._shifts = {}
        for pair in starts:
            rank = lanes[pair[0]].ranks[0]
            if not self._active[pair[0]]:
                continue
            took = sorted(ends[pair][t] - starts[pair][t] for t in ends.get(pair, ()) if t in starts[pair])
            tol = took[len(took) // 2] * SHIFT_MERGE_FRACTION if took else 0
            self._shifts[pair] = (tol, [(d, *offsets(pair, mirror_pair(pair, d))) for d in sym.mirrors(rank)])

    def _profile(self, backend, src: str, dst: str, key: int, rates_only: bool = False,
                 hashed_alike: bool | None = None):
        """Network path profile of one flow, from the flow engine: link rates in order and fixed latency,
        or (``rates_only``) what its rate depends on (first, last and narrowest link)."""
        prof = self._profiler(backend)
        # which links the hash chose does not tell copies apart when hashed copies may ride together
        links = not (self.hash_slowest if hashed_alike is None else hashed_alike)
        try:
            return prof.rate_profile(src, dst, key, links) if rates_only else prof._profile(src, dst, key, links)
        except Exception:
            return None

    def _profiler(self, backend):
        """The flow engine that profiles ``backend``'s paths (itself if it is one)."""
        prof = self._profilers.get(id(backend))
        if prof is None:
            from netbackend.flow import FlowBackend

            prof = backend if isinstance(backend, FlowBackend) else FlowBackend(backend.topology, backend.config,
                                                                                  backend.seed)
            self._profilers[id(backend)] = prof
        return prof

    def _endpoints(self, link: str, src: int, dst: int) -> tuple[str, str]:
        gpus = self.system.gpus
        if link == "net":
            return gpus[src].nic, gpus[dst].nic
        return gpus[src].name, gpus[dst].name

    def _replica_mirrors(self, ranks) -> list[int]:
        """Replicas whose copy of this (intra-replica) communication is not simulated."""
        sym = self.sym
        if sym is None:
            return []
        pos = sym.position
        p0 = pos[ranks[0]]
        if any(pos[r] != p0 for r in ranks):
            return []
        return sym.mirrors(ranks[0])

    def _reduced(self, transfers, eps, ranks, shape):
        """(transfers, struct, images): the schedule reduced to one flow per orbit, or None. ``transfers``: the
        shape's planned schedule, ``eps``: per transfer its (src, dst, src_ep, dst_ep) in this group
        (:func:`_endpoints`)."""
        from heterosim.comm.schedule import Transfer
        from heterosim.sim.symmetry import schedule_orbits

        orb = self._orbit_memo.get(shape, False)
        if orb is False:
            orb = schedule_orbits(_with_endpoints(transfers, eps), ranks, self.system)
            self._orbit_memo[shape] = orb
        if orb is None:
            return None
        # copies must see paths of alike rates (NIC caps, narrowest link): else they are simulated one by one.
        # (Lengths may differ, a hop inside a leaf vs across the spine: the orbit ends with its latest copy.)
        for members in orb.members:
            x = transfers[members[0]]
            src, dst, src_ep, dst_ep = eps[members[0]]
            if x.link == "nvls" or src < 0 or dst < 0:
                return None
            backend = self.net if x.link == "net" else self.intra
            if backend is None:
                continue
            p0 = self._profile(backend, src_ep, dst_ep, x.flow_key, True)
            # (what _profile(..., True) returns for each, checked in one call: ~1,000 copies per schedule)
            if len(members) > 1 and not self._profiler(backend).rates_alike(
                    p0, [(eps[j][2], eps[j][3], transfers[j].flow_key) for j in members[1:]], not self.hash_slowest):
                return None
        reps, images = [], []
        for o, members in enumerate(orb.members):
            x = transfers[members[0]]
            src, dst, src_ep, dst_ep = eps[members[0]]
            reps.append(Transfer(o, src, dst, orb.size[o], x.link, src_ep, dst_ep, orb.deps[o], x.channel,
                                 x.step, x.latency_ns, x.flow_key))
            images.append(tuple([eps[j][2:] for j in members[1:]]))  # (a list first: ~1.8x a generator's pace)
        return reps, _structure(reps), images

    # ------------------------------------------------------------- scheduling
    def _push(self, t: int, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, payload))

    def _local_durations(self, lane: Lane) -> list[int]:
        """Per op of the lane's program: its duration if it is local (compute, or a TP
        collective inside the lane's node), else -1. Shared by lanes of the same kind."""
        gpus = self.system.gpus
        key = (lane.program, lane.device, lane.slowdown, gpus[lane.ranks[0]].group,
               tuple(gpus[r].local for r in lane.ranks))
        table = self._dur_tables.get(key)
        if table is not None:
            return table
        from heterosim.hardware import get_device

        device = get_device(lane.device) if self.compute is not None else None
        table = []
        append = table.append
        # an op's time depends on its kernels (one tuple shared by identical layers) or on its collective and
        # size only: computed once per table for each (15k ops, ~100 distinct at 1,024 GPUs)
        by_kernels: dict[int, int] = {}
        by_tp: dict[tuple, int] = {}
        for op in self.programs[lane.program].ops:
            if op.kind == "compute" and op.duration_ns >= 0:  # recorded (imported trace): as measured
                append(op.duration_ns)
            elif op.kind == "compute":
                k = op.kernels
                d = by_kernels.get(id(k)) if k else None
                if d is None:
                    d = int(round(self.compute.op_time_ns(op, device, self.precision) * lane.slowdown))
                    if k:
                        by_kernels[id(k)] = d
                append(d)
            elif op.group == "tp" and op.collective not in ("send", "recv"):
                tk = (op.collective, op.size_bytes)
                d = by_tp.get(tk)
                if d is None:
                    d = by_tp[tk] = self._intra_collective_ns(op.collective, lane.ranks, op.size_bytes)
                append(d)
            else:
                append(-1)
        self._dur_tables[key] = table
        return table

    def _try_start_stream(self, lane: Lane, s: int) -> None:
        if lane.busy[s]:
            return
        stream = lane.prog.streams[s]
        h = lane.head[s]
        if h >= len(stream):
            return
        oid = stream[h]
        if lane.remaining[oid] != 0:
            return
        lane.busy[s] = True
        now = self._now
        lane.start_ns[oid] = now
        d = lane.dur[oid]
        if d >= 0:
            if self._ct is not None:  # (its duration depends on the communication beside it)
                self._ct.start_local(lane, oid)
                return
            end = now + d
            if lane.prog.chain_next[oid] >= 0:
                end, oid = self._run_chain(lane, oid, end)
            self._seq += 1
            heapq.heappush(self._heap, (end, self._seq, _EV_OP_DONE, (lane, oid)))
        else:
            self._post_comm(lane, lane.prog.ops[oid])

    def _run_chain(self, lane: Lane, cur: int, end: int) -> tuple[int, int]:
        """Run local ``cur`` (ending at ``end``) and its chain (:func:`_chains`) while the next op waits on
        nothing but it, heads its stream when ``cur`` ends and is local; (end, op) of the last one, whose
        end the caller queues. The ops before it end now, ahead of the clock: nothing outside the
        chain can see it (their only dependent is the next op, and their streams' next ops wait on it)."""
        nxt, remaining, dur = lane.prog.chain_next, lane.remaining, lane.dur
        z = nxt[cur]
        while z >= 0 and remaining[z] == 1 and dur[z] >= 0 and chain_step(lane, cur, z, end):
            cur = z
            end += dur[z]
            z = nxt[cur]
        return end, cur

    def _complete_op(self, lane: Lane, oid: int) -> None:
        prog = lane.prog
        if self._ct is not None:
            self._ct.op_done(lane, oid)
        lane.end_ns[oid] = self._now
        lane.done_count += 1
        stream_of = prog.stream_of
        s = stream_of[oid]
        lane.busy[s] = False
        lane.head[s] += 1
        start = self._try_start_stream
        start(lane, s)
        remaining = lane.remaining
        for d in prog.dependents[oid]:
            remaining[d] -= 1
            if remaining[d] == 0:
                start(lane, stream_of[d])

    # ----------------------------------------------------------- communication
    def _post_comm(self, lane: Lane, op: Op) -> None:
        if op.collective in ("send", "recv"):
            self._post_p2p(lane, op)
            return
        dim = op.group
        if dim not in self.ir.groups:
            raise SimulationError(f"op {op.name!r} names unknown group {dim!r}")
        insts = []
        for r in lane.ranks:
            gid = self.ir.group_id(r, dim)
            key = (dim, gid, op.tag)
            inst = self._instances.get(key)
            if inst is None:
                inst = _Instance(key, op, self.ir.groups[dim][gid], self._lanes_in_group(dim, gid))
                self._instances[key] = inst
            if lane.id not in inst.lane_ops:
                inst.lane_ops[lane.id] = op.id
                insts.append(inst)
        ready = [inst for inst in insts if len(inst.lane_ops) == inst.lanes_needed]
        if ready and self._shifts:
            t = self._latest_post(ready)
            if t > self._now:  # a mirrored replica's copy of this lane posts later: the collective waits for it
                self._sym_stats["delayed_collectives"] += 1
                self._push(t, _EV_XFER_READY, ("start_ready", (ready, op)))
                return
        self._start_ready(ready, op)

    def _mirror_post(self, inst: _Instance, replica: int | None = None) -> int:
        """When the latest of the mirrored replicas' copies of ``inst``'s simulated lanes would post it (``replica``:
        that one's): a lane's op posts when its last input ended; in a copy running ``lag`` behind on its compute
        stream (:meth:`_note_lag`) a local or pipeline input ends that much later, a collective's end is shared."""
        t = self._now
        lanes = self.lanes
        for lane_id, oid in inst.lane_ops.items():
            lag = self._lag.get(lane_id)
            if not lag:
                continue
            m = max(lag.values()) if replica is None else lag.get(replica, 0)
            if m <= 0:
                continue
            lane = lanes[lane_id]
            prog = lane.prog
            op = prog.ops[oid]
            pos = prog.stream_pos[oid]
            inputs = op.deps if pos == 0 else (*op.deps, prog.streams[prog.stream_of[oid]][pos - 1])
            end_ns, dur, ops = lane.end_ns, lane.dur, prog.ops
            for i in inputs:
                e = end_ns[i]
                if dur[i] >= 0 or ops[i].collective in ("send", "recv"):
                    e += m
                if e > t:
                    t = e
        return t

    def _latest_post(self, ready: list) -> int:
        """When every replica has posted these instances: cross-replica collectives wait for the latest
        mirrored copy (:meth:`_mirror_post`); replica-local ones do not (each mirror runs its own copy)."""
        t = self._now
        for inst in ready:
            if not self._replica_mirrors(inst.ranks):
                t = max(t, self._mirror_post(inst))
        return t

    def _waiting_on(self, lane: Lane, oid: int) -> bool:
        """Whether the lane's compute stream sits idle waiting on op ``oid``: its head op depends on it, directly
        or through ops not started yet (a received activation's TP all-gather, say)."""
        prog = lane.prog
        cs = getattr(prog, "compute_stream", None)
        if cs is None:
            cs = prog.compute_stream = prog.stream_names.index("compute") if "compute" in prog.stream_names else -1
        if cs < 0 or lane.busy[cs]:
            return False
        stream = prog.streams[cs]
        h = lane.head[cs]
        if h >= len(stream):
            return False
        ops, started = prog.ops, lane.start_ns
        frontier = [stream[h]]
        for _ in range(4):
            nxt = []
            for o in frontier:
                for d in ops[o].deps:
                    if d == oid:
                        return True
                    if started[d] < 0:
                        nxt.append(d)
            frontier = nxt
        return False

    def _note_lag(self, lane_id: int, oid: int, inst: _Instance, step: tuple = ()) -> None:
        """A communication op the lane's compute stream waited on ended: each mirrored copy of the lane now runs
        as far behind as its own copy of the op ended later (0 for ``step``, mirrors riding in this one's flows;
        its start offset while its own copy is still moving, updated when it ends: :meth:`_mirror_done`). Ops
        not waited on leave the lag as it was."""
        lane = self.lanes[lane_id]
        if not self._waiting_on(lane, oid):
            return
        end = self._now
        lag = dict.fromkeys(step, 0)
        ms, me = inst.mirror_start or {}, inst.mirror_end or {}
        for d, t0 in ms.items():
            t1 = me.get(d)
            lag[d] = t1 - end if t1 is not None else t0 - inst.start_ns
        self._lag[lane_id] = lag
        self._lag_src[lane_id] = inst
        inst.lag_lanes += (lane_id,)

    def _mirror_done(self, inst: _Instance, replicas: tuple[int, ...]) -> None:
        """Mirrored ``replicas``' own copies of ``inst`` ended now."""
        now = self._now
        if inst.mirror_end is None:
            inst.mirror_end = {}
        for d in replicas:
            inst.mirror_end[d] = now
        if inst.end_ns >= 0:
            for lane_id in inst.lag_lanes:
                if self._lag_src.get(lane_id) is inst:
                    lag = self._lag[lane_id]
                    for d in replicas:
                        lag[d] = now - inst.end_ns

    def _start_ready(self, ready: list, op: Op) -> None:
        if len(ready) > 1 and self.symmetry:
            # the TP ranks of a lane start the same collective on parallel groups (one per rail) at once:
            # one schedule, the others' transfers as copies, when their paths are alike
            collective, size = op.collective, op.size_bytes
            if op.peer_bytes is not None:
                collective, size = self._what(ready[0])
                if any(self._what(inst)[1] != size for inst in ready[1:]):
                    collective = None  # all-to-allvs of different per-pair sizes: each its own schedule
            groups = None if collective is None else \
                self._merge_plan(collective, size, tuple(inst.ranks for inst in ready))
            if groups is not None:
                self._start_instance(ready[0], followers=ready[1:], images=groups)
                return
        for inst in ready:
            self._start_instance(inst)

    def _merge_plan(self, collective: str, size: int, groups: tuple[tuple[int, ...], ...]):
        """Per transfer of the first group's (reduced) schedule: its copies in all the groups, or None."""
        key = (collective, size, groups)
        hit = self._merge_memo.get(key, False)
        if hit is not False:
            return hit
        hit = None
        if not any(self._one_node(g) for g in groups) and self._rails_alike() \
                and (self.hash_slowest or self._rails_pinned()):
            lead = self._planned(collective, groups[0], size, with_shape=True)
            others = [self._planned(collective, g, size, with_shape=True) for g in groups[1:]]
            # the same schedule up to renaming: same transfer count, dependency structure and reduction
            if lead[0] and all(len(o[0]) == len(lead[0]) and o[1] == lead[1] and (o[2] is None) == (lead[2] is None)
                               for o in others):
                hit = self._merged_images(lead, others)
        if len(self._merge_memo) < 50_000:
            self._merge_memo[key] = hit
        return hit

    def _rails_alike(self) -> bool:
        """Whether the parallel groups of a lane (one per rail) can ride as copies of one another: every
        node's NICs have links of one rate and delay, and so have all switch-to-switch links (a degraded
        link anywhere would time one rail's traffic differently, and what shares links with it)."""
        ok = getattr(self, "_rails_ok", None)
        if ok is None:
            net = getattr(self.system, "net", None)
            if net is None:
                self._rails_ok = False
                return False
            node_of_nic = {g.nic: g.node for g in self.system.gpus}
            per_node: dict = {}
            fabric = set()
            for link in net.links:
                nic = link.a if link.a in node_of_nic else link.b if link.b in node_of_nic else None
                if nic is None:
                    fabric.add((link.rate_gbps, link.delay_ns))
                else:
                    per_node.setdefault(node_of_nic[nic], set()).add(
                        (link.rate_gbps, link.delay_ns, net.host_rate_gbps.get(nic)))
            ok = self._rails_ok = len(fabric) <= 1 and all(len(v) == 1 for v in per_node.values())
        return ok

    def _rails_pinned(self) -> bool:
        """Whether no rail's traffic depends on a hash: rails pinned (``network.ecmp: rail``), or a fabric of
        one switch (no choice for the hash to make). Else each rail's NIC links also carry what the hash put
        there, rail by rail, and one rate for a group's rails is wrong (measured: merging a 256-GPU TP4
        run's pipeline rails under hashed ECMP put it 146 us off the full run)."""
        cfg = getattr(self.net, "config", None)
        if getattr(cfg, "ecmp", "hash") == "rail":
            return True
        topo = getattr(self.net, "topology", None)
        return topo is not None and len(topo.switches) <= 1

    def _links(self, backend, src: str, dst: str, key: int) -> tuple[int, ...]:
        """The links (NIC caps included) of a flow's path, from the flow engine's router."""
        memo = self._links_memo
        k = (id(backend), src, dst, key)
        hit = memo.get(k)
        if hit is None:
            prof = self._profilers.get(id(backend))
            if prof is None:
                self._profile(backend, src, dst, key, True)
                prof = self._profilers[id(backend)]
            hit = memo[k] = prof._path_info(Message(0, src, dst, 1, 0, key))[0]
        return hit

    def _merged_images(self, lead, others):
        xfers, _, images, _ = lead
        out = []
        # with hashed paths taken as alike (hash_slowest) rails may meet on a link: the group, one flow with
        # two copies there, moves at that pace (as the lane's op, which ends with its slowest rail, does)
        disjoint = not (self.hash_slowest and not self._rails_pinned())
        for i, x in enumerate(xfers):
            own = images[i] if images is not None else ()
            backend = self.net if x.link == "net" else self.intra
            p0 = self._profile(backend, x.src_ep, x.dst_ep, x.flow_key, True) if backend is not None else None
            used = set(self._links(backend, x.src_ep, x.dst_ep, x.flow_key)) if backend is not None else set()
            copies = list(own)
            for o in others:
                y = o[0][i]
                if y.link != x.link or y.latency_ns != x.latency_ns or abs(y.size_bytes - x.size_bytes) > 64:
                    return None
                if backend is not None:
                    if self._profile(backend, y.src_ep, y.dst_ep, y.flow_key, True) != p0:
                        return None
                    # the groups' paths share no link: two rails on one spine link would meet each other there
                    # while a third has its link alone, and one rate for all of them would be wrong
                    if disjoint:
                        links = self._links(backend, y.src_ep, y.dst_ep, y.flow_key)
                        if used.intersection(links):
                            return None
                        used.update(links)
                copies.append((y.src_ep, y.dst_ep))
                if o[2] is not None:
                    copies.extend(o[2][i])
            out.append(tuple(copies))
        return out

    def _post_p2p(self, lane: Lane, op: Op) -> None:
        peer_lane = self.lane_of_rank[self.ir.peer_of(lane.ranks[0], op.peer_offset)]
        if op.collective == "send":
            key = (lane.id, peer_lane, op.tag)
        else:
            key = (peer_lane, lane.id, op.tag)
        other = self._p2p_posted.pop(key, None)
        if other is None:
            self._p2p_posted[key] = (lane.id, op.id)
            return
        send_side, recv_side = ((lane.id, op.id), other) if op.collective == "send" else (other, (lane.id, op.id))
        src_lane = self.lanes[send_side[0]]
        dst_lane = self.lanes[recv_side[0]]
        sop = self.programs[src_lane.program].ops[send_side[1]]
        ranks = tuple(src_lane.ranks) + tuple(dst_lane.ranks)
        inst = _Instance(("p2p",) + key, sop, ranks, 2, {send_side[0]: send_side[1], recv_side[0]: recv_side[1]})
        inst.p2p_ops = (send_side, recv_side)  # type: ignore[attr-defined]
        inst.start_ns = self._now
        if self._ct is not None:
            self._ct.comm_moving(inst)
        if self._p2p_log is not None:
            self._log_p2p(send_side[0], recv_side[0], key[2], self._now)
        shifts = None
        if self._shifts is not None:
            shifts = self._shift_groups(send_side[0], recv_side[0], key[2])
            if shifts is not None:  # (for the receiver's lag, _note_lag)
                inst.mirror_start = {d: self._now + off for off, ds in shifts[1] for d in ds}
                inst.step = shifts[0]  # type: ignore[attr-defined]
        rsize = self.programs[dst_lane.program].ops[recv_side[1]].size_bytes
        if len(src_lane.ranks) == len(dst_lane.ranks):
            size = max(sop.size_bytes, rsize)
            pairs = tuple(zip(src_lane.ranks, dst_lane.ranks))
            # the TP ranks send their shards at once, one per rail: one flow, the other rails' as copies,
            # when their paths are alike (as for the lane's parallel data-parallel groups, _post_comm)
            merged = self._merge_plan("send", size, pairs) if self.symmetry and len(pairs) > 1 else None
            if merged is not None:
                self._launch_schedule(inst, "send", pairs[0], size, images=merged, merged_groups=len(pairs) - 1,
                                      shifts=shifts)
            else:
                for a, b in pairs:
                    self._launch_schedule(inst, "send", (a, b), size, shifts=shifts)
        else:  # stages of different TP degree (parallelism.stage_tp): re-shard between the two TP groups
            for a, b, nbytes in reshard_transfers(src_lane.ranks, sop.size_bytes, dst_lane.ranks, rsize):
                self._launch_schedule(inst, "send", (a, b), nbytes, shifts=shifts)
        if inst.pending == 0:
            self._finish_instance(inst)

    def _intra_collective_ns(self, collective: str, group: tuple[int, ...], size) -> int:
        """``size``: bytes, or an all-to-allv's per-pair matrix (:meth:`_what`)."""
        if len(group) <= 1 or (collective != "alltoallv" and size <= 0):
            return 0
        direct = (collective, size, group)  # the same group repeats its collectives every layer
        d = self._intra_memo.get(direct)
        if d is not None:
            return d
        spec_key = (collective, size, len(group), self.system.gpus[group[0]].group,
                    tuple(self.system.gpus[r].local for r in group))
        d = self._intra_memo.get(spec_key)
        if d is None:
            sched = self._plan_call(collective, group, size)
            d = int(self.intra_time(sched, self.system))
            self._intra_memo[spec_key] = d
        self._intra_memo[direct] = d
        return d

    def _one_node(self, ranks: tuple[int, ...]) -> bool:
        hit = self._one_node_memo.get(ranks)
        if hit is None:
            gpus = self.system.gpus
            n0 = gpus[ranks[0]].node
            hit = all(gpus[r].node == n0 for r in ranks)
            self._one_node_memo[ranks] = hit
        return hit

    def _plan_kwargs(self, collective: str) -> dict:
        opts = {}
        algo = self.comm_options.get("algorithm", "auto")
        if algo != "auto" and collective in ("allreduce", "reducescatter", "allgather", "broadcast", "reduce"):
            opts["algorithm"] = algo
        if self.comm_options.get("protocol", "auto") != "auto":
            opts["protocol"] = self.comm_options["protocol"]
        if self.comm_options.get("channels"):
            opts["channels"] = self.comm_options["channels"]
        return opts

    def _what(self, inst: _Instance) -> tuple[str, Any]:
        """(collective, size) the comm planner is given for an instance: the op's own, or for an all-to-allv
        (``Op.peer_bytes``) ``("alltoallv", matrix)``, row i from rank ranks[i]'s own op of the instance's tag
        (read from its program, so lanes the symmetry reduction leaves out still give theirs)."""
        op = inst.op
        if op.peer_bytes is None:
            return op.collective, op.size_bytes
        rows = []
        for r in inst.ranks:
            pid = self.ir.rank_program[r]
            tags = self._peer_tags.get(pid)
            if tags is None:
                tags = self._peer_tags[pid] = {o.tag: o for o in self.programs[pid].ops if o.peer_bytes is not None}
            mine = tags.get(op.tag)
            if mine is None or len(mine.peer_bytes) != len(inst.ranks):
                raise SimulationError(f"op {op.name!r} ({op.tag}): rank {r} has no all-to-allv row of "
                                      f"{len(inst.ranks)} entries")
            rows.append(mine.peer_bytes)
        return "alltoallv", tuple(rows)

    def _plan_call(self, collective: str, ranks: tuple[int, ...], size):
        """The comm planner's schedule: ``plan_collective``, or for ``alltoallv`` (size: the per-pair matrix)
        ``heterosim.comm.alltoallv.plan_alltoallv``."""
        if collective == "alltoallv":
            from heterosim.comm.alltoallv import plan_alltoallv

            return plan_alltoallv(ranks, size, self.system, **self._plan_kwargs(collective))
        return self.plan(collective, ranks, size, self.system, **self._plan_kwargs(collective))

    def _start_instance(self, inst: _Instance, followers=(), images=None) -> None:
        inst.start_ns = self._now
        collective, size = self._what(inst)
        if self._ct is not None:
            self._ct.comm_moving(inst, followers)
        del self._instances[inst.key]
        if followers:
            for f in followers:
                f.start_ns = self._now
                del self._instances[f.key]
            inst.followers = followers  # type: ignore[attr-defined]
            self._launch_schedule(inst, collective, inst.ranks, size, images=images,
                                  merged_groups=len(followers))
            if inst.pending == 0:
                self._finish_instance(inst)
            return
        if self._one_node(inst.ranks):
            d = self._intra_collective_ns(collective, inst.ranks, size)
            inst.pending = 1
            self._push(self._now + d, _EV_XFER_READY, ("instance_done", inst))
            return
        self._launch_schedule(inst, collective, inst.ranks, size)
        if inst.pending == 0:
            self._finish_instance(inst)

    def _shift_groups(self, src: int, dst: int, tag) -> tuple | None:
        """(mirrored replicas in step with the simulated one, ((offset ns, replicas), ...)) for one pipeline
        transfer (:meth:`shift_replicas_by`): mirrors whose offsets lie within ``SHIFT_MERGE_FRACTION`` of the
        pair's transfer time of the group's first ride as one flow, at the group's mean offset."""
        spec = self._shifts.get((src, dst))
        if not spec:
            return None
        tol, mirrors = spec
        ss = self._sym_stats
        offs = []
        for d, measured, steady in mirrors:
            off = measured.get(tag, steady)
            if off < 0:  # ahead of the earliest replica in the warm-up: cannot start before it here
                ss["shifted_early"] += 1
                off = 0
            offs.append((off, d))
        offs.sort()
        groups: list[list[tuple[int, int]]] = [[]]  # the first: the simulated replica's, at offset 0
        first = 0
        for off, d in offs:
            if off - first > tol:
                groups.append([])
                first = off
            groups[-1].append((off, d))
        step = tuple(d for _, d in groups[0])
        out = tuple((round(sum(o for o, _ in g) / len(g)), tuple(d for _, d in g)) for g in groups[1:])
        ss["shifted_groups"] += len(out)
        ss["shifted_sends"] += len(offs) - len(step)
        return step, out

    def _launch_schedule(self, inst: _Instance, collective: str, ranks: tuple[int, ...], size: int,
                         images: list | None = None, merged_groups: int = 0, shifts: tuple | None = None) -> None:
        """``shifts``: (mirrored replica, offset ns) whose copies of these transfers go as their own flows that
        late (:meth:`shift_replicas_by`), not as copies in this one's group."""
        if self._one_node(ranks):
            d = self._intra_collective_ns(collective, ranks, size)
            inst.pending += 1
            self._push(self._now + d, _EV_XFER_READY, ("instance_done", inst))
            return
        merged = images
        xfers, struct, images = self._planned(collective, ranks, size)
        if not xfers:
            return
        state = _ScheduleState(inst, xfers, struct)
        if merged is not None:
            images = merged
            self._sym_stats["merged_rail_groups"] += merged_groups
        if images is not None and collective != "send":  # (a pipeline send's copies are its rails)
            ss = self._sym_stats
            ss["orbit_schedules"] += 1
            ss["orbit_flows"] += len(xfers)
            ss["orbit_transfers"] += len(xfers) + sum(len(im) for im in images)
        mirrors = self._replica_mirrors(ranks) if self.sym is not None and shifts is None else ()
        state.shifts = shifts or None
        if mirrors and self._shifts is not None and collective != "send":
            # shifted replicas: each mirror runs its own copy of a replica-local collective (the embedding
            # all-reduce), from when it posts, and ends it by its own collisions; nothing here waits for it
            for d in mirrors:
                self._launch_shadow(inst, d, xfers, struct, images)
            mirrors = ()
        if mirrors:
            images = [self._with_mirrors(x, images[i] if images is not None else (), mirrors)
                      for i, x in enumerate(xfers)]
        state.images = images
        inst.pending += 1
        for i in struct[0]:
            self._start_transfer(state, i)

    def _launch_shadow(self, inst: _Instance, d: int, xfers, struct, images) -> None:
        """Mirrored replica ``d``'s own copy of a replica-local collective (:class:`_Shadow`)."""
        sh = _Shadow(inst, d)
        state = _ScheduleState(sh, xfers, struct)
        state.shadow = True
        state.images = [self._mirror_copies(x, images[i] if images is not None else (), (d,))
                        for i, x in enumerate(xfers)]
        t = self._mirror_post(inst, d)
        if inst.mirror_start is None:
            inst.mirror_start, inst.mirror_end = {}, {}
        inst.mirror_start[d] = t
        self._sym_stats["shadow_schedules"] += 1
        if t > self._now:
            self._push(t, _EV_XFER_READY, ("shadow_start", state))
        else:
            for i in struct[0]:
                self._start_transfer(state, i)

    def _with_mirrors(self, x, own: tuple, mirrors: list[int]) -> tuple:
        """Copies of transfer ``x`` (and its orbit copies ``own``) in the replicas that are not simulated."""
        key = (x.src, x.dst, x.link, own)
        hit = self._image_memo.get(key)
        if hit is None:
            sym = self.sym
            out = list(own)
            pairs = [(x.src, x.dst)]
            if own:  # orbit copies are named by endpoints; find their ranks through the GPUs' endpoints
                ep_rank = self._ep_rank()
                pairs += [(ep_rank[(x.link, a, True)], ep_rank[(x.link, b, False)]) for a, b in own]
            for d in mirrors:
                for a, b in pairs:
                    out.append(self._endpoints(x.link, sym.image(a, d), sym.image(b, d)))
            hit = tuple(out)
            if len(self._image_memo) < 100_000:
                self._image_memo[key] = hit
        return hit

    def _ep_rank(self) -> dict:
        m = getattr(self, "_ep_rank_map", None)
        if m is None:
            m = {}
            for g in self.system.gpus:
                for link in ("nvlink", "pcie", "c2c"):
                    m[(link, g.name, True)] = m[(link, g.name, False)] = g.rank
                # NICs shared by several GPUs map to the first (only the endpoint matters for the copy)
                m.setdefault(("net", g.nic, True), g.rank)
                m.setdefault(("net", g.nic, False), g.rank)
            self._ep_rank_map = m
        return m

    def _planned(self, collective: str, ranks: tuple[int, ...], size: int, with_shape: bool = False):
        """The flow schedule for this group, planned once per group *shape*.

        DP/PP groups at the same position of different replicas are isomorphic
        (same node types, same local GPU indices, same node order), so their
        schedules differ only by rank relabelling; planning costs milliseconds
        and a 1024-GPU run has thousands of such instances.
        """
        gpus = self.system.gpus
        node_ids = sorted({gpus[r].node_index for r in ranks})
        node_ord = {n: i for i, n in enumerate(node_ids)}
        shape = (collective, size, tuple((node_ord[gpus[r].node_index], gpus[r].local, gpus[r].group) for r in ranks))
        hit = self._plan_memo.get(shape)
        if hit is not None and hit[3] and hit[0] != ranks:
            # a schedule with switch-side ends (CollNet over SHARP: the aggregation switch depends on where the
            # group's NICs are, heterosim/comm/collnet.py) is its group's own: never relabelled for another
            hit = self._plan_memo.get((shape, ranks))
        if hit is None:
            sched = self._plan_call(collective, ranks, size)
            switch_ends = any(x.src == SHARP_SWITCH or x.dst == SHARP_SWITCH for x in sched.transfers)
            hit = (ranks, sched.transfers, _structure(sched.transfers), switch_ends)
            self._plan_memo[(shape, ranks) if shape in self._plan_memo else shape] = hit
        base_ranks, transfers, struct, switch_ends = hit
        if switch_ends:
            return (transfers, struct, None, shape) if with_shape else (transfers, struct, None)
        if base_ranks != ranks or self.symmetry:
            # the same group runs the same collective many times (buckets, micro-batches)
            key = (shape, ranks)
            moved = self._relabel_memo.get(key)
            if moved is None:
                rank_map = dict(zip(base_ranks, ranks)) if base_ranks != ranks else None
                red = eps = None
                if self.symmetry and collective != "send":
                    # reduced, the schedule needs its transfers' new endpoints only: no relabelled copy
                    eps = _endpoints(transfers, rank_map, self.system)
                    red = self._reduced(transfers, eps, ranks, shape)
                if red is not None:
                    moved = red
                else:
                    if rank_map is not None:
                        transfers = _with_endpoints(transfers, eps or _endpoints(transfers, rank_map, self.system))
                    moved = (transfers, struct, None)
                if len(self._relabel_memo) < 200_000:
                    self._relabel_memo[key] = moved
            return moved + (shape,) if with_shape else moved
        return (transfers, struct, None, shape) if with_shape else (transfers, struct, None)

    def _start_transfer(self, state: "_ScheduleState", i: int) -> None:
        x = state.xfers[i]
        now = self._now
        start = now + int(x.latency_ns)
        net = x.link == "net"
        backend = self.net if net else self.intra
        self._msg_seq += 1
        mid = self._msg_seq
        state.outstanding += 1
        self._msg_owner[mid] = (state, i)
        shadow = state.shadow
        if not shadow and self.record_messages and (self.message_limit is None or len(self.messages) < self.message_limit):
            rec = MessageRecord(mid, x.src, x.dst, x.src_ep, x.dst_ep, x.size_bytes, x.link,
                                state.inst.op.collective, state.inst.op.comm_kind, start, flow_key=x.flow_key)
            self.messages.append(rec)
            state.records[i] = rec
        images = state.images[i] if state.images is not None else ()
        eps = None
        if shadow:  # a mirrored replica's own copies: the first is the flow, the others its copies
            eps, images = images[0], self._tail(images)
        own = images
        if state.shifts is not None and state.shifts[0]:  # mirrors in step with this one ride in its group
            images = self._mirror_copies(x, images, state.shifts[0], True)
        copies = 1 + len(images)
        self.all_messages += copies
        size = x.size_bytes
        if net:
            self.net_bytes += size * copies
            self.net_messages += copies
        if backend is None or size <= 0:
            self._push(start, _EV_XFER_READY, ("xfer_done", mid))
            return
        shifts = state.shifts
        if shifts is not None:
            for off, ds in shifts[1]:
                pairs = self._mirror_copies(x, own, ds)  # (the mirrors' copies of this one's, not of those in step)
                if net:
                    self.net_bytes += size * len(pairs)
                    self.net_messages += len(pairs)
                self.all_messages += len(pairs)
                tag = (id(state.inst), ds)  # (the replicas' own end of the transfer: _ghost_done)
                left = self._ghost_left.get(tag)
                if left is None:
                    self._ghost_left[tag] = [1, state.inst, ds]
                else:
                    left[0] += 1
                if off > 0 or start > now:
                    self._push(start + off, _EV_XFER_READY, ("shifted_send", (backend, x, pairs, tag)))
                else:
                    self._send_shifted(backend, x, pairs, tag, start)
        if start > now:
            self._push(start, _EV_XFER_READY, ("xfer_send", (backend, mid, x, images, eps)))
        else:
            self._send(backend, mid, x, images, start, eps)

    def _send(self, backend, mid: int, x, images: tuple, start: int, eps: tuple | None = None) -> None:
        self._catch_up(backend)
        if x.link == "net":
            if self._net_inflight == 0:
                self._net_busy_since = start
            self._net_inflight += 1
        a, b = eps if eps is not None else (x.src_ep, x.dst_ep)
        msg = Message(mid, a, b, int(x.size_bytes), start, x.flow_key, x.connection, x.step_bytes)
        if not images:
            backend.send(msg)
            return
        self._sym_stats["copies_sent"] += len(images)
        send_group = getattr(backend, "send_group", None)
        if send_group is not None and send_group(msg, images, hashed_alike=self.hash_slowest):
            return
        # copies one by one; the transfer completes with the last of them
        backend.send(msg)
        self._wait[mid] = 1 + len(images)
        for a, b in images:
            self._msg_seq += 1
            self._shadow[self._msg_seq] = mid
            backend.send(Message(self._msg_seq, a, b, int(x.size_bytes), start, x.flow_key, x.connection,
                                 x.step_bytes))

    def _mirror_copies(self, x, own: tuple, replicas: tuple[int, ...], keep: bool = False) -> tuple:
        """Endpoints of transfer ``x`` and of its copies ``own`` in each of the mirrored ``replicas`` (``keep``:
        after ``own``)."""
        key = (x.src, x.dst, x.link, own, replicas, keep)
        hit = self._shift_memo.get(key)
        if hit is None:
            sym = self.sym
            pairs = [(x.src, x.dst)]
            if own:  # copies are named by endpoints; find their ranks through the GPUs' endpoints (_with_mirrors)
                ep_rank = self._ep_rank()
                pairs += [(ep_rank[(x.link, a, True)], ep_rank[(x.link, b, False)]) for a, b in own]
            hit = tuple(self._endpoints(x.link, sym.image(a, d), sym.image(b, d)) for d in replicas for a, b in pairs)
            if keep:
                hit = own + hit
            if len(self._shift_memo) < 100_000:
                self._shift_memo[key] = hit
        return hit

    def _tail(self, t: tuple) -> tuple:
        """``t[1:]``, the same tuple object each time for the same ``t``: the flow backend finds a group's
        links by the identity of its copies' tuple (``send_group``), and a fresh slice each send made it
        hash hundreds of endpoint pairs and keep every slice (321k on the planner's stage-major 1,024-GPU
        candidate)."""
        hit = self._tails.get(id(t))
        if hit is None or hit[0] is not t:
            hit = (t, t[1:])
            if len(self._tails) < 100_000:
                self._tails[id(t)] = hit  # holds t, so its id is not reused meanwhile
        return hit[1]

    def _send_shifted(self, backend, x, pairs: tuple, tag: tuple, start: int) -> None:
        """A mirrored replica's copies of ``x`` as one group flow of their own that nothing waits for (ids < 0);
        ``tag``: (instance, replicas), whose own end of the instance is when its last such flow ends."""
        self._catch_up(backend)
        self._ghost_seq -= 1
        (a, b), rest = pairs[0], self._tail(pairs)
        msg = Message(self._ghost_seq, a, b, int(x.size_bytes), start, x.flow_key, x.connection, x.step_bytes)
        self._ghost_tag[self._ghost_seq] = tag
        send_group = getattr(backend, "send_group", None)
        if not rest or (send_group is not None and send_group(msg, rest, hashed_alike=True)):
            if not rest:
                backend.send(msg)
            return
        backend.send(msg)
        self._ghost_left[tag][0] += len(rest)
        for a, b in rest:
            self._ghost_seq -= 1
            self._ghost_tag[self._ghost_seq] = tag
            backend.send(Message(self._ghost_seq, a, b, int(x.size_bytes), start, x.flow_key, x.connection,
                                 x.step_bytes))

    def _ghost_done(self, mid: int) -> None:
        tag = self._ghost_tag.pop(mid)
        left = self._ghost_left[tag]
        left[0] -= 1
        if left[0] == 0:
            del self._ghost_left[tag]
            self._mirror_done(left[1], left[2])

    def _transfer_done(self, mid: int) -> None:
        if mid < 0:  # a mirrored replica's shifted copies (_send_shifted): nothing waits for them
            self._ghost_done(mid)
            return
        if self._wait:
            mid = self._shadow.pop(mid, mid)
            left = self._wait.get(mid)
            if left is not None:
                if left > 1:
                    self._wait[mid] = left - 1
                    return
                del self._wait[mid]
        state, i = self._msg_owner.pop(mid)
        if state.xfers[i].link == "net" and state.xfers[i].size_bytes > 0 and self._net_inflight:
            self._net_inflight -= 1
            if self._net_inflight == 0:
                self._net_busy_ns += self._now - self._net_busy_since
        state.outstanding -= 1
        if state.records:
            rec = state.records.get(i)
            if rec is not None:  # (records may stop at message_limit)
                rec.end_ns = self._now
        state.done += 1
        waiting = state.waiting
        for j in state.dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                self._start_transfer(state, j)
        if state.outstanding == 0 and state.done == len(state.xfers):
            inst = state.inst
            inst.pending -= 1
            if inst.pending == 0:
                self._finish_instance(inst)

    def _finish_instance(self, inst: _Instance) -> None:
        if type(inst) is _Shadow:
            self._mirror_done(inst.inst, (inst.replica,))
            return
        inst.end_ns = self._now
        self._finished_instances.append(inst)
        p2p = getattr(inst, "p2p_ops", None)
        if p2p is not None:
            if self._p2p_log is not None:
                self._p2p_end[(p2p[0][0], p2p[1][0])][inst.key[3]] = self._now
            if self._shifts and inst.mirror_start is not None:
                self._note_lag(p2p[1][0], p2p[1][1], inst, inst.step)
            for lane_id, oid in p2p:
                self.lanes[lane_id].comm_start_ns[oid] = inst.start_ns
                self._complete_op(self.lanes[lane_id], oid)
            return
        for lane_id, op_id in inst.lane_ops.items():
            lane = self.lanes[lane_id]
            # a lane whose ranks sit in several instances of this op completes with the last one
            key = (lane_id, op_id, inst.op.tag)
            counter = self._lane_inst_pending.get(key)
            if counter is None:
                counter = self._lane_instances(lane, inst.op)
            counter -= 1
            self._lane_inst_pending[key] = counter
            lane.comm_start_ns[op_id] = max(lane.comm_start_ns.get(op_id, -1), inst.start_ns)
            if counter == 0:
                del self._lane_inst_pending[key]
                if self._shifts:
                    owner = getattr(inst, "leader", inst)  # (parallel groups riding as its copies: its mirrors')
                    if owner.mirror_start is not None:  # replica-local: each mirror ends its own copy
                        self._note_lag(lane_id, op_id, owner)
                    elif self._lag.get(lane_id) and self._waiting_on(lane, op_id):
                        self._lag[lane_id] = {}  # a collective across replicas ends for all of them at once
                self._complete_op(lane, op_id)
        followers = getattr(inst, "followers", None)
        if followers:  # parallel groups whose transfers rode as copies of this one's end with it
            inst.followers = ()  # type: ignore[attr-defined]
            for f in followers:
                f.leader = inst  # type: ignore[attr-defined]
                self._finish_instance(f)

    def _lane_instances(self, lane: Lane, op: Op) -> int:
        return len({self.ir.group_id(r, op.group) for r in lane.ranks})

    def _catch_up(self, backend: NetworkBackend) -> None:
        """Bring an idle backend's clock to now so a send never lands in its past."""
        if backend.now_ns < self._now:
            early = backend.advance(self._now)
            if early:  # cannot happen: the main loop never passes a backend's next completion
                raise SimulationError(f"internal: backend {backend.name} completed message {early[0].id} at "
                                      f"{early[0].finish_ns} ns, before now ({self._now} ns, backend was at "
                                      f"{backend.now_ns} ns)")

    # -------------------------------------------------------------- main loop
    def run(self, wall_limit_s: float | None = None) -> SimResult:
        import time as _time

        t0 = _time.monotonic()
        if self.needs_warm_up():  # (else the mirrors would send in lockstep: ops_and_replicas, silently)
            raise SimulationError("internal: hashed_copies ops_and_shifted_replicas needs shift_replicas_by(a "
                                  "warm-up's start times) before run (heterosim.pipeline.simulate does it)")
        self._lane_inst_pending: dict[tuple, int] = {}
        total_ops = 0
        active = [lane for lane in self.lanes if self._active[lane.id]]
        for lane in active:
            prog = self.programs[lane.program]
            n = len(prog.ops)
            total_ops += n
            lane.remaining = list(prog.ndeps)
            lane.head = [0] * len(prog.streams)
            lane.busy = [False] * len(prog.streams)
            lane.start_ns = [-1] * n
            lane.end_ns = [-1] * n
            lane.dur = self._local_durations(lane)
            lane.prog = prog
        for lane in active:
            if self.release_ns.get(lane.id, 0) > 0:
                self._push(self.release_ns[lane.id], _EV_XFER_READY, ("lane_start", lane))
                continue
            for s in range(len(self.programs[lane.program].streams)):
                self._try_start_stream(lane, s)
        done_ops = 0
        last_report = 0
        intra, net = self.intra, self.net
        try:  # a backend that can bound its next completion need not be advanced every step
            net.next_event_ns()
            net_peek = True
        except NotImplementedError:
            net_peek = False
        while not self._stop:
            t_local = self._heap[0][0] if self._heap else None
            t_intra = intra.next_event_ns() if intra is not None and intra.pending() else None
            bound = _min(t_local, t_intra)
            if net.pending() and not (net_peek and bound is not None and net.next_event_ns() > bound):
                completions = net.advance(bound)
                if completions:
                    t = completions[0].finish_ns
                    self._now = max(self._now, t)
                    if intra is not None and intra.pending():
                        for c in intra.advance(t):
                            self._now = max(self._now, c.finish_ns)
                            self._transfer_done(c.id)
                    self.events += len(completions)
                    done = self._transfer_done
                    for c in completions:
                        done(c.id)
                    continue
            if bound is None:
                break
            self._now = max(self._now, bound)
            if intra is not None and intra.pending() and t_intra is not None and t_intra <= bound:
                for c in intra.advance(bound):
                    self.events += 1
                    self._transfer_done(c.id)
            while self._heap and self._heap[0][0] <= self._now:
                t, _, kind, payload = heapq.heappop(self._heap)
                self.events += 1
                if kind == _EV_OP_DONE:
                    lane, oid = payload
                    self._complete_op(lane, oid)
                    done_ops += 1
                else:
                    what, arg = payload
                    if what == "xfer_done":
                        self._transfer_done(arg)
                    elif what == "xfer_send":
                        backend, mid, x, images, eps = arg
                        self._send(backend, mid, x, images, self._now, eps)
                    elif what == "instance_done":
                        arg.pending -= 1
                        if arg.pending == 0:
                            self._finish_instance(arg)
                    elif what == "shifted_send":
                        self._send_shifted(*arg, self._now)
                    elif what == "start_ready":
                        self._start_ready(*arg)
                    elif what == "shadow_start":
                        for i in arg.struct_roots:
                            self._start_transfer(arg, i)
                    elif what == "ct_done":
                        self._ct.done(arg)
                    elif what == "lane_start":
                        for s in range(len(arg.prog.streams)):
                            self._try_start_stream(arg, s)
            if self.progress is not None and self.events - last_report > 20000:
                last_report = self.events
                self.progress(sum(l.done_count for l in self.lanes), total_ops)
            if wall_limit_s is not None and _time.monotonic() - t0 > wall_limit_s:
                raise SimulationError(f"simulation exceeded the wall-clock limit of {wall_limit_s:.0f} s",
                                      field="network.wall_limit_s", value=wall_limit_s)
        if self._stop:  # a warm-up (warm_up) has what it ran for
            return None
        stuck = [(lane, n) for lane in active if lane.done_count < (n := len(self.programs[lane.program].ops))]
        if stuck:
            lane, n = stuck[0]
            prog = self.programs[lane.program]
            waiting = next((prog.ops[i] for i in range(n) if lane.end_ns[i] < 0), None)
            raise SimulationError(
                f"simulation cannot finish: {len(stuck)} lane(s) stuck; ranks {list(lane.ranks)} wait at op "
                f"{waiting.name!r} (unmatched communication or a dependency cycle in the IR)")
        if self.progress is not None:
            self.progress(total_ops, total_ops)
        retimed = self._alias_mirrors()
        end = max((max(l.end_ns) if l.end_ns else 0) for l in active + retimed)
        sym = None
        if self.symmetry:
            sym = {"lanes_simulated": len(active), "lanes_total": len(self.lanes),
                   "hashed_copies": self.hashed_copies,
                   # whether the result may come from the approximate merging of hashed copies: a mode other
                   # than exact, on a fabric where some path depends on the ECMP hash (heterosim/results/summary.py
                   # labels it with its measured bound)
                   "approximate": self.hash_slowest and not self._rails_pinned(),
                   "replica_classes": self.sym.summary() if self.sym is not None else None, **self._sym_stats}
        return SimResult(end, self.lanes, self.programs, self._dur_tables, self.messages, self._finished_instances,
                         self.events, net.stats(), intra.stats() if intra is not None else None,
                         net_bytes=self.net_bytes, net_messages=self.net_messages, all_messages=self.all_messages,
                         inter_node_busy_ns=self._net_busy_ns, symmetry=sym,
                         contention=self._ct.summary(active) if self._ct is not None else None)

    # ----------------------------------------------------------- read by the program export (heterosim/sim/program.py)
    def local_durations(self, lane: Lane) -> list[int]:
        """Per op of the lane: its local duration, or -1 (:meth:`_local_durations`)."""
        return self._local_durations(lane)

    def planned(self, collective: str, ranks: tuple[int, ...], size: int):
        """(transfers, structure, images) of a collective on these ranks (:meth:`_planned`)."""
        return self._planned(collective, ranks, size)

    def one_node(self, ranks: tuple[int, ...]) -> bool:
        return self._one_node(ranks)

    def intra_collective_ns(self, collective: str, group: tuple[int, ...], size: int) -> int:
        """A collective confined to one node, in closed form (:meth:`_intra_collective_ns`)."""
        return self._intra_collective_ns(collective, group, size)

    def _alias_mirrors(self) -> list[Lane]:
        """A lane that was not executed has its representative's timeline (the same lists, no copy), unless it
        ran a replica-local collective of its own (shifted replicas): then its own timeline from there on
        (:meth:`_retime`); those lanes."""
        sym = self.sym
        if sym is None:
            return []
        own = self._mirror_ops() if self._shifts else {}
        retimed = []
        for lane in self.lanes:
            if self._active[lane.id]:
                continue
            cls = sym.classes[sym.class_of_replica[sym.position[lane.ranks[0]]]]
            src = self.lanes[self.lane_of_rank[sym.image(lane.ranks[0], cls[0])]]
            lane.remaining, lane.head, lane.busy = src.remaining, src.head, src.busy
            lane.start_ns, lane.end_ns, lane.dur = src.start_ns, src.end_ns, src.dur
            lane.comm_start_ns = src.comm_start_ns
            lane.done_count = src.done_count
            fixed = own.get((src.id, sym.position[lane.ranks[0]]))
            if fixed:
                self._retime(lane, src, fixed)
                retimed.append(lane)
        return retimed

    def _mirror_ops(self) -> dict:
        """(simulated lane id, mirrored replica) -> {op id: (moving from, end)} of the replica-local collectives
        that replica's copy ran on its own (:meth:`_launch_shadow`) and ended at another time."""
        out: dict[tuple[int, int], dict[int, tuple[int, int]]] = defaultdict(dict)
        for inst in self._finished_instances:
            if inst.mirror_end is None or hasattr(inst, "p2p_ops") or hasattr(inst, "leader"):
                continue
            for d, e in inst.mirror_end.items():
                if e == inst.end_ns and inst.mirror_start[d] == inst.start_ns:
                    continue
                for lane_id, oid in inst.lane_ops.items():
                    out[(lane_id, d)][oid] = (inst.mirror_start[d], e)
        return out

    def _retime(self, lane: Lane, src: Lane, fixed: dict[int, tuple[int, int]]) -> None:
        """``lane``'s own timeline: ``src``'s up to the first op in ``fixed`` (op -> moving from, end: its own
        copies' times); from there each op starts when its inputs end in this copy, a local op lasting as long,
        another communication op (moving with every replica) ending as in ``src`` unless this copy posts it
        after it started moving, then that much later."""
        prog = src.prog
        ops = prog.ops
        pred = getattr(prog, "stream_pred", None)
        if pred is None:
            pred = [-1] * len(ops)
            for stream in prog.streams:
                for a, b in zip(stream, stream[1:]):
                    pred[b] = a
            prog.stream_pred = pred
        s0, e0, m0, dur = src.start_ns, src.end_ns, src.comm_start_ns, src.dur
        start, end, moving = list(s0), list(e0), dict(m0)
        for o in range(min(fixed), len(ops)):
            ready = 0
            for i in ops[o].deps:
                if end[i] > ready:
                    ready = end[i]
            p = pred[o]
            if p >= 0 and end[p] > ready:
                ready = end[p]
            hit = fixed.get(o)
            if hit is not None:
                start[o] = ready
                moving[o] = max(hit[0], ready)
                end[o] = max(hit[1], moving[o])
            elif dur[o] >= 0:  # (as long as it took in src: compute contention may have stretched it)
                start[o] = ready
                end[o] = ready + e0[o] - s0[o]
            elif ready > s0[o]:
                start[o] = ready
                m = m0.get(o, s0[o])
                if ready > m:
                    end[o] = e0[o] + ready - m
                    moving[o] = ready
        lane.start_ns, lane.end_ns, lane.comm_start_ns = start, end, moving


def reshard_transfers(src_ranks: tuple[int, ...], src_bytes: int, dst_ranks: tuple[int, ...],
                      dst_bytes: int) -> list[tuple[int, int, int]]:
    """(sender, receiver, bytes) moving one pipeline message between TP groups of different size.

    Sharded activations (sequence parallelism: every rank holds 1/tp of the message, so
    ``src_bytes*tp_a == dst_bytes*tp_b``): receiver j needs bytes [j*dst_bytes, (j+1)*dst_bytes)
    of the whole activation A. Otherwise each side holds the full (replicated) activation,
    A = max of the two sizes, and every receiver needs all of it. Either way sender i supplies
    the i-th of tp_a equal slices of A, so the senders share the work; a transfer carries the
    overlap of what one sender supplies and one receiver needs."""
    tp_a, tp_b = len(src_ranks), len(dst_ranks)
    if src_bytes * tp_a == dst_bytes * tp_b:
        total = src_bytes * tp_a
        need = [(j * dst_bytes, (j + 1) * dst_bytes) for j in range(tp_b)]
    else:
        total = max(src_bytes, dst_bytes)
        need = [(0, total)] * tp_b
    out = []
    for i, a in enumerate(src_ranks):
        lo, hi = i * total // tp_a, (i + 1) * total // tp_a
        for b, (nlo, nhi) in zip(dst_ranks, need):
            n = min(hi, nhi) - max(lo, nlo)
            if n > 0:
                out.append((a, b, n))
    return out


class _ScheduleState:
    """One running flow schedule: which transfers wait on how many others."""

    __slots__ = ("inst", "xfers", "waiting", "dependents", "done", "outstanding", "records", "images", "shifts",
                 "shadow", "struct_roots")

    def __init__(self, inst: _Instance, xfers, struct) -> None:
        self.inst = inst
        self.xfers = xfers
        self.waiting = list(struct[1])
        self.dependents = struct[2]
        self.done = 0
        self.outstanding = 0
        self.records: dict[int, MessageRecord] = {}
        self.images: list[tuple] | None = None
        """Per transfer: (src, dst) endpoints of its copies (symmetry reduction), or None."""
        self.shifts: tuple | None = None
        """(mirrored replica, offset ns) sending its own copies of every transfer that late, or None."""
        self.shadow = False
        """A mirrored replica's own copy (Coordinator._launch_shadow): images[i][0] is transfer i's flow."""
        self.struct_roots = struct[0]


def _structure(xfers) -> tuple[list[int], list[int], list[list[int]]]:
    """(roots, number of deps, dependents) by position; shared by relabelled copies."""
    index = {x.id: i for i, x in enumerate(xfers)}
    ndeps = [len(x.deps) for x in xfers]
    dependents: list[list[int]] = [[] for _ in xfers]
    for i, x in enumerate(xfers):
        for d in x.deps:
            dependents[index[d]].append(i)
    return [i for i, n in enumerate(ndeps) if n == 0], ndeps, dependents


def _endpoints(transfers, rank_map: dict[int, int] | None, system) -> list[tuple]:
    """Per transfer (src, dst, src_ep, dst_ep) with ranks renamed by ``rank_map`` (None: as planned)."""
    if rank_map is None:
        return [(x.src, x.dst, x.src_ep, x.dst_ep) for x in transfers]
    gpus = system.gpus
    out = []
    for x in transfers:
        src = rank_map.get(x.src, x.src)
        dst = rank_map.get(x.dst, x.dst)
        if x.link == "net":
            out.append((src, dst, gpus[src].nic, gpus[dst].nic))
        else:
            gpu_end = src if src >= 0 else dst
            sw = f"{gpus[gpu_end].node}/nvswitch"
            out.append((src, dst, gpus[src].name if src >= 0 else sw, gpus[dst].name if dst >= 0 else sw))
    return out


def _with_endpoints(transfers, eps: list[tuple]) -> list:
    """A copy of ``transfers`` with each one's (src, dst, src_ep, dst_ep) from ``eps``."""
    from heterosim.comm.schedule import Transfer

    return [Transfer(x.id, src, dst, x.size_bytes, x.link, src_ep, dst_ep, x.deps, x.channel, x.step, x.latency_ns,
                     x.flow_key, x.connection, x.step_bytes) for x, (src, dst, src_ep, dst_ep) in zip(transfers, eps)]


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a < b else b


def chain_step(lane: Lane, cur: int, z: int, end: int) -> bool:
    """One link of a chain (``Coordinator._run_chain``, and ``contention`` with re-timed durations): if ``z``
    may start the moment ``cur`` ends at ``end`` (next on ``cur``'s stream, or its own stream idle and at
    ``z``), end ``cur`` there and start ``z``; False (nothing changed) when it may not."""
    prog = lane.prog
    sc, sz = prog.stream_of[cur], prog.stream_of[z]
    if sz == sc:
        if prog.stream_pos[z] != prog.stream_pos[cur] + 1:
            return False
    elif lane.busy[sz] or lane.head[sz] != prog.stream_pos[z]:
        return False
    lane.end_ns[cur] = end
    lane.done_count += 1
    lane.busy[sc] = False
    lane.head[sc] += 1
    lane.remaining[z] = 0
    lane.busy[sz] = True
    lane.start_ns[z] = end
    return True
