"""How much of a scenario's traffic the packet-level accelerations cannot skip: a floor, measured.

``acceleration: auto`` computes in closed form the messages whose NIC is their bottleneck (alone on
their ports, or sharing them only with their own NIC's messages); memoization replays congested
episodes that start on idle ports from fresh or settled connections; the fast-forward needs rates
that stay steady over windows.  A message whose lifetime overlaps another NIC's message on a common
egress port (a hashed-ECMP collision, a pipeline send meeting a data-parallel ring step) builds a
queue, is marked, and its DCQCN rate moves: ns-3 has to simulate it packet by packet unless the
exact episode repeats.

This script runs the scenario once at flow level (same messages, same hashed paths as the ns-3
backend: netbackend.routing.Router with the scenario's ecmp and seed), finds those colliding
messages by a sweep over their start/end times, and prints their share of the bytes, the data
packet-hops they need (MTU packets x links on the path) and what that alone costs at a given
packet-hop rate (the ns-3 backend does about 1.0 M per CPU second here: bench_ns3_accel.py's
GPT-3 b64 off run, 1.115 G hops in 1,091 s).  Flow-level timing stands in for packet-level timing,
so the share is an estimate, not a bound; the episodes column says how often one repeats exactly
(same hosts, ECMP keys, sizes, start offsets rounded to 1 us), which is what memoization needs.

    .venv/bin/python benchmarks/ns3_collision_floor.py h0-llama1-65b h1-llama1-65b   # H-suite names
    .venv/bin/python benchmarks/ns3_collision_floor.py path/to/scenario.yaml
"""
from __future__ import annotations

import argparse
import collections
import math
import time
from pathlib import Path

from heterosim import api
from netbackend.routing import Router

ROOT = Path(__file__).resolve().parents[1]
HOPS_PER_CPU_S = 1.02e6
"""ns-3 backend packet-hops per CPU second on this machine: GPT-3 175B b64 / 128 H100 at packet level
(acceleration off), 1.115 G hops in 1,090.9 s CPU (README, bench_ns3_accel.py --gpt3)."""


def flow_messages(path: Path):
    """The scenario's inter-node messages at flow level (every lane, no symmetry reduction), the router
    that hashes their paths as the ns-3 backend does, and the MTU."""
    sc = api.load(str(path))
    res = api.simulate(api.prepare(sc), backend="flow", record_messages=True, symmetry=False)
    router = Router(res.prepared.system.net, mode=sc.network.ecmp, seed=sc.seed)
    return [m for m in res.sim.messages if m.link == "net"], router, sc.network.mtu_bytes


def _overlaps(msgs, paths, which: list[int]):
    """(i, j) for each message i of ``which`` that starts while j (of ``which``) is active on a common
    egress port after i's NIC.  Ends sort before starts at the same ns: back-to-back is no overlap."""
    events = sorted([(msgs[i].start_ns, 1, i) for i in which] + [(msgs[i].end_ns, 0, i) for i in which])
    active: dict[int, set[int]] = collections.defaultdict(set)
    for _, starts, i in events:
        for p in paths[i][1:]:
            if starts:
                for j in active[p]:
                    yield i, j
                active[p].add(i)
            else:
                active[p].discard(i)


def colliding(msgs, paths) -> list[bool]:
    """Messages that overlap, on an egress port after their NIC's own, a message of another NIC."""
    hit = [False] * len(msgs)
    for i, j in _overlaps(msgs, paths, list(range(len(msgs)))):
        if msgs[j].src_ep != msgs[i].src_ep:
            hit[i] = hit[j] = True
    return hit


def episodes(msgs, paths, hit) -> tuple[int, int]:
    """(colliding episodes, distinct ones): connected sets of overlapping colliding messages, keyed by
    hosts, ECMP keys, sizes and start offsets rounded to 1 us."""
    parent = list(range(len(msgs)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    which = [i for i in range(len(msgs)) if hit[i]]
    for i, j in _overlaps(msgs, paths, which):
        parent[find(i)] = find(j)
    comps = collections.defaultdict(list)
    for i in which:
        comps[find(i)].append(i)
    keys = set()
    for c in comps.values():
        t0 = min(msgs[i].start_ns for i in c)
        keys.add(tuple(sorted((msgs[i].src_ep, msgs[i].dst_ep, msgs[i].flow_key, msgs[i].size_bytes,
                               round((msgs[i].start_ns - t0) / 1000)) for i in c)))
    return len(comps), len(keys)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenarios", nargs="+", help="H-suite names (h0-llama1-65b, ...) or scenario files")
    ap.add_argument("--hops-per-s", type=float, default=HOPS_PER_CPU_S)
    args = ap.parse_args()
    print(f"{'scenario':<18} {'net TB':>7} {'colliding':>9} {'by kind (colliding share)':<52} {'episodes':>9} "
          f"{'distinct':>8} {'data hops':>9} {'floor s':>8}")
    for name in args.scenarios:
        path = Path(name) if name.endswith((".yaml", ".yml")) else ROOT / "scenarios/suites/h-suite" / f"{name}.yaml"
        t0 = time.perf_counter()
        msgs, router, mtu = flow_messages(path)
        route_of: dict[tuple, list[int]] = {}
        paths = []
        for m in msgs:
            k = (m.src_ep, m.dst_ep, m.flow_key)
            if k not in route_of:
                route_of[k] = list(router.route(*k)[1])
            paths.append(route_of[k])
        hit = colliding(msgs, paths)
        total = sum(m.size_bytes for m in msgs)
        coll = sum(m.size_bytes for m, h in zip(msgs, hit) if h)
        kinds: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for m, h in zip(msgs, hit):
            k = kinds[m.collective]
            k[0] += m.size_bytes
            k[1] += m.size_bytes if h else 0
        by_kind = ", ".join(f"{k} {v[0] / 1e12:.2f} TB ({v[1] / v[0]:.0%})" for k, v in
                            sorted(kinds.items(), key=lambda kv: -kv[1][0])[:3])
        hops = sum(math.ceil(m.size_bytes / mtu) * len(p) for m, p, h in zip(msgs, paths, hit) if h)
        n_ep, n_distinct = episodes(msgs, paths, hit)
        print(f"{path.stem:<18} {total / 1e12:>7.3f} {coll / total:>9.1%} {by_kind:<52} {n_ep:>9,} "
              f"{n_distinct:>8,} {hops / 1e6:>8.0f}M {hops / args.hops_per_s:>8.0f}   "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
