"""Accelerated packet level: source-bounded partitions in closed form, the rest in ns-3.

``network.acceleration.mode: auto`` wraps the ns-3 backend (same NetworkBackend
interface) and simulates fewer packets where the packet-level answer is known:

* **Partitions.** Active flows are grouped by the egress ports they use (paths
  from :class:`netbackend.routing.Router`, the same ECMP choice the ns-3 backend
  makes).  A *source-bounded* partition is one whose flows all leave the same
  NIC, use ports no packet-level flow uses, and cross no port slower than that NIC;
  several such partitions may share a port while the sum of their rates fits it
  (_fits; a rate that rises past it hands them back, _check_capacity).
  Such a partition builds no queue beyond one packet (its NIC is its bottleneck),
  so DCQCN never sees a mark and every QP stays at line rate: the NIC's
  packet-by-packet round robin among its ready QPs is the whole answer.  A lone
  flow is the one-flow case and its FCT is exact to the nanosecond (the
  store-and-forward train of :func:`netbackend.ns3.scenarios.store_and_forward_ns`,
  with the last, shorter packet waiting behind its predecessor).
* **Hand-back.** The moment a flow arrives that shares a port with a closed-form
  partition (or leaves the same NIC while that NIC also feeds packet-level flows),
  every flow of that partition posts its unsent bytes to ns-3 on its own
  connection at that time and the new flow joins them at packet level.  The
  original message completes when its remainder does.

Approximations (measured by benchmarks/bench_ns3_accel.py and the tests):
round robin among k QPs is treated as a fluid share of 1/k of the NIC (exact for
k = 1, within a packet per event otherwise); the ACKs of closed-form flows are
not simulated (a few % of the reverse ports' bytes, at control priority); a
handed-back flow's packets already on the wire are delivered analytically, so
ns-3 starts the remainder on an empty pipeline with a fresh QP at line rate
(exact for the sender, since the flow was alone and never marked); step credits
are assumed not to throttle (checked: NCCL's 8 steps x step size must cover
twice the bandwidth-delay product, otherwise the flow stays at packet level).

Connections whose QPs were slowed by congestion control (a mark on their path while one of
their messages was in ns-3) are *dirty*.  A dirty connection's next message may still be computed
in closed form when its QPs are idle in ns-3 with no cut check pending: with no queue there is no
mark, so the DCQCN rate only rises on the increase timer, and the wrapper replays that trajectory
(state read from ns-3, the same arithmetic as DcqcnRp::Increase) with the NIC water-filled among
its QPs.  With a byte counter (the paper preset) only a connection back at line rate qualifies.
Packet-level tails migrate back (_migrate): once a NIC's packet-level messages have their ports to
themselves, ns-3 keeps the work request each is sending and the remaining steps continue in closed
form.  Steady-state fast-forward of congested partitions (``fast_forward``, off: _ff_check) is
experimental: measured outside issue 12's targets (docs/packet-level-acceleration.md), because the rates
of a short window are not DCQCN's long-run ones and ns-3's idle QPs recover their rate while fast-forwarded.

Memoization (``memoize``, _memo_batch): training repeats congested episodes (the same pipeline
sends collide on the same hashed ports every micro-batch).  An episode starts when messages of
different NICs start together on ports that are idle, on connections that are fresh or settled;
messages that later start on its ports join its script.  The first time, ns-3 runs it and the
wrapper records the script, each completion offset, the port counters and, at each joiner's
start, every message's delivered bytes and DCQCN state.  The next episode with the same first
batch is replayed from the record as long as the same joiners come at the same offsets; when
they do not, its messages go back to ns-3 with the bytes and DCQCN state the record had there
(RdmaNic::RestoreConnectionCc; queues start empty).  Two starts with the same key differ only in
what packet level itself leaves to chance (random ECN marking) and in alpha below SETTLED_ALPHA.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from netbackend.base import Completion, Message, NetStats, NetworkBackend
from netbackend.config import NetworkConfig, resolved_dcqcn
from hscommon.errors import UserError
from netbackend.routing import Router
from netbackend.ns3.wire import data_wire_bytes, header_bytes

ACCEL_CCS = ("dcqcn", "dcqcn_paper", "none")
"""Congestion controls whose QP starts at line rate and changes only on CNPs (rdma-nic.h), so
a flow that never queues keeps line rate.  HPCC paces a lone flow at eta of line rate with a
window, TIMELY reacts to RTT, DCTCP starts from a window: not closed form here."""


@dataclass(slots=True)
class _Flow:
    """One message in a closed-form partition."""

    msg: Message
    ports: list[int]
    wire_total: float
    wire_left: float
    tail_ns: float
    """Last packet's time from leaving the NIC to being delivered."""
    payload: int = -1
    """Payload bytes it carries in closed form (-1: the whole message)."""
    lead_wire: float = 0.0
    """Wire bytes ns-3 still sends for it first (a migrated message's kept work request)."""

    @property
    def bytes(self) -> int:
        return self.msg.size_bytes if self.payload < 0 else self.payload


@dataclass(slots=True)
class _Trajectory:
    """The DCQCN rate of a QP whose path builds no queue: it only rises, on the increase timer.

    With no mark there is no CNP and no cut, so the reaction point's rate changes only at its
    increase-timer events (the byte counter is off: only such QPs get a trajectory).  Each event
    repeats DcqcnRp::Increase then the stage count (dcqcn.cc) with the same double arithmetic,
    and the timer is re-armed one interval later while RC or RT is below line rate
    (RdmaNic::OnIncreaseTimer), so the trajectory is the one ns-3 follows for the idle QP."""

    rate_bps: float
    target_bps: float
    stage: int
    next_ns: float
    """Next increase-timer expiry (-1: none armed)."""
    line_bps: float
    ai_bps: float
    hai_bps: float
    fast_stages: int
    interval_ns: float

    def advance_to(self, t: float) -> None:
        while 0 <= self.next_ns <= t:
            if self.stage >= self.fast_stages:  # stages counted before this event (BC = T)
                self.target_bps += self.hai_bps if self.stage > self.fast_stages else self.ai_bps
            self.target_bps = min(self.target_bps, self.line_bps)
            self.rate_bps = min((self.rate_bps + self.target_bps) / 2.0, self.line_bps)
            self.stage += 1
            if self.rate_bps < self.line_bps or self.target_bps < self.line_bps:
                self.next_ns += self.interval_ns
            else:
                self.next_ns = -1

    @property
    def bytes_per_ns(self) -> float:
        return self.rate_bps / 8e9

    def at_line(self) -> bool:
        return self.next_ns < 0 and self.rate_bps >= self.line_bps


def water_fill(rate: float, keys: list, caps: dict[Any, _Trajectory]) -> dict[Any, float]:
    """Round robin among the ready QPs, each paced at most at its DCQCN rate: water-filling of
    the NIC's ``rate`` (a QP below its fair share keeps its rate, the rest share the rest)."""
    left, n = rate, len(keys)
    shares: dict[Any, float] = {}
    for key, tr in sorted(((k, caps[k]) for k in keys if k in caps), key=lambda kv: kv[1].rate_bps):
        if tr.bytes_per_ns * n >= left:
            break
        shares[key] = tr.bytes_per_ns
        left -= tr.bytes_per_ns
        n -= 1
    fair = left / n if n else 0.0
    return {key: shares.get(key, fair) for key in keys}


@dataclass(slots=True)
class _Group:
    """A source-bounded partition: the closed-form flows of one NIC, per QP in posting order."""

    src: str
    line_bytes_per_ns: float
    t_last: float
    qps: dict[Any, deque] = field(default_factory=dict)
    version: int = 0
    rate_bytes_per_ns: float = 0.0
    """Data rate left by the ACKs this NIC sends (set by the backend's _rerate)."""
    caps: dict[Any, _Trajectory] = field(default_factory=dict)
    """QPs still below line rate after a congestion episode, with their DCQCN trajectory."""
    shares: dict[Any, float] | None = None
    """Per-QP wire rate (bytes/ns) when some QP is capped; None: an equal share each."""

    def active(self) -> int:
        return len(self.qps)  # a QP's deque is removed the moment it empties

    def allocate(self) -> None:
        if not self.caps:  # the common case: every QP at line rate, an equal share each
            self.shares = None
            return
        for key in [k for k, tr in self.caps.items() if k not in self.qps or tr.at_line()]:
            del self.caps[key]
        self.shares = water_fill(self.rate_bytes_per_ns, list(self.qps), self.caps) if self.caps else None

    def rates(self) -> dict[Any, float]:
        """Wire rate (bytes/ns) of each QP's head flow."""
        if self.shares is not None:
            return self.shares
        k = len(self.qps)
        return {key: self.rate_bytes_per_ns / k for key in self.qps}

    def next_cap_change(self) -> float | None:
        if not self.caps:
            return None
        times = [tr.next_ns for tr in self.caps.values() if tr.next_ns >= 0]
        return min(times) if times else None

    def advance_to(self, t: float) -> None:
        k = len(self.qps)
        if k and t > self.t_last:
            dt = t - self.t_last
            if self.shares is None:
                share = dt * self.rate_bytes_per_ns / k
                for q in self.qps.values():
                    q[0].wire_left -= share
            else:
                for key, q in self.qps.items():
                    q[0].wire_left -= dt * self.shares[key]
        if t > self.t_last:
            self.t_last = t

    def next_departure(self) -> float | None:
        k = len(self.qps)
        if not k:
            return None
        if self.shares is None:
            if k == 1:  # most partitions: one QP
                left = next(iter(self.qps.values()))[0].wire_left
            else:
                left = min(q[0].wire_left for q in self.qps.values())
            return self.t_last + max(0.0, left) * k / self.rate_bytes_per_ns
        return self.t_last + min(max(0.0, q[0].wire_left) / self.shares[key] for key, q in self.qps.items())


@dataclass
class _FFlow:
    """A flow of a fast-forwarded partition: its unsent steps, delivered at its measured rate."""

    iid: int
    orig: int
    ports: list[int]
    lead: int
    """Payload ns-3 still holds for it (the kept work request, not yet delivered)."""
    payload: int
    """Payload taken out of ns-3 (whole NCCL steps)."""
    rate: float
    """Delivered payload bytes per ns over the last window."""
    cc: list[float] = field(default_factory=list)
    """Its connection's DCQCN state when the fast-forward began (RdmaNic::SaveConnectionCc),
    restored when it goes back: the QP does not recover its rate while its bytes are elsewhere."""


@dataclass
class _Steady:
    """A packet-level partition in steady state, advanced at its flows' measured rates."""

    sid: int
    t0: float
    flows: list[_FFlow]
    marks_per_ns: float
    """ECN marks per ns on its ports over the last window (extrapolated over the interval)."""

    def end_ns(self) -> float:
        return min(self.t0 + (f.lead + f.payload) / f.rate for f in self.flows)


SETTLED_ALPHA = 0.01
"""A connection whose QPs had CNPs counts as settled (memo state "settled") once it is back at line
rate with alpha at most this: its next cut takes at most alpha / 2 = 0.5 % of its rate (DCQCN's
RC (1 - alpha / 2), Zhu et al., SIGCOMM'15), so two settled starts differ by under half of issue
12's 1 % iteration tolerance in their first cut and not at all afterwards."""


_MEMO_STATS = ("ecn_marks", "paused_ns", "tx_bytes", "tx_packets")
"""Port statistics a replay adds (PortStat names); tx_packets are counted apart from the simulated hops."""


@dataclass
class _MemoEntry:
    """What one isolated, congested partition did in ns-3, relative to its start."""

    script: list[tuple[int, tuple]]
    """(start offset, description) of each message: the first batch in key order, then the joiners."""
    offsets: list[int]
    """Completion offset of each message (from the episode's start), in script order."""
    progress: list[tuple[int, list[int], list[list[float]]]]
    """(offset, delivered bytes and connection state (RdmaNic::SaveConnectionCc) of each message
    that had started) at each joiner's start: where a replay that leaves its script there stands."""
    settle: list[float]
    """Per message: ns after its completion until its connection is settled again (0: already)."""
    port_deltas: dict[str, dict[int, float]]
    """Port statistic -> port -> increase over the episode."""
    closed_bytes: dict[int, float]
    """Port -> wire bytes the wrapper delivered in closed form there (migrated tails)."""


@dataclass
class _Memo:
    """An episode being recorded (``entry`` None: ns-3 runs it) or replayed, with its ports."""

    rid: int
    key: tuple
    t0: int
    msgs: list[Message]
    ports: set[int]
    entry: _MemoEntry | None = None
    script: list[tuple[int, tuple]] = field(default_factory=list)
    """(start offset, description) of each message in the order they joined."""
    progress: list[tuple[int, list[int], list[list[float]]]] = field(default_factory=list)
    """(offset, bytes each earlier message had delivered, its connection's DCQCN state) at each
    joiner's start."""
    fin: dict[int, int] = field(default_factory=dict)
    start_stats: dict[str, list[float]] = field(default_factory=dict)
    start_closed: dict[int, float] = field(default_factory=dict)
    settle: dict[int, float | None] = field(default_factory=dict)


def _components(items: list, ports_of) -> list[list]:
    """Connected sets of ``items`` (two are connected when their ports share one), union-find; each
    set and the sets in the order of ``items``."""
    parent = {id(x): id(x) for x in items}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    at: dict[int, int] = {}
    for x in items:
        for p in ports_of(x):
            j = at.setdefault(p, id(x))
            if j != id(x):
                parent[find(id(x))] = find(j)
    comps: dict[int, list] = {}
    for x in items:
        comps.setdefault(find(id(x)), []).append(x)
    return list(comps.values())


def check_acceleration(config: NetworkConfig) -> None:
    """Reject acceleration settings that have no closed form (one-line UserError)."""
    if config.acceleration.mode == "off":
        return
    if config.cc not in ACCEL_CCS:
        raise UserError(f"acceleration auto supports cc {', '.join(ACCEL_CCS)} (or set "
                        "network.acceleration.mode: off)", field="network.cc", value=config.cc)
    if config.cc_window:
        raise UserError("acceleration auto needs cc_window false (a BDP window can pace a lone flow)",
                        field="network.cc_window", value=config.cc_window)
    acc = config.acceleration
    if acc.collisions == "fluid":
        if config.cc not in ("dcqcn", "dcqcn_paper"):
            raise UserError("collisions: fluid models DCQCN only (no PFC): use cc dcqcn or dcqcn_paper, or "
                            "collisions: packet", field="network.acceleration.collisions", value=acc.collisions)
        if acc.memoize or acc.fast_forward:
            raise UserError("collisions: fluid replaces memoize and fast_forward (they act on packet-level "
                            "flows): turn those off", field="network.acceleration.collisions", value=acc.collisions)
        if config.transport.qps_per_connection > 1:
            raise UserError("collisions: fluid needs one QP per connection",
                            field="network.transport.qps_per_connection", value=config.transport.qps_per_connection)


def _add_by_name(into: dict, per_port: dict, names: list, skip_zero: bool = False) -> None:
    """Adds each port's value, rounded to an integer, to ``into`` under the port's name (``names[port]``): how
    the closed-form, replayed and fluid shares join ns-3's own per-link and per-port counters. ``skip_zero``:
    a port whose rounded value is 0 gets no entry (the fluid model's expected marks: most ports have a few
    hundredths)."""
    for p, v in per_port.items():
        n = int(round(v))
        if n or not skip_zero:
            into[names[p]] = into.get(names[p], 0) + n


class AcceleratedNs3Backend(NetworkBackend):
    """ns-3 backend with closed-form source-bounded partitions (``acceleration.mode: auto``)."""

    name = "ns3"

    def __init__(self, topology, config: NetworkConfig | None = None, seed: int = 0, **kw):
        from netbackend.ns3 import Ns3Backend

        config = config or NetworkConfig(backend="ns3")
        super().__init__(topology, config, seed)
        check_acceleration(config)
        inner_cfg = config.model_copy(update={"acceleration": config.acceleration.model_copy(
            update={"mode": "off"})})
        acc = config.acceleration
        self._ff_on = acc.fast_forward
        self._memo_on = acc.memoize and config.transport.qps_per_connection == 1
        if self._ff_on or self._memo_on:
            kw = dict(kw, track_message_bytes=True)  # delivery rates / progress of packet-level flows
        self.inner = Ns3Backend(topology, inner_cfg, seed, **kw)
        self._router = Router(topology, mode=config.ecmp, seed=seed)
        self._fluid = None
        if acc.collisions == "fluid":
            from netbackend.ns3.fluid import FluidSide

            # (another run number, another draw of the model's sampled CNPs: NetworkConfig.rng_run)
            self._fluid = FluidSide(self._router, config, seed + config.rng_run - 1, self._delay_ns, topology,
                                    self.inner._port_links)
        self._fluid_of: dict[int, tuple[int, list[int], Any, int]] = {}
        """Piece id (a message's bytes posted to the fluid model, like an inner id) -> (message id, ports,
        connection, payload bytes posted) while the fluid model carries it."""
        self._fluid_by_src: dict[str, list[int]] = {}
        """NIC -> its pieces in the fluid model, in posting order."""
        self._fluid_left: set[int] = set()
        """Pieces whose tail left the fluid model (_fluid_migrate); it still delivers their head."""
        self._fluid_cands: set[str] = set()
        self._share = config.acceleration.share_ports
        self._migrate_on = config.acceleration.migrate
        self._mtu = config.mtu_bytes
        self._hdr = header_bytes(config)  # the model's rule (wire.py), as the NIC sends them
        tr = config.transport
        self._per_message_qp = tr.qp_mode == "per_message"
        self._qps_per_conn = tr.qps_per_connection
        self._max_steps = tr.max_outstanding_steps
        self._now = 0
        self._seq = itertools.count()
        self._starts: list[tuple[int, int, Message]] = []  # (start_ns, seq, msg)
        self._events: list[tuple[float, int, str, Any]] = []  # ("dep", (src, version)) / ("done", msg)
        self._groups: dict[str, _Group] = {}
        self._live: set[str] = set()
        """NICs whose closed-form partition has flows."""
        self._dst_groups: dict[str, dict[str, int]] = {}
        """Receiving NIC -> sending NIC -> closed-form flows between them (whom a receiver's ACKs slow)."""
        self._owners: dict[int, dict[Any, int]] = {}  # port -> owner -> flows ("g", src) / ("n", inner id)
        self._inner_of: dict[int, tuple[int, list[int], Any, int]] = {}  # inner id -> (orig, ports, conn key, marks at post)
        self._next_inner = itertools.count(1)
        self._pending: set[int] = set()
        self._start: dict[int, int] = {}
        self._size: dict[int, int] = {}
        self._fct: dict[int, tuple[int, int]] = {}
        self._dirty: set[Any] = set()
        self._route_cache: dict[tuple, list[int]] = {}
        self._path_cache: dict[tuple, tuple[bool, float]] = {}
        self._shape_cache: dict[tuple, tuple[float, float]] = {}
        """(size, step, path) -> (wire bytes, tail ns): training repeats a few message shapes."""
        self._wire_cache: dict[tuple[int, int], tuple[int, int, int]] = {}
        self._batch: dict[str, list] = {}
        """NIC -> connection keys of the messages starting at this instant (see _fits)."""
        self._recheck: set[str] = set()
        self._by_src: dict[str, list[int]] = {}
        """NIC -> its packet-level (inner) messages in posting order."""
        self._migrated: set[int] = set()
        """Inner messages whose tail went to closed form (ns-3 finishes their kept request)."""
        self._parts: dict[int, int] = {}
        """Message id -> pieces still to deliver, for a message split between ns-3 and closed form."""
        self._candidates: set[str] = set()
        self._queue_at = -1
        self._queue_vec: list[float] = []
        self._shared: dict[int, int] = {}
        """Port -> number of closed-form partitions (NICs) crossing it, where more than one."""
        """Connections whose QPs may have been slowed by DCQCN (a mark on their path in ns-3)."""
        self._states: dict[int, list[_Trajectory]] = {}
        """Message id -> DCQCN trajectories of its dirty connection, read by _why_not for _join."""
        self._prechecked: int | None = None
        self._max_tail_ns = 0.0
        self._marks_at = -1
        self._msgs: dict[int, Message] = {}
        self._active_in: dict[str, int] = {}
        self._active_out: dict[str, int] = {}
        self._ack_frac = 64 / (data_wire_bytes(config) * config.ack_interval_packets)
        """ControlPacketBytes (rdma-nic.cc default 64) per ack_interval data packets."""
        self._reacts = config.cc != "none"
        self._marks_vec: Any = None
        self._prefix: dict[int, tuple[int, int]] = {}  # orig id -> (inner id, bytes done in closed form)
        self._link_bytes: dict[int, float] = {}
        self._busy_ns = 0
        """Time with a message in flight: what ns-3's sampled queue mean is over in ``off`` (its sampler runs
        while it has traffic), here whatever carries the bytes (stats: mean_queue_bytes)."""
        self._bytes_delivered = 0
        self.counts = {"bytes_packet_level": 0, "bytes_closed_form": 0, "bytes_fast_forwarded": 0,
                       "bytes_replayed": 0, "messages_closed_form": 0, "messages_packet_level": 0,
                       "partitions_closed_form": 0, "handbacks": 0, "flows_handed_back": 0, "memo_hits": 0,
                       "connections_recovered": 0, "messages_rate_limited": 0,
                       "handbacks_over_capacity": 0, "migrations": 0, "bytes_migrated": 0,
                       "fast_forwards": 0, "messages_replayed": 0, "memo_recorded": 0,
                       "memo_invalidated": 0, "memo_interrupts": 0, "memo_unsettled": 0, "memo_states_restored": 0,
                       "replay_state_mismatch": 0, "bytes_fluid": 0, "messages_fluid": 0,
                       "not_qualified": {}}
        self._wall = 0.0
        self._theta = acc.theta
        r = self._router
        fastest = max([r.link_rate_gbps[p] for p in range(len(r.link_rate_gbps)) if r.link_src[p] < r.num_hosts]
                      or [1.0])
        self._ff_win_ns = acc.window_packets * data_wire_bytes(config) * 8 / fastest
        self._ff_next: int | None = None
        self._ff_hist: dict[int, deque] = {}
        """Inner message -> its last (time, delivered bytes) samples."""
        self._ff_marks: deque = deque(maxlen=3)
        """Last (time, ECN marks per port) samples."""
        self._steady: dict[int, _Steady] = {}
        self._extrap_marks = 0.0
        self._memo: dict[tuple, _MemoEntry] = {}
        self._rec: dict[int, _Memo] = {}
        """Partitions being recorded (ns-3 runs them) or replayed, by id."""
        self._memo_port: dict[int, int] = {}
        """Port -> the recorded or replayed partition that holds it."""
        self._rec_of: dict[int, int] = {}
        """Message id -> the partition it belongs to, until it completes."""
        self._ns3_conns: set = set()
        """Connections that ever had a message in ns-3 (the others have fresh QPs there)."""
        self._settle: dict[Any, float] = {}
        """Connection -> when a replayed episode would have left it settled again."""
        self._replayed: dict[str, dict[int, float]] = {}
        """Port statistic -> port -> what replayed episodes added (not in ns-3's counters)."""
        if self._memo_on:
            dq = resolved_dcqcn(config)
            self._alpha_g = float(dq["g"])
            self._alpha_ns = float(dq["alpha_update_interval_ns"])

    # ------------------------------------------------------------ interface
    @property
    def now_ns(self) -> int:
        return self._now

    def pending(self) -> int:
        return len(self._pending)

    def send(self, msg: Message) -> None:
        t0 = time.perf_counter()
        if msg.start_ns < self._now:
            raise UserError(f"message starts before the backend's current time {self._now} ns",
                            field="message.start_ns", value=msg.start_ns)
        self.inner._check_ends(msg)
        if msg.size_bytes <= 0:
            raise UserError("message size must be > 0", field="message.size_bytes", value=msg.size_bytes)
        if msg.id in self._pending or msg.id in self._fct:
            raise UserError("message id already used", field="message.id", value=msg.id)
        self._pending.add(msg.id)
        self._start[msg.id] = msg.start_ns
        self._size[msg.id] = msg.size_bytes
        heapq.heappush(self._starts, (msg.start_ns, next(self._seq), msg))
        self._wall += time.perf_counter() - t0

    def advance(self, until_ns: int | None = None) -> list[Completion]:
        t0 = time.perf_counter()
        busy, now0 = bool(self._pending), self._now
        try:
            return self._advance(until_ns)
        finally:
            self._wall += time.perf_counter() - t0
            if busy:
                self._busy_ns += max(0, self._now - now0)

    def _advance(self, until_ns: int | None) -> list[Completion]:
        if until_ns is None and not self._pending:
            return []
        if until_ns is not None and until_ns < self._now:
            until_ns = self._now
        while True:
            # the earliest of: the next start, the next local event, the precheck, the steady check
            first = self._starts[0][0] if self._starts else None
            if self._events and (first is None or self._events[0][0] < first):
                first = self._events[0][0]
            pre = self._precheck_time()
            if pre is not None and (first is None or pre < first):
                first = pre
            if self._ff_on:
                if self._ff_next is None and len(self._inner_of) > len(self._migrated):
                    self._ff_next = self._now + math.ceil(self._ff_win_ns)
                if self._ff_next is not None:
                    ff = max(self._ff_next, self._now)
                    first = ff if first is None or ff < first else first
            t_local = max(self._now, math.ceil(first)) if first is not None else None  # whole ns
            limit = t_local if until_ns is None else (until_ns if t_local is None else min(t_local, until_ns))
            t_fluid = self._fluid.peek(limit) if self._fluid is not None and self._fluid.pending() else None
            if t_fluid is not None:
                t_fluid = max(self._now, math.ceil(t_fluid))
                limit = t_fluid if limit is None else min(limit, t_fluid)
            if self.inner.pending():
                done = self.inner.advance(limit)
                if done:
                    tc = done[0].finish_ns
                    self._now = max(self._now, tc)
                    out = [c for c in (self._inner_done(c.id, c.finish_ns) for c in done) if c is not None]
                    if self._candidates:
                        self._migrate_candidates()
                    out += self._pop_local_done(tc)
                    if out:
                        return out
                    continue
            if t_fluid is not None:  # ns-3 had nothing before it (limit <= t_fluid)
                self._now = max(self._now, t_fluid)
                out = [self._fluid_done(mid, max(self._now, math.ceil(fin))) for mid, fin in self._fluid.pop()]
                if self._fluid_cands:
                    cands, self._fluid_cands = self._fluid_cands, set()
                    for src in sorted(cands):
                        self._fluid_migrate(src)
                out = [c for c in out if c is not None] + self._pop_local_done(t_fluid)
                if out:
                    return out
                continue
            if limit is None:
                return []
            self._now = max(self._now, limit)
            out = self._pop_local_done(limit)
            if out:
                return out
            if pre is not None and pre <= limit:
                self._precheck(limit)
            if self._ff_next is not None and self._ff_next <= limit:
                self._ff_check(limit)
            batch = []
            while self._starts and self._starts[0][0] <= limit:
                batch.append(heapq.heappop(self._starts)[2])
            if batch and self._memo_on:
                batch = self._memo_batch(batch, limit)
            if batch:
                self._batch = {}
                for msg in batch:  # a NIC's QPs starting together share it from the first packet
                    keys = self._batch.setdefault(msg.src, [])
                    if self._conn_key(msg) not in keys:
                        keys.append(self._conn_key(msg))
                for msg in batch:
                    self._start_message(msg, limit)
                self._batch = {}
                recheck, self._recheck = self._recheck, set()
                for src in sorted(recheck):
                    if src in self._groups:
                        self._check_capacity(self._shared_ports(self._groups[src]))
            if until_ns is not None and limit >= until_ns and not (self._events and self._events[0][0] <= limit):
                return []

    def _pop_local_done(self, t: int) -> list[Completion]:
        """Handle group departures and closed-form deliveries up to ``t``; return those at ``t``."""
        out: list[Completion] = []
        while self._events and self._events[0][0] <= t:
            when, _, kind, what = heapq.heappop(self._events)
            if kind == "dep":
                src, version = what
                g = self._groups.get(src)
                if g is not None and g.version == version:
                    self._departures(g, when)
            elif kind == "ff":
                if what in self._steady:
                    self._ff_end(what, math.ceil(when))
            elif kind == "memo":  # a replayed message's recorded completion
                rid, mid = what
                m = self._rec.get(rid)
                if m is not None and m.entry is not None and mid not in m.fin:
                    out.append(self._complete(mid, t))
            elif kind == "memo_expect":  # the script's next message did not come on time
                rid, n = what
                m = self._rec.get(rid)
                if m is not None and len(m.msgs) <= n:
                    self._memo_interrupt(rid, t)
            else:  # "done": a closed-form message delivered (reported at the whole ns t >= when)
                c = self._part_done(what, t)
                if c is not None:
                    out.append(c)
        return out

    # ------------------------------------------------------- early hand-back
    def _precheck_time(self) -> int | None:
        """When to look at the next start: one pipeline before it, if closed-form flows exist.

        A flow handed back at the moment of the conflict would restart on an empty pipeline,
        and DCQCN's first cuts (which persist for a rate-increase interval) depend on whose
        packets reach the shared queue first.  Handing it back one path latency early lets
        ns-3 rebuild exactly the in-flight packets it had when the new flow arrives (it was
        alone, so those packets are what ns-3 computes)."""
        if not self._starts or not self._groups:
            return None
        t_next = self._starts[0][0]
        if self._prechecked == t_next:
            return None
        if not self._live:
            return None
        # the longest pipeline of any closed-form flow so far (earlier is only more packet level)
        return max(self._now, self.inner.now_ns, t_next - math.ceil(self._max_tail_ns) - 1)

    def _precheck(self, t: int) -> None:
        """Hand back, at ``t``, the partitions the starts of the next start time will conflict with."""
        t_next = self._starts[0][0]
        self._prechecked = t_next
        groups: set[str] = set()
        batch = [msg for _, _, msg in sorted(e for e in self._starts if e[0] == t_next)]
        rate = self._router.link_rate_gbps
        demand: dict[int, dict[str, float]] = {}  # port -> starting NIC -> its line rate
        for msg in batch if self._share else ():
            ports = self._ports(msg)
            for p in ports[1:]:
                demand.setdefault(p, {})[msg.src] = rate[ports[0]] / 8.0
        starters = {msg.src for msg in batch}

        def over(p: int) -> bool:  # shared ports: the starters at line rate beside the others
            return self._port_load(p, skip=starters) + sum(demand[p].values()) > rate[p] / 8.0 * (1 + 1e-9)

        for msg in batch:
            ports = self._ports(msg)
            found = self._conflicting_groups(msg, ports)
            # With the fluid model taking collisions, a message that meets no closed-form partition
            # has nothing to hand back and the checks are skipped (at packet level reading a
            # connection's state brings ns-3 to now, which they keep doing).
            if (found or self._fluid is None) and (self._why_not(msg, ports) is not None or (
                    self._share and any(over(p) for p in ports[1:] if p in self._owners))):
                groups |= found
            self._states.pop(msg.id, None)  # read again when it starts
        for src in sorted(groups):
            if src in self._groups and self._groups[src].active():
                self._hand_back(src, t)

    def _conflicting_groups(self, msg: Message, ports: list[int]) -> set[str]:
        groups = {o[1] for p in ports for o in self._owners.get(p, ()) if o[0] == "g"}
        if ports and ports[0] in self._owners and ("g", msg.src) in self._owners[ports[0]]:
            groups.add(msg.src)
        return groups

    # ----------------------------------------------------------- decisions
    def _conn_key(self, msg: Message):
        if msg.connection < 0 or self._per_message_qp:
            return ("m", msg.id)
        return (msg.src, msg.dst, msg.connection)

    def _ports(self, msg: Message) -> list[int]:
        if msg.src == msg.dst:
            return []
        k = (msg.src, msg.dst, msg.flow_key)
        ports = self._route_cache.get(k)
        if ports is None:
            ports = self._route_cache[k] = list(self._router.route(msg.src, msg.dst, msg.flow_key)[1])
        return ports

    def _path(self, ports: list[int]) -> tuple[bool, float]:
        """(a port slower than the NIC on the path, unloaded RTT in ns) of a path, cached."""
        k = tuple(ports)
        v = self._path_cache.get(k)
        if v is None:
            r = self._router
            r0 = r.link_rate_gbps[ports[0]]
            slower = any(r.link_rate_gbps[p] < r0 for p in ports[1:])
            rtt_ns = 2 * sum(self._delay_ns(p) + (self._mtu + self._hdr) * 8 / r.link_rate_gbps[p] for p in ports)
            v = self._path_cache[k] = (slower, rtt_ns)
        return v

    def _why_not(self, msg: Message, ports: list[int]) -> str | None:
        """None if ``msg`` may join its NIC's closed-form partition, else the reason."""
        if not ports:
            return "loopback"
        if msg.connection >= 0 and not self._per_message_qp and self._qps_per_conn > 1:
            return "several QPs per connection"
        slower, rtt_ns = self._path(ports)
        if slower:
            return "a port slower than the NIC"
        if msg.step_bytes > 0 and msg.size_bytes > msg.step_bytes:
            if self._max_steps * msg.step_bytes < 2 * rtt_ns * self._router.link_rate_gbps[ports[0]] / 8:
                return "step credits would throttle"
        own = ("g", msg.src)
        shared = False
        for p in ports:
            for o in self._owners.get(p, ()):
                if o != own:
                    if o[0] in ("n", "f"):
                        return "shares a port"
                    shared = True
        if shared and not self._share:
            return "shares a port"
        # The connection's DCQCN state last: reading it (from ns-3 or the fluid model) costs more
        # than the checks above together, and most messages that would need it share a port.
        key = self._conn_key(msg)
        if key in self._dirty and not (msg.src in self._groups and key in self._groups[msg.src].qps):
            state = self._conn_state(msg)
            if state is None:
                return "connection rate state in ns-3"
            self._states[msg.id] = state
        if shared and not self._fits(msg, ports):
            return "shares a port beyond its capacity"
        return None

    def _fits(self, msg: Message, ports: list[int]) -> bool:
        """Would every port the NIC's partition crosses stay within its rate with ``msg`` joining?

        Partitions of several NICs may share ports as long as the sum of their flows' rates fits
        each port: then no queue builds (a packet at most, from phase), nothing is marked, and
        every flow keeps the rate its NIC gives it.  Checked at line rate (an upper bound)."""
        g = self._groups.get(msg.src)
        key = self._conn_key(msg)
        keys = list(g.qps) if g is not None else []
        if key in keys:
            return True  # queued behind a message of its QP: no new load
        caps = dict(g.caps) if g is not None else {}
        state = self._states.get(msg.id)
        if state:
            tr = dataclasses.replace(state[0])  # a copy: _join replays the one read
            tr.advance_to(float(self._now))
            if not tr.at_line():
                caps[key] = tr
        line = self._router.link_rate_gbps[ports[0]] / 8.0
        keys += [k for k in self._batch.get(msg.src, ()) if k != key and k not in keys]
        shares = water_fill(line, keys + [key], caps)
        new: dict[int, float] = {}
        for k in keys:
            if g is not None and k in g.qps:  # (the other starters' ports count when they join)
                for p in g.qps[k][0].ports[1:]:
                    new[p] = new.get(p, 0.0) + shares[k]
        for p in ports[1:]:
            new[p] = new.get(p, 0.0) + shares[key]
        rate = self._router.link_rate_gbps
        return all(self._port_load(p, skip=msg.src) + v <= rate[p] / 8.0 * (1 + 1e-9) for p, v in new.items())

    def _port_load(self, p: int, skip: str | set | None = None) -> float:
        """Wire rate (bytes/ns) the closed-form partitions (but ``skip``'s) put on port ``p``."""
        load = 0.0
        skip = {skip} if isinstance(skip, str) else (skip or set())
        for o in self._owners.get(p, ()):
            if o[0] == "g" and o[1] not in skip:
                g = self._groups[o[1]]
                rates = g.rates()
                for key, q in g.qps.items():
                    if p in q[0].ports:
                        load += rates[key]
        return load

    def _shared_ports(self, g: _Group) -> list[int]:
        if not self._shared:
            return []
        return sorted({p for q in g.qps.values() for p in q[0].ports if p in self._shared})

    def _conn_state(self, msg: Message, busy_ok: bool = False) -> list[_Trajectory] | None:
        """The DCQCN trajectories of a dirty connection's QPs read from ns-3, or None when they
        cannot be followed in closed form (data or a cut check outstanding there, or a byte
        counter, which would need the bytes the QP sends, with a rate below line)."""
        key = self._conn_key(msg)
        if key[0] == "m" or self.config.cc == "none":
            return None if key[0] == "m" else []
        if self._fluid is not None:
            return self._fluid_state(msg, key)
        v = self._dcqcn_read(msg, busy_ok)
        if not v:
            return None
        line, ai, hai, fast, interval, bc = v[:6]
        out = []
        for i in range(6, len(v), 7):  # per QP: RC, RT, stages, next increase, CNP seen, alpha (rdma-nic.h)
            rate, target, tstage, _bstage, nxt = v[i:i + 5]
            tr = _Trajectory(rate, target, int(tstage), nxt, line, ai, hai, int(fast), interval)
            if bc > 0 and not (rate >= line and target >= line):
                return None
            out.append(tr)
        return out

    def _fluid_state(self, msg: Message, key) -> list[_Trajectory] | None:
        """As :meth:`_conn_state`, from the fluid model's QP: None while it has bytes, CNPs or a cut
        check pending there (the next message joins it in the model)."""
        v = self._fluid.idle_state(key, self._now)
        if v is None or v[15] >= 0:
            return None
        return self._fluid_trajectory(v, self._ports(msg), self._now)

    def _fluid_trajectory(self, v: list[float], ports: list[int], t: int) -> list[_Trajectory] | None:
        """The increase-timer trajectory of a fluid QP's saved DCQCN state (DcqcnRp::Save at ``t``);
        None with a byte counter below line rate (it would need the bytes the QP sends)."""
        line = self._router.link_rate_gbps[ports[0]] * 1e9
        ai, hai, fast, interval, bc = self._fluid.trajectory_params(line)
        if bc > 0 and not (v[0] >= line and v[1] >= line):
            return None
        return [_Trajectory(v[0], v[1], int(v[3]), t + v[14] if v[14] >= 0 else -1.0, line, ai, hai, fast, interval)]

    def _bring_inner_to(self, t: int) -> None:
        if self.inner.now_ns < t:
            # bring an idle ns-3 up to now: its watchdog would read the gap as a stall
            assert not self.inner.advance(t), "ns-3 completion left behind"

    def _start_message(self, msg: Message, t: int) -> None:
        self._msgs[msg.id] = msg
        self._bump(msg, +1, float(t))
        ports = self._ports(msg)
        if (self._memo_port or self._settle) and self._memo_touch(msg, ports, t):
            return  # a replayed episode's scripted message
        if self._steady:
            for sid in sorted({o[1] for p in ports for o in self._owners.get(p, ()) if o[0] == "s"}):
                self._ff_end(sid, t)
        why = self._why_not(msg, ports)
        if why is None:
            self._join(msg, ports, t)
            return
        self._states.pop(msg.id, None)
        nq = self.counts["not_qualified"]
        nq[why] = nq.get(why, 0) + 1
        for src in sorted(self._conflicting_groups(msg, ports)):
            self._hand_back(src, t)
        self.counts[self._post_inner(msg.id, msg, msg.size_bytes, t, ports)] += 1

    def _wire(self, size: int, step: int) -> tuple[int, int, int]:
        """(wire bytes, last packet's wire bytes, the packet before it's) of a message (cached: a
        training run has few sizes and asks for each twice a message)."""
        v = self._wire_cache.get((size, step))
        if v is None:
            if len(self._wire_cache) > 100_000:  # random sizes (traffic studies): no reuse
                self._wire_cache.clear()
            v = self._wire_cache[(size, step)] = self._wire_of(size, step)
        return v

    def _wire_of(self, size: int, step: int) -> tuple[int, int, int]:
        step = step if 0 < step < size else size
        n_steps, last_step = divmod(size, step)
        full, rest = divmod(step, self._mtu)
        per_step = full * (self._mtu + self._hdr) + ((rest + self._hdr) if rest else 0)
        lf, lr = divmod(last_step, self._mtu)
        wire = n_steps * per_step + lf * (self._mtu + self._hdr) + ((lr + self._hdr) if lr else 0)
        seq = ([] if not n_steps else ([self._mtu + self._hdr] * min(full, 2) + ([rest + self._hdr] if rest else [])))
        seq = seq + [self._mtu + self._hdr] * min(lf, 2) + ([lr + self._hdr] if lr else [])
        last = seq[-1]
        prev = seq[-2] if len(seq) >= 2 else 0
        return wire, last, prev

    def _delay_ns(self, port: int) -> float:
        """Propagation of a directed link plus, when a switch transmits on it, the switch's pipeline
        latency (the ns-3 switch adds ``per_hop_latency_ns`` to every port it transmits on)."""
        r = self._router
        lat = self.config.per_hop_latency_ns if r.link_src[port] >= r.num_hosts else 0
        return r.link_delay_ns[port] + lat

    def _tail_ns(self, ports: list[int], last: int, prev: int) -> float:
        """From the last packet leaving the NIC to its delivery (store and forward; it may wait
        behind a longer predecessor on an equally fast port)."""
        r = self._router
        rates = [r.link_rate_gbps[p] for p in ports]
        delays = [self._delay_ns(p) for p in ports]
        d_prev = -last * 8 / rates[0]
        d_last = 0.0
        for h in range(1, len(ports)):
            if prev:
                d_prev = d_prev + delays[h - 1] + prev * 8 / rates[h]
            d_last = max(d_last + delays[h - 1], d_prev if prev else float("-inf")) + last * 8 / rates[h]
        return d_last + delays[-1]

    def _join(self, msg: Message, ports: list[int], t: int) -> None:
        g = self._groups.get(msg.src)
        if g is None or not g.active():
            rate = self._router.link_rate_gbps[ports[0]] / 8.0
            if g is None:
                g = self._groups[msg.src] = _Group(msg.src, rate, float(t), rate_bytes_per_ns=rate)
            g.t_last = float(t)
            self.counts["partitions_closed_form"] += 1
        else:
            g.advance_to(float(t))
        ck = (msg.size_bytes, msg.step_bytes, tuple(ports))
        shape = self._shape_cache.get(ck)
        if shape is None:
            if len(self._shape_cache) > 100_000:  # random sizes (traffic studies): no reuse
                self._shape_cache.clear()
            wire, last, prev = self._wire(msg.size_bytes, msg.step_bytes)
            shape = self._shape_cache[ck] = (float(wire), self._tail_ns(ports, last, prev))
        flow = _Flow(msg, ports, shape[0], shape[0], shape[1])
        self._max_tail_ns = max(self._max_tail_ns, flow.tail_ns)
        if self._add_flow(g, self._conn_key(msg), flow, self._states.pop(msg.id, None), t):
            self.counts["messages_rate_limited"] += 1
        self.counts["messages_closed_form"] += 1
        self._rerate(g, float(t))

    def _add_flow(self, g: _Group, key, flow: _Flow, state: list[_Trajectory] | None, t: float) -> bool:
        """Queue ``flow`` on its QP in ``g`` and take its ports; a QP new to the partition starts
        on its DCQCN trajectory (``state``), if any.  True if that leaves it below line rate."""
        capped = False
        if state is not None and key not in g.qps:
            for tr in state:  # one QP per connection here (_why_not, _migrate)
                tr.advance_to(float(t))
                if not tr.at_line():
                    g.caps[key] = tr
                    capped = True
        g.qps.setdefault(key, deque()).append(flow)
        self._live.add(g.src)
        msg = flow.msg
        by_src = self._dst_groups.setdefault(msg.dst, {})
        by_src[msg.src] = by_src.get(msg.src, 0) + 1
        owner = ("g", g.src)
        for p in flow.ports:
            own = self._owners.setdefault(p, {})
            n = own.get(owner)
            if n:
                own[owner] = n + 1
            else:
                own[owner] = 1
                self._count_sharing(p, own)
        return capped

    def _rerate(self, g: _Group, t: float) -> None:
        """Set the group's data rate at ``t``: the NIC's line rate less the ACKs it sends.

        A NIC receiving data acknowledges every ack_interval packets at control priority on the
        same egress port; a lone flow is also slowed by the ACKs its receiver sends for flows that
        receiver transmits (they come back through its last port).  Both at most ack/data bytes
        (64 / 4174 = 1.5 % at the defaults); receivers are taken to receive at line rate."""
        g.advance_to(t)
        if not g.qps and not g.caps:
            # emptied (its last flows departed, half the calls): no rate to set or capacity to
            # check, and the rate is set again before it carries a flow (_join, _migrate); its
            # departure events go stale as a re-schedule would make them
            g.version = next(self._seq)
            return
        slowed = self._active_in.get(g.src, 0) > 0
        if not slowed and len(g.qps) == 1:
            head = next(iter(g.qps.values()))[0]
            slowed = self._active_out.get(head.msg.dst, 0) > 0
        g.rate_bytes_per_ns = g.line_bytes_per_ns * (1.0 - self._ack_frac if slowed else 1.0)
        for key, tr in g.caps.items():
            tr.advance_to(t)
            if tr.at_line() and key in self._dirty:
                self._dirty.discard(key)
                self.counts["connections_recovered"] += 1
        g.allocate()
        self._reschedule(g)
        if self._batch:
            self._recheck.add(g.src)  # after the whole batch has joined
        else:
            self._check_capacity(self._shared_ports(g))

    def _check_capacity(self, ports) -> None:
        """Hand back the partitions on ports loaded past their rate (a rate rose: a flow left its
        NIC, a DCQCN timer fired): they would queue and mark."""
        rate = self._router.link_rate_gbps
        over = [p for p in ports if self._port_load(p) > rate[p] / 8.0 * (1 + 1e-9)]
        if over:
            for src in sorted({o[1] for p in over for o in self._owners.get(p, ()) if o[0] == "g"}):
                if src in self._groups:
                    self._hand_back(src, self._now)
            self.counts["handbacks_over_capacity"] += 1

    def _bump(self, msg: Message, delta: int, t: float) -> None:
        """Count active messages per sending and receiving NIC; re-rate the groups it affects."""
        changed = []
        src, dst, out, inn = msg.src, msg.dst, self._active_out, self._active_in
        before = out.get(src, 0)
        out[src] = before + delta
        if (before == 0) != (before + delta == 0):
            changed.append(src)
        before = inn.get(dst, 0)
        inn[dst] = before + delta
        if (before == 0) != (before + delta == 0):
            changed.append(dst)
        if not changed or not self._groups:
            return
        srcs = set()
        for host in changed:
            if host in self._live:
                srcs.add(host)
            for src in self._dst_groups.get(host, ()):
                if any(q[0].msg.dst in changed for q in self._groups[src].qps.values()):
                    srcs.add(src)
        for src in sorted(srcs):
            g = self._groups.get(src)  # a re-rate may hand partitions back (over capacity)
            if g is not None and g.qps:
                self._rerate(g, t)

    def _reschedule(self, g: _Group) -> None:
        g.version = next(self._seq)  # unique across the group objects of one NIC
        t = g.next_departure()
        cap = g.next_cap_change()
        if cap is not None and (t is None or cap < t):
            t = cap  # a QP's rate rises: re-allocate then (_departures finds no departure)
        if t is not None:
            heapq.heappush(self._events, (t, next(self._seq), "dep", (g.src, g.version)))

    def _release(self, owner, ports: list[int]) -> None:
        for p in ports:
            own = self._owners[p]
            n = own[owner] - 1
            if n:
                own[owner] = n
            else:
                del own[owner]
                if not own:
                    del self._owners[p]
                if owner[0] == "g":
                    self._count_sharing(p, own)

    def _count_sharing(self, p: int, own: dict) -> None:
        if len(own) < 2:  # most ports: one owner, shared by nobody
            self._shared.pop(p, None)
            return
        n = sum(1 for o in own if o[0] == "g")
        if n > 1:
            self._shared[p] = n
        else:
            self._shared.pop(p, None)

    def _departures(self, g: _Group, t: float) -> None:
        """The head flows whose last byte left the NIC at ``t``: schedule their delivery."""
        g.advance_to(t)
        eps = 0.01  # bytes: float residue of the fluid share
        for key in list(g.qps):
            q = g.qps[key]
            while q and q[0].wire_left <= eps:
                f = q.popleft()
                self._forget(f)
                self._count_links(f.ports, f.wire_total - f.lead_wire)
                self.counts["bytes_closed_form"] += f.bytes
                self._release(("g", g.src), f.ports)
                heapq.heappush(self._events, (t + f.tail_ns, next(self._seq), "done", f.msg.id))
            if not q:
                del g.qps[key]
        if not g.qps:
            self._live.discard(g.src)
        self._rerate(g, t)

    def _forget(self, f: _Flow) -> None:
        by_src = self._dst_groups[f.msg.dst]
        by_src[f.msg.src] -= 1
        if not by_src[f.msg.src]:
            del by_src[f.msg.src]
            if not by_src:
                del self._dst_groups[f.msg.dst]

    def _count_links(self, ports: list[int], wire: float) -> None:
        """``wire`` bytes that crossed ``ports`` outside ns-3 (closed form, fast-forwarded)."""
        for p in ports:
            self._link_bytes[p] = self._link_bytes.get(p, 0.0) + wire

    def _payload_sent(self, f: _Flow) -> int:
        """Payload bytes of the whole packets the NIC has started by now (fluid estimate)."""
        if f.payload >= 0:  # a migrated tail: whole steps after ns-3's kept work request
            sent = max(0.0, f.wire_total - f.wire_left - f.lead_wire)
            return min(f.payload, int(sent // (self._mtu + self._hdr)) * self._mtu)
        size, step = f.msg.size_bytes, f.msg.step_bytes
        step = step if 0 < step < size else size
        full, rest = divmod(step, self._mtu)
        per_step = full * (self._mtu + self._hdr) + ((rest + self._hdr) if rest else 0)
        sent = max(0.0, f.wire_total - f.wire_left)
        q, r = divmod(sent, per_step)
        pk = int(-(-r // (self._mtu + self._hdr)))  # a packet on the wire is sent whole
        return min(size, int(q) * step + min(step, pk * self._mtu))

    def _hand_back(self, src: str, t: int) -> None:
        """Post the unsent bytes of every closed-form flow of ``src`` to ns-3 at ``t``."""
        g = self._groups.pop(src)
        self._live.discard(src)
        g.advance_to(float(t))
        self.counts["handbacks"] += 1
        for q in g.qps.values():
            for f in q:
                self._forget(f)
                self._release(("g", src), f.ports)
                sent = self._payload_sent(f)
                self.counts["flows_handed_back"] += 1
                if sent >= f.bytes:  # everything on the wire: delivered in closed form
                    self._count_links(f.ports, f.wire_total - f.lead_wire)
                    self.counts["bytes_closed_form"] += f.bytes
                    heapq.heappush(self._events, (t + f.tail_ns, next(self._seq), "done", f.msg.id))
                    continue
                # the packets it started, whole (the rest goes on as a message of its own): counting the
                # wire sent to the fraction dropped the started packet's unsent part from every link's bytes
                self._count_links(f.ports, float(self._wire(sent, f.msg.step_bytes)[0]) if sent else 0.0)
                self.counts["bytes_closed_form"] += sent
                self.counts["messages_closed_form"] -= 1
                self.counts[self._post_inner(f.msg.id, f.msg, f.bytes - sent, t, f.ports, handed_back=True)] += 1

    def _post_inner(self, orig: int, msg: Message, size: int, t: int, ports: list[int],
                    handed_back: bool = False) -> str:
        """Give ``size`` bytes of ``msg`` to ns-3 (or the fluid model); returns the counter to bump."""
        if self._fluid is not None and ports:
            key = self._conn_key(msg)
            piece = next(self._next_inner)
            step = msg.step_bytes if 0 < msg.step_bytes < size else size
            self._fluid.post(key, piece, msg.src, ports, self._wire(size, msg.step_bytes)[0], t,
                             step_wire_bytes=self._wire(step, 0)[0],
                             credits=self._max_steps if msg.connection >= 0 else 0, payload_bytes=size)
            self._fluid_of[piece] = (orig, ports, key, size)
            self._fluid_by_src.setdefault(msg.src, []).append(piece)
            for p in ports:
                self._owners.setdefault(p, {})[("f", piece)] = 1
            self.counts["bytes_fluid"] += size
            return "messages_fluid"
        if self._memo_port and orig not in self._rec_of:  # e.g. a hand-back beside an episode's joiner
            for rid in sorted({self._memo_port[p] for p in ports if p in self._memo_port}):
                self._memo_stop(rid, t)
        self._bring_inner_to(t)
        iid = next(self._next_inner)
        self.inner.send(Message(iid, msg.src, msg.dst, size, t, msg.flow_key, msg.connection,
                                msg.step_bytes))
        self._inner_of[iid] = (orig, ports, self._conn_key(msg), self._marks(ports))
        self._ns3_conns.add(self._conn_key(msg))
        self._by_src.setdefault(msg.src, []).append(iid)
        self._prefix[orig] = (iid, msg.size_bytes - size)
        for p in ports:
            own = self._owners.setdefault(p, {})
            own[("n", iid)] = 1
        self.counts["bytes_packet_level"] += size
        return "messages_packet_level"

    def _marks(self, ports: list[int]) -> int:
        """ECN marks so far on ``ports`` (0 without ECN: no CNP can then reach a QP).

        Read only when some mark happened since the last read (one counter, not every port)."""
        if not self._reacts:
            return 0
        total = self._cnps()
        if total == 0:
            return 0
        if total != self._marks_at:
            self._marks_vec = self.inner._sim.PortStat("ecn_marks")
            self._marks_at = total
        v = self._marks_vec
        return int(sum(v[p] for p in ports))

    def _cnps(self) -> int:
        vals = self.inner._sim.CounterValues()
        return int(vals[self._cnp_index()])

    def _cnp_index(self) -> int:
        idx = getattr(self, "_cnp_idx", None)
        if idx is None:
            names = [str(n) for n in self.inner._sim.CounterNames()]
            idx = self._cnp_idx = names.index("ce_received")
        return idx

    def _inner_done(self, iid: int, fin: int) -> Completion | None:
        orig, ports, conn, marks0 = self._inner_of.pop(iid)
        self._by_src[self._msgs[orig].src].remove(iid)
        self._ff_hist.pop(iid, None)
        if iid in self._migrated:
            self._migrated.discard(iid)  # its ports were released when it migrated
        else:
            self._prefix.pop(orig, None)
            self._release(("n", iid), ports)
            if self._migrate_on:
                self._candidates.add(self._msgs[orig].src)
                for p in ports:
                    for o in self._owners.get(p, ()):
                        if o[0] == "n":
                            self._candidates.add(self._msgs[self._inner_of[o[1]][0]].src)
        if self._reacts and self._marks(ports) != marks0:  # a mark on its path: DCQCN may have slowed it
            self._dirty.add(conn)
        return self._part_done(orig, fin)

    def _fluid_done(self, piece: int, fin: int) -> Completion | None:
        """The fluid model delivered a message: free its ports; its connection's DCQCN state now
        lives in the model (dirty: _conn_state follows it from there).  The NICs left alone on
        ports it shared may carry on in closed form (_fluid_migrate)."""
        orig, ports, key, _ = self._fluid_of.pop(piece)
        src = self._msgs[orig].src
        self._fluid_by_src[src].remove(piece)
        if piece in self._fluid_left:
            self._fluid_left.discard(piece)  # its ports were released when its tail left
        else:
            self._release(("f", piece), ports)
            if self._migrate_on:
                self._fluid_cands.add(src)
                for p in ports:
                    for o in self._owners.get(p, ()):
                        if o[0] == "f":
                            self._fluid_cands.add(self._msgs[self._fluid_of[o[1]][0]].src)
        self._dirty.add(key)
        return self._part_done(orig, fin)

    def _fluid_migrate(self, src: str) -> None:
        """Move the unsent bytes of ``src``'s fluid messages into closed form, as _migrate does for
        ns-3: when every port they cross carries only them, no queue is left there, and no CNP,
        mark or cut check is in flight for their connections, nothing can slow them but their NIC
        and their DCQCN increase timers.  Each keeps in the model the packets it has started."""
        if src in self._groups:
            return
        mids = [m for m in self._fluid_by_src.get(src, ()) if m not in self._fluid_left]
        if not mids:
            return
        mine = {("f", m) for m in mids}
        ports_all: set[int] = set()
        for m in mids:  # the Python-side conditions first: the model's are dearer to read
            _, ports, key, _ = self._fluid_of[m]
            if key[0] == "m":
                return
            for p in ports:
                if not self._owners.get(p, {}).keys() <= mine:
                    return
            ports_all.update(ports[1:])
        if not all(self._fluid.quiet(self._fluid_of[m][2]) for m in mids):
            return
        if self._fluid.queued_over(ports_all, 2 * (self._mtu + self._hdr)):
            return
        t = self._now
        states: dict[Any, list[_Trajectory]] = {}
        for m in mids:
            _, ports, key, _ = self._fluid_of[m]
            if key not in states:
                st = self._fluid_trajectory(self._fluid.state(key, t), ports, t)
                if st is None:
                    return
                states[key] = st
        tails = []
        for key in states:
            for mid, kept, removed, sent in self._fluid.trim(key):
                if removed > 0:
                    tails.append((mid, kept, sent))
        if not tails:
            return
        self.counts["migrations"] += 1
        g = self._groups[src] = _Group(src, self._router.link_rate_gbps[self._fluid_of[tails[0][0]][1][0]] / 8.0,
                                       float(t))
        self.counts["partitions_closed_form"] += 1
        pkt = self._mtu + self._hdr
        for piece, kept, sent in sorted(tails, key=lambda x: self._fluid_by_src[src].index(x[0])):
            orig, ports, key, size = self._fluid_of[piece]
            msg = self._msgs[orig]
            kept_payload = min(size, round(kept / pkt) * self._mtu)
            removed = size - kept_payload
            self._release(("f", piece), ports)
            if kept_payload > 0:
                self._fluid_left.add(piece)
                self._parts[orig] = self._parts.get(orig, 1) + 1
            else:  # nothing of it was sent: it leaves the model whole
                del self._fluid_of[piece]
                self._fluid_by_src[src].remove(piece)
                self._fluid.forget(piece)
            self.counts["bytes_fluid"] -= removed
            self.counts["bytes_migrated"] += removed
            lead = max(0.0, kept - sent)
            wire, last, prev = self._wire(removed, msg.step_bytes)
            f = _Flow(msg, ports, wire + lead, wire + lead, self._tail_ns(ports, last, prev), payload=removed,
                      lead_wire=lead)
            self._add_flow(g, key, f, states[key], t)
        self._rerate(g, float(t))

    def _part_done(self, orig: int, fin: int) -> Completion | None:
        """A piece of a message is delivered; the message completes with its last piece."""
        left = self._parts.get(orig)
        if left is not None:
            if left > 1:
                self._parts[orig] = left - 1
                return None
            del self._parts[orig]
        return self._complete(orig, fin)

    # ---------------------------------------------------------- migration
    def _migrate_candidates(self) -> None:
        """After packet-level messages completed: NICs whose packet-level flows now have their
        ports to themselves carry on in closed form (see _migrate)."""
        cands, self._candidates = self._candidates, set()
        if self._qps_per_conn > 1 or self._per_message_qp:
            return
        for src in sorted(cands):
            if self._by_src.get(src) and src not in self._groups:
                self._migrate(src)

    def _migrate(self, src: str) -> None:
        """Move the unsent tails of ``src``'s packet-level messages into closed form.

        Allowed when every port those messages cross carries only them (at packet level) and
        no closed-form flow, no switch queue on them holds more than two packets, and every
        connection's DCQCN state can be followed (no cut due): then, as for any source-bounded
        partition, no queue builds, no mark comes, and the NIC's round robin over its QPs at
        their DCQCN rates is the answer.  ns-3 keeps the work request each message is sending
        (it becomes the message's last there, so the in-flight packets finish exactly); the
        rest (whole NCCL steps) leaves ns-3 and joins the NIC's closed-form partition behind
        that kept request, whose bytes count as the NIC's time first."""
        iids = list(self._by_src[src])
        if any(i in self._migrated for i in iids):
            return
        mine = {("n", i) for i in iids}
        ports_all: set[int] = set()
        for i in iids:
            orig, ports, conn, _ = self._inner_of[i]
            if conn[0] == "m" or self._path(ports)[0]:
                return
            for p in ports:
                for o in self._owners.get(p, ()):
                    if o not in mine:
                        return
            ports_all.update(ports[1:])
        if self._router.num_hosts and ports_all:
            q = self._queue_bytes()
            if any(q[p] > 2 * (self._mtu + self._hdr) for p in ports_all):
                return
        states: dict[Any, list[_Trajectory]] = {}
        for i in iids:
            orig, ports, conn, _ = self._inner_of[i]
            if conn not in states:
                st = self._conn_state(self._msgs[orig], busy_ok=True)
                if st is None:
                    return
                states[conn] = st
        hi = self.inner._host_index
        tails: list[tuple[int, int, float, int, list[int], Any]] = []  # (iid, bytes, lead wire, status, ports, conn)
        blocked: set[Any] = set()
        for i in reversed(iids):  # newest first on each connection
            orig, ports, conn, _ = self._inner_of[i]
            if conn in blocked:
                continue
            m = self._msgs[orig]
            status, kept, removed = (float(x) for x in self.inner._sim.TrimMessage(
                hi[m.src], hi[m.dst], m.connection, i))
            if status == 0:
                blocked.add(conn)  # its older messages are sent further still
                continue
            tails.append((i, int(removed), float(self._wire(int(kept), 0)[0]) if kept else 0.0, int(status), ports,
                          conn))
        if not tails:
            return
        t = self._now
        self.counts["migrations"] += 1
        g = self._groups[src] = _Group(src, self._router.link_rate_gbps[tails[0][4][0]] / 8.0, float(t))
        self.counts["partitions_closed_form"] += 1
        for i, removed, lead, status, ports, conn in reversed(tails):  # posting order
            m = self._msgs[self._inner_of[i][0]]
            self._took_out(i, status, removed)
            self.counts["bytes_migrated"] += removed
            wire, last, prev = self._wire(removed, m.step_bytes)
            f = _Flow(m, ports, wire + lead, wire + lead, self._tail_ns(ports, last, prev), payload=removed,
                      lead_wire=lead)
            self._add_flow(g, conn, f, states[conn], t)
        self._rerate(g, float(t))

    # -------------------------------------------------------- memoization
    def _memo_batch(self, batch: list[Message], t: int) -> list[Message]:
        """Start episodes: replay the congested partitions of this batch that ran before, record
        the new ones.  Returns the messages to start as usual.

        An episode starts with a connected set of messages starting together at ``t`` (two are
        connected when their data paths share a port) in which some port carries messages of two
        NICs (not source-bounded: it goes to ns-3).  It must find every port idle (no flow of any
        kind, so ns-3 runs it on empty queues as it did the first time) and each connection fresh
        (no CNP ever) or settled (SETTLED_ALPHA).  Messages that start later on its ports join it
        (_memo_touch); it ends when all have completed.  Its key is the first batch's (hosts, ECMP
        key, connection, size, step, state) per message; the paths follow from hosts and keys."""
        srcs: dict[int, set] = {}
        for m in batch:
            for p in self._ports(m):
                srcs.setdefault(p, set()).add(m.src)
        comps = _components([m for m in batch if self._ports(m)], self._ports)
        replayed: set[int] = set()
        for comp in comps:
            if len(comp) < 2 or not any(len(srcs[p]) > 1 for m in comp for p in self._ports(m)):
                continue
            ports = {p for m in comp for p in self._ports(m)}
            if any(p in self._owners or p in self._memo_port for p in ports):
                continue
            states = [self._memo_state(m) for m in comp]
            if None in states:
                continue
            rows = sorted((self._desc(m, st), i) for i, (m, st) in enumerate(zip(comp, states)))
            key = tuple(r for r, _ in rows)
            msgs = [comp[i] for _, i in rows]
            rec = _Memo(next(self._seq), key, t, [], ports, entry=self._memo.get(key))
            self._rec[rec.rid] = rec
            for p in ports:
                self._memo_port[p] = rec.rid
            if rec.entry is None:  # record: ns-3 runs it; the counters on its ports are its own
                rec.start_stats = {k: self.inner._port_stat(k) for k in _MEMO_STATS}
                rec.start_closed = dict(self._link_bytes)
                for m, (d, _) in zip(msgs, rows):
                    self._memo_add(rec, m, d, t)
                continue
            self.counts["memo_hits"] += 1
            for m, (d, _) in zip(msgs, rows):
                self._memo_add(rec, m, d, t)
                replayed.add(m.id)
            self._memo_expect(rec)
        return [m for m in batch if m.id not in replayed]

    def _desc(self, m: Message, state: str) -> tuple:
        return (m.src, m.dst, m.flow_key, m.connection, m.size_bytes, m.step_bytes, state)

    def _memo_add(self, rec: _Memo, m: Message, desc: tuple, t: int) -> None:
        """``m`` is the next message of episode ``rec`` (recorded, or replayed at its offset)."""
        idx = len(rec.msgs)
        if rec.entry is None and idx and t > rec.t0:
            self._bring_inner_to(t)
            rec.progress.append((t - rec.t0, [self.message_rx_bytes(x) for x in rec.msgs],
                                 [self._save_cc(x) if self._conn_key(x)[0] != "m" else [] for x in rec.msgs]))
        rec.msgs.append(m)
        rec.script.append((t - rec.t0, desc))
        self._rec_of[m.id] = rec.rid
        for p in self._ports(m):
            if p not in rec.ports:
                rec.ports.add(p)
                self._memo_port[p] = rec.rid
        if rec.entry is not None:
            self._msgs[m.id] = m
            self._bump(m, +1, float(t))
            heapq.heappush(self._events, (rec.t0 + rec.entry.offsets[idx], next(self._seq), "memo", (rec.rid, m.id)))

    def _memo_expect(self, rec: _Memo) -> None:
        """A replay must see its next scripted message start on time; look one ns after."""
        n = len(rec.msgs)
        if n < len(rec.entry.script):
            when = rec.t0 + rec.entry.script[n][0] + 1
            heapq.heappush(self._events, (when, next(self._seq), "memo_expect", (rec.rid, n)))

    def _dcqcn_read(self, msg: Message, busy_ok: bool) -> list[float]:
        """RdmaNic::ConnectionDcqcnState of ``msg``'s connection, with ns-3 brought to now."""
        self._bring_inner_to(self._now)
        hi = self.inner._host_index
        return [float(x) for x in self.inner._sim.ConnectionDcqcnState(hi[msg.src], hi[msg.dst], msg.connection, busy_ok)]

    def _dcqcn_vec(self, msg: Message, busy_ok: bool) -> list[float]:
        v = self._dcqcn_read(msg, busy_ok)
        return v if len(v) == 6 + 7 and v[5] <= 0 else []  # one QP, no byte counter

    def _save_cc(self, msg: Message) -> list[float]:
        """RdmaNic::SaveConnectionCc of ``msg``'s connection (empty: none, or not one DCQCN QP)."""
        hi = self.inner._host_index
        return [float(v) for v in self.inner._sim.SaveConnectionCc(hi[msg.src], hi[msg.dst], msg.connection)]

    def _restore_cc(self, msg: Message, state: list[float]) -> bool:
        hi = self.inner._host_index
        return bool(self.inner._sim.RestoreConnectionCc(hi[msg.src], hi[msg.dst], msg.connection, state))

    def _memo_state(self, msg: Message) -> str | None:
        """'fresh', 'settled', or None (a state a recording would not repeat) of its connection."""
        key = self._conn_key(msg)
        if key[0] == "m" or not self._reacts:
            return "fresh"
        if self._settle.get(key, -1.0) > self._now:
            return None  # a replayed episode left it slower than ns-3 knows
        if key not in self._ns3_conns:
            return "fresh"
        v = self._dcqcn_vec(msg, False)
        if not v:
            return None  # busy or a cut due
        line = v[0]
        rate, target, _ts, _bs, nxt, seen, alpha = v[6:13]
        if not seen:
            return "fresh"
        if rate >= line and target >= line and nxt < 0 and alpha <= SETTLED_ALPHA:
            return "settled"
        return None

    def _settle_ns(self, msg: Message) -> float | None:
        """How long until ``msg``'s connection is settled again, from its DCQCN state in ns-3 now
        (its rate trajectory on the increase timer, alpha's decay by 1 - g per period without a
        CNP); None when a cut check is still due."""
        if self._conn_key(msg)[0] == "m" or not self._reacts:
            return 0.0
        v = self._dcqcn_vec(msg, True)
        if not v:
            return None
        line, ai, hai, fast, interval, _bc = v[:6]
        rate, target, tstage, _bs, nxt, seen, alpha = v[6:13]
        tr = _Trajectory(rate, target, int(tstage), nxt, line, ai, hai, int(fast), interval)
        t_line = float(self._now)
        while not tr.at_line():
            if tr.next_ns < 0:
                return None
            t_line = tr.next_ns
            tr.advance_to(tr.next_ns)
        t_alpha = float(self._now)
        if seen and alpha > SETTLED_ALPHA:  # one period more: the grid's phase
            periods = math.ceil(math.log(SETTLED_ALPHA / alpha) / math.log(1.0 - self._alpha_g)) + 1
            t_alpha += periods * self._alpha_ns
        return max(t_line, t_alpha) - self._now

    def _memo_touch(self, msg: Message, ports: list[int], t: int) -> bool:
        """A message starts on an episode's ports: it joins a recording (with its connection's
        state; one that a recording would not repeat drops it), and a replay if the script has it
        next at this offset (True: replayed, not started), else the replay goes back to ns-3."""
        ck = self._conn_key(msg)
        until = self._settle.get(ck)
        if until is not None:
            if until > t:  # ns-3 starts it at the rate it had before the replayed episode
                self.counts["replay_state_mismatch"] += 1
            else:
                del self._settle[ck]
        rids = sorted({self._memo_port[p] for p in ports if p in self._memo_port})
        if not rids or msg.id in self._rec_of:  # (a first-batch message of a recording: in it)
            return False
        if len(rids) > 1:  # two episodes meet: neither is the answer for its key alone
            for rid in rids:
                self._memo_stop(rid, t)
            return False
        rec = self._rec[rids[0]]
        state = self._memo_state(msg)
        if state is None:
            self._memo_stop(rec.rid, t)
            return False
        desc = self._desc(msg, state)
        if rec.entry is None:
            self._memo_add(rec, msg, desc, t)
            return False
        n = len(rec.msgs)
        if n < len(rec.entry.script) and rec.entry.script[n] == (t - rec.t0, desc):
            self._memo_add(rec, msg, desc, t)
            self._memo_expect(rec)
            return True
        self._memo_stop(rec.rid, t)
        return False

    def _memo_stop(self, rid: int, t: int) -> None:
        rec = self._rec.get(rid)
        if rec is None:
            return
        if rec.entry is None:
            self.counts["memo_invalidated"] += 1
            del self._rec[rid]
            self._memo_release(rec)
        else:
            self._memo_interrupt(rid, t)

    def _memo_release(self, rec: _Memo) -> None:
        for p in rec.ports:
            if self._memo_port.get(p) == rec.rid:
                del self._memo_port[p]
        for m in rec.msgs:
            if self._rec_of.get(m.id) == rec.rid:
                del self._rec_of[m.id]

    def _memo_done(self, rid: int, msg: Message, fin: int) -> None:
        """A message of a recorded or replayed episode completed (from _complete)."""
        rec = self._rec.get(rid)
        if rec is None:
            return
        rec.fin[msg.id] = fin
        ck = self._conn_key(msg)
        last_of_conn = all(m.id in rec.fin for m in rec.msgs if self._conn_key(m) == ck)
        if rec.entry is None and last_of_conn:
            rec.settle[msg.id] = self._settle_ns(msg)
        if rec.entry is not None and last_of_conn:
            s = rec.entry.settle[rec.msgs.index(msg)]
            if s and ck[0] != "m":
                self._settle[ck] = max(self._settle.get(ck, 0.0), fin + s)
        if len(rec.fin) < len(rec.msgs) or (rec.entry is not None and len(rec.msgs) < len(rec.entry.script)):
            return
        del self._rec[rid]
        self._memo_release(rec)
        if rec.entry is None:
            self._memo_store(rec)
            return
        self._add_replayed(rec.entry, 1.0)
        self.counts["messages_replayed"] += len(rec.msgs)
        self.counts["bytes_replayed"] += sum(m.size_bytes for m in rec.msgs)

    def _memo_store(self, rec: _Memo) -> None:
        """A recording ended: keep its script, completion offsets and what ns-3 counted on its ports."""
        if any(v is None for v in rec.settle.values()):
            self.counts["memo_unsettled"] += 1
            return
        now = {k: self.inner._port_stat(k) for k in _MEMO_STATS}
        deltas = {k: {p: now[k][p] - rec.start_stats[k][p] for p in sorted(rec.ports)
                      if now[k][p] != rec.start_stats[k][p]} for k in _MEMO_STATS}
        closed = {p: self._link_bytes.get(p, 0.0) - rec.start_closed.get(p, 0.0) for p in sorted(rec.ports)
                  if self._link_bytes.get(p, 0.0) != rec.start_closed.get(p, 0.0)}
        self._memo[rec.key] = _MemoEntry(list(rec.script), [rec.fin[m.id] - rec.t0 for m in rec.msgs],
                                         list(rec.progress),
                                         [rec.settle.get(m.id) or 0.0 for m in rec.msgs], deltas, closed)
        self.counts["memo_recorded"] += 1

    def _add_replayed(self, e: _MemoEntry, frac: float) -> None:
        for k, per_port in e.port_deltas.items():
            acc = self._replayed.setdefault(k, {})
            for p, v in per_port.items():
                acc[p] = acc.get(p, 0.0) + frac * v
        for p, v in e.closed_bytes.items():
            self._link_bytes[p] = self._link_bytes.get(p, 0.0) + frac * v

    def _memo_interrupt(self, rid: int, t: int) -> None:
        """A replay leaves its script (another message on its ports, or a scripted one that did not
        come): its messages not yet complete go to ns-3 with the bytes they would not have
        delivered by ``t`` at their recorded mean rate, on their connections as ns-3 has them (the
        counters count the elapsed share)."""
        rec = self._rec.pop(rid)
        self._memo_release(rec)
        e = rec.entry
        if self._memo.get(rec.key) is e:
            del self._memo[rec.key]  # this start goes on otherwise now: record it afresh next time
        dt = t - rec.t0
        self._add_replayed(e, min(1.0, dt / (max(e.offsets) or 1)))
        self.counts["memo_interrupts"] += 1
        for i, (m, (start, _), off) in enumerate(zip(rec.msgs, e.script, e.offsets)):
            if m.id in rec.fin:
                self.counts["messages_replayed"] += 1
                self.counts["bytes_replayed"] += m.size_bytes
                continue
            # delivered bytes: linear between the recorded points around dt (exact at a joiner's start)
            pts = [(start, 0)] + [(o, b[i]) for o, b, _ in e.progress if i < len(b)] + [(off, m.size_bytes)]
            lo = max((p for p in pts if p[0] <= dt), default=pts[0])
            hi = min((p for p in pts if p[0] >= dt), default=pts[-1])
            est = lo[1] if hi[0] == lo[0] else lo[1] + (hi[1] - lo[1]) * (dt - lo[0]) / (hi[0] - lo[0])
            done = max(0, min(int(est) // self._mtu * self._mtu, m.size_bytes - 1))
            self.counts["bytes_replayed"] += done
            self.counts["messages_packet_level"] += 1
            self._post_inner(m.id, m, m.size_bytes - done, t, self._ports(m), handed_back=True)
            # its connection as the recording had it at the last joiner's start before dt (exact when
            # the script was left there); a connection ns-3 has not met yet starts fresh
            cc = [c[i] for o, _, c in e.progress if o <= dt and i < len(c) and c[i]]
            if cc and self._restore_cc(m, cc[-1]):
                self.counts["memo_states_restored"] += 1

    # ------------------------------------------------------ fast-forward
    def _ff_check(self, t: int) -> None:
        """Sample the delivery of every packet-level message; fast-forward the partitions whose
        flows all delivered at a steady rate over the last two windows.

        A partition is a connected set of packet-level messages (two are connected when they
        cross a common egress port).  It qualifies when each flow's delivery rates over the last
        two windows differ by at most ``theta`` of their mean, each connection has one message in
        ns-3, and each flow has at least four windows of bytes left (else the saving is nil).
        Then every flow's unsent steps leave ns-3 (RdmaNic::TrimMessage, as for migration) and are
        delivered at the last window's rate (_Steady) until the first flow ends or a message
        starts on one of its ports; what is left then goes back to ns-3 (_ff_end)."""
        self._ff_next = None
        active = [i for i in self._inner_of if i not in self._migrated]
        if not active:
            return
        self._ff_next = t + math.ceil(self._ff_win_ns)
        self._bring_inner_to(t)
        hi = self.inner._host_index
        sim = self.inner._sim
        for i in active:
            m = self._msgs[self._inner_of[i][0]]
            h = self._ff_hist.get(i)
            if h is None:
                h = self._ff_hist[i] = deque(maxlen=3)
            h.append((t, int(sim.MessageRxBytes(hi[m.dst], i))))
        if self._reacts:
            self._ff_marks.append((t, self.inner._port_stat("ecn_marks")))
        comps = _components(active, lambda i: self._inner_of[i][1])  # partitions of packet-level messages
        for comp in comps:
            rates = self._ff_steady(comp)
            if rates is not None:
                self._ff_start(comp, rates, t)

    def _ff_steady(self, comp: list[int]) -> dict[int, float] | None:
        """Each flow's delivery rate (bytes/ns) if the partition is steady, else None."""
        conns = set()
        rates = {}
        for i in comp:
            orig, ports, conn, _ = self._inner_of[i]
            if conn[0] == "m" or conn in conns:
                return None
            conns.add(conn)
            for p in ports:
                if any(o[0] != "n" for o in self._owners.get(p, ())):
                    return None
            h = self._ff_hist[i]
            if len(h) < 3:
                return None
            (t0, b0), (t1, b1), (t2, b2) = h
            r1, r2 = (b1 - b0) / (t1 - t0), (b2 - b1) / (t2 - t1)
            if r1 <= 0 or r2 <= 0 or abs(r1 - r2) > self._theta * (r1 + r2) / 2:
                return None
            if self.inner._size[i] - b2 < 4 * r2 * self._ff_win_ns:
                return None
            rates[i] = r2
        return rates

    def _ff_start(self, comp: list[int], rates: dict[int, float], t: int) -> None:
        hi = self.inner._host_index
        marks_rate = 0.0
        if self._reacts and len(self._ff_marks) >= 2:
            (ta, va), (tb, vb) = self._ff_marks[0], self._ff_marks[-1]  # the two windows judged steady
            ports = {p for i in comp for p in self._inner_of[i][1]}
            marks_rate = sum(vb[p] - va[p] for p in ports) / max(1, tb - ta)
        sid = next(self._seq)
        st = _Steady(sid, float(t), [], marks_rate)
        for i in comp:  # a recording must be ns-3's own answer
            rid = self._rec_of.get(self._inner_of[i][0])
            if rid is not None and rid in self._rec and self._rec[rid].entry is None:
                self._memo_stop(rid, t)
        for i in comp:
            orig, ports, _, _ = self._inner_of[i]
            m = self._msgs[orig]
            delivered = self._ff_hist[i][-1][1]
            size = self.inner._size[i]
            status, _, removed = (int(x) for x in self.inner._sim.TrimMessage(hi[m.src], hi[m.dst],
                                                                             m.connection, i))
            if status == 0:
                continue  # its last step is being sent: it stays at packet level, beside the others
            cc = self._save_cc(m)
            self._took_out(i, status, removed)
            lead = 0 if status == 2 else max(0, size - removed - delivered)
            st.flows.append(_FFlow(i, orig, ports, lead, removed, rates[i], cc))
            for p in ports:
                own = self._owners.setdefault(p, {})
                own[("s", sid)] = own.get(("s", sid), 0) + 1
        if not st.flows:
            return
        self._steady[sid] = st
        self.counts["fast_forwards"] += 1
        heapq.heappush(self._events, (st.end_ns(), next(self._seq), "ff", sid))

    def _ff_end(self, sid: int, t: int) -> None:
        """End a fast-forward at ``t``: flows whose bytes were all delivered complete, the rest
        go back to ns-3 on their connections (which keep their QPs)."""
        st = self._steady.pop(sid)
        dt = max(0.0, t - st.t0)
        self._extrap_marks += st.marks_per_ns * dt
        for f in st.flows:
            self._release(("s", sid), f.ports)
            done_at = st.t0 + (f.lead + f.payload) / f.rate
            m = self._msgs[f.orig]
            if done_at <= t + 1e-6:
                self.counts["bytes_fast_forwarded"] += f.payload
                self._count_links(f.ports, self._wire(f.payload, m.step_bytes)[0])
                heapq.heappush(self._events, (done_at, next(self._seq), "done", f.orig))
                continue
            sent = int(max(0.0, f.rate * dt - f.lead) // self._mtu) * self._mtu
            sent = min(sent, f.payload - 1)
            self.counts["bytes_fast_forwarded"] += sent
            if sent > 0:  # (its link bytes: fast-forwarded bytes were on no link's count before)
                self._count_links(f.ports, self._wire(sent, m.step_bytes)[0])
            self._post_inner(f.orig, m, f.payload - sent, t, f.ports, handed_back=True)
            if f.cc:
                self._restore_cc(m, f.cc)

    def _took_out(self, i: int, status: int, removed: int) -> None:
        """Bookkeeping after RdmaNic::TrimMessage took ``removed`` bytes of inner message ``i`` out of
        ns-3 (status 1: ns-3 finishes the kept request, one more piece of the message; status 2: nothing
        of it was sent, it leaves ns-3 whole).  Its ports are no longer held at packet level."""
        orig, ports, _, _ = self._inner_of[i]
        self._release(("n", i), ports)
        if status == 2:
            del self._inner_of[i]
            self._by_src[self._msgs[orig].src].remove(i)
            self.inner.forget(i)
            self._prefix.pop(orig, None)
            self._ff_hist.pop(i, None)
        else:
            self._migrated.add(i)
            self._parts[orig] = self._parts.get(orig, 1) + 1
        self.counts["bytes_packet_level"] -= removed

    def _queue_bytes(self) -> list[float]:
        if self._queue_at != self._now:
            self._queue_vec = self.inner._port_stat("queue_bytes")
            self._queue_at = self._now
        return self._queue_vec

    def _complete(self, mid: int, fin: int) -> Completion:
        msg = self._msgs.pop(mid)
        self._bump(msg, -1, float(fin))
        self._pending.discard(mid)
        self._fct[mid] = (self._start.pop(mid), fin)
        size = self._size.pop(mid)
        self._bytes_delivered += size
        rid = self._rec_of.get(mid)
        if rid is not None:
            self._memo_done(rid, msg, fin)
        return Completion(mid, fin)

    def message_rx_bytes(self, msg: Message) -> int:
        """Bytes of an in-progress message delivered so far (packet level: from ns-3, which needs
        track_message_bytes; closed form: the packets its NIC has sent, a pipeline early; the fluid
        model: its whole packets past the receiver)."""
        if msg.id in self._fct:
            return msg.size_bytes
        prefix = self._prefix.get(msg.id)
        if prefix is not None:
            return prefix[1] + self.inner.message_rx_bytes(
                Message(prefix[0], msg.src, msg.dst, msg.size_bytes - prefix[1], 0))
        rx, found = 0, False
        if self._fluid is not None:
            for piece in self._fluid_by_src.get(msg.src, ()):
                orig, _, _, size = self._fluid_of[piece]
                if orig == msg.id:  # (what came before the piece went closed form: sent, a pipeline early)
                    rx, found = msg.size_bytes - size + self._fluid.delivered_payload(piece), True
                    break
        g = self._groups.get(msg.src)
        if g is not None:
            g.advance_to(float(self._now))
            for q in g.qps.values():
                for f in q:
                    if f.msg.id == msg.id:  # (after a fluid piece: the tail it handed to closed form)
                        return rx + self._payload_sent(f)
        return rx if found else 0

    # ------------------------------------------------------------ statistics
    def _queue_means(self, names: list[str]) -> dict:
        """mean_queue_bytes, hot_ports and queue_samples over the whole run, as ``off`` reports them: each port's
        queue averaged over the time a message was in flight (ns-3's samples and the fluid model's integral; a
        closed-form flow queues nothing), the hottest ports' samples from both.  (ns-3's own mean is over the
        time it had packets, a part of the run here.)"""
        from netbackend.ns3 import hot_port_samples

        sim, interval = self.inner._sim, self.config.queue_sample_interval_ns
        if self._busy_ns <= 0 or interval <= 0:
            return {}
        # (a sample stands for its interval: the sum of ns-3's samples x interval is its queues' integral)
        integral = {names[i]: v * interval for i, v in enumerate(sim.PortStat("queue_sample_sum")) if v}
        if self._fluid is not None:
            _add_by_name(integral, self._fluid.queue_integral(), names)
        mean_q = {p: v / self._busy_ns for p, v in integral.items() if v > 0}
        hot, samples = hot_port_samples(mean_q, names, sim.QueueSamples())
        if self._fluid is not None:
            index = {n: i for i, n in enumerate(names)}
            samples += [(t, names[p], int(round(q))) for t, p, q in self._fluid.queue_samples([index[h] for h in hot])]
        samples.sort()
        return {"mean_queue_bytes": mean_q, "hot_ports": hot, "queue_samples": samples}

    def stats(self) -> NetStats:
        st = self.inner.stats()
        link_bytes = dict(st.link_bytes)
        names = self.inner._port_links
        _add_by_name(link_bytes, self._link_bytes, names)
        extra = dict(st.extra)
        rp = {k: sum(v.values()) for k, v in self._replayed.items()}
        _add_by_name(link_bytes, self._replayed.get("tx_bytes", {}), names)
        port_names = [str(n) for n in self.inner._sim.PortNames()] if rp or self._fluid is not None else []
        if rp:
            marks = dict(extra["ecn_marks_per_port"])
            _add_by_name(marks, self._replayed.get("ecn_marks", {}), port_names)
            cnp_per_mark = extra["cnps_sent"] / extra["ecn_marks"] if extra["ecn_marks"] else 1.0
            extra.update(ecn_marks_per_port=marks, ecn_marks=sum(marks.values()),
                         cnps_sent=extra["cnps_sent"] + int(round(rp.get("ecn_marks", 0.0) * cnp_per_mark)),
                         pfc_paused_ns_total=extra["pfc_paused_ns_total"] + int(round(rp.get("paused_ns", 0.0))))
        if self._fluid is not None:
            _add_by_name(link_bytes, self._fluid.link_tx_bytes(), names)
            fc = self._fluid.counters()
            # per port too (network_stats.csv, the plots): each port's expected count rounded, the total their sum
            marks = dict(extra["ecn_marks_per_port"])
            _add_by_name(marks, self._fluid.port_marks(), port_names, skip_zero=True)
            # the deepest queue per port, packet level's or the model's
            max_q = dict(extra["max_queue_bytes"])
            for p, v in self._fluid.port_max_queue().items():
                max_q[port_names[p]] = max(max_q.get(port_names[p], 0), int(round(v)))
            extra.update(ecn_marks_per_port=marks, ecn_marks=sum(marks.values()), max_queue_bytes=max_q,
                         cnps_sent=extra["cnps_sent"] + fc["cnps"],
                         cnps_received=extra["cnps_received"] + fc["cnps"])
        extra.update(self._queue_means(port_names or [str(n) for n in self.inner._sim.PortNames()]))
        c = dict(self.counts)
        if self._fluid is not None:
            c["fluid_work"] = self._fluid.work()
            c["fluid_counters"] = dict(fc, how="ECN marks: the model's expected count (RED probability x packets "
                                                "per step); CNPs: those it sampled; both included in ecn_marks and "
                                                "cnps_sent; no PFC in the model")
            c["fluid_pfc"] = self._fluid.pfc_check()
        total = (c["bytes_closed_form"] + c["bytes_packet_level"] + c["bytes_fast_forwarded"] + c["bytes_replayed"]
                 + c["bytes_fluid"])
        c["closed_form_share"] = c["bytes_closed_form"] / total if total else 0.0
        c["fast_forwarded_share"] = c["bytes_fast_forwarded"] / total if total else 0.0
        c["replayed_share"] = c["bytes_replayed"] / total if total else 0.0
        c["fluid_share"] = c["bytes_fluid"] / total if total else 0.0
        c["accelerated_share"] = (c["closed_form_share"] + c["fast_forwarded_share"] + c["replayed_share"]
                                  + c["fluid_share"])
        c["memo_entries"] = len(self._memo)
        c["replayed_counters"] = ({"ecn_marks": int(round(rp.get("ecn_marks", 0.0))),
                                   "pfc_paused_ns": int(round(rp.get("paused_ns", 0.0))),
                                   "packet_hops": int(round(rp.get("tx_packets", 0.0))),
                                   "how": "the port counters ns-3 gave the recorded episode, added once per "
                                          "replay (a share for an interrupted one); CNPs at the run's CNPs per "
                                          "mark; included in ecn_marks, cnps_sent, pfc_paused_ns_total and "
                                          "link bytes, not in packet_hops"}
                                  if self._memo_on else {})
        c["connections_at_packet_level"] = len(self._dirty)
        c["fallback_packet_level"] = total > 0 and c["accelerated_share"] == 0
        c["note"] = ("no partition qualified for closed form: plain packet level" if c["fallback_packet_level"]
                     else "closed-form flows build no queue: no ECN/CNP/PFC counters extrapolated" + (
                         "; ECN marks of fast-forwarded intervals extrapolated (extrapolated_counters)"
                         if self._ff_on else "") + (
                         f"; fluid collisions: a PFC PAUSE could have fired at {len(c['fluid_pfc']['possible_at'])} "
                         "switches, which the fluid model does not simulate (fluid_pfc; collisions: packet does)"
                         if self._fluid is not None and c["fluid_pfc"]["possible_at"] else ""))
        c["extrapolated_counters"] = ({"ecn_marks": int(round(self._extrap_marks)),
                                       "how": "marks per ns on a partition's ports over the window before "
                                              "each fast-forward, times its length; not in ns-3's port counters"}
                                      if self._ff_on else {})
        c["wrapper_wall_s"] = self._wall
        extra["acceleration"] = c
        return NetStats(messages=len(self._fct), bytes_delivered=self._bytes_delivered, fct_ns=dict(self._fct),
                        link_bytes=link_bytes, extra=extra)

    def close(self) -> None:
        self.inner.close()
