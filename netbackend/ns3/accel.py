"""Accelerated packet level: source-bounded partitions in closed form, the rest in ns-3.

``network.acceleration.mode: auto`` wraps the ns-3 backend (same NetworkBackend
interface) and simulates fewer packets where the packet-level answer is known:

* **Partitions.** Active flows are grouped by the egress ports they use (paths
  from :class:`netbackend.routing.Router`, the same ECMP choice the ns-3 backend
  makes).  A *source-bounded* partition is one whose flows all leave the same
  NIC, use ports no packet-level flow uses, and cross no port slower than that NIC;
  several such partitions may share a port while the sum of their rates fits it
  (partitions.py: Partitions.fits; a rate that rises past it hands them back, Partitions.check_capacity).
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
Packet-level tails migrate back (packet.py: PacketSide.migrate): once a NIC's packet-level messages have their ports to
themselves, ns-3 keeps the work request each is sending and the remaining steps continue in closed
form.  Steady-state fast-forward of congested partitions (``fast_forward``, off: fastforward.py) is
experimental: measured outside issue 12's targets (docs/packet-level-acceleration.md), because the rates
of a short window are not DCQCN's long-run ones and ns-3's idle QPs recover their rate while fast-forwarded.

Memoization (``memoize``, memo.py): training repeats congested episodes (the same pipeline
sends collide on the same hashed ports every micro-batch).  An episode starts when messages of
different NICs start together on ports that are idle, on connections that are fresh or settled;
messages that later start on its ports join its script.  The first time, ns-3 runs it and the
wrapper records the script, each completion offset, the port counters and, at each joiner's
start, every message's delivered bytes and DCQCN state.  The next episode with the same first
batch is replayed from the record as long as the same joiners come at the same offsets; when
they do not, its messages go back to ns-3 with the bytes and DCQCN state the record had there
(RdmaNic::RestoreConnectionCc; queues start empty).  Two starts with the same key differ only in
what packet level itself leaves to chance (random ECN marking) and in alpha below SETTLED_ALPHA.

Layout.  :class:`AcceleratedNs3Backend` (this module) keeps the clock, the starts and the local events
and gives each concern to one collaborator under netbackend/ns3/: closed_form.py (the model: flows,
DCQCN trajectories, water-filling, a partition), paths.py (routes, wire bytes, tails), ports.py (who
holds each port), partitions.py (joining, rates, departures, capacity), handback.py (hand-backs),
packet.py (messages in ns-3, their connections' state, migration back), islands.py (the fluid
model's messages), memo.py (memoization), fastforward.py (fast-forward) and accel_stats.py (the
statistics).  ns-3 is reached only through Ns3Backend's public interface (netbackend/ns3/__init__.py,
"the accelerator's interface"); the backend is chosen by ``create_ns3_backend`` (the registry's
``create_backend("ns3", ...)``), never by Ns3Backend itself.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from typing import Any

from hscommon.errors import UserError
from netbackend.base import Completion, Message, NetStats, NetworkBackend
from netbackend.config import NetworkConfig
from netbackend.ns3.accel_stats import acceleration_counts, merged_counters, queue_means
from netbackend.ns3.fastforward import FastForward
from netbackend.ns3.handback import HandBacks
from netbackend.ns3.islands import FluidIslands
from netbackend.ns3.memo import Memo
from netbackend.ns3.packet import PacketSide
from netbackend.ns3.partitions import Partitions
from netbackend.ns3.paths import PathShapes
from netbackend.ns3.ports import PortLedger
from netbackend.routing import Router

ACCEL_CCS = ("dcqcn", "dcqcn_paper", "none")
"""Congestion controls whose QP starts at line rate and changes only on CNPs (rdma-nic.h), so
a flow that never queues keeps line rate.  HPCC paces a lone flow at eta of line rate with a
window, TIMELY reacts to RTT, DCTCP starts from a window: not closed form here."""


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


class AcceleratedNs3Backend(NetworkBackend):
    """ns-3 backend with closed-form source-bounded partitions (``acceleration.mode: auto``): the clock,
    the starts and the local events (departures, deliveries, replays, fast-forward ends), with each
    concern given to a collaborator (the module's "Layout")."""

    name = "ns3"

    def __init__(self, topology, config: NetworkConfig | None = None, seed: int = 0, **kw):
        from netbackend.ns3 import Ns3Backend

        config = config or NetworkConfig(backend="ns3")
        super().__init__(topology, config, seed)
        check_acceleration(config)
        inner_cfg = config.model_copy(update={"acceleration": config.acceleration.model_copy(
            update={"mode": "off"})})
        acc = config.acceleration
        if acc.fast_forward or (acc.memoize and config.transport.qps_per_connection == 1):
            kw = dict(kw, track_message_bytes=True)  # delivery rates / progress of packet-level flows
        self.inner = Ns3Backend(topology, inner_cfg, seed, **kw)
        self.paths = PathShapes(Router(topology, mode=config.ecmp, seed=seed), config)
        self.ledger = PortLedger()
        self.seq = itertools.count()
        """Tie-breaker of the event heaps and the partitions' versions (one sequence for all)."""
        self._now = 0
        self.starts: list[tuple[int, int, Message]] = []  # (start_ns, seq, msg)
        self.events: list[tuple[float, int, str, Any]] = []
        """(time, seq, kind, what): "dep" (src, version), "done" msg id, "ff" steady id, "memo" (rid, msg id),
        "memo_expect" (rid, n)."""
        self.msgs: dict[int, Message] = {}
        """Started messages, until they complete."""
        self.pieces: dict[int, int] = {}
        """Message id -> pieces still to deliver, for a message split between ns-3 and closed form."""
        self._inflight: dict[int, Message] = {}
        """Sent messages, until they complete."""
        self._fct: dict[int, tuple[int, int]] = {}
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
        self.parts = Partitions(self)
        self.hand = HandBacks(self)
        self.packet = PacketSide(self)
        self.islands = FluidIslands(self, topology, seed)
        self.memo = Memo(self)
        self.ff = FastForward(self)

    @property
    def reacts(self) -> bool:
        """Whether QPs react to marks (a CC other than none)."""
        return self.config.cc != "none"

    # ------------------------------------------------------------ interface
    @property
    def now_ns(self) -> int:
        return self._now

    def pending(self) -> int:
        return len(self._inflight)

    def send(self, msg: Message) -> None:
        t0 = time.perf_counter()
        if msg.start_ns < self._now:
            raise UserError(f"message starts before the backend's current time {self._now} ns",
                            field="message.start_ns", value=msg.start_ns)
        self.inner.check_ends(msg)
        if msg.size_bytes <= 0:
            raise UserError("message size must be > 0", field="message.size_bytes", value=msg.size_bytes)
        if msg.id in self._inflight or msg.id in self._fct:
            raise UserError("message id already used", field="message.id", value=msg.id)
        self._inflight[msg.id] = msg
        heapq.heappush(self.starts, (msg.start_ns, next(self.seq), msg))
        self._wall += time.perf_counter() - t0

    def advance(self, until_ns: int | None = None) -> list[Completion]:
        t0 = time.perf_counter()
        busy, now0 = bool(self._inflight), self._now
        try:
            return self._advance(until_ns)
        finally:
            self._wall += time.perf_counter() - t0
            if busy:
                self._busy_ns += max(0, self._now - now0)

    def _advance(self, until_ns: int | None) -> list[Completion]:
        if until_ns is None and not self._inflight:
            return []
        if until_ns is not None and until_ns < self._now:
            until_ns = self._now
        while True:
            # the earliest of: the next start, the next local event, the precheck, the steady check
            first = self.starts[0][0] if self.starts else None
            if self.events and (first is None or self.events[0][0] < first):
                first = self.events[0][0]
            pre = self.hand.precheck_time()
            if pre is not None and (first is None or pre < first):
                first = pre
            if self.ff.on:
                if self.ff.next is None and len(self.packet.inner_of) > len(self.packet.migrated):
                    self.ff.next = self._now + math.ceil(self.ff.win_ns)
                if self.ff.next is not None:
                    ff = max(self.ff.next, self._now)
                    first = ff if first is None or ff < first else first
            t_local = max(self._now, math.ceil(first)) if first is not None else None  # whole ns
            limit = t_local if until_ns is None else (until_ns if t_local is None else min(t_local, until_ns))
            t_fluid = self.islands.side.peek(limit) if self.islands.side is not None and self.islands.side.pending() else None
            if t_fluid is not None:
                t_fluid = max(self._now, math.ceil(t_fluid))
                limit = t_fluid if limit is None else min(limit, t_fluid)
            if self.inner.pending():
                done = self.inner.advance(limit)
                if done:
                    tc = done[0].finish_ns
                    self._now = max(self._now, tc)
                    out = [c for c in (self.packet.done(c.id, c.finish_ns) for c in done) if c is not None]
                    if self.packet.candidates:
                        self.packet.migrate_candidates()
                    out += self._pop_local_done(tc)
                    if out:
                        return out
                    continue
            if t_fluid is not None:  # ns-3 had nothing before it (limit <= t_fluid)
                self._now = max(self._now, t_fluid)
                out = [self.islands.done(mid, max(self._now, math.ceil(fin))) for mid, fin in self.islands.side.pop()]
                if self.islands.cands:
                    cands, self.islands.cands = self.islands.cands, set()
                    for src in sorted(cands):
                        self.islands.migrate(src)
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
                self.hand.precheck(limit)
            if self.ff.next is not None and self.ff.next <= limit:
                self.ff.check(limit)
            batch = []
            while self.starts and self.starts[0][0] <= limit:
                batch.append(heapq.heappop(self.starts)[2])
            if batch and self.memo.on:
                batch = self.memo.batch(batch, limit)
            if batch:
                self._start_batch(batch, limit)
            if until_ns is not None and limit >= until_ns and not (self.events and self.events[0][0] <= limit):
                return []

    def _pop_local_done(self, t: int) -> list[Completion]:
        """Handle group departures and closed-form deliveries up to ``t``; return those at ``t``."""
        out: list[Completion] = []
        while self.events and self.events[0][0] <= t:
            when, _, kind, what = heapq.heappop(self.events)
            if kind == "dep":
                src, version = what
                g = self.parts.groups.get(src)
                if g is not None and g.version == version:
                    self.parts.departures(g, when)
            elif kind == "ff":
                if what in self.ff.steady:
                    self.ff.end(what, math.ceil(when))
            elif kind == "memo":  # a replayed message's recorded completion
                rid, mid = what
                m = self.memo.rec.get(rid)
                if m is not None and m.entry is not None and mid not in m.fin:
                    out.append(self.complete(mid, t))
            elif kind == "memo_expect":  # the script's next message did not come on time
                rid, n = what
                m = self.memo.rec.get(rid)
                if m is not None and len(m.msgs) <= n:
                    self.memo.interrupt(rid, t)
            else:  # "done": a closed-form message delivered (reported at the whole ns t >= when)
                c = self.part_done(what, t)
                if c is not None:
                    out.append(c)
        return out

    def bring_inner_to(self, t: int) -> None:
        if self.inner.now_ns < t:
            # bring an idle ns-3 up to now: its watchdog would read the gap as a stall
            assert not self.inner.advance(t), "ns-3 completion left behind"

    def _start_message(self, msg: Message, t: int) -> None:
        self.msgs[msg.id] = msg
        self.parts.bump(msg, +1, float(t))
        ports = self.paths.ports(msg)
        if (self.memo.port or self.memo.settle) and self.memo.touch(msg, ports, t):
            return  # a replayed episode's scripted message
        if self.ff.steady:
            for sid in sorted({o[1] for p in ports for o in self.ledger.owners.get(p, ()) if o[0] == "s"}):
                self.ff.end(sid, t)
        why = self.parts.why_not(msg, ports)
        if why is None:
            self.parts.join(msg, ports, t)
            return
        self.parts.states.pop(msg.id, None)
        nq = self.counts["not_qualified"]
        nq[why] = nq.get(why, 0) + 1
        for src in sorted(self.parts.conflicting(msg, ports)):
            self.hand.hand_back(src, t)
        self.counts[self.post(msg.id, msg, msg.size_bytes, t, ports)] += 1

    def _start_batch(self, batch: list[Message], t: int) -> None:
        """Start the messages whose start time is ``t``; then check the ports of partitions whose rate
        changed meanwhile (Partitions.rerate defers that while a batch joins)."""
        parts = self.parts
        parts.batch = {}
        for msg in batch:  # a NIC's QPs starting together share it from the first packet
            keys = parts.batch.setdefault(msg.src, [])
            if self.paths.conn_key(msg) not in keys:
                keys.append(self.paths.conn_key(msg))
        for msg in batch:
            self._start_message(msg, t)
        parts.batch = {}
        recheck, parts.recheck = parts.recheck, set()
        for src in sorted(recheck):
            if src in parts.groups:
                parts.check_capacity(parts.shared_ports(parts.groups[src]))

    def post(self, orig: int, msg: Message, size: int, t: int, ports: list[int]) -> str:
        """Give ``size`` bytes of ``msg`` (message ``orig``) to the fluid model, or else to ns-3 (stopping
        a recording whose ports it would cross); returns the counter to bump."""
        if self.islands.side is not None and ports:
            return self.islands.post(orig, msg, size, t, ports)
        memo = self.memo
        if memo.port and orig not in memo.rec_of:  # e.g. a hand-back beside an episode's joiner
            for rid in sorted({memo.port[p] for p in ports if p in memo.port}):
                memo.stop(rid, t)
        return self.packet.post(orig, msg, size, t, ports)

    def part_done(self, orig: int, fin: int) -> Completion | None:
        """A piece of a message is delivered; the message completes with its last piece."""
        left = self.pieces.get(orig)
        if left is not None:
            if left > 1:
                self.pieces[orig] = left - 1
                return None
            del self.pieces[orig]
        return self.complete(orig, fin)

    def complete(self, mid: int, fin: int) -> Completion:
        msg = self.msgs.pop(mid)
        self.parts.bump(msg, -1, float(fin))
        sent = self._inflight.pop(mid)
        self._fct[mid] = (sent.start_ns, fin)
        self._bytes_delivered += sent.size_bytes
        rid = self.memo.rec_of.get(mid)
        if rid is not None:
            self.memo.done(rid, msg, fin)
        return Completion(mid, fin)

    def message_rx_bytes(self, msg: Message) -> int:
        """Bytes of an in-progress message delivered so far (packet level: from ns-3, which needs
        track_message_bytes; closed form: the packets its NIC has sent, a pipeline early; the fluid
        model: its whole packets past the receiver)."""
        if msg.id in self._fct:
            return msg.size_bytes
        prefix = self.packet.prefix.get(msg.id)
        if prefix is not None:
            return prefix[1] + self.inner.message_rx_bytes(
                Message(prefix[0], msg.src, msg.dst, msg.size_bytes - prefix[1], 0))
        rx, found = self.islands.rx_bytes(msg) if self.islands.side is not None else (0, False)
        g = self.parts.groups.get(msg.src)
        if g is not None:
            g.advance_to(float(self._now))
            for q in g.qps.values():
                for f in q:
                    if f.msg.id == msg.id:  # (after a fluid piece: the tail it handed to closed form)
                        return rx + self.paths.payload_sent(f)
        return rx if found else 0

    # ------------------------------------------------------------ statistics
    def stats(self) -> NetStats:
        link_bytes, extra, port_names, fc = merged_counters(self)
        extra.update(queue_means(self, self._busy_ns, port_names or self.inner.port_names()))
        c = acceleration_counts(self, fc)
        c["wrapper_wall_s"] = self._wall
        extra["acceleration"] = c
        return NetStats(messages=len(self._fct), bytes_delivered=self._bytes_delivered, fct_ns=dict(self._fct),
                        link_bytes=link_bytes, extra=extra)

    def close(self) -> None:
        self.inner.close()
