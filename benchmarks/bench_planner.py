"""Planner scoring speed: candidates scored per minute for GPT-3 175B on 128 GPUs (8 DGX H100 + 8 DGX A100).

Target (issue: heterogeneity): >= 500 candidates per minute on a 2-core machine. A "candidate" is one
(TP, PP, DP, micro-batch, schedule/interleave, recompute) x mapping x partition (aware or uniform) that
passed divisibility and was memory-checked and scored by the closed-form estimate; configurations pruned
before that are not counted. The planner is single-threaded. Prints wall and CPU rates and the ratio to
500 measured in this run; ``--simulate K`` also times the flow simulation of the best K (those are what
``heterosim plan`` ranks by). Not a test.

    .venv/bin/python benchmarks/bench_planner.py [--scenario scenarios/suites/h-suite/h1-gpt3-175b.yaml]
    .venv/bin/python benchmarks/bench_planner.py --sim-rate 3 [--ecmp rail|hash] [--jobs 2]
    .venv/bin/python benchmarks/bench_planner.py --sim-rate 2 --ecmp hash --jobs 2 --before 599bba1
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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
                         "the best K candidates simulated with the symmetry reduction and without")
    ap.add_argument("--ecmp", choices=("hash", "rail"), default="rail",
                    help="with --sim-rate: leaf-spine paths hashed or rails pinned to spines (default)")
    ap.add_argument("--jobs", type=int, default=1, metavar="N",
                    help="with --sim-rate: also the reduced candidates N at a time (Planner.simulate_all, forked "
                         "processes), first, in a fresh planner")
    ap.add_argument("--before", metavar="REV",
                    help="with --sim-rate: also the planner of git revision REV (in its own process, from `git "
                         "archive`) simulating the same candidates, e.g. 599bba1, the planner as issue 15 found it")
    args = ap.parse_args()
    if args.sim_rate:
        sim_rate(args.sim_rate, args.ecmp, args.jobs, args.before)
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


_OLD_PLANNER = r"""
import json, sys, time
from heterosim import api
from heterosim.config.loader import scenario_from_dict
from heterosim.planner.mapping import apply_overrides
import heterosim.workload.memory as memory

memory.check_plan = lambda *a, **k: None  # (its memory model rejected plans that fit: fixed since)
spec = json.loads(sys.stdin.read())
base = scenario_from_dict(spec["scenario"])
out = []
for overrides in spec["candidates"]:
    t, p = time.perf_counter(), time.process_time()
    sc = apply_overrides(apply_overrides(base, overrides), {"training.iterations": 1})
    res = api.simulate(api.prepare(sc), backend="flow", record_messages=False)
    out.append({"sim_time_s": res.summary["iteration_time_s"], "wall_s": time.perf_counter() - t,
                "cpu_s": time.process_time() - p})
print(json.dumps(out))
"""
"""Run inside revision REV's tree: each candidate's scenario (this tree's candidate overrides) simulated as
that revision's ``Planner.simulate`` did. Its own search would not rank, or even admit, the same candidates
(its memory model rejected plans that fit, e.g. TP4 PP16 without recomputation: 128 GiB where 74.5 GiB
are there), so its memory check is skipped; the simulation is its own."""


def old_planner(rev: str, scenario: dict, overrides: list[dict]) -> list[dict]:
    """Revision ``rev``'s planner simulation of each candidate (its overrides of ``scenario``), one at a time,
    in a fresh process of that revision's tree."""
    import revisions

    with tempfile.TemporaryDirectory(prefix="planner-before-") as d:
        revisions.extract(rev, d)
        env = dict(os.environ, PYTHONPATH=d, PYTHONDONTWRITEBYTECODE="1")
        run = subprocess.run([sys.executable, "-c", _OLD_PLANNER], cwd=d, env=env, check=True, text=True,
                             input=json.dumps({"scenario": scenario, "candidates": overrides}), stdout=subprocess.PIPE)
    return json.loads(run.stdout)


def sim_rate(k: int, ecmp: str, jobs: int = 1, before: str | None = None) -> None:
    """Issue 15 target: >= 10x more simulated (not closed-form) candidates per minute than before, GPT-3 175B
    on 1,024 GPUs. Both rates are measured here, one after the other in this process, on the planner's own
    path (``Planner.simulate``: systems and the compute model shared across candidates): the new one with
    the symmetry reduction on the best K candidates, the old one (every lane and flow simulated, as the
    planner did before issue 15; today's engine otherwise, so the ratio understates the gain) on the same
    K. Each candidate's simulated iteration time is printed for both: they must agree. Wall time on a
    shared machine is noisy, so CPU time is printed beside it. ``jobs`` > 1: first, in a fresh planner (no
    cache warmed by the runs below), the reduced candidates ``jobs`` at a time (``Planner.simulate_all``):
    its wall rate against the old one is what ``heterosim plan --jobs`` gives; its CPU rate is the engine's."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_run import cpu_s
    from bench_run import scenario as run_scenario

    from heterosim.config.loader import scenario_from_dict

    spec = run_scenario(128, 16, 1536, ecmp)
    sc = scenario_from_dict(spec)
    rates, times = {}, {}
    if jobs > 1:
        planner = Planner(sc)
        best = planner.search().candidates[:k]
        label = f"new (reduced), {jobs} at a time"
        t, c = time.perf_counter(), cpu_s()
        planner.simulate_all(best, jobs=jobs)
        wall, cpu = time.perf_counter() - t, cpu_s() - c
        for i, cand in enumerate(best):
            times.setdefault(i, []).append(cand.sim_time_s)
            print(f"  [{label}] {cand.short()} {cand.mapping.describe()}: simulated {cand.sim_time_s:.9f} s/iter",
                  flush=True)
        rates[label] = (len(best) / wall * 60, len(best) / cpu * 60)
        print(f"  [{label}] {len(best)} candidates in {wall:.1f} s wall ({cpu:.1f} s CPU, workers included): "
              f"{rates[label][0]:.2f}/min wall, {rates[label][1]:.2f}/min CPU", flush=True)
    planner = Planner(sc)
    rep = planner.search()
    best = rep.candidates[:k]
    print(f"GPT-3 175B on 1,024 A100, leaf-spine, {ecmp} ECMP: {rep.scored} candidates scored in "
          f"{rep.scoring_s:.1f} s; simulating the best {k}")
    for label, symmetry in (("new (reduced)", True), ("old (full)", False)):
        t, c = time.perf_counter(), time.process_time()
        for i, cand in enumerate(best):
            t1 = time.process_time()
            planner.simulate(cand, symmetry=symmetry)
            times.setdefault(i, []).append(cand.sim_time_s)
            print(f"  [{label}] {cand.short()} {cand.mapping.describe()}: simulated {cand.sim_time_s:.9f} s/iter in "
                  f"{time.process_time() - t1:.1f} s CPU", flush=True)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        rates[label] = (len(best) / wall * 60, len(best) / cpu * 60)
        print(f"  [{label}] {len(best)} candidates in {wall:.1f} s wall ({cpu:.1f} s CPU): "
              f"{rates[label][0]:.2f}/min wall, {rates[label][1]:.2f}/min CPU", flush=True)
    if before:
        got = old_planner(before, spec, [c.overrides for c in best])
        for cand, g in zip(best, got):
            print(f"  [planner at {before}] {cand.short()} {cand.mapping.describe()}: simulated "
                  f"{g['sim_time_s']:.9f} s/iter in {g['cpu_s']:.1f} s CPU ({g['wall_s']:.1f} s wall)", flush=True)
        wall, cpu = sum(g["wall_s"] for g in got), sum(g["cpu_s"] for g in got)
        ref = (len(got) / wall * 60, len(got) / cpu * 60)
        print(f"  [planner at {before}] {len(got)} candidates in {wall:.1f} s wall ({cpu:.1f} s CPU): "
              f"{ref[0]:.2f}/min wall, {ref[1]:.2f}/min CPU", flush=True)
        for label, (w, c) in rates.items():
            print(f"  {label} against the planner at {before} (target >= 10x): {w / ref[0]:.1f}x wall, "
                  f"{c / ref[1]:.1f}x CPU")
        for i, g in enumerate(got):
            print(f"  candidate {i}: simulated iteration at {before} {g['sim_time_s']:.9f} s, reduced "
                  f"{times[i][-2]:.9f} s ({times[i][-2] / g['sim_time_s'] - 1:+.1e})")
    new, old = rates["new (reduced)"], rates["old (full)"]
    print(f"simulated candidates per minute, new/old (target >= 10x): {new[0] / old[0]:.1f}x wall, "
          f"{new[1] / old[1]:.1f}x CPU")
    if jobs > 1:
        par = rates[f"new (reduced), {jobs} at a time"]
        print(f"  with {jobs} at a time: {par[0] / old[0]:.1f}x wall (the planner's rate on this machine), "
              f"{par[1] / old[1]:.1f}x CPU")
        assert all(v[0] == v[1] for v in times.values()), "simulate_all gave other times than one at a time"
    worst = max(abs(v[-2] - v[-1]) / v[-1] for v in times.values())
    print(f"simulated iteration times, reduced vs full: {sum(v[-2] == v[-1] for v in times.values())} of "
          f"{len(times)} identical, largest difference {worst:.1e} relative (issue 15: bit-identical uncongested, "
          f"else <= 0.5%)")


if __name__ == "__main__":
    main()
