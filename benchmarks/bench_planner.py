"""Planner scoring speed: candidates scored per minute for GPT-3 175B on 128 GPUs (8 DGX H100 + 8 DGX A100).

Target (issue: heterogeneity): >= 500 candidates per minute on a 2-core machine. A "candidate" is one
(TP, PP, DP, micro-batch, schedule/interleave, recompute) x mapping x partition (aware or uniform) that
passed divisibility and was memory-checked and scored by the closed-form estimate; configurations pruned
before that are not counted. The planner is single-threaded. Prints wall and CPU rates and the ratio to
500 measured in this run; ``--simulate K`` also times the flow simulation of the best K (those are what
``heterosim plan`` ranks by). Not a test.

    .venv/bin/python benchmarks/bench_planner.py [--scenario scenarios/suites/h-suite/h1-gpt3-175b.yaml]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from heterosim import api
from heterosim.planner.search import Planner, plan_report

TARGET_PER_MIN = 500.0
DEFAULT = Path(__file__).resolve().parent.parent / "scenarios/suites/h-suite/h1-gpt3-175b.yaml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", type=Path, default=DEFAULT)
    ap.add_argument("--simulate", type=int, default=0, help="also simulate the best K (flow backend)")
    args = ap.parse_args()
    sc = api.load(args.scenario)
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    planner = Planner(sc)
    setup = time.perf_counter() - t_wall
    rep = planner.search()
    wall = time.perf_counter() - t_wall
    cpu = time.process_time() - t_cpu
    per_min_wall = rep.scored / wall * 60
    per_min_cpu = rep.scored / cpu * 60
    print(f"scenario: {args.scenario.name} ({planner.world} GPUs, {sc.model.name})")
    print(f"configurations enumerated: {rep.enumerated} (pruned: {rep.pruned_divisibility} divisibility, "
          f"{rep.pruned_memory} memory)")
    print(f"candidates scored: {rep.scored} in {wall:.2f} s wall ({cpu:.2f} s CPU; setup {setup:.2f} s)")
    print(f"candidates/minute: {per_min_wall:.0f} wall, {per_min_cpu:.0f} CPU")
    print(f"ratio to target {TARGET_PER_MIN:.0f}/min: {per_min_wall / TARGET_PER_MIN:.1f}x (wall)")
    best = rep.candidates[0]
    print(f"best (estimated): {best.short()} {best.mapping.describe()} est {best.est_time_s:.2f} s")
    if args.simulate:
        t0 = time.perf_counter()
        full = plan_report(sc, top_k=args.simulate, simulate=args.simulate)
        print(f"simulated best {args.simulate} + naive in {time.perf_counter() - t0:.1f} s:")
        for p, e, s in full.calibration:
            print(f"  est {e:.2f} s  sim {s:.2f} s  ({(e / s - 1) * 100:+.1f}%)  {p}")


if __name__ == "__main__":
    main()
