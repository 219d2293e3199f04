"""Packet-level RoCE backend on ns-3 (the pip ``ns3`` wheel).

The model (NIC with queue pairs and DCQCN, output-queued switches with a
shared-buffer MMU, PFC and ECN, ECMP) is the C++ module in
``src/heterosim-rdma``, compiled on first use (``build.py``).  Python only
injects messages and drains completions: C++ runs until the next completion
time and stops, so Python runs once per completion time, never per packet.
"""
from __future__ import annotations

import time
from typing import Any

from netbackend.base import Completion, Message, NetStats, NetworkBackend
from netbackend.config import DCQCN_PRESETS, NetworkConfig, port_ecn_bytes, resolved_dcqcn
from netbackend.routing import Router, check_fabric, rail_of
from hscommon.errors import NetworkError, UserError
from netbackend.ns3 import driver
from netbackend.ns3.driver import run_isolated
from netbackend.ns3.wire import data_wire_bytes, header_bytes
from netbackend.registry import register_backend
from netbackend.topo import NetTopology

__all__ = ["Ns3Backend", "Ns3InternalError", "create_ns3_backend", "example_command", "run_isolated", "unit_test_command"]

_STATUS = {1: "PFC deadlock", 2: "no progress", 3: "wall-clock limit", 4: "internal error",
           5: "transport error"}
_INTERNAL = 4
"""RdmaNetworkHelper::INTERNAL_ERROR: a model invariant broke (a bug, not the input)."""
_TRANSPORT = 5
"""RdmaNetworkHelper::TRANSPORT_ERROR: a QP exceeded its retry count (the NIC's QP error state)."""
_CC_TYPE = {"dcqcn": "ns3::RdmaCcDcqcn", "hpcc": "ns3::RdmaCcHpcc", "timely": "ns3::RdmaCcTimely",
            "dctcp": "ns3::RdmaCcDctcp", "swift": "ns3::RdmaCcSwift", "none": "ns3::RdmaCcNone"}
"""network.cc -> the TypeId of its RdmaCongestionOps class (rdma-cc-ops.h); the DCQCN presets take
the class of their reaction point (``_cc_type``)."""
_CC_IMPLEMENTED = ("dcqcn", "dcqcn_cx", "dcqcn_paper", "hpcc", "timely", "dctcp", "swift", "none")


def _cc_type(cfg: NetworkConfig) -> str:
    """TypeId name of the NIC's CongestionOps for ``cfg``: the DCQCN presets by their reaction point
    (``dcqcn.reaction``: vendor -> ns3::RdmaCcDcqcn, paper -> ns3::RdmaCcDcqcnPaper)."""
    if cfg.cc in DCQCN_PRESETS:
        return "ns3::RdmaCcDcqcn" if resolved_dcqcn(cfg)["reaction"] == "vendor" else "ns3::RdmaCcDcqcnPaper"
    return _CC_TYPE[cfg.cc]
_HOT_PORTS = 8
"""Queue samples are returned for this many ports with the largest mean queue."""


def hot_port_samples(mean_q: dict[str, float], names: list[str], flat) -> tuple[list[str], list[tuple]]:
    """(the _HOT_PORTS ports with the largest mean queue, their (ns, port, bytes) samples) from a flattened
    (ns, port index, bytes) sample vector (HeterosimRdmaSim::QueueSamples)."""
    hot = sorted(mean_q, key=lambda p: (-mean_q[p], p))[:_HOT_PORTS]
    keep = set(hot)
    flat = list(flat)
    samples = [(int(flat[i]), names[int(flat[i + 1])], int(flat[i + 2]))
               for i in range(0, len(flat), 3) if names[int(flat[i + 1])] in keep]
    return hot, samples


def unit_test_command() -> list[str]:
    """argv that runs the module's ns-3 TestSuite (builds it first if needed)."""
    from netbackend.ns3.build import ensure_built

    return [str(ensure_built().test_binary), "--suite=heterosim-rdma", "--verbose"]


def example_command(name: str, *args: str) -> list[str]:
    """argv that runs the module's example program ``examples/<name>.cc`` with ns-3 command-line
    ``args`` such as ``--senders=2`` (builds it first if needed)."""
    from netbackend.ns3.build import ensure_built

    build = ensure_built()
    for binary in build.examples:
        if binary.name == name:
            return [str(binary), *args]
    raise ValueError(f"no example {name!r} (have: {', '.join(b.name for b in build.examples) or 'none'})")


def swift_defaults(sw) -> dict[str, str]:
    """ns-3 defaults of ns3::RdmaCcSwift from ``network.swift`` (netbackend/config.py SwiftConfig)."""
    cls = "ns3::RdmaCcSwift::"
    return {cls + "Ai": repr(float(sw.ai_packets)), cls + "Beta": repr(float(sw.beta)),
            cls + "MaxMdf": repr(float(sw.max_mdf)), cls + "MinCwnd": repr(float(sw.min_cwnd_packets)),
            cls + "MaxCwnd": repr(float(sw.max_cwnd_packets or 0)),
            cls + "BaseTarget": _ns(sw.base_target_ns or 0), cls + "HopScale": _ns(sw.hop_scale_ns),
            cls + "FsRange": _ns(sw.fs_range_ns), cls + "FsMinCwnd": repr(float(sw.fs_min_cwnd_packets)),
            cls + "FsMaxCwnd": repr(float(sw.fs_max_cwnd_packets)),
            cls + "RetxResetThreshold": str(sw.retx_reset_threshold)}


def _ns(value: int) -> str:
    return f"{int(value)}ns"


def _bps(mbps: float) -> str:
    return f"{int(round(mbps * 1e6))}bps"


def switch_buffers(topo, cfg) -> tuple[list[int], dict[str, int]]:
    """(PFC headroom bytes per link, in ``topo.links`` order; shared buffer bytes per switch) as the
    ns-3 fabric is built with them.

    Headroom absorbs what is in flight after a PAUSE: factor x rate x delay (HPCC simulator, ~3x)
    plus one max-size packet being sent at each end, which dominates on short links.  The switch
    pipeline latency is part of the delay (ns-3 adds it to the propagation of every port a switch
    transmits on: rdma-switch.h).  The buffer is ``buffer.shared_buffer_mb``, else 16 MB x (the
    switch's fastest port / 50G), the HPCC study's (network-reference.md)."""
    wire_bytes = data_wire_bytes(cfg)
    hdrm = []
    max_rate = {s: 0.0 for s in topo.switches}
    for link in topo.links:
        delay_ns = link.delay_ns + cfg.per_hop_latency_ns
        hdrm.append(int(cfg.buffer.headroom_factor * (link.rate_gbps / 8.0) * delay_ns) + 2 * wire_bytes)
        for end in (link.a, link.b):
            if end in max_rate:
                max_rate[end] = max(max_rate[end], link.rate_gbps)
    mb = cfg.buffer.shared_buffer_mb
    return hdrm, {s: int((mb if mb is not None else 16.0 * max(r, 1.0) / 50.0) * 1e6) for s, r in max_rate.items()}


class Ns3InternalError(RuntimeError):
    """A broken invariant of the ns-3 model (a bug to report, not bad input), e.g. a message completed twice."""

    def __init__(self, detail: str):
        super().__init__(f"internal error in the ns3 backend: {detail}")


@register_backend("ns3", factory=lambda *a, **kw: create_ns3_backend(*a, **kw))
class Ns3Backend(NetworkBackend):
    """ns-3 packet-level fabric: one per process at a time (close() frees it).

    This class is plain packet level (``network.acceleration.mode: off``); ``create_ns3_backend`` (what the
    registry's ``create_backend("ns3", ...)`` calls) picks the accelerated backend when the configuration asks
    for it.  Besides the NetworkBackend interface, the accelerator (``accel.py`` and the modules it is split
    into) uses only the operations under "the accelerator's interface" below: what it asks of ns-3 (a
    connection's congestion-control state, taking a message's unsent steps out, the port counters), never this
    object's fields.
    """

    def __init__(self, topology: NetTopology, config: NetworkConfig | None = None, seed: int = 0,
                 *, track_message_bytes: bool = False, rate_sample_qps: int = 0):
        super().__init__(topology, config, seed)
        cfg = self.config
        if cfg.acceleration.mode != "off":  # a choice made before construction, never silently here
            raise UserError("Ns3Backend is plain packet level: create the accelerated backend with "
                            "netbackend.ns3.create_ns3_backend or create_backend('ns3', ...)",
                            field="network.acceleration.mode", value=cfg.acceleration.mode)
        self.check_config(topology, cfg)
        self._host_index = {h: i for i, h in enumerate(topology.hosts)}
        self._rail = ({h: rail_of(i, h) for i, h in enumerate(topology.hosts)} if cfg.ecmp == "rail" else None)
        self._unlinked = _unlinked_hosts(topology)
        # The flow backend's Router defines the ECMP hash and per-switch salts; the
        # switches apply the same choice (netbackend/routing.py), so paths agree.
        self._router = Router(topology, mode=cfg.ecmp, seed=seed)
        t0 = time.perf_counter()
        sim_cls = driver.sim_class()
        driver.acquire(self)
        self._closed = False
        try:
            self._configure(sim_cls, track_message_bytes, rate_sample_qps)
            self._sim = sim_cls()
            self._build()
        except Exception:
            driver.release(self)
            raise
        self.setup_wall_s = time.perf_counter() - t0
        self._start: dict[int, int] = {}
        self._size: dict[int, int] = {}
        self._fct: dict[int, tuple[int, int]] = {}
        self._pending: set[int] = set()
        self._bytes_done = 0
        self._call_wall_s = 0.0
        self._counter_index: dict[str, int] = {}

    # ------------------------------------------------------------------ setup
    @classmethod
    def check_config(cls, topology: NetTopology, config: NetworkConfig) -> None:
        """The CC is implemented, the acceleration settings have a closed form (``acceleration.mode`` not
        off: ``accel.check_acceleration``), and the fabric is one the module can build (``routing.check_fabric``:
        unique names, links between known nodes with a rate and a delay; and one NIC port per host)."""
        if any(h.endswith("/sharp") for h in topology.hosts):  # topologies/sharp.py's SHARP aggregation endpoints
            raise UserError("SHARP in-network reduction is not modelled by the ns3 backend (use the flow backend)",
                            field="fabric.in_network_reduction", value="sharp")
        if config.cc not in _CC_IMPLEMENTED:
            raise UserError("not implemented yet in the ns3 backend (use one of "
                            f"{', '.join(_CC_IMPLEMENTED)})", field="network.cc", value=config.cc)
        if config.acceleration.mode != "off":
            from netbackend.ns3.accel import check_acceleration

            tr = config.transport
            for fld, val in (("rx_drain_gbps", tr.rx_drain_gbps), ("rx_drain_gbps_per_host", tr.rx_drain_gbps_per_host)):
                if val:  # its closed forms assume line-rate receivers
                    raise UserError("a receive pipeline has no closed form: packet-level acceleration needs "
                                    f"network.transport.{fld} unset (or acceleration.mode off)",
                                    field=f"network.transport.{fld}", value=val)
            check_acceleration(config)
        check_fabric(topology, config.ecmp)  # names, link ends, rates, delays (as the flow backend)
        for host, gbps in config.transport.rx_drain_gbps_per_host.items():
            if host not in topology.hosts:
                raise UserError("unknown host", field="network.transport.rx_drain_gbps_per_host", value=host)
            if not gbps > 0:
                raise UserError("drain rate must be > 0 Gb/s", field=f"network.transport.rx_drain_gbps_per_host.{host}",
                                value=gbps)
        degree = {h: 0 for h in topology.hosts}
        for link in topology.links:
            for end in (link.a, link.b):
                if end in degree:
                    degree[end] += 1
        multi = [h for h, d in degree.items() if d > 1]
        if multi:
            raise NetworkError("the ns3 backend models one NIC port per host; host has several links",
                               field="topology.hosts", value=multi[0])

    def _configure(self, sim_cls, track_message_bytes: bool, rate_sample_qps: int) -> None:
        cfg = self.config
        pfc, buf, hp, tm, tr = cfg.pfc, cfg.buffer, cfg.hpcc, cfg.timely, cfg.transport
        d = resolved_dcqcn(cfg)
        nic = "ns3::RdmaNic::"
        ops, dq, hc, tl = "ns3::RdmaCongestionOps::", "ns3::RdmaCcDcqcn::", "ns3::RdmaCcHpcc::", "ns3::RdmaCcTimely::"
        sw = "ns3::RdmaSwitchNode::"
        helper = "ns3::RdmaNetworkHelper::"
        defaults = {
            nic + "Payload": str(cfg.mtu_bytes),
            nic + "HeaderBytes": str(header_bytes(cfg)),
            nic + "AckInterval": str(cfg.ack_interval_packets),
            nic + "QpMode": tr.qp_mode,
            nic + "QpsPerConnection": str(tr.qps_per_connection),
            nic + "MaxOutstandingSteps": str(tr.max_outstanding_steps),
            nic + "CongestionOps": _cc_type(cfg),
            ops + "BdpWindow": "true" if cfg.cc_window else "false",
            nic + "CnpMode": d["cnp_mode"],
            nic + "CnpInterval": _ns(d["cnp_interval_ns"]),
            nic + "RetransmitTimeout": _ns(tr.retransmit_timeout_ns),
            nic + "RetryCount": str(tr.retry_count),
            nic + "AckClass": tr.ack_class,
            nic + "CnpClass": tr.cnp_class,
            nic + "RxDrainRate": _bps(tr.rx_drain_gbps * 1000) if tr.rx_drain_gbps else "0bps",
            nic + "RxBufferBytes": str(tr.rx_buffer_bytes),
            nic + "RxPfc": "true" if pfc.enabled else "false",  # a lossy fabric's receiver drops instead
            nic + "NackInterval": _ns(tr.nack_interval_ns),
            nic + "TrackMessageBytes": "true" if track_message_bytes else "false",
            nic + "RateSampleQps": str(int(rate_sample_qps)),
            dq + "ClampTargetRate": "true" if d["clamp_target_rate"] else "false",
            dq + "G": repr(float(d["g"])),
            dq + "AlphaInterval": _ns(d["alpha_update_interval_ns"]),
            dq + "RateDecreaseInterval": _ns(d["rate_decrease_interval_ns"]),
            dq + "RateIncreaseInterval": _ns(d["rate_increase_interval_ns"]),
            dq + "ByteCounter": str(d["byte_counter_bytes"]),
            dq + "FastRecoveryStages": str(d["fast_recovery_stages"]),
            dq + "RateAi": _bps(d["rate_ai_mbps"]) if d["rate_ai_mbps"] else "0bps",
            dq + "RateHai": _bps(d["rate_hai_mbps"]) if d["rate_hai_mbps"] else "0bps",
            dq + "MinRate": _bps(d["min_rate_mbps"]),
            dq + "MinDecreaseFactor": repr(float(d["min_decrease_factor"])),
            "ns3::RdmaCcDctcp::G": repr(float(cfg.dctcp.g)),
            hc + "IntHeaderBytes": str(hp.int_bytes),
            hc + "Eta": repr(float(hp.eta)),
            hc + "MaxStage": str(hp.max_stage),
            hc + "Wai": repr(float(hp.w_ai_bytes)),
            ops + "BaseRtt": _ns(hp.base_rtt_ns or 0),  # T of every CC that needs one (it always was)
            hc + "MinRate": _bps(hp.min_rate_mbps),
            tl + "Alpha": repr(float(tm.alpha)),
            tl + "Beta": repr(float(tm.beta)),
            tl + "TLow": _ns(tm.t_low_ns),
            tl + "THigh": _ns(tm.t_high_ns),
            tl + "MinRtt": _ns(tm.min_rtt_ns),
            tl + "Delta": _bps(tm.delta_mbps) if tm.delta_mbps else "0bps",
            tl + "HaiThreshold": str(tm.hai_threshold),
            tl + "SegmentBytes": str(tm.segment_bytes),
            tl + "MinRate": _bps(tm.min_rate_mbps),
            **swift_defaults(cfg.swift),
            sw + "IntEnabled": "true" if cfg.cc == "hpcc" else "false",
            sw + "PfcEnabled": "true" if pfc.enabled else "false",
            sw + "PfcDynamic": "true" if pfc.threshold == "dynamic" else "false",
            sw + "PfcShift": str(pfc.dynamic_shift),
            sw + "PfcStaticThreshold": str(int(pfc.static_threshold_kb * 1000)),
            sw + "PfcResumeOffset": str(int(pfc.resume_offset_kb * 1000)),
            sw + "PfcPauseQuanta": _ns(pfc.pause_quanta_ns),
            sw + "ReservedPerQueue": str(int(buf.reserved_per_queue_kb * 1000)),
            sw + "EcnEnabled": "true" if cfg.ecn.enabled else "false",
            sw + "EcmpByKey": "true" if cfg.ecmp == "rail" else "false",
            sw + "PipelineLatency": _ns(cfg.per_hop_latency_ns),
            helper + "QueueSampleInterval": _ns(cfg.queue_sample_interval_ns),
            helper + "StallLimit": _ns(cfg.stall_limit_ns),
            # a paused cycle gets the same patience as the no-delivery watchdog
            helper + "DeadlockHoldTime": _ns(cfg.deadlock_hold_ns or cfg.stall_limit_ns),
            helper + "WallLimit": repr(float(cfg.wall_limit_s)),
            helper + "Seed": str(int(self.seed) & 0xFFFFFFFF),
        }
        for name, value in defaults.items():
            sim_cls.SetDefault(name, value)
        sim_cls.SetSeed((int(self.seed) & 0x7FFFFFFF) + 1, cfg.rng_run)

    def _build(self) -> None:
        topo, cfg = self.topology, self.config
        index = {n: i for i, n in enumerate(list(topo.hosts) + list(topo.switches))}
        hdrm, buffer_of = switch_buffers(topo, cfg)
        self._port_links = []
        for link in topo.links:
            self._port_links.append((link.a, link.b))
            self._port_links.append((link.b, link.a))
        import cppyy

        # element by element: compiled adders, no std::vector built from Python (fabric-spec.h)
        spec = cppyy.gbl.ns3.FabricSpec()
        for h in topo.hosts:
            spec.AddHost(h)
        for s in topo.switches:
            spec.AddSwitch(s, buffer_of[s], self._router.switch_salt32(s))
        for link, headroom in zip(topo.links, hdrm):
            kmin, kmax, pmax = port_ecn_bytes(link.rate_gbps, cfg)
            spec.AddLink(index[link.a], index[link.b], link.rate_gbps * 1e9, int(link.delay_ns),
                         kmin, kmax, pmax, headroom)
        self._sim.Build(spec)
        for host, gbps in cfg.transport.rx_drain_gbps_per_host.items():  # slow receivers (checked in check_config)
            self._sim.SetNicAttribute(self._host_index[host], "RxDrainRate", _bps(gbps * 1000))

    # --------------------------------------------------------------- running
    @property
    def now_ns(self) -> int:
        return int(self._sim.Now())

    def check_ends(self, msg: Message) -> None:
        """Both ends known hosts, linked unless the message stays on its host (the accelerated backend
        checks with this too). One test for the common case; the loop only to name the failing end."""
        hosts, unlinked = self._host_index, self._unlinked
        if (msg.src in hosts and msg.dst in hosts
                and not (unlinked and msg.src != msg.dst and (msg.src in unlinked or msg.dst in unlinked))):
            return
        for fld, end in (("src", msg.src), ("dst", msg.dst)):
            if end not in hosts:
                raise NetworkError("unknown host", field=f"message.{fld}", value=end)
            if end in unlinked and msg.src != msg.dst:
                raise NetworkError("host has no link", field=f"message.{fld}", value=end)

    def send(self, msg: Message) -> None:
        t0 = time.perf_counter()
        now = self.now_ns
        if msg.start_ns < now:
            raise UserError(f"message starts before the backend's current time {now} ns",
                            field="message.start_ns", value=msg.start_ns)
        self.check_ends(msg)
        if msg.size_bytes <= 0:
            raise UserError("message size must be > 0", field="message.size_bytes", value=msg.size_bytes)
        if msg.id in self._pending or msg.id in self._fct:
            raise UserError("message id already used", field="message.id", value=msg.id)
        self._start[msg.id] = msg.start_ns
        self._size[msg.id] = msg.size_bytes
        self._pending.add(msg.id)
        # rail mode pins a flow to its source NIC's rail at every switch, as the flow backend does;
        # hash mode: the flow backend's own flow hash, so both backends pick the same paths
        if self._rail is not None:
            fhash = self._rail[msg.src]
        else:
            fhash = self._router.flow_hash32(msg.src, msg.dst, msg.flow_key)
        self._sim.AddMessage(msg.id, self._host_index[msg.src], self._host_index[msg.dst],
                             msg.size_bytes, msg.start_ns, fhash & 0xFFFFFFFF, int(msg.connection),
                             max(0, int(msg.step_bytes)))
        self._call_wall_s += time.perf_counter() - t0

    def advance(self, until_ns: int | None = None) -> list[Completion]:
        t0 = time.perf_counter()
        try:
            if until_ns is None and not self._pending:
                return []
            if until_ns is not None and until_ns < self.now_ns:
                until_ns = self.now_ns
            status = int(self._sim.Run(-1 if until_ns is None else int(until_ns)))
            flat = list(self._sim.DrainCompletions())
            out = []
            for i in range(0, len(flat), 2):
                mid, fin = int(flat[i]), int(flat[i + 1])
                if mid not in self._start:
                    raise Ns3InternalError(f"message {mid} reported complete at {fin} ns but it is not in flight "
                                           f"({'already complete' if mid in self._fct else 'never sent'})")
                self._pending.discard(mid)
                self._fct[mid] = (self._start.pop(mid), fin)
                self._bytes_done += self._size.pop(mid)
                out.append(Completion(mid, fin))
            if status == _INTERNAL:
                raise Ns3InternalError(f"{self._sim.StatusDetail()} at {self.now_ns} ns")
            if status == _TRANSPORT:  # a QP timed out more often than its retry count allows
                raise NetworkError(f"at {self.now_ns} ns: {self._sim.StatusDetail()} (every "
                                   f"{self.config.transport.retransmit_timeout_ns} ns)",
                                   field="network.transport.retry_count", value=self.config.transport.retry_count)
            if status:
                detail = str(self._sim.StatusDetail())
                raise NetworkError(f"{_STATUS.get(status, 'error')} at {self.now_ns} ns with "
                                   f"{len(self._pending)} messages in flight: {detail}",
                                   field="network.backend", value="ns3")
            return out
        finally:
            self._call_wall_s += time.perf_counter() - t0

    def pending(self) -> int:
        return len(self._pending)

    def forget(self, msg_id: int) -> None:
        """A message the accelerated wrapper took out of ns-3 whole (RdmaNic::TrimMessage status 2):
        it will never complete here."""
        self._pending.discard(msg_id)
        self._start.pop(msg_id, None)
        self._size.pop(msg_id, None)

    def message_rx_bytes(self, msg: Message) -> int:
        """Bytes of an in-progress message delivered so far (needs track_message_bytes)."""
        if msg.id in self._fct:
            return msg.size_bytes
        return int(self._sim.MessageRxBytes(self._host_index[msg.dst], msg.id))

    # ------------------------------------------------ the accelerator's interface
    # What the accelerated backend (accel.py) asks of plain packet level besides NetworkBackend's
    # send/advance/pending/stats: ports are indexed as ``port_links`` lists them (each link's two
    # directions, in topology.links order: the index netbackend.routing.Router uses for a directed link);
    # hosts by name; messages by the id they were sent with.

    @property
    def port_links(self) -> list[tuple[str, str]]:
        """(from node, to node) of each directed port, in port index order."""
        return self._port_links

    def port_names(self) -> list[str]:
        """ns-3's name of each port (HeterosimRdmaSim::PortNames), in port index order."""
        return [str(n) for n in self._sim.PortNames()]

    def port_stat(self, name: str) -> list[float]:
        """A per-port statistic (HeterosimRdmaSim::PortStat: tx_bytes, tx_packets, ecn_marks, paused_ns,
        queue_bytes, queue_sample_sum, ...), in port index order."""
        return self._port_stat(name)

    def queue_samples(self):
        """The flattened (ns, port index, bytes) queue samples (HeterosimRdmaSim::QueueSamples), for
        :func:`hot_port_samples`."""
        return self._sim.QueueSamples()

    def counter(self, name: str) -> int:
        """One of the fabric-wide counters ``stats().extra["counters"]`` lists (e.g. ``ce_received``), now."""
        idx = self._counter_index.get(name)
        if idx is None:
            idx = self._counter_index[name] = [str(n) for n in self._sim.CounterNames()].index(name)
        return int(self._sim.CounterValues()[idx])

    def message_size(self, msg_id: int) -> int:
        """Bytes of in-flight message ``msg_id`` as sent."""
        return self._size[msg_id]

    def delivered_bytes(self, dst: str, msg_id: int) -> int:
        """Payload bytes of in-flight message ``msg_id`` that host ``dst`` received so far (needs
        track_message_bytes): RdmaNic's per-message receive count."""
        return int(self._sim.MessageRxBytes(self._host_index[dst], msg_id))

    def connection_dcqcn_state(self, src: str, dst: str, connection: int, busy_ok: bool) -> list[float]:
        """RdmaNic::ConnectionDcqcnState of connection ``connection`` from ``src`` to ``dst``: (line rate,
        AI, HAI, fast-recovery stages, increase interval, byte counter) then per QP (RC, RT, stages counted by
        the timer and by the byte counter, next increase, CNP seen, alpha); empty when it cannot be followed
        (data or a cut check outstanding, unless ``busy_ok`` allows the data)."""
        hi = self._host_index
        return [float(x) for x in self._sim.ConnectionDcqcnState(hi[src], hi[dst], connection, busy_ok)]

    def save_connection_cc(self, src: str, dst: str, connection: int) -> list[float]:
        """RdmaNic::SaveConnectionCc: the connection's congestion-control state (empty: none, or not one
        DCQCN QP), for :meth:`restore_connection_cc`."""
        hi = self._host_index
        return [float(v) for v in self._sim.SaveConnectionCc(hi[src], hi[dst], connection)]

    def restore_connection_cc(self, src: str, dst: str, connection: int, state: list[float]) -> bool:
        """RdmaNic::RestoreConnectionCc: give the connection's QP a saved state (its queues start empty)."""
        hi = self._host_index
        return bool(self._sim.RestoreConnectionCc(hi[src], hi[dst], connection, state))

    def trim_message(self, src: str, dst: str, connection: int, msg_id: int) -> tuple[float, float, float]:
        """RdmaNic::TrimMessage: take the unsent NCCL steps of in-flight message ``msg_id`` out of ns-3.
        (status, unsent bytes of the request it keeps, bytes removed): status 0 nothing taken (its last step is being sent); 1 ns-3
        keeps the work request being sent and completes the message when that is delivered; 2 nothing of
        it was sent and it left ns-3 whole (call :meth:`forget`)."""
        hi = self._host_index
        status, kept, removed = (float(x) for x in self._sim.TrimMessage(hi[src], hi[dst], connection, msg_id))
        return status, kept, removed

    # ------------------------------------------------------------ statistics
    def _port_stat(self, name: str) -> list[float]:
        return [float(v) for v in self._sim.PortStat(name)]

    def stats(self) -> NetStats:
        names = [str(n) for n in self._sim.PortNames()]
        tx = self._port_stat("tx_bytes")
        link_bytes = {self._port_links[i]: int(tx[i]) for i in range(len(tx))}

        def per_port(stat: str, as_int: bool = True) -> dict[str, Any]:
            vals = self._port_stat(stat)
            return {names[i]: (int(v) if as_int else v) for i, v in enumerate(vals) if v}

        counters = dict(zip((str(n) for n in self._sim.CounterNames()),
                            (int(v) for v in self._sim.CounterValues())))
        pause_sent = per_port("pfc_pause_sent")
        pause_recv = per_port("pfc_pause_recv")
        paused_ns = per_port("paused_ns")
        marks = per_port("ecn_marks")
        drops = per_port("drops")
        mean_q = per_port("mean_queue_bytes", as_int=False)
        max_q = per_port("max_queue_bytes")
        hot, samples = hot_port_samples(mean_q, names, self._sim.QueueSamples())
        rflat = list(self._sim.RateSamples())
        rates = [(int(rflat[i]), self.topology.hosts[int(rflat[i + 1])], int(rflat[i + 2]),
                  rflat[i + 3] / 1e9) for i in range(0, len(rflat), 4)]
        run_wall = float(self._sim.RunWallSeconds())
        calls = max(self._call_wall_s, 1e-12)
        extra = {
            "pfc_pause_frames": pause_sent,
            "pfc_pause_frames_total": sum(pause_sent.values()),
            "pfc_pause_frames_received": pause_recv,
            "pfc_resume_frames": per_port("pfc_resume_sent"),
            "pfc_paused_ns": paused_ns,
            "pfc_paused_ns_total": sum(paused_ns.values()),
            "ecn_marks": sum(marks.values()),
            "ecn_marks_per_port": marks,
            "cnps_sent": counters["cnps_sent"],
            "cnps_received": counters["cnps_received"],
            "drops": sum(drops.values()),
            "drops_per_port": drops,
            "mean_queue_bytes": mean_q,
            "max_queue_bytes": max_q,
            "queue_samples": samples,
            "hot_ports": hot,
            "rate_samples_gbps": rates,
            "counters": counters,
            "packet_hops": int(sum(self._port_stat("tx_packets"))),
            "ns3_wall_s": run_wall,
            "backend_call_wall_s": self._call_wall_s,
            "python_overhead_fraction": max(0.0, (calls - run_wall) / calls),
            "setup_wall_s": self.setup_wall_s,
        }
        return NetStats(messages=len(self._fct), bytes_delivered=self._bytes_done,
                        fct_ns=dict(self._fct), link_bytes=link_bytes, extra=extra)

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._sim.Destroy()
        driver.release(self)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def create_ns3_backend(topology: NetTopology, config: NetworkConfig | None = None, seed: int = 0,
                       **kw) -> NetworkBackend:
    """The ns-3 backend ``config`` asks for: plain packet level (:class:`Ns3Backend`) with
    ``network.acceleration.mode: off``, else the accelerated backend over it
    (:class:`netbackend.ns3.accel.AcceleratedNs3Backend`).  ``kw``: ``track_message_bytes``,
    ``rate_sample_qps`` (Ns3Backend's).  The registry's ``create_backend("ns3", ...)`` calls this."""
    if config is not None and config.acceleration.mode != "off":
        from netbackend.ns3.accel import AcceleratedNs3Backend

        return AcceleratedNs3Backend(topology, config, seed, **kw)
    return Ns3Backend(topology, config, seed, **kw)


def _unlinked_hosts(topology: NetTopology) -> set[str]:
    """Hosts with no link (they can neither send nor receive; ``check_config`` has vetted the rest)."""
    linked = {end for link in topology.links for end in (link.a, link.b)}
    return {h for h in topology.hosts if h not in linked}
