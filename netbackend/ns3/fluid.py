"""Python side of the fluid DCQCN collision model (model/fluid-net.h, which says what it models).

:func:`episode_class` loads ``ns3::FluidNet`` from the module's library (the same build the
ns-3 backend uses; its header holds standard-library types only, like the binding facade), and
:func:`dcqcn_params` fills ``ns3::DcqcnParams`` with the values RdmaNic::Setup would use for a NIC
of a given line rate, so a fluid episode and packet level run the same reaction point.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

from netbackend.ns3.wire import data_wire_bytes

_lock = threading.Lock()
_cls = None


def episode_class():
    """``ns3::FluidNet``, building and loading the module on first use."""
    global _cls
    with _lock:
        if _cls is None:
            from netbackend.ns3.build import ensure_built
            from netbackend.ns3.driver import _quiet_stderr, sim_class

            sim_class()  # loads the library and adds its include path
            with _quiet_stderr():
                import cppyy

                cppyy.include(str(ensure_built().include_dir / "ns3" / "fluid-net.h"))
            _cls = cppyy.gbl.ns3.FluidNet
        return _cls


def dcqcn_params(resolved: dict, line_bps: float):
    """``ns3::DcqcnParams`` from :func:`netbackend.config.resolved_dcqcn` for a NIC at ``line_bps``,
    and the receiver's CNP interval (0: CE echoed on the next ACK).  R_AI / R_HAI left None scale
    with the line rate as RdmaNic::Setup does (5 and 50 Mb/s per 25 Gb/s)."""
    import cppyy

    episode_class()
    p = cppyy.gbl.ns3.DcqcnParams()
    p.g = resolved["g"]
    p.alphaIntervalNs = max(1, resolved["alpha_update_interval_ns"])
    p.rateDecreaseIntervalNs = resolved["rate_decrease_interval_ns"]
    p.rateIncreaseIntervalNs = max(1, resolved["rate_increase_interval_ns"])
    p.byteCounterBytes = resolved["byte_counter_bytes"]
    p.fastRecoveryStages = resolved["fast_recovery_stages"]
    p.rateAiBps = resolved["rate_ai_mbps"] * 1e6 if resolved["rate_ai_mbps"] else line_bps * 5.0 / 25000.0
    p.rateHaiBps = resolved["rate_hai_mbps"] * 1e6 if resolved["rate_hai_mbps"] else line_bps * 50.0 / 25000.0
    p.minRateBps = resolved["min_rate_mbps"] * 1e6
    p.lineRateBps = line_bps
    p.vendor = resolved["reaction"] == "vendor"
    p.clampTargetRate = resolved["clamp_target_rate"]
    p.minDecreaseFactor = resolved.get("min_decrease_factor") or 0.0  # as RdmaCcDcqcn's MinDecreaseFactor
    cnp = resolved["cnp_interval_ns"] if resolved["cnp_mode"] == "interval" else 0
    return p, cnp


def fluid_threads(configured: int | None) -> int:
    """``acceleration.fluid_threads``, None resolved: 2 where this process may run on 2 CPUs or more
    (its affinity, as a container or ``taskset`` sets it), else 1."""
    if configured is not None:
        return configured
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 if cpus >= 2 else 1


MAX_QUEUE_SAMPLES = 2_000_000
"""As RdmaNetworkHelper's MaxQueueSamples default: the model's queue samples stop there."""


class FluidSide:
    """The traffic the accelerated backend gives the fluid model (``collisions: fluid``).

    One ``ns3::FluidNet`` for the whole run: a port per directed link a message crosses (made on
    first use, with the switch's ECN thresholds as the ns-3 backend sets them), a NIC per host, a
    QP per connection (its DCQCN state persists across the connection's messages, as NCCL keeps
    QPs).  Paths are the Router's, the same ECMP choice packet level makes."""

    def __init__(self, router, config, seed: int, delay_ns, topo, port_links: list[tuple[str, str]]):
        from netbackend.config import resolved_dcqcn

        self.net = episode_class()(config.acceleration.fluid_dt_ns, seed)
        self.threads = fluid_threads(config.acceleration.fluid_threads)
        self.net.SetThreads(self.threads)
        self.net.SetQueueSampling(config.queue_sample_interval_ns, MAX_QUEUE_SAMPLES)
        self.router = router
        self.cfg = config
        self._delay_ns = delay_ns
        self._dq = resolved_dcqcn(config)
        self._ports: dict[int, int] = {}
        self._nics: dict[str, int] = {}
        self._flows: dict = {}
        self._posted: dict[int, float] = {}
        """QP -> wire bytes posted on it so far (where its next message starts in its byte stream)."""
        self._piece: dict[int, tuple[int, float, float, int]] = {}
        """Message (piece) id -> (QP, its first wire byte in the QP's stream, wire bytes, payload bytes)."""
        self._nic_link: dict[int, int] = {}
        """QP -> the link its NIC sends on (the model has no port there: its bytes are the QP's sends)."""
        self._params: dict[float, tuple] = {}
        self._traj: dict[float, tuple] = {}
        self._buf: list[tuple[float, int]] = []
        self._pending = 0
        self.pkt = float(data_wire_bytes(config))
        self.topo = topo
        self._port_links = port_links
        self._switch_id = {s: i for i, s in enumerate(topo.switches)}

    def _port(self, p: int) -> int:
        fp = self._ports.get(p)
        if fp is None:
            from netbackend.config import port_ecn_bytes

            rate = self.router.link_rate_gbps[p]
            kmin, kmax, pmax = (port_ecn_bytes(rate, self.cfg) if self.cfg.ecn.enabled
                                else (float("inf"), float("inf"), 0.0))
            fp = self._ports[p] = self.net.AddPort(rate * 1e9, kmin, kmax, pmax)
            sw = self._switch_id.get(self._port_links[p][0])
            if sw is not None:
                self.net.SetPortSwitch(fp, sw)
        return fp

    def flow(self, key, src: str, ports: list[int], t: int, credits: int = 0) -> int:
        """The fluid QP of connection ``key`` (made on first use, fresh at line rate; ``credits``:
        NCCL steps in flight before a clear-to-send, 0 for none, as RdmaNic gives connections)."""
        fid = self._flows.get(key)
        if fid is None:
            r = self.router
            line = r.link_rate_gbps[ports[0]] * 1e9
            nic = self._nics.get(src)
            if nic is None:
                nic = self._nics[src] = self.net.AddNic(line)
            params, cnp = self._params_at(line)
            hops = [-1.0, line, float(self._delay_ns(ports[0]))]
            for p in ports[1:]:
                hops += [float(self._port(p)), r.link_rate_gbps[p] * 1e9, float(self._delay_ns(p))]
            # an ACK comes back over as many links, each switch adding its pipeline latency
            lat = self.cfg.per_hop_latency_ns
            ack = sum(64 * 8 / r.link_rate_gbps[p] + r.link_delay_ns[p] for p in ports) + lat * (len(ports) - 1)
            fid = self._flows[key] = self.net.AddFlow(nic, hops, self.pkt, float(ack), params, cnp, t)
            self._nic_link[fid] = ports[0]
            if credits:
                self.net.SetStepCredits(fid, credits)
        return fid

    def post(self, key, mid: int, src: str, ports: list[int], wire_bytes: float, t: int,
             step_wire_bytes: float = 0.0, credits: int = 0, *, payload_bytes: int) -> None:
        fid = self.flow(key, src, ports, t, credits)
        self.net.Post(fid, mid, t, float(wire_bytes), float(step_wire_bytes))
        begin = self._posted.get(fid, 0.0)
        self._posted[fid] = begin + float(wire_bytes)
        self._piece[mid] = (fid, begin, float(wire_bytes), payload_bytes)
        self._pending += 1

    def delivered_payload(self, mid: int) -> int:
        """Payload of message ``mid`` past its receiver so far: its whole packets delivered (a message is
        delivered in order on its QP, after the QP's earlier ones)."""
        fid, begin, wire, payload = self._piece[mid]
        got = min(max(0.0, self.net.FlowProgress(fid)[2] - begin), wire)
        if got >= wire - 1e-6:
            return payload
        return min(payload, int(got // self.pkt) * (self.cfg.mtu_bytes))

    def pending(self) -> int:
        return self._pending

    def peek(self, until_ns: int | None) -> float | None:
        """The earliest delivery at or before ``until_ns`` (None: no limit), running the model that
        far; None if there is none."""
        if not self._buf:
            self.net.Run(-1 if until_ns is None else until_ns)
            d = self.net.DrainCompletions()
            if d.size():  # most runs deliver nothing: converting the empty vector cost 1.6 us a call
                d = list(d)
                self._buf = sorted(((d[j + 1], int(d[j])) for j in range(0, len(d), 2)), reverse=True)
        if not self._buf or (until_ns is not None and self._buf[-1][0] > until_ns):
            return None
        return self._buf[-1][0]

    def pop(self) -> list[tuple[int, float]]:
        """(message id, finish ns) of the deliveries at the time :meth:`peek` returned."""
        first = self._buf[-1][0]
        out = []
        while self._buf and self._buf[-1][0] <= first:
            fin, mid = self._buf.pop()
            out.append((mid, fin))
            self._piece.pop(mid, None)
        self._pending -= len(out)
        return out

    def _params_at(self, line_bps: float) -> tuple:
        if line_bps not in self._params:
            self._params[line_bps] = dcqcn_params(self._dq, line_bps)
        return self._params[line_bps]

    def trajectory_params(self, line_bps: float) -> tuple[float, float, int, float, int]:
        """(R_AI, R_HAI bit/s, fast-recovery stages, increase interval ns, byte counter) at a line rate
        (kept: read for every message that checks its connection's state)."""
        v = self._traj.get(line_bps)
        if v is None:
            p = self._params_at(line_bps)[0]
            v = self._traj[line_bps] = (float(p.rateAiBps), float(p.rateHaiBps), int(p.fastRecoveryStages),
                                        float(p.rateIncreaseIntervalNs), int(p.byteCounterBytes))
        return v

    def _by_port(self, values, nonzero: bool = False) -> dict[int, float]:
        """A per-port vector of the model's, by the inner backend's port index (``nonzero``: ports with a value)."""
        v = list(values)
        return {p: v[fp] for p, fp in self._ports.items() if v[fp] or not nonzero}

    def link_tx_bytes(self) -> dict[int, float]:
        """Wire bytes the model sent per link (inner backend's port index): its switch ports' and, on each
        NIC's own link, what its QPs sent (FlowProgress)."""
        out = self._by_port(self.net.PortTxBytes())
        for fid, p in self._nic_link.items():
            sent = self.net.FlowProgress(fid)[1]
            if sent:
                out[p] = out.get(p, 0.0) + sent
        return out

    def port_max_queue(self) -> dict[int, float]:
        """The deepest each port's queue got in the model, bytes; ports without none."""
        return self._by_port(self.net.PortMaxQueue(), nonzero=True)

    def queue_integral(self) -> dict[int, float]:
        """Per port (inner backend's index), its queue's integral over time in the model, bytes x ns; ports
        without none."""
        return self._by_port(self.net.PortQueueIntegral(), nonzero=True)

    def queue_samples(self, ports) -> list[tuple[int, int, float]]:
        """(ns, inner backend's port index, bytes) of the model's queues on ``ports`` (inner indices) every
        ``queue_sample_interval_ns``."""
        import cppyy

        mine = [self._ports[p] for p in ports if p in self._ports]
        if not mine:
            return []
        back = {fp: p for p, fp in self._ports.items()}
        v = list(self.net.QueueSamples(cppyy.gbl.std.vector["uint32_t"](mine)))
        return [(int(v[j]), back[int(v[j + 1])], v[j + 2]) for j in range(0, len(v), 3)]

    def port_marks(self) -> dict[int, float]:
        """Expected ECN marks per port (as :meth:`counters`); ports without none."""
        return self._by_port(self.net.PortMarks(), nonzero=True)

    def trim(self, key) -> list[tuple[int, float, float, float]]:
        """(message id, wire kept, wire removed, wire sent) of the connection's messages whose
        unsent bytes left the model (FluidNet::Trim)."""
        fid = self._flows[key]
        d = list(self.net.Trim(fid))
        out = [(int(d[j]), d[j + 1], d[j + 2], d[j + 3]) for j in range(0, len(d), 4)]
        for mid, kept, _, _ in out:
            q, begin, _, payload = self._piece[mid]
            self._piece[mid] = (q, begin, kept, min(payload, round(kept / self.pkt) * self.cfg.mtu_bytes))
        self._posted[fid] = self.net.FlowProgress(fid)[0]
        return out

    def forget(self, mid: int) -> None:
        """Posted message ``mid`` left the model whole (trimmed before its first byte)."""
        self._pending -= 1
        self._piece.pop(mid, None)

    def quiet(self, key) -> bool:
        """No CNP, mark or cut check in flight for the connection: nothing will cut its rate."""
        prog = self.net.FlowProgress(self._flows[key])
        return prog[3] == 0 and prog[4] == 0 and prog[5] < 0

    def queued_over(self, ports, limit_bytes: float) -> bool:
        """Whether any of ``ports`` (link indices) has more than ``limit_bytes`` queued in the model
        (a port the model never made has none).  Reads only those ports: converting every port's
        depth was a tenth of the migration check's time on the H-suite."""
        v = self.net.PortQueue()
        return any(v[self._ports[p]] > limit_bytes for p in ports if p in self._ports)

    def state(self, key, t: int) -> Sequence[float]:
        """DcqcnRp::Save of the connection's QP at ``t``, indexed in place (a few fields are read;
        a list of all of them cost more than the call)."""
        return self.net.SaveState(self._flows[key], t)

    def idle_state(self, key, t: int) -> Sequence[float] | None:
        """The connection's DCQCN state at ``t`` when its QP has nothing pending, else None."""
        fid = self._flows.get(key)
        if fid is None or not self.net.Idle(fid):
            return None
        return self.state(key, t)

    def work(self) -> dict:
        steps, flow_steps, parallel = (float(x) for x in self.net.Work())
        return {"steps": int(steps), "flow_steps": int(flow_steps), "parallel_steps": int(parallel),
                "threads": self.threads,
                "dt_ns": self.cfg.acceleration.fluid_dt_ns}

    def pfc_check(self) -> dict:
        """Whether a PAUSE could have fired where the fluid model queued bytes (it models no PFC).

        A switch PAUSEs an ingress whose shared bytes pass its threshold (RdmaSwitchNode::
        GetPfcThreshold: static, or the free shared buffer >> shift).  The model keeps, per
        ingress (the link a flow's bytes entered the switch by), the most bytes it had queued at
        once, and per switch the most bytes queued in all its ports at once; an ingress whose
        maximum stays under the threshold that the switch's maximum would leave (a lower bound
        on the threshold at any instant) can never have paused.  Switches where one does not
        are listed: their fluid results lack whatever PFC would have done there."""
        from netbackend.ns3 import switch_buffers

        pfc, buf = self.cfg.pfc, self.cfg.buffer
        if not pfc.enabled:
            return {"possible_at": [], "how": "pfc.enabled false"}
        topo = self.topo
        hdrm, buffer_of = switch_buffers(topo, self.cfg)
        headroom = {s: 0 for s in topo.switches}
        nports = {s: 0 for s in topo.switches}
        for link, h in zip(topo.links, hdrm):
            for end in (link.a, link.b):
                if end in headroom:
                    headroom[end] += h
                    nports[end] += 1
        sw_max = list(self.net.SwitchMaxQueue())
        ing = list(self.net.IngressMaxQueue())
        worst: dict[int, float] = {}
        for j in range(0, len(ing), 2):
            sid = int(ing[j])
            worst[sid] = max(worst.get(sid, 0.0), ing[j + 1])
        reserved = buf.reserved_per_queue_kb * 1000.0
        out = []
        for sid, q in sorted(worst.items()):
            sw = topo.switches[sid]
            if pfc.threshold == "static":
                thr = pfc.static_threshold_kb * 1000.0
            else:
                used = sw_max[sid] if sid < len(sw_max) else 0.0
                thr = max(buffer_of[sw] - headroom[sw] - reserved * nports[sw] - used, 0.0) / 2 ** pfc.dynamic_shift
            if q - reserved > thr:
                out.append({"switch": sw, "ingress_queued_bytes": round(q), "threshold_bytes": round(thr)})
        return {"possible_at": out,
                "how": "per ingress, the most bytes the fluid model queued at once against the PFC threshold "
                       "the switch's most bytes at once would leave (RdmaSwitchNode::GetPfcThreshold); listed "
                       "switches may have paused at packet level, which the fluid model does not do"}

    def counters(self) -> dict:
        """ECN marks (expected), CNPs and rate cuts.  With CE echoed on every ACK (cnp_mode
        ack_piggyback) a receiver flags one ACK per marked packet, so CNPs are the marks; with
        separate CNPs (interval) they are the ones the model sampled."""
        marks = float(sum(self.net.PortMarks()))
        piggyback = self._dq["cnp_mode"] != "interval"
        return {"ecn_marks": marks, "cnps": int(round(marks)) if piggyback else int(self.net.Cnps()),
                "rate_cuts": int(self.net.Cuts())}
