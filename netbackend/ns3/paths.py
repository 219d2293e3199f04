"""Paths and packet trains of the accelerated backend (``accel.py``): a message's connection key and
directed ports (the same ECMP choice as ns-3: :class:`netbackend.routing.Router`), a path's unloaded
RTT, a message's wire bytes and the last packet's store-and-forward tail.  Cached: training repeats a
few message shapes.  Needs no ns-3 and no backend state."""
from __future__ import annotations

from netbackend.base import Message
from netbackend.config import NetworkConfig
from netbackend.ns3.closed_form import Flow
from netbackend.ns3.wire import header_bytes
from netbackend.routing import Router


class PathShapes:
    """Routes, wire sizes and tails of messages on one fabric, cached."""

    def __init__(self, router: Router, config: NetworkConfig):
        self.router = router
        self.mtu = config.mtu_bytes
        self.hdr = header_bytes(config)  # the model's rule (wire.py), as the NIC sends them
        tr = config.transport
        self.per_message_qp = tr.qp_mode == "per_message"
        self.qps_per_conn = tr.qps_per_connection
        self.max_steps = tr.max_outstanding_steps
        self.per_hop_latency_ns = config.per_hop_latency_ns
        self._route_cache: dict[tuple, list[int]] = {}
        self._path_cache: dict[tuple, tuple[bool, float]] = {}
        self._shape_cache: dict[tuple, tuple[float, float]] = {}
        """(size, step, path) -> (wire bytes, tail ns): training repeats a few message shapes."""
        self._wire_cache: dict[tuple[int, int], tuple[int, int, int]] = {}

    def conn_key(self, msg: Message):
        if msg.connection < 0 or self.per_message_qp:
            return ("m", msg.id)
        return (msg.src, msg.dst, msg.connection)

    def ports(self, msg: Message) -> list[int]:
        if msg.src == msg.dst:
            return []
        k = (msg.src, msg.dst, msg.flow_key)
        ports = self._route_cache.get(k)
        if ports is None:
            ports = self._route_cache[k] = list(self.router.route(msg.src, msg.dst, msg.flow_key)[1])
        return ports

    def path(self, ports: list[int]) -> tuple[bool, float]:
        """(a port slower than the NIC on the path, unloaded RTT in ns) of a path, cached."""
        k = tuple(ports)
        v = self._path_cache.get(k)
        if v is None:
            r = self.router
            r0 = r.link_rate_gbps[ports[0]]
            slower = any(r.link_rate_gbps[p] < r0 for p in ports[1:])
            rtt_ns = 2 * sum(self.delay_ns(p) + (self.mtu + self.hdr) * 8 / r.link_rate_gbps[p] for p in ports)
            v = self._path_cache[k] = (slower, rtt_ns)
        return v

    def wire(self, size: int, step: int) -> tuple[int, int, int]:
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
        full, rest = divmod(step, self.mtu)
        per_step = full * (self.mtu + self.hdr) + ((rest + self.hdr) if rest else 0)
        lf, lr = divmod(last_step, self.mtu)
        wire = n_steps * per_step + lf * (self.mtu + self.hdr) + ((lr + self.hdr) if lr else 0)
        seq = ([] if not n_steps else ([self.mtu + self.hdr] * min(full, 2) + ([rest + self.hdr] if rest else [])))
        seq = seq + [self.mtu + self.hdr] * min(lf, 2) + ([lr + self.hdr] if lr else [])
        last = seq[-1]
        prev = seq[-2] if len(seq) >= 2 else 0
        return wire, last, prev

    def delay_ns(self, port: int) -> float:
        """Propagation of a directed link plus, when a switch transmits on it, the switch's pipeline
        latency (the ns-3 switch adds ``per_hop_latency_ns`` to every port it transmits on)."""
        r = self.router
        lat = self.per_hop_latency_ns if r.link_src[port] >= r.num_hosts else 0
        return r.link_delay_ns[port] + lat

    def tail_ns(self, ports: list[int], last: int, prev: int) -> float:
        """From the last packet leaving the NIC to its delivery (store and forward; it may wait
        behind a longer predecessor on an equally fast port)."""
        r = self.router
        rates = [r.link_rate_gbps[p] for p in ports]
        delays = [self.delay_ns(p) for p in ports]
        d_prev = -last * 8 / rates[0]
        d_last = 0.0
        for h in range(1, len(ports)):
            if prev:
                d_prev = d_prev + delays[h - 1] + prev * 8 / rates[h]
            d_last = max(d_last + delays[h - 1], d_prev if prev else float("-inf")) + last * 8 / rates[h]
        return d_last + delays[-1]

    def payload_sent(self, f: Flow) -> int:
        """Payload bytes of the whole packets the NIC has started by now (fluid estimate)."""
        if f.payload >= 0:  # a migrated tail: whole steps after ns-3's kept work request
            sent = max(0.0, f.wire_total - f.wire_left - f.lead_wire)
            return min(f.payload, int(sent // (self.mtu + self.hdr)) * self.mtu)
        size, step = f.msg.size_bytes, f.msg.step_bytes
        step = step if 0 < step < size else size
        full, rest = divmod(step, self.mtu)
        per_step = full * (self.mtu + self.hdr) + ((rest + self.hdr) if rest else 0)
        sent = max(0.0, f.wire_total - f.wire_left)
        q, r = divmod(sent, per_step)
        pk = int(-(-r // (self.mtu + self.hdr)))  # a packet on the wire is sent whole
        return min(size, int(q) * step + min(step, pk * self.mtu))

    def shape(self, msg: Message, ports: list[int]) -> tuple[float, float]:
        """(wire bytes, tail ns) of ``msg`` on ``ports``, cached."""
        ck = (msg.size_bytes, msg.step_bytes, tuple(ports))
        shape = self._shape_cache.get(ck)
        if shape is None:
            if len(self._shape_cache) > 100_000:  # random sizes (traffic studies): no reuse
                self._shape_cache.clear()
            wire, last, prev = self.wire(msg.size_bytes, msg.step_bytes)
            shape = self._shape_cache[ck] = (float(wire), self.tail_ns(ports, last, prev))
        return shape
