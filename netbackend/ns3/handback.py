"""Hand-backs of the accelerated backend (``accel.py``): closed-form partitions that a starting message
would meet go back to ns-3 (or the fluid model), each flow's unsent bytes posted on its own connection,
one path latency before the conflict (:meth:`HandBacks.precheck`) so that ns-3 rebuilds the packets the
flow had in flight."""
from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from netbackend.ns3.accel import AcceleratedNs3Backend


class HandBacks:
    """When to look ahead at the next start, and handing a NIC's partition back."""

    def __init__(self, backend: AcceleratedNs3Backend):
        self.b = backend
        self.prechecked: int | None = None
        """The start time whose conflicts were last handed back early."""

    def precheck_time(self) -> int | None:
        """When to look at the next start: one pipeline before it, if closed-form flows exist.

        A flow handed back at the moment of the conflict would restart on an empty pipeline,
        and DCQCN's first cuts (which persist for a rate-increase interval) depend on whose
        packets reach the shared queue first.  Handing it back one path latency early lets
        ns-3 rebuild exactly the in-flight packets it had when the new flow arrives (it was
        alone, so those packets are what ns-3 computes)."""
        if not self.b.starts or not self.b.parts.groups:
            return None
        t_next = self.b.starts[0][0]
        if self.prechecked == t_next:
            return None
        if not self.b.parts.live:
            return None
        # the longest pipeline of any closed-form flow so far (earlier is only more packet level)
        return max(self.b.now_ns, self.b.inner.now_ns, t_next - math.ceil(self.b.parts.max_tail_ns) - 1)

    def precheck(self, t: int) -> None:
        """Hand back, at ``t``, the partitions the starts of the next start time will conflict with."""
        t_next = self.b.starts[0][0]
        self.prechecked = t_next
        groups: set[str] = set()
        batch = [msg for _, _, msg in sorted(e for e in self.b.starts if e[0] == t_next)]
        rate = self.b.paths.router.link_rate_gbps
        demand: dict[int, dict[str, float]] = {}  # port -> starting NIC -> its line rate
        for msg in batch if self.b.parts.share else ():
            ports = self.b.paths.ports(msg)
            for p in ports[1:]:
                demand.setdefault(p, {})[msg.src] = rate[ports[0]] / 8.0
        starters = {msg.src for msg in batch}

        def over(p: int) -> bool:  # shared ports: the starters at line rate beside the others
            return self.b.parts.port_load(p, skip=starters) + sum(demand[p].values()) > rate[p] / 8.0 * (1 + 1e-9)

        for msg in batch:
            ports = self.b.paths.ports(msg)
            found = self.b.parts.conflicting(msg, ports)
            # With the fluid model taking collisions, a message that meets no closed-form partition
            # has nothing to hand back and the checks are skipped (at packet level reading a
            # connection's state brings ns-3 to now, which they keep doing).
            if (found or self.b.islands.side is None) and (self.b.parts.why_not(msg, ports) is not None or (
                    self.b.parts.share and any(over(p) for p in ports[1:] if p in self.b.ledger.owners))):
                groups |= found
            self.b.parts.states.pop(msg.id, None)  # read again when it starts
        for src in sorted(groups):
            if src in self.b.parts.groups and self.b.parts.groups[src].active():
                self.hand_back(src, t)

    def hand_back(self, src: str, t: int) -> None:
        """Post the unsent bytes of every closed-form flow of ``src`` to ns-3 at ``t``."""
        g = self.b.parts.groups.pop(src)
        self.b.parts.live.discard(src)
        g.advance_to(float(t))
        self.b.counts["handbacks"] += 1
        for q in g.qps.values():
            for f in q:
                self.b.parts.forget_flow(f)
                self.b.ledger.release(("g", src), f.ports)
                sent = self.b.paths.payload_sent(f)
                self.b.counts["flows_handed_back"] += 1
                if sent >= f.bytes:  # everything on the wire: delivered in closed form
                    self.b.ledger.count_links(f.ports, f.wire_total - f.lead_wire)
                    self.b.counts["bytes_closed_form"] += f.bytes
                    heapq.heappush(self.b.events, (t + f.tail_ns, next(self.b.seq), "done", f.msg.id))
                    continue
                # the packets it started, whole (the rest goes on as a message of its own): counting the
                # wire sent to the fraction dropped the started packet's unsent part from every link's bytes
                self.b.ledger.count_links(f.ports, float(self.b.paths.wire(sent, f.msg.step_bytes)[0]) if sent else 0.0)
                self.b.counts["bytes_closed_form"] += sent
                self.b.counts["messages_closed_form"] -= 1
                self.b.counts[self.b.post(f.msg.id, f.msg, f.bytes - sent, t, f.ports)] += 1
