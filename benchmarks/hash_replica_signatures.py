"""Can data-parallel replicas be merged exactly under hashed ECMP? A necessary condition, measured.

Merging replica d into replica e (one simulated, the other's flows sent as copies) is exact only if a
relabelling of links maps the whole traffic onto itself with e's flows onto d's: then max-min gives both
the same rates at every instant. Any such relabelling keeps, for every pipeline flow of a replica, how
many pipeline flows of the iteration (any replica) cross each link it uses. This script computes that
*collision signature* (the sorted per-flow tuples of those counts) per replica of bench_run.py's
scenario; replicas with different signatures can never be merged exactly, whatever the relabelling.

    .venv/bin/python benchmarks/hash_replica_signatures.py [--gpus 1024] [--ecmp hash]
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from heterosim import api
from heterosim.comm import plan_collective
from netbackend.base import Message
from netbackend.flow import FlowBackend


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--ecmp", choices=("hash", "rail"), default="hash")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_run import scenario_for

    sc, title, _ = scenario_for(str(args.gpus), ecmp=args.ecmp)
    prep = api.prepare(sc)
    ir, system = prep.ir, prep.system
    net = FlowBackend(system.net, sc.network)
    position = {}
    for g in ir.groups["dp"]:
        for i, r in enumerate(g):
            position[r] = i
    flows = []  # (replica, links) of every pipeline transfer, both directions, as the comm planner keys them
    for g in ir.groups["pp"]:
        for a, b in zip(g, g[1:]):
            for x, y in ((a, b), (b, a)):
                for t in plan_collective("send", (x, y), 1 << 20, system).transfers:
                    links = net._path_info(Message(0, t.src_ep, t.dst_ep, 1, 0, t.flow_key))[0]
                    flows.append((position[x], links))
    load = collections.Counter(link for _, links in flows for link in links)
    per_replica = collections.defaultdict(list)
    for rep, links in flows:
        per_replica[rep].append(tuple(sorted(load[link] for link in links)))
    classes = collections.defaultdict(list)
    for rep, sig in per_replica.items():
        classes[tuple(sorted(sig))].append(rep)
    print(title)
    print(f"pipeline flows: {len(flows)}; replicas: {len(per_replica)}; distinct collision signatures: "
          f"{len(classes)} (replicas that could be merged at best: "
          f"{sum(len(c) - 1 for c in classes.values())})")
    print(f"pipeline flows per link (links used): {sorted(collections.Counter(load.values()).items())}")


if __name__ == "__main__":
    main()
