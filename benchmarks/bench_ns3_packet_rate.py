"""Packet-hop rate of the ns-3 RoCE backend vs raw ns-3 PointToPoint devices.

Prints figures (not a timed test).  The baseline is built in the same run: a
C++ feeder keeps one PointToPointNetDevice queue full over a 100 Gb/s link
(shared/ns3-wheel-notes.md measured ~350k packets/s of 4 KB that way).  The
backend figure counts every frame a port serializes (data, ACK, CNP, PFC) and
separately data packets x hops; the target is >= 0.5x the baseline.

Run: .venv/bin/python benchmarks/bench_ns3_packet_rate.py [--quick] [--against REV [--rounds N]]

``--against REV`` measures git revision REV (extracted with ``git archive``, its module built on first
use) and this tree in one run, one process at a time, alternating ``--rounds`` times, and prints the
ratio of the median backend frames per ns-3 wall-second per case (> 1: this tree is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def against(rev: str, rounds: int, quick: bool) -> None:
    """This tree and ``rev`` side by side: one child process at a time, alternating."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import revisions

    here = Path(__file__).resolve().parents[1]
    rates: dict[str, dict[str, list[float]]] = {rev: {}, "this tree": {}}
    walls: dict[str, dict[str, list[float]]] = {rev: {}, "this tree": {}}
    with tempfile.TemporaryDirectory(prefix="hs-rate-") as old:
        revisions.extract(rev, old)
        for r in range(rounds):
            for label, tree in ((rev, old), ("this tree", str(here))):
                # this script in both cases; PYTHONPATH picks the tree whose netbackend it imports
                cmd = [sys.executable, str(Path(__file__).resolve()), "--json"]
                if quick:
                    cmd.append("--quick")
                out = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": tree}, cwd=tree, capture_output=True,
                                     text=True, check=True).stdout
                rows = json.loads(out.strip().splitlines()[-1])
                for row in rows:
                    rates[label].setdefault(row["name"], []).append(row["frames_per_s"])
                    walls[label].setdefault(row["name"], []).append(row["wall_s"])
                print(f"round {r + 1} {label}: " + ", ".join(f"{row['frames_per_s']:,.0f}" for row in rows),
                      flush=True)
    print(f"medians over {rounds} rounds: frames per ns-3 wall-second {rev} | this tree | ratio this/{rev};"
          f" wall s of the whole run {rev} | this tree")
    for name, old_rates in rates[rev].items():
        a, b = statistics.median(old_rates), statistics.median(rates["this tree"][name])
        wa, wb = statistics.median(walls[rev][name]), statistics.median(walls["this tree"][name])
        print(f"  {name:32s} {a:>11,.0f} | {b:>11,.0f} | {b / a:5.3f}    {wa:6.2f} | {wb:6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    ap.add_argument("--json", action="store_true", help="print the runs as one JSON line (for --against)")
    ap.add_argument("--against", metavar="REV", help="also measure git revision REV, side by side")
    ap.add_argument("--rounds", type=int, default=3, help="--against: alternations of the two trees")
    args = ap.parse_args()
    if args.against:
        against(args.against, args.rounds, args.quick)
        return
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
    if args.json:
        print(json.dumps([{k: r[k] for k in ("name", "frames_per_s", "data_hops_per_s", "wall_s")} for r in runs]))
        return
    for r in runs:
        print(f"{r['name']:32s} frames/s {r['frames_per_s']:>11,.0f} ({r['frames_per_s'] / base:4.2f}x raw)  "
              f"data hops/s {r['data_hops_per_s']:>11,.0f} ({r['data_hops_per_s'] / base:4.2f}x raw)  "
              f"simulated {r['sim_GBps_per_wall_s']:.2f} GB per wall-s  ({r['sim_ms']:.1f} ms sim in "
              f"{r['wall_s']:.2f} s, python {100 * r['python_fraction']:.1f}%)")


if __name__ == "__main__":
    main()
