"""Canned validation scenarios for the ns-3 backend (tests, benchmarks, sweeps).

Each returns plain Python numbers, so it can run in a child process through
:func:`netbackend.ns3.run_isolated`.  Topologies and parameters follow
shared/network-reference.md (100 Gb/s hosts, 1 us links).
"""
from __future__ import annotations

import time

from netbackend.base import Message
from netbackend.config import NetworkConfig
from netbackend.ns3.wire import data_wire_bytes, header_bytes
from netbackend.topo import Link, NetTopology


def wire_bytes(size_bytes: int, cfg: NetworkConfig) -> list[int]:
    """Per-packet wire sizes of a message (payload + per-packet headers)."""
    hdr = header_bytes(cfg)
    full, rest = divmod(size_bytes, cfg.mtu_bytes)
    return [cfg.mtu_bytes + hdr] * full + ([rest + hdr] if rest else [])


def store_and_forward_ns(packets: list[int], rates_gbps: list[float], delays_ns: list[int]) -> float:
    """Analytical finish time of a packet train over store-and-forward hops.

    finish(k, h) = max(arrival(k, h), finish(k-1, h)) + size_k / rate_h; the
    arrival at hop h+1 is finish(k, h) + delay_h.
    """
    prev = [0.0] * len(rates_gbps)
    for size in packets:
        t = 0.0
        for h, (rate, delay) in enumerate(zip(rates_gbps, delays_ns)):
            t = max(t, prev[h]) + size * 8 / rate
            prev[h] = t
            t += delay
    return t


def single_flow(size_bytes: int = 10_000_000, rate_gbps: float = 100.0, delay_ns: int = 1000,
                cfg: NetworkConfig | None = None) -> dict:
    """One flow h0 -> s0 -> h1 on an idle path."""
    from netbackend.ns3 import create_ns3_backend

    cfg = cfg or NetworkConfig(backend="ns3")
    topo = NetTopology(hosts=["h0", "h1"], switches=["s0"],
                       links=[Link("h0", "s0", rate_gbps, delay_ns), Link("s0", "h1", rate_gbps, delay_ns)])
    with create_ns3_backend(topo, cfg) as b:
        b.send(Message(1, "h0", "h1", size_bytes, 0))
        (c,) = b.advance()
        extra = b.stats().extra
    pkts = wire_bytes(size_bytes, cfg)
    # the switch's pipeline latency adds to the link it transmits on
    analytic = store_and_forward_ns(pkts, [rate_gbps] * 2, [delay_ns, delay_ns + cfg.per_hop_latency_ns])
    efficiency = size_bytes / sum(pkts)
    # Goodput of the steady train: payload over the time the first link was busy.
    return {"fct_ns": c.finish_ns, "analytic_fct_ns": analytic,
            "goodput_gbps": size_bytes * 8 / (c.finish_ns - (analytic - sum(pkts) * 8 / rate_gbps)),
            "expected_goodput_gbps": rate_gbps * efficiency, "drops": extra["drops"]}


def star_topology(n_senders: int, rate_gbps: float = 100.0, delay_ns: int = 1000) -> NetTopology:
    hosts = ["r0"] + [f"s{i}" for i in range(n_senders)]
    return NetTopology(hosts=hosts, switches=["sw0"], links=[Link(h, "sw0", rate_gbps, delay_ns) for h in hosts])


def two_tier_topology(n_senders: int, rate_gbps: float = 100.0, uplink_gbps: float = 400.0,
                      delay_ns: int = 1000) -> NetTopology:
    """Receiver r0 under leaf0, senders under leaf1, leaf0 - spine0 - leaf1 uplinks."""
    senders = [f"s{i}" for i in range(n_senders)]
    links = [Link("r0", "leaf0", rate_gbps, delay_ns)]
    links += [Link(s, "leaf1", rate_gbps, delay_ns) for s in senders]
    links += [Link("leaf0", "spine0", uplink_gbps, delay_ns), Link("leaf1", "spine0", uplink_gbps, delay_ns)]
    return NetTopology(hosts=["r0"] + senders, switches=["leaf0", "leaf1", "spine0"], links=links)


def incast(n_senders: int, size_bytes: int = 20_000_000, cfg: NetworkConfig | None = None,
           two_tier: bool = False, window_ns: int = 50_000, seed: int = 0, steady_fraction: float = 0.3,
           start_spread_ns: int = 0) -> dict:
    """N -> 1 incast; per-window goodput of every flow from delivered bytes.

    Steady state = the last ``steady_fraction`` of the time before the first
    flow finishes (DCQCN has converged by then for these sizes).
    """
    from netbackend.ns3 import create_ns3_backend

    cfg = cfg or NetworkConfig(backend="ns3")
    topo = two_tier_topology(n_senders) if two_tier else star_topology(n_senders)
    wall0 = time.perf_counter()
    msgs = [Message(i, f"s{i}", "r0", size_bytes, i * start_spread_ns) for i in range(n_senders)]
    windows: list[tuple[int, list[int]]] = []
    fct: dict[int, int] = {}
    with create_ns3_backend(topo, cfg, seed, track_message_bytes=True) as b:
        for m in msgs:
            b.send(m)
        t = 0
        while b.pending():
            t += window_ns
            while True:
                done = b.advance(t)
                for c in done:
                    fct[c.id] = c.finish_ns
                if not done or b.now_ns >= t:
                    break
            windows.append((t, [b.message_rx_bytes(m) for m in msgs]))
        st = b.stats()
    wall = time.perf_counter() - wall0
    first = min(fct.values())
    lo = first - steady_fraction * first
    steady = [(t, v) for t, v in windows if lo <= t <= first - window_ns]
    rate = 100.0
    eff = cfg.mtu_bytes / data_wire_bytes(cfg)
    per_flow = [(steady[-1][1][i] - steady[0][1][i]) * 8 / (steady[-1][0] - steady[0][0])
                for i in range(n_senders)] if len(steady) >= 2 else [0.0] * n_senders
    total = sum(per_flow)
    jain = total ** 2 / (n_senders * sum(x * x for x in per_flow)) if total > 0 else 0.0
    agg = []  # aggregate goodput per window (Gb/s), for convergence times
    for (t0, v0), (t1, v1) in zip(windows, windows[1:]):
        agg.append((t1, sum((b1 or size_bytes) - (b0 or 0) if b1 or b0 else 0 for b0, b1 in zip(v0, v1)) * 8 / (t1 - t0)))
    bottleneck = "leaf0->r0" if two_tier else "sw0->r0"
    qs = [q for tq, p, q in st.extra["queue_samples"] if p == bottleneck and lo <= tq <= first]
    e = st.extra
    return {
        "fct_ns": fct, "first_finish_ns": first, "jain": jain, "per_flow_gbps": per_flow,
        "utilization": total / (rate * eff), "drops": e["drops"],
        "pfc_pause_frames": e["pfc_pause_frames"], "pfc_pause_frames_total": e["pfc_pause_frames_total"],
        "pfc_paused_ns": e["pfc_paused_ns"], "pfc_paused_ns_total": e["pfc_paused_ns_total"],
        "ecn_marks": e["ecn_marks"], "cnps": e["cnps_sent"],
        "mean_queue_bytes": e["mean_queue_bytes"].get(bottleneck, 0.0),
        "max_queue_bytes": e["max_queue_bytes"].get(bottleneck, 0),
        "steady_queue_mean_bytes": sum(qs) / len(qs) if qs else 0.0,
        "steady_queue_max_bytes": max(qs) if qs else 0,
        "aggregate_gbps": agg, "wall_s": wall, "ns3_wall_s": e["ns3_wall_s"],
        "packet_hops": e["packet_hops"], "python_overhead_fraction": e["python_overhead_fraction"],
    }


def convergence_time_ns(aggregate_gbps: list[tuple[int, float]], threshold_gbps: float,
                        end_ns: int) -> int:
    """Time after which aggregate goodput stays >= threshold until ``end_ns`` (first finish)."""
    t_conv = 0
    for t, g in aggregate_gbps:
        if t <= end_ns and g < threshold_gbps:
            t_conv = t
    return t_conv


def run_fcts(topo: NetTopology, msgs: list[Message], cfg: NetworkConfig, seed: int = 0) -> dict[int, int]:
    """Finish times of a message set on ``cfg.backend`` (determinism and agreement checks)."""
    from netbackend.registry import create_backend

    out: dict[int, int] = {}
    with create_backend(cfg.backend, topo, cfg, seed) as b:
        for m in msgs:
            b.send(m)
        while b.pending():
            for c in b.advance():
                out[c.id] = c.finish_ns
    return out
