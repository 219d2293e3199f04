"""Traffic study at packet level: the HPCC paper's FB_Hadoop 30 % + incast scenario, once per CC.

Runs ``scenarios/traffic/hpcc-fb-hadoop-30-incast.yaml`` (320 hosts, 3-tier
fat-tree, ns3 backend) for ``--sim-ms`` of simulated time per congestion
control: flows arrive during that time and the run stops at its end (flows still
running are counted as unfinished); the first tenth is warm-up. Prints wall
time, packet hops and hops per wall second (simulation loop, setup excluded),
p95 FCT slowdown of flows <= 1 KB and >= 1 MB, and the PFC paused fraction.
CC names come from ``netbackend.config.CcKind``; those the backend rejects are
listed as unsupported. Settings run one at a time (``--jobs``) so wall times are
not shared between them.

    .venv/bin/python benchmarks/bench_traffic.py [--sim-ms 10] [--cc dcqcn,hpcc] [--jobs 1] [--out DIR]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import get_args

from heterosim.traffic import load_traffic, run_traffic
from netbackend.config import CcKind

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "traffic" / "hpcc-fb-hadoop-30-incast.yaml"


def supported(ccs: list[str], network) -> tuple[list[str], dict[str, str]]:
    from heterosim.studies.compare import _probe
    from netbackend.ns3 import run_isolated

    problems = run_isolated(_probe, ("ns3", network, ccs))
    return [c for c in ccs if not problems.get(c)], {c: e for c, e in problems.items() if e}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sim-ms", type=float, default=10.0, help="simulated time per CC (ms)")
    ap.add_argument("--cc", default=",".join(get_args(CcKind)), help="comma-separated CC settings")
    ap.add_argument("--jobs", type=int, default=1, help="settings simulated at once")
    ap.add_argument("--out", default="results/bench-traffic")
    args = ap.parse_args()

    T = int(args.sim_ms * 1e6)
    sc = load_traffic(SCENARIO, [f"duration_ns={T}", f"warmup_ns={T // 10}", "drain_ns=0"])
    ccs, unsupported = supported([c.strip() for c in args.cc.split(",") if c.strip()], sc.network)
    for c, err in unsupported.items():
        print(f"{c}: not supported by the ns3 backend ({err})")
    t0 = time.perf_counter()
    summaries = run_traffic(sc, args.out, ccs=ccs, jobs=args.jobs)
    total = time.perf_counter() - t0

    s0 = summaries[0]
    print(f"\n{s0['scenario']}: {s0['fabric']['hosts']} hosts, {s0['fabric']['switches']} switches, "
          f"{s0['flows']['generated']:,} flows in {args.sim_ms:g} ms simulated (warm-up {T // 10 / 1e6:g} ms), "
          f"ns3 backend, {args.jobs} setting(s) at a time; total wall {total:.0f} s")
    head = (f"{'cc':<8} {'wall s':>8} {'setup s':>8} {'packet hops':>14} {'hops/s':>11} {'measured':>9} "
            f"{'unfinished':>10} {'p95 <=1KB':>10} {'p95 >=1MB':>10} {'PFC paused':>11} {'drops':>6}")
    print(head)
    print("-" * len(head))
    for s in summaries:
        bins = {b["bin"]: b for b in s["slowdown"]["by_size"]}
        sim = s["simulation"]
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"{s['cc']:<8} {sim['wall_s']:>8.1f} {sim['setup_wall_s']:>8.1f} {fmt(sim['packet_hops'], ',d'):>14} "
              f"{fmt(sim['packet_hops_per_s'], ',.0f'):>11} {s['flows']['finished_in_stats']:>9,} "
              f"{s['flows']['unfinished_in_stats']:>10,} {fmt(bins['<=1KB']['p95'], '.2f'):>10} "
              f"{fmt(bins['>=1MB']['p95'], '.2f'):>10} {fmt(s['pfc']['paused_fraction_overall'], '.2e'):>11} "
              f"{fmt(s['drops'], ',d'):>6}")
    print(f"\nresults: {args.out}/ (comparison.md, per-CC fct.csv and summary.json)")


if __name__ == "__main__":
    main()
