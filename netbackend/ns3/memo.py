"""Memoization of the accelerated backend (``accel.py``, ``acceleration.memoize``): congested episodes
that repeat (training's pipeline sends colliding on the same hashed ports every micro-batch) are recorded
the first time ns-3 runs them and replayed from the record after (:class:`Memo`)."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from netbackend.base import Message
from netbackend.config import resolved_dcqcn
from netbackend.ns3.closed_form import Trajectory, components

if TYPE_CHECKING:
    from netbackend.ns3.accel import AcceleratedNs3Backend

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


class Memo:
    """Recorded episodes (``entries``, by key) and the episodes being recorded or replayed (``rec``).

    Memoization (``memoize``, :meth:`batch`): an episode starts when messages of different NICs start
    together on ports that are idle, on connections that are fresh or settled; messages that later start
    on its ports join its script.  The first time, ns-3 runs it and the record keeps the script, each
    completion offset, the port counters and, at each joiner's start, every message's delivered bytes and
    DCQCN state.  The next episode with the same first batch is replayed from the record as long as the
    same joiners come at the same offsets; when they do not, its messages go back to ns-3 with the bytes
    and DCQCN state the record had there (RdmaNic::RestoreConnectionCc; queues start empty).  Two starts
    with the same key differ only in what packet level itself leaves to chance (random ECN marking) and in
    alpha below SETTLED_ALPHA."""

    def __init__(self, backend: AcceleratedNs3Backend):
        self.b = backend
        config = backend.config
        self.on = config.acceleration.memoize and config.transport.qps_per_connection == 1
        self.entries: dict[tuple, _MemoEntry] = {}
        self.rec: dict[int, _Memo] = {}
        """Partitions being recorded (ns-3 runs them) or replayed, by id."""
        self.port: dict[int, int] = {}
        """Port -> the recorded or replayed partition that holds it."""
        self.rec_of: dict[int, int] = {}
        """Message id -> the partition it belongs to, until it completes."""
        self.settle: dict[Any, float] = {}
        """Connection -> when a replayed episode would have left it settled again."""
        self.replayed: dict[str, dict[int, float]] = {}
        """Port statistic -> port -> what replayed episodes added (not in ns-3's counters)."""
        if self.on:
            dq = resolved_dcqcn(config)
            self._alpha_g = float(dq["g"])
            self._alpha_ns = float(dq["alpha_update_interval_ns"])

    def batch(self, batch: list[Message], t: int) -> list[Message]:
        """Start episodes: replay the congested partitions of this batch that ran before, record
        the new ones.  Returns the messages to start as usual.

        An episode starts with a connected set of messages starting together at ``t`` (two are
        connected when their data paths share a port) in which some port carries messages of two
        NICs (not source-bounded: it goes to ns-3).  It must find every port idle (no flow of any
        kind, so ns-3 runs it on empty queues as it did the first time) and each connection fresh
        (no CNP ever) or settled (SETTLED_ALPHA).  Messages that start later on its ports join it
        (touch); it ends when all have completed.  Its key is the first batch's (hosts, ECMP
        key, connection, size, step, state) per message; the paths follow from hosts and keys."""
        srcs: dict[int, set] = {}
        for m in batch:
            for p in self.b.paths.ports(m):
                srcs.setdefault(p, set()).add(m.src)
        comps = components([m for m in batch if self.b.paths.ports(m)], self.b.paths.ports)
        replayed: set[int] = set()
        for comp in comps:
            if len(comp) < 2 or not any(len(srcs[p]) > 1 for m in comp for p in self.b.paths.ports(m)):
                continue
            ports = {p for m in comp for p in self.b.paths.ports(m)}
            if any(p in self.b.ledger.owners or p in self.port for p in ports):
                continue
            states = [self.state(m) for m in comp]
            if None in states:
                continue
            rows = sorted((self.desc(m, st), i) for i, (m, st) in enumerate(zip(comp, states)))
            key = tuple(r for r, _ in rows)
            msgs = [comp[i] for _, i in rows]
            rec = _Memo(next(self.b.seq), key, t, [], ports, entry=self.entries.get(key))
            self.rec[rec.rid] = rec
            for p in ports:
                self.port[p] = rec.rid
            if rec.entry is None:  # record: ns-3 runs it; the counters on its ports are its own
                rec.start_stats = {k: self.b.inner.port_stat(k) for k in _MEMO_STATS}
                rec.start_closed = dict(self.b.ledger.link_bytes)
                for m, (d, _) in zip(msgs, rows):
                    self.add(rec, m, d, t)
                continue
            self.b.counts["memo_hits"] += 1
            for m, (d, _) in zip(msgs, rows):
                self.add(rec, m, d, t)
                replayed.add(m.id)
            self.expect(rec)
        return [m for m in batch if m.id not in replayed]

    def desc(self, m: Message, state: str) -> tuple:
        return (m.src, m.dst, m.flow_key, m.connection, m.size_bytes, m.step_bytes, state)

    def add(self, rec: _Memo, m: Message, desc: tuple, t: int) -> None:
        """``m`` is the next message of episode ``rec`` (recorded, or replayed at its offset)."""
        idx = len(rec.msgs)
        if rec.entry is None and idx and t > rec.t0:
            self.b.bring_inner_to(t)
            rec.progress.append((t - rec.t0, [self.b.message_rx_bytes(x) for x in rec.msgs],
                                 [self.b.packet.save_cc(x) if self.b.paths.conn_key(x)[0] != "m" else [] for x in rec.msgs]))
        rec.msgs.append(m)
        rec.script.append((t - rec.t0, desc))
        self.rec_of[m.id] = rec.rid
        for p in self.b.paths.ports(m):
            if p not in rec.ports:
                rec.ports.add(p)
                self.port[p] = rec.rid
        if rec.entry is not None:
            self.b.msgs[m.id] = m
            self.b.parts.bump(m, +1, float(t))
            heapq.heappush(self.b.events, (rec.t0 + rec.entry.offsets[idx], next(self.b.seq), "memo", (rec.rid, m.id)))

    def expect(self, rec: _Memo) -> None:
        """A replay must see its next scripted message start on time; look one ns after."""
        n = len(rec.msgs)
        if n < len(rec.entry.script):
            when = rec.t0 + rec.entry.script[n][0] + 1
            heapq.heappush(self.b.events, (when, next(self.b.seq), "memo_expect", (rec.rid, n)))

    def state(self, msg: Message) -> str | None:
        """'fresh', 'settled', or None (a state a recording would not repeat) of its connection."""
        key = self.b.paths.conn_key(msg)
        if key[0] == "m" or not self.b.reacts:
            return "fresh"
        if self.settle.get(key, -1.0) > self.b.now_ns:
            return None  # a replayed episode left it slower than ns-3 knows
        if key not in self.b.packet.conns:
            return "fresh"
        v = self.b.packet.dcqcn_vec(msg, False)
        if not v:
            return None  # busy or a cut due
        line = v[0]
        rate, target, _ts, _bs, nxt, seen, alpha = v[6:13]
        if not seen:
            return "fresh"
        if rate >= line and target >= line and nxt < 0 and alpha <= SETTLED_ALPHA:
            return "settled"
        return None

    def settle_ns(self, msg: Message) -> float | None:
        """How long until ``msg``'s connection is settled again, from its DCQCN state in ns-3 now
        (its rate trajectory on the increase timer, alpha's decay by 1 - g per period without a
        CNP); None when a cut check is still due."""
        if self.b.paths.conn_key(msg)[0] == "m" or not self.b.reacts:
            return 0.0
        v = self.b.packet.dcqcn_vec(msg, True)
        if not v:
            return None
        line, ai, hai, fast, interval, _bc = v[:6]
        rate, target, tstage, _bs, nxt, seen, alpha = v[6:13]
        tr = Trajectory(rate, target, int(tstage), nxt, line, ai, hai, int(fast), interval)
        t_line = float(self.b.now_ns)
        while not tr.at_line():
            if tr.next_ns < 0:
                return None
            t_line = tr.next_ns
            tr.advance_to(tr.next_ns)
        t_alpha = float(self.b.now_ns)
        if seen and alpha > SETTLED_ALPHA:  # one period more: the grid's phase
            periods = math.ceil(math.log(SETTLED_ALPHA / alpha) / math.log(1.0 - self._alpha_g)) + 1
            t_alpha += periods * self._alpha_ns
        return max(t_line, t_alpha) - self.b.now_ns

    def touch(self, msg: Message, ports: list[int], t: int) -> bool:
        """A message starts on an episode's ports: it joins a recording (with its connection's
        state; one that a recording would not repeat drops it), and a replay if the script has it
        next at this offset (True: replayed, not started), else the replay goes back to ns-3."""
        ck = self.b.paths.conn_key(msg)
        until = self.settle.get(ck)
        if until is not None:
            if until > t:  # ns-3 starts it at the rate it had before the replayed episode
                self.b.counts["replay_state_mismatch"] += 1
            else:
                del self.settle[ck]
        rids = sorted({self.port[p] for p in ports if p in self.port})
        if not rids or msg.id in self.rec_of:  # (a first-batch message of a recording: in it)
            return False
        if len(rids) > 1:  # two episodes meet: neither is the answer for its key alone
            for rid in rids:
                self.stop(rid, t)
            return False
        rec = self.rec[rids[0]]
        state = self.state(msg)
        if state is None:
            self.stop(rec.rid, t)
            return False
        desc = self.desc(msg, state)
        if rec.entry is None:
            self.add(rec, msg, desc, t)
            return False
        n = len(rec.msgs)
        if n < len(rec.entry.script) and rec.entry.script[n] == (t - rec.t0, desc):
            self.add(rec, msg, desc, t)
            self.expect(rec)
            return True
        self.stop(rec.rid, t)
        return False

    def stop(self, rid: int, t: int) -> None:
        rec = self.rec.get(rid)
        if rec is None:
            return
        if rec.entry is None:
            self.b.counts["memo_invalidated"] += 1
            del self.rec[rid]
            self.release(rec)
        else:
            self.interrupt(rid, t)

    def release(self, rec: _Memo) -> None:
        for p in rec.ports:
            if self.port.get(p) == rec.rid:
                del self.port[p]
        for m in rec.msgs:
            if self.rec_of.get(m.id) == rec.rid:
                del self.rec_of[m.id]

    def done(self, rid: int, msg: Message, fin: int) -> None:
        """A message of a recorded or replayed episode completed (from AcceleratedNs3Backend.complete)."""
        rec = self.rec.get(rid)
        if rec is None:
            return
        rec.fin[msg.id] = fin
        ck = self.b.paths.conn_key(msg)
        last_of_conn = all(m.id in rec.fin for m in rec.msgs if self.b.paths.conn_key(m) == ck)
        if rec.entry is None and last_of_conn:
            rec.settle[msg.id] = self.settle_ns(msg)
        if rec.entry is not None and last_of_conn:
            s = rec.entry.settle[rec.msgs.index(msg)]
            if s and ck[0] != "m":
                self.settle[ck] = max(self.settle.get(ck, 0.0), fin + s)
        if len(rec.fin) < len(rec.msgs) or (rec.entry is not None and len(rec.msgs) < len(rec.entry.script)):
            return
        del self.rec[rid]
        self.release(rec)
        if rec.entry is None:
            self.store(rec)
            return
        self.add_replayed(rec.entry, 1.0)
        self.b.counts["messages_replayed"] += len(rec.msgs)
        self.b.counts["bytes_replayed"] += sum(m.size_bytes for m in rec.msgs)

    def store(self, rec: _Memo) -> None:
        """A recording ended: keep its script, completion offsets and what ns-3 counted on its ports."""
        if any(v is None for v in rec.settle.values()):
            self.b.counts["memo_unsettled"] += 1
            return
        now = {k: self.b.inner.port_stat(k) for k in _MEMO_STATS}
        deltas = {k: {p: now[k][p] - rec.start_stats[k][p] for p in sorted(rec.ports)
                      if now[k][p] != rec.start_stats[k][p]} for k in _MEMO_STATS}
        closed = {p: self.b.ledger.link_bytes.get(p, 0.0) - rec.start_closed.get(p, 0.0) for p in sorted(rec.ports)
                  if self.b.ledger.link_bytes.get(p, 0.0) != rec.start_closed.get(p, 0.0)}
        self.entries[rec.key] = _MemoEntry(list(rec.script), [rec.fin[m.id] - rec.t0 for m in rec.msgs],
                                         list(rec.progress),
                                         [rec.settle.get(m.id) or 0.0 for m in rec.msgs], deltas, closed)
        self.b.counts["memo_recorded"] += 1

    def add_replayed(self, e: _MemoEntry, frac: float) -> None:
        for k, per_port in e.port_deltas.items():
            acc = self.replayed.setdefault(k, {})
            for p, v in per_port.items():
                acc[p] = acc.get(p, 0.0) + frac * v
        for p, v in e.closed_bytes.items():
            self.b.ledger.link_bytes[p] = self.b.ledger.link_bytes.get(p, 0.0) + frac * v

    def interrupt(self, rid: int, t: int) -> None:
        """A replay leaves its script (another message on its ports, or a scripted one that did not
        come): its messages not yet complete go to ns-3 with the bytes they would not have
        delivered by ``t`` at their recorded mean rate, on their connections as ns-3 has them (the
        counters count the elapsed share)."""
        rec = self.rec.pop(rid)
        self.release(rec)
        e = rec.entry
        if self.entries.get(rec.key) is e:
            del self.entries[rec.key]  # this start goes on otherwise now: record it afresh next time
        dt = t - rec.t0
        self.add_replayed(e, min(1.0, dt / (max(e.offsets) or 1)))
        self.b.counts["memo_interrupts"] += 1
        for i, (m, (start, _), off) in enumerate(zip(rec.msgs, e.script, e.offsets)):
            if m.id in rec.fin:
                self.b.counts["messages_replayed"] += 1
                self.b.counts["bytes_replayed"] += m.size_bytes
                continue
            # delivered bytes: linear between the recorded points around dt (exact at a joiner's start)
            pts = [(start, 0)] + [(o, b[i]) for o, b, _ in e.progress if i < len(b)] + [(off, m.size_bytes)]
            lo = max((p for p in pts if p[0] <= dt), default=pts[0])
            hi = min((p for p in pts if p[0] >= dt), default=pts[-1])
            est = lo[1] if hi[0] == lo[0] else lo[1] + (hi[1] - lo[1]) * (dt - lo[0]) / (hi[0] - lo[0])
            done = max(0, min(int(est) // self.b.paths.mtu * self.b.paths.mtu, m.size_bytes - 1))
            self.b.counts["bytes_replayed"] += done
            self.b.counts["messages_packet_level"] += 1
            self.b.post(m.id, m, m.size_bytes - done, t, self.b.paths.ports(m))
            # its connection as the recording had it at the last joiner's start before dt (exact when
            # the script was left there); a connection ns-3 has not met yet starts fresh
            cc = [c[i] for o, _, c in e.progress if o <= dt and i < len(c) and c[i]]
            if cc and self.b.packet.restore_cc(m, cc[-1]):
                self.b.counts["memo_states_restored"] += 1
