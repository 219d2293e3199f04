"""Steady-state fast-forward of the accelerated backend (``accel.py``, ``acceleration.fast_forward``,
experimental): packet-level partitions whose flows delivered at a steady rate over the last two windows
leave ns-3 and are delivered at that rate until one ends or a message starts on their ports
(:class:`FastForward`).  Measured outside issue 12's targets (docs/packet-level-acceleration.md): the rates
of a short window are not DCQCN's long-run ones."""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from netbackend.ns3.closed_form import components
from netbackend.ns3.wire import data_wire_bytes

if TYPE_CHECKING:
    from netbackend.ns3.accel import AcceleratedNs3Backend

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


class FastForward:
    """The delivery samples of packet-level messages and the partitions being fast-forwarded (``steady``)."""

    def __init__(self, backend: AcceleratedNs3Backend):
        self.b = backend
        config = backend.config
        acc = config.acceleration
        self.on = acc.fast_forward
        self.theta = acc.theta
        r = backend.paths.router
        fastest = max([r.link_rate_gbps[p] for p in range(len(r.link_rate_gbps)) if r.link_src[p] < r.num_hosts]
                      or [1.0])
        self.win_ns = acc.window_packets * data_wire_bytes(config) * 8 / fastest
        self.next: int | None = None
        """When to sample next (None: no packet-level message to sample)."""
        self.hist: dict[int, deque] = {}
        """Inner message -> its last (time, delivered bytes) samples."""
        self.marks: deque = deque(maxlen=3)
        """Last (time, ECN marks per port) samples."""
        self.steady: dict[int, _Steady] = {}
        self.extrap_marks = 0.0

    def check(self, t: int) -> None:
        """Sample the delivery of every packet-level message; fast-forward the partitions whose
        flows all delivered at a steady rate over the last two windows.

        A partition is a connected set of packet-level messages (two are connected when they
        cross a common egress port).  It qualifies when each flow's delivery rates over the last
        two windows differ by at most ``theta`` of their mean, each connection has one message in
        ns-3, and each flow has at least four windows of bytes left (else the saving is nil).
        Then every flow's unsent steps leave ns-3 (RdmaNic::TrimMessage, as for migration) and are
        delivered at the last window's rate (_Steady) until the first flow ends or a message
        starts on one of its ports; what is left then goes back to ns-3 (end)."""
        self.next = None
        active = [i for i in self.b.packet.inner_of if i not in self.b.packet.migrated]
        if not active:
            return
        self.next = t + math.ceil(self.win_ns)
        self.b.bring_inner_to(t)
        for i in active:
            m = self.b.msgs[self.b.packet.inner_of[i][0]]
            h = self.hist.get(i)
            if h is None:
                h = self.hist[i] = deque(maxlen=3)
            h.append((t, self.b.inner.delivered_bytes(m.dst, i)))
        if self.b.reacts:
            self.marks.append((t, self.b.inner.port_stat("ecn_marks")))
        comps = components(active, lambda i: self.b.packet.inner_of[i][1])  # partitions of packet-level messages
        for comp in comps:
            rates = self.steady_rates(comp)
            if rates is not None:
                self.start(comp, rates, t)

    def steady_rates(self, comp: list[int]) -> dict[int, float] | None:
        """Each flow's delivery rate (bytes/ns) if the partition is steady, else None."""
        conns = set()
        rates = {}
        for i in comp:
            orig, ports, conn, _ = self.b.packet.inner_of[i]
            if conn[0] == "m" or conn in conns:
                return None
            conns.add(conn)
            for p in ports:
                if any(o[0] != "n" for o in self.b.ledger.owners.get(p, ())):
                    return None
            h = self.hist[i]
            if len(h) < 3:
                return None
            (t0, b0), (t1, b1), (t2, b2) = h
            r1, r2 = (b1 - b0) / (t1 - t0), (b2 - b1) / (t2 - t1)
            if r1 <= 0 or r2 <= 0 or abs(r1 - r2) > self.theta * (r1 + r2) / 2:
                return None
            if self.b.inner.message_size(i) - b2 < 4 * r2 * self.win_ns:
                return None
            rates[i] = r2
        return rates

    def start(self, comp: list[int], rates: dict[int, float], t: int) -> None:
        marks_rate = 0.0
        if self.b.reacts and len(self.marks) >= 2:
            (ta, va), (tb, vb) = self.marks[0], self.marks[-1]  # the two windows judged steady
            ports = {p for i in comp for p in self.b.packet.inner_of[i][1]}
            marks_rate = sum(vb[p] - va[p] for p in ports) / max(1, tb - ta)
        sid = next(self.b.seq)
        st = _Steady(sid, float(t), [], marks_rate)
        for i in comp:  # a recording must be ns-3's own answer
            rid = self.b.memo.rec_of.get(self.b.packet.inner_of[i][0])
            if rid is not None and rid in self.b.memo.rec and self.b.memo.rec[rid].entry is None:
                self.b.memo.stop(rid, t)
        for i in comp:
            orig, ports, _, _ = self.b.packet.inner_of[i]
            m = self.b.msgs[orig]
            delivered = self.hist[i][-1][1]
            size = self.b.inner.message_size(i)
            status, _, removed = (int(x) for x in self.b.inner.trim_message(m.src, m.dst, m.connection, i))
            if status == 0:
                continue  # its last step is being sent: it stays at packet level, beside the others
            cc = self.b.packet.save_cc(m)
            self.b.packet.took_out(i, status, removed)
            lead = 0 if status == 2 else max(0, size - removed - delivered)
            st.flows.append(_FFlow(i, orig, ports, lead, removed, rates[i], cc))
            for p in ports:
                own = self.b.ledger.owners.setdefault(p, {})
                own[("s", sid)] = own.get(("s", sid), 0) + 1
        if not st.flows:
            return
        self.steady[sid] = st
        self.b.counts["fast_forwards"] += 1
        heapq.heappush(self.b.events, (st.end_ns(), next(self.b.seq), "ff", sid))

    def end(self, sid: int, t: int) -> None:
        """End a fast-forward at ``t``: flows whose bytes were all delivered complete, the rest
        go back to ns-3 on their connections (which keep their QPs)."""
        st = self.steady.pop(sid)
        dt = max(0.0, t - st.t0)
        self.extrap_marks += st.marks_per_ns * dt
        for f in st.flows:
            self.b.ledger.release(("s", sid), f.ports)
            done_at = st.t0 + (f.lead + f.payload) / f.rate
            m = self.b.msgs[f.orig]
            if done_at <= t + 1e-6:
                self.b.counts["bytes_fast_forwarded"] += f.payload
                self.b.ledger.count_links(f.ports, self.b.paths.wire(f.payload, m.step_bytes)[0])
                heapq.heappush(self.b.events, (done_at, next(self.b.seq), "done", f.orig))
                continue
            sent = int(max(0.0, f.rate * dt - f.lead) // self.b.paths.mtu) * self.b.paths.mtu
            sent = min(sent, f.payload - 1)
            self.b.counts["bytes_fast_forwarded"] += sent
            if sent > 0:  # (its link bytes: fast-forwarded bytes were on no link's count before)
                self.b.ledger.count_links(f.ports, self.b.paths.wire(sent, m.step_bytes)[0])
            self.b.post(f.orig, m, f.payload - sent, t, f.ports)
            if f.cc:
                self.b.packet.restore_cc(m, f.cc)
