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
    ap.add_argument("--sim-rate", type=int, default=0, metavar="K",
                    help="simulated candidates per minute: GPT-3 175B on 1,024 A100 (bench_run.py's scenario), "
                         "the best K candidates simulated with the symmetry reduction and the best one without")
    args = ap.parse_args()
    if args.sim_rate:
        sim_rate(args.sim_rate)
        return
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


def sim_rate(k: int) -> None:
    """Issue 15 target: >= 10x more simulated (not closed-form) candidates per minute than before, GPT-3 175B
    on 1,024 GPUs. Both rates are measured here, with the same engine the planner uses (Planner.simulate):
    the reduced one on the best K candidates, the full one (every lane and flow: what it did before) on the
    best one. Wall time on a shared machine is noisy, so CPU time is printed beside it."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_run import scenario as run_scenario

    from heterosim.config.loader import scenario_from_dict

    sc = scenario_from_dict(run_scenario(128, 16, 1536))
    planner = Planner(sc)
    rep = planner.search()
    best = rep.candidates[:k]
    print(f"GPT-3 175B on 1,024 A100: {rep.scored} candidates scored in {rep.scoring_s:.1f} s; simulating the best {k}")
    rates = {}
    for label, symmetry, cands in (("reduced", True, best), ("full", False, best[:1])):
        t, c = time.perf_counter(), time.process_time()
        for cand in cands:
            _simulate(planner, cand, symmetry)
            print(f"  [{label}] {cand.short()}: simulated {cand.sim_time_s:.3f} s/iter")
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        rates[label] = (len(cands) / wall * 60, len(cands) / cpu * 60)
        print(f"  [{label}] {len(cands)} candidates in {wall:.1f} s wall ({cpu:.1f} s CPU): "
              f"{rates[label][0]:.2f}/min wall, {rates[label][1]:.2f}/min CPU")
    print(f"ratio reduced/full (target >= 10x): {rates['reduced'][0] / rates['full'][0]:.1f}x wall, "
          f"{rates['reduced'][1] / rates['full'][1]:.1f}x CPU")


def _simulate(planner: Planner, cand, symmetry: bool) -> None:
    from heterosim.planner.mapping import apply_overrides

    sc = apply_overrides(planner.scenario, cand.overrides)
    sc = apply_overrides(sc, {"training.iterations": 1, "simulation.symmetry": symmetry})
    res = api.simulate(api.prepare(sc), record_messages=False)
    cand.sim_time_s = res.summary["iteration_time_s"]


if __name__ == "__main__":
    main()
