"""Closed-form partitions of the accelerated backend (``accel.py``): which messages may join their NIC's
source-bounded partition (:meth:`Partitions.why_not`, :meth:`Partitions.fits`), the partitions' rates (the
NIC's line rate less its ACKs, water-filled among capped QPs), their departures, and the hand-back of
partitions a rising rate overloads (:meth:`Partitions.check_capacity`)."""
from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from typing import TYPE_CHECKING

from netbackend.base import Message
from netbackend.ns3.closed_form import Flow, Group, Trajectory, water_fill
from netbackend.ns3.wire import data_wire_bytes

if TYPE_CHECKING:
    from netbackend.ns3.accel import AcceleratedNs3Backend


class Partitions:
    """The closed-form partitions, one per NIC (``groups``), and the per-NIC activity their rates depend on."""

    def __init__(self, backend: AcceleratedNs3Backend):
        self.b = backend
        config = backend.config
        self.share = config.acceleration.share_ports
        self.groups: dict[str, Group] = {}
        self.live: set[str] = set()
        """NICs whose closed-form partition has flows."""
        self.dst_groups: dict[str, dict[str, int]] = {}
        """Receiving NIC -> sending NIC -> closed-form flows between them (whom a receiver's ACKs slow)."""
        self.active_in: dict[str, int] = {}
        self.active_out: dict[str, int] = {}
        self.ack_frac = 64 / (data_wire_bytes(config) * config.ack_interval_packets)
        """ControlPacketBytes (rdma-nic.cc default 64) per ack_interval data packets."""
        self.max_tail_ns = 0.0
        """The longest pipeline of any closed-form flow so far (HandBacks.precheck_time)."""
        self.batch: dict[str, list] = {}
        """NIC -> connection keys of the messages starting at this instant (see fits)."""
        self.recheck: set[str] = set()
        self.states: dict[int, list[Trajectory]] = {}
        """Message id -> DCQCN trajectories of its dirty connection, read by why_not for join."""

    def conflicting(self, msg: Message, ports: list[int]) -> set[str]:
        groups = {o[1] for p in ports for o in self.b.ledger.owners.get(p, ()) if o[0] == "g"}
        if ports and ports[0] in self.b.ledger.owners and ("g", msg.src) in self.b.ledger.owners[ports[0]]:
            groups.add(msg.src)
        return groups

    def why_not(self, msg: Message, ports: list[int]) -> str | None:
        """None if ``msg`` may join its NIC's closed-form partition, else the reason."""
        if not ports:
            return "loopback"
        if msg.connection >= 0 and not self.b.paths.per_message_qp and self.b.paths.qps_per_conn > 1:
            return "several QPs per connection"
        slower, rtt_ns = self.b.paths.path(ports)
        if slower:
            return "a port slower than the NIC"
        if msg.step_bytes > 0 and msg.size_bytes > msg.step_bytes:
            if self.b.paths.max_steps * msg.step_bytes < 2 * rtt_ns * self.b.paths.router.link_rate_gbps[ports[0]] / 8:
                return "step credits would throttle"
        own = ("g", msg.src)
        shared = False
        for p in ports:
            for o in self.b.ledger.owners.get(p, ()):
                if o != own:
                    if o[0] in ("n", "f"):
                        return "shares a port"
                    shared = True
        if shared and not self.share:
            return "shares a port"
        # The connection's DCQCN state last: reading it (from ns-3 or the fluid model) costs more
        # than the checks above together, and most messages that would need it share a port.
        key = self.b.paths.conn_key(msg)
        if key in self.b.packet.dirty and not (msg.src in self.groups and key in self.groups[msg.src].qps):
            state = self.b.packet.conn_state(msg)
            if state is None:
                return "connection rate state in ns-3"
            self.states[msg.id] = state
        if shared and not self.fits(msg, ports):
            return "shares a port beyond its capacity"
        return None

    def fits(self, msg: Message, ports: list[int]) -> bool:
        """Would every port the NIC's partition crosses stay within its rate with ``msg`` joining?

        Partitions of several NICs may share ports as long as the sum of their flows' rates fits
        each port: then no queue builds (a packet at most, from phase), nothing is marked, and
        every flow keeps the rate its NIC gives it.  Checked at line rate (an upper bound)."""
        g = self.groups.get(msg.src)
        key = self.b.paths.conn_key(msg)
        keys = list(g.qps) if g is not None else []
        if key in keys:
            return True  # queued behind a message of its QP: no new load
        caps = dict(g.caps) if g is not None else {}
        state = self.states.get(msg.id)
        if state:
            tr = dataclasses.replace(state[0])  # a copy: join replays the one read
            tr.advance_to(float(self.b.now_ns))
            if not tr.at_line():
                caps[key] = tr
        line = self.b.paths.router.link_rate_gbps[ports[0]] / 8.0
        keys += [k for k in self.batch.get(msg.src, ()) if k != key and k not in keys]
        shares = water_fill(line, keys + [key], caps)
        new: dict[int, float] = {}
        for k in keys:
            if g is not None and k in g.qps:  # (the other starters' ports count when they join)
                for p in g.qps[k][0].ports[1:]:
                    new[p] = new.get(p, 0.0) + shares[k]
        for p in ports[1:]:
            new[p] = new.get(p, 0.0) + shares[key]
        rate = self.b.paths.router.link_rate_gbps
        return all(self.port_load(p, skip=msg.src) + v <= rate[p] / 8.0 * (1 + 1e-9) for p, v in new.items())

    def port_load(self, p: int, skip: str | set | None = None) -> float:
        """Wire rate (bytes/ns) the closed-form partitions (but ``skip``'s) put on port ``p``."""
        load = 0.0
        skip = {skip} if isinstance(skip, str) else (skip or set())
        for o in self.b.ledger.owners.get(p, ()):
            if o[0] == "g" and o[1] not in skip:
                g = self.groups[o[1]]
                rates = g.rates()
                for key, q in g.qps.items():
                    if p in q[0].ports:
                        load += rates[key]
        return load

    def shared_ports(self, g: Group) -> list[int]:
        if not self.b.ledger.shared:
            return []
        return sorted({p for q in g.qps.values() for p in q[0].ports if p in self.b.ledger.shared})

    def join(self, msg: Message, ports: list[int], t: int) -> None:
        g = self.groups.get(msg.src)
        if g is None or not g.active():
            rate = self.b.paths.router.link_rate_gbps[ports[0]] / 8.0
            if g is None:
                g = self.groups[msg.src] = Group(msg.src, rate, float(t), rate_bytes_per_ns=rate)
            g.t_last = float(t)
            self.b.counts["partitions_closed_form"] += 1
        else:
            g.advance_to(float(t))
        shape = self.b.paths.shape(msg, ports)
        flow = Flow(msg, ports, shape[0], shape[0], shape[1])
        self.max_tail_ns = max(self.max_tail_ns, flow.tail_ns)
        if self.add_flow(g, self.b.paths.conn_key(msg), flow, self.states.pop(msg.id, None), t):
            self.b.counts["messages_rate_limited"] += 1
        self.b.counts["messages_closed_form"] += 1
        self.rerate(g, float(t))

    def add_flow(self, g: Group, key, flow: Flow, state: list[Trajectory] | None, t: float) -> bool:
        """Queue ``flow`` on its QP in ``g`` and take its ports; a QP new to the partition starts
        on its DCQCN trajectory (``state``), if any.  True if that leaves it below line rate."""
        capped = False
        if state is not None and key not in g.qps:
            for tr in state:  # one QP per connection here (why_not, PacketSide.migrate)
                tr.advance_to(float(t))
                if not tr.at_line():
                    g.caps[key] = tr
                    capped = True
        g.qps.setdefault(key, deque()).append(flow)
        self.live.add(g.src)
        msg = flow.msg
        by_src = self.dst_groups.setdefault(msg.dst, {})
        by_src[msg.src] = by_src.get(msg.src, 0) + 1
        owner = ("g", g.src)
        for p in flow.ports:
            own = self.b.ledger.owners.setdefault(p, {})
            n = own.get(owner)
            if n:
                own[owner] = n + 1
            else:
                own[owner] = 1
                self.b.ledger.count_sharing(p, own)
        return capped

    def rerate(self, g: Group, t: float) -> None:
        """Set the group's data rate at ``t``: the NIC's line rate less the ACKs it sends.

        A NIC receiving data acknowledges every ack_interval packets at control priority on the
        same egress port; a lone flow is also slowed by the ACKs its receiver sends for flows that
        receiver transmits (they come back through its last port).  Both at most ack/data bytes
        (64 / 4174 = 1.5 % at the defaults); receivers are taken to receive at line rate."""
        g.advance_to(t)
        if not g.qps and not g.caps:
            # emptied (its last flows departed, half the calls): no rate to set or capacity to
            # check, and the rate is set again before it carries a flow (join, migrate); its
            # departure events go stale as a re-schedule would make them
            g.version = next(self.b.seq)
            return
        slowed = self.active_in.get(g.src, 0) > 0
        if not slowed and len(g.qps) == 1:
            head = next(iter(g.qps.values()))[0]
            slowed = self.active_out.get(head.msg.dst, 0) > 0
        g.rate_bytes_per_ns = g.line_bytes_per_ns * (1.0 - self.ack_frac if slowed else 1.0)
        for key, tr in g.caps.items():
            tr.advance_to(t)
            if tr.at_line() and key in self.b.packet.dirty:
                self.b.packet.dirty.discard(key)
                self.b.counts["connections_recovered"] += 1
        g.allocate()
        self.reschedule(g)
        if self.batch:
            self.recheck.add(g.src)  # after the whole batch has joined
        else:
            self.check_capacity(self.shared_ports(g))

    def check_capacity(self, ports) -> None:
        """Hand back the partitions on ports loaded past their rate (a rate rose: a flow left its
        NIC, a DCQCN timer fired): they would queue and mark."""
        rate = self.b.paths.router.link_rate_gbps
        over = [p for p in ports if self.port_load(p) > rate[p] / 8.0 * (1 + 1e-9)]
        if over:
            for src in sorted({o[1] for p in over for o in self.b.ledger.owners.get(p, ()) if o[0] == "g"}):
                if src in self.groups:
                    self.b.hand.hand_back(src, self.b.now_ns)
            self.b.counts["handbacks_over_capacity"] += 1

    def bump(self, msg: Message, delta: int, t: float) -> None:
        """Count active messages per sending and receiving NIC; re-rate the groups it affects."""
        changed = []
        src, dst, out, inn = msg.src, msg.dst, self.active_out, self.active_in
        before = out.get(src, 0)
        out[src] = before + delta
        if (before == 0) != (before + delta == 0):
            changed.append(src)
        before = inn.get(dst, 0)
        inn[dst] = before + delta
        if (before == 0) != (before + delta == 0):
            changed.append(dst)
        if not changed or not self.groups:
            return
        srcs = set()
        for host in changed:
            if host in self.live:
                srcs.add(host)
            for src in self.dst_groups.get(host, ()):
                if any(q[0].msg.dst in changed for q in self.groups[src].qps.values()):
                    srcs.add(src)
        for src in sorted(srcs):
            g = self.groups.get(src)  # a re-rate may hand partitions back (over capacity)
            if g is not None and g.qps:
                self.rerate(g, t)

    def reschedule(self, g: Group) -> None:
        g.version = next(self.b.seq)  # unique across the group objects of one NIC
        t = g.next_departure()
        cap = g.next_cap_change()
        if cap is not None and (t is None or cap < t):
            t = cap  # a QP's rate rises: re-allocate then (departures finds no departure)
        if t is not None:
            heapq.heappush(self.b.events, (t, next(self.b.seq), "dep", (g.src, g.version)))

    def departures(self, g: Group, t: float) -> None:
        """The head flows whose last byte left the NIC at ``t``: schedule their delivery."""
        g.advance_to(t)
        eps = 0.01  # bytes: float residue of the fluid share
        for key in list(g.qps):
            q = g.qps[key]
            while q and q[0].wire_left <= eps:
                f = q.popleft()
                self.forget_flow(f)
                self.b.ledger.count_links(f.ports, f.wire_total - f.lead_wire)
                self.b.counts["bytes_closed_form"] += f.bytes
                self.b.ledger.release(("g", g.src), f.ports)
                heapq.heappush(self.b.events, (t + f.tail_ns, next(self.b.seq), "done", f.msg.id))
            if not q:
                del g.qps[key]
        if not g.qps:
            self.live.discard(g.src)
        self.rerate(g, t)

    def forget_flow(self, f: Flow) -> None:
        by_src = self.dst_groups[f.msg.dst]
        by_src[f.msg.src] -= 1
        if not by_src[f.msg.src]:
            del by_src[f.msg.src]
            if not by_src:
                del self.dst_groups[f.msg.dst]
