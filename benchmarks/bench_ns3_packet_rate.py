"""Packet-hop rate of the ns-3 RoCE backend vs raw ns-3 PointToPoint devices.

Prints figures (not a timed test).  The baseline is built in the same run: a
C++ feeder keeps one PointToPointNetDevice queue full over a 100 Gb/s link
(shared/ns3-wheel-notes.md measured ~350k packets/s of 4 KB that way).  The
backend figure counts every frame a port serializes (data, ACK, CNP, PFC) and
separately data packets x hops; the target is >= 0.5x the baseline.

Run: .venv/bin/python benchmarks/bench_ns3_packet_rate.py [--quick] [--against REV [--rounds N]]

``--against REV`` measures git revision REV (extracted with ``git archive``, its module built on first
use) and this tree (also with ``ack_class: control``, the class ACKs had before issue 41) in one run,
one process at a time, alternating ``--rounds`` times, and prints the median CPU seconds of each
backend run and their ratio to REV's (> 1: faster than REV).
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
    c0 = time.process_time()
    with Ns3Backend(topo, cfg) as b:
        for m in msgs:
            b.send(m)
        while b.pending():
            b.advance()
        st = b.stats()
        sim_ns = b.now_ns
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    e = st.extra
    ns3 = e["ns3_wall_s"]
    data_hops = e["counters"]["data_packets_sent"] * hops_per_packet
    return {"name": name, "frames_per_s": e["packet_hops"] / ns3, "data_hops_per_s": data_hops / ns3,
            "sim_GBps_per_wall_s": st.bytes_delivered / wall / 1e9, "sim_ms": sim_ns / 1e6,
            "wall_s": wall, "cpu_s": cpu, "frames": e["packet_hops"],
            "python_fraction": e["python_overhead_fraction"]}


def against(rev: str, rounds: int, quick: bool) -> None:
    """This tree (as configured, and with ACK/NAK in the control class as before issue 41) and ``rev``
    side by side: one child process at a time, alternating, ``rounds`` times.  Compared on process CPU
    seconds of each backend run (the same workload in every variant), which a shared machine's load
    disturbs less than wall time."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import revisions

    here = Path(__file__).resolve().parents[1]
    variants = [(rev, None, []), ("this tree", str(here), []),
                ("this tree, ack_class=control", str(here), ["--ack-class", "control"])]
    cpu: dict[str, dict[str, list[float]]] = {v[0]: {} for v in variants}
    rate: dict[str, dict[str, list[float]]] = {v[0]: {} for v in variants}
    with tempfile.TemporaryDirectory(prefix="hs-rate-") as old:
        revisions.extract(rev, old)
        for r in range(rounds):
            for label, tree, extra in variants:
                tree = tree or old
                # this script in every case; PYTHONPATH picks the tree whose netbackend it imports
                cmd = [sys.executable, str(Path(__file__).resolve()), "--json", *extra] + (["--quick"] if quick else [])
                out = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": tree}, cwd=tree, capture_output=True,
                                     text=True, check=True).stdout
                for row in json.loads(out.strip().splitlines()[-1]):
                    cpu[label].setdefault(row["name"], []).append(row["cpu_s"])
                    rate[label].setdefault(row["name"], []).append(row["frames"] / row["cpu_s"])
            print(f"round {r + 1} done", flush=True)
    print(f"medians over {rounds} rounds: CPU s of each backend run (frames per CPU-second); ratio = {rev} CPU / "
          "variant CPU (> 1: faster than {rev})".replace("{rev}", rev))
    for name in cpu[rev]:
        base = statistics.median(cpu[rev][name])
        cells = []
        for label, _, _ in variants:
            c = statistics.median(cpu[label][name])
            cells.append(f"{label}: {c:.3f} s ({statistics.median(rate[label][name]):,.0f}/s, {base / c:.3f})")
        print(f"  {name:30s} " + " | ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    ap.add_argument("--json", action="store_true", help="print the runs as one JSON line (for --against)")
    ap.add_argument("--against", metavar="REV", help="also measure git revision REV, side by side")
    ap.add_argument("--rounds", type=int, default=3, help="--against: alternations of the trees")
    ap.add_argument("--ack-class", choices=["data", "control"], help="network.transport.ack_class (default: the "
                    "config's)")
    args = ap.parse_args()
    if args.against:
        against(args.against, args.rounds, args.quick)
        return
    scale = 0.25 if args.quick else 1.0
    kw = {}
    if args.ack_class:
        from netbackend.config import TransportConfig

        kw["transport"] = TransportConfig(ack_class=args.ack_class)
    base = raw_p2p(int(400_000 * scale))
    sc.single_flow(size_bytes=100_000)  # warm-up: first calls JIT the cppyy wrappers
    print(f"raw ns-3 PointToPoint, 1 hop, 4174 B frames: {base:,.0f} packets/s")
    runs = []
    star = sc.star_topology(8)
    size = int(50_000_000 * scale)
    for cc in ("none", "dcqcn"):
        msgs = [Message(i, f"s{i}", "r0", size, 0) for i in range(8)]
        runs.append(backend_run(f"incast 8->1 star, cc={cc}", star, msgs, NetworkConfig(backend="ns3", cc=cc, **kw), 2))
    tier = sc.two_tier_topology(8)
    msgs = [Message(i, f"s{i}", "r0", size, 0) for i in range(8)]
    runs.append(backend_run("incast 8->1 two-tier, dcqcn", tier, msgs, NetworkConfig(backend="ns3", **kw), 4))
    if args.json:
        print(json.dumps([{k: r[k] for k in ("name", "frames_per_s", "data_hops_per_s", "wall_s", "cpu_s", "frames")}
                          for r in runs]))
        return
    for r in runs:
        print(f"{r['name']:32s} frames/s {r['frames_per_s']:>11,.0f} ({r['frames_per_s'] / base:4.2f}x raw)  "
              f"data hops/s {r['data_hops_per_s']:>11,.0f} ({r['data_hops_per_s'] / base:4.2f}x raw)  "
              f"simulated {r['sim_GBps_per_wall_s']:.2f} GB per wall-s  ({r['sim_ms']:.1f} ms sim in "
              f"{r['wall_s']:.2f} s, python {100 * r['python_fraction']:.1f}%)")


if __name__ == "__main__":
    main()
