"""Speed of the flow-level backend (one core, pure Python).

    .venv/bin/python benchmarks/bench_flow_backend.py [--messages 100000] [--load 0.5]

Scenarios on a 128-host leaf-spine (8 leaves x 16 hosts at 100 Gb/s, 4 spines,
400 Gb/s uplinks, 1:1):
  (a) random pairs, WebSearch flow sizes (HPCC study CDF, ../shared/reference),
      Poisson arrivals at ``--load`` of the host line rate;
  (b) incast: 127 senders -> 1 receiver, 64 KB each, repeated rounds;
  (c) all-to-all burst: every host to every other, 256 KB, all at t = 0.
Prints flows/s and events/s (start + drain batches) and the ratio to the target
of 10^5 flows in 30 s (well under the one-minute budget).
"""
from __future__ import annotations

import argparse
import bisect
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from netbackend import Link, Message, NetTopology  # noqa: E402
from netbackend.flow import FlowBackend  # noqa: E402

TARGET_FLOWS_PER_S = 100_000 / 30
CDF_DIR = "/work/shared/reference/flow-size-distributions"
# Fallback copy of the WebSearch CDF (bytes, percent) if the shared folder is absent.
_WEBSEARCH = [(0, 0), (10000, 15), (20000, 20), (30000, 30), (50000, 40), (80000, 53), (200000, 60),
              (1000000, 70), (2000000, 80), (5000000, 90), (10000000, 97), (30000000, 100)]


def leaf_spine_128() -> NetTopology:
    hosts, links = [], []
    for j in range(8):
        for i in range(16):
            h = f"h{j}_{i}"
            hosts.append(h)
            links.append(Link(h, f"leaf{j}", 100.0, 500))
        for k in range(4):
            links.append(Link(f"leaf{j}", f"spine{k}", 400.0, 500))
    return NetTopology(hosts=hosts, switches=[f"leaf{j}" for j in range(8)] + [f"spine{k}" for k in range(4)],
                       links=links)


def load_cdf(name: str) -> list[tuple[float, float]]:
    path = os.path.join(CDF_DIR, f"{name}.txt")
    if not os.path.exists(path):
        return [(float(a), float(b)) for a, b in _WEBSEARCH]
    rows = []
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            a, b = line.split()[:2]
            rows.append((float(a), float(b)))
    return rows


def sampler(cdf: list[tuple[float, float]], rng: random.Random):
    ps = [p for _, p in cdf]

    def draw() -> int:
        u = rng.random() * 100
        i = max(1, bisect.bisect_left(ps, u))
        (x0, p0), (x1, p1) = cdf[i - 1], cdf[i]
        x = x0 if p1 == p0 else x0 + (x1 - x0) * (u - p0) / (p1 - p0)
        return max(1, int(x))

    mean = sum((cdf[i][0] + cdf[i - 1][0]) / 2 * (cdf[i][1] - cdf[i - 1][1]) / 100 for i in range(1, len(cdf)))
    return draw, mean


def drive(b: FlowBackend, msgs: list[Message]) -> tuple[float, float, int]:
    """Send everything up front (the backend holds future starts) and run to the end.

    Returns (CPU s, wall s, completions); rates use CPU time, which a busy shared
    machine distorts less than wall time."""
    t0, c0 = time.perf_counter(), time.process_time()
    for m in msgs:
        b.send(m)
    n = 0
    while b.pending():
        n += len(b.advance())
    return time.process_time() - c0, time.perf_counter() - t0, n


def report(name: str, b: FlowBackend, cpu: float, wall: float, n: int) -> float:
    c = b.counters
    st = b.stats()
    end_ns = max(f for _, f in st.fct_ns.values())
    fps = n / cpu
    print(f"{name:<34} flows={n:>7}  cpu={cpu:7.2f}s wall={wall:7.2f}s  flows/s={fps:8.0f}  "
          f"events/s={c.events / cpu:8.0f}  "
          f"mean refill set={c.refilled_flows / max(c.refills, 1):6.1f}  sim={end_ns / 1e6:8.2f} ms  "
          f"max util={st.extra['max_link_utilization']:.2f}  vs target x{fps / TARGET_FLOWS_PER_S:.1f}")
    return fps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--load", type=float, default=0.5)
    ap.add_argument("--cdf", default="websearch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenarios", default="abc", help="which of a, b, c to run")
    args = ap.parse_args()
    topo = leaf_spine_128()
    rng = random.Random(args.seed)

    if "a" in args.scenarios:
        run_random(topo, rng, args)
    if "b" in args.scenarios:
        run_incast(topo, args)
    if "c" in args.scenarios:
        run_all_to_all(topo, args)


def run_random(topo: NetTopology, rng: random.Random, args) -> None:
    draw, mean = sampler(load_cdf(args.cdf), rng)
    rate_Bpns = len(topo.hosts) * 100.0 / 8 * args.load  # offered bytes per ns
    gap_ns = mean / rate_Bpns
    t, msgs = 0.0, []
    for mid in range(args.messages):
        t += rng.expovariate(1 / gap_ns)
        s, d = rng.sample(topo.hosts, 2)
        msgs.append(Message(mid, s, d, draw(), int(t), flow_key=mid))
    b = FlowBackend(topo, seed=args.seed)
    cpu, wall, n = drive(b, msgs)
    report(f"(a) random {args.cdf} load {args.load}", b, cpu, wall, n)


def run_incast(topo: NetTopology, args) -> None:
    dst = topo.hosts[0]
    msgs, mid = [], 0
    per_round_ns = int(127 * 65536 * 8 / 100 * 1.2)
    for r in range(100):
        for s in topo.hosts[1:]:
            msgs.append(Message(mid, s, dst, 65536, r * per_round_ns, flow_key=mid))
            mid += 1
    b = FlowBackend(topo, seed=args.seed)
    cpu, wall, n = drive(b, msgs)
    report("(b) incast 127->1 x 100 rounds", b, cpu, wall, n)


def run_all_to_all(topo: NetTopology, args) -> None:
    msgs, mid = [], 0
    for s in topo.hosts:
        for d in topo.hosts:
            if s != d:
                msgs.append(Message(mid, s, d, 262144, 0, flow_key=mid))
                mid += 1
    b = FlowBackend(topo, seed=args.seed)
    cpu, wall, n = drive(b, msgs)
    report("(c) all-to-all burst 128x127", b, cpu, wall, n)


if __name__ == "__main__":
    main()
