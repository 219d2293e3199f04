"""Why ``simulation.hashed_copies: ops_and_replicas`` moves a stage's exposed pipeline time: the full run's
replicas do not send in lockstep.

In the full simulation (every lane and flow, hash ECMP) this takes, for a few stage boundaries and rail 0,
the start time of every pipeline send of each data-parallel replica, pairs replica d's k-th send with
replica 0's k-th, and prints how far apart they start (median and 90th percentile) against how long a
send lasts, and in how many of the pairs the two sends overlap in time. With ``ops_and_replicas`` every
mirrored replica sends at the simulated replica's instants, so all of them overlap, every time.

    .venv/bin/python benchmarks/hash_replica_offsets.py [--gpus 512] [--boundaries 3-4,4-3,11-12]

Measured at 512 GPUs (GPT-3 175B, TP8 PP16 DP4, bench_run.py's scenario): replicas 1 and 3 start
540-2,022 us away from replica 0 (2-7 send durations of 277-289 us, the same offset at the median and
the 90th percentile: fixed by the pipeline's fill and kept) and overlap replica 0's sends in 0-6% of the
384 pairs; replica 2 runs in lockstep with replica 0 (offset 0, overlap 100%). Not a test: the full run
takes about 30 s CPU at 512 GPUs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from heterosim import api


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--boundaries", default="3-4,4-3,11-12", help="src-dst pipeline stages, comma-separated")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_run import scenario_for

    sc, title, _ = scenario_for(str(args.gpus), ecmp="hash")
    prep = api.prepare(sc)
    res = api.simulate(prep, record_messages=True, symmetry=False)
    ir = prep.ir
    stage_of = {r: ir.program_of(r).stage for r in range(ir.world_size)}
    tp = len(ir.groups["tp"][0]) if ir.groups.get("tp") else 1
    position = {}
    for g in ir.groups["dp"]:
        for i, r in enumerate(g):
            position[r] = i
    D = len(ir.groups["dp"][0])
    sends: dict[tuple, list[tuple[int, int]]] = {}
    for m in res.sim.messages:
        if m.collective == "send" and m.link == "net" and m.src % tp == 0:  # rail 0 of each TP group
            sends.setdefault((stage_of[m.src], stage_of[m.dst], position[m.src]), []).append((m.start_ns, m.end_ns))
    print(f"{title}; full simulation, pipeline sends on rail 0, replica d's k-th send against replica 0's")
    print(f"{'boundary':>9} {'replica':>7} | {'|start offset| median us':>24} {'p90 us':>8} | "
          f"{'send us (median)':>16} | overlapping")
    for b in args.boundaries.split(","):
        s, d = (int(x) for x in b.split("-"))
        base = sends.get((s, d, 0))
        if not base:
            print(f"{b:>9}: no inter-node pipeline sends")
            continue
        dur = statistics.median(e - a for a, e in base) / 1e3
        for rep in range(1, D):
            other = sends[(s, d, rep)]
            offs = sorted(abs(a[0] - o[0]) for a, o in zip(base, other))
            overlap = sum(1 for a, o in zip(base, other) if min(a[1], o[1]) > max(a[0], o[0]))
            print(f"{b:>9} {rep:>7} | {statistics.median(offs) / 1e3:24.1f} {offs[len(offs) * 9 // 10] / 1e3:8.1f} | "
                  f"{dur:16.1f} | {overlap}/{len(base)}")


if __name__ == "__main__":
    main()
