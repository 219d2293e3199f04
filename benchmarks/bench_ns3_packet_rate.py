"""Packet-hop rate of the ns-3 RoCE backend vs raw ns-3 PointToPoint devices.

Prints figures (not a timed test).  The baseline is built in the same run: a
C++ feeder keeps one PointToPointNetDevice queue full over a 100 Gb/s link
(shared/ns3-wheel-notes.md measured ~350k packets/s of 4 KB that way).  The
backend figure counts every frame a port serializes (data, ACK, CNP, PFC) and
separately data packets x hops; the target is >= 0.5x the baseline.

Run: .venv/bin/python benchmarks/bench_ns3_packet_rate.py [--quick]
"""
from __future__ import annotations

import argparse
import time

from netbackend.base import Message
from netbackend.config import NetworkConfig
from netbackend.ns3 import Ns3Backend, driver
from netbackend.ns3 import scenarios as sc


def raw_p2p(packets: int, packet_bytes: int = 4174) -> float:
    wall, delivered, _sim_s = driver.sim_class().RawP2pBaseline(packets, packet_bytes, 100e9)
    assert int(delivered) == packets
    return packets / wall


def backend_run(name: str, topo, msgs, cfg: NetworkConfig, hops_per_packet: float) -> dict:
    t0 = time.perf_counter()
    with Ns3Backend(topo, cfg) as b:
        for m in msgs:
            b.send(m)
        while b.pending():
            b.advance()
        st = b.stats()
        sim_ns = b.now_ns
    wall = time.perf_counter() - t0
    e = st.extra
    ns3 = e["ns3_wall_s"]
    data_hops = e["counters"]["data_packets_sent"] * hops_per_packet
    return {"name": name, "frames_per_s": e["packet_hops"] / ns3, "data_hops_per_s": data_hops / ns3,
            "sim_GBps_per_wall_s": st.bytes_delivered / wall / 1e9, "sim_ms": sim_ns / 1e6,
            "wall_s": wall, "python_fraction": e["python_overhead_fraction"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    args = ap.parse_args()
    scale = 0.25 if args.quick else 1.0
    base = raw_p2p(int(400_000 * scale))
    sc.single_flow(size_bytes=100_000)  # warm-up: first calls JIT the cppyy wrappers
    print(f"raw ns-3 PointToPoint, 1 hop, 4174 B frames: {base:,.0f} packets/s")
    runs = []
    star = sc.star_topology(8)
    size = int(50_000_000 * scale)
    for cc in ("none", "dcqcn"):
        msgs = [Message(i, f"s{i}", "r0", size, 0) for i in range(8)]
        runs.append(backend_run(f"incast 8->1 star, cc={cc}", star, msgs, NetworkConfig(backend="ns3", cc=cc), 2))
    tier = sc.two_tier_topology(8)
    msgs = [Message(i, f"s{i}", "r0", size, 0) for i in range(8)]
    runs.append(backend_run("incast 8->1 two-tier, dcqcn", tier, msgs, NetworkConfig(backend="ns3"), 4))
    for r in runs:
        print(f"{r['name']:32s} frames/s {r['frames_per_s']:>11,.0f} ({r['frames_per_s'] / base:4.2f}x raw)  "
              f"data hops/s {r['data_hops_per_s']:>11,.0f} ({r['data_hops_per_s'] / base:4.2f}x raw)  "
              f"simulated {r['sim_GBps_per_wall_s']:.2f} GB per wall-s  ({r['sim_ms']:.1f} ms sim in "
              f"{r['wall_s']:.2f} s, python {100 * r['python_fraction']:.1f}%)")


if __name__ == "__main__":
    main()
