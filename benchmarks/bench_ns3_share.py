"""Where the wall time of a packet-level run goes: inside ns-3 vs Python (coordinator + backend glue).

Times ``api.simulate`` on a scenario (default: the quickstart) with the ns3
backend and splits it into: ns-3 setup (topology build), ns-3 event loop
(``extra['ns3_wall_s']``: C++ ``Run`` calls), Python inside backend calls
(message injection, completion draining), and everything else (coordinator,
planning, summary). Target: Python share < 10 % of the simulate wall time.

    .venv/bin/python benchmarks/bench_ns3_share.py [scenario.yaml] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from heterosim import api

TARGET_PYTHON_SHARE = 0.10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", nargs="?", default="scenarios/quickstart.yaml")
    ap.add_argument("--set", dest="set_", action="append", default=[], help="override path=value")
    ap.add_argument("--profile", action="store_true", help="cProfile the run; top functions by own time")
    args = ap.parse_args()

    from netbackend.ns3 import driver
    from netbackend.ns3.build import ensure_built

    t0 = time.perf_counter()
    ensure_built()  # compiles only when the C++ sources changed since the last build
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    driver.sim_class()  # cppyy: load the library, JIT the facade header (once per process)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    prep = api.prepare(api.load(args.scenario, args.set_))
    t_prep = time.perf_counter() - t0
    prof = cProfile.Profile() if args.profile else None
    t1, c1 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    res = api.simulate(prep, backend="ns3")
    if prof:
        prof.disable()
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    x = res.sim.net_stats.extra
    ns3_run, setup, calls = x["ns3_wall_s"], x["setup_wall_s"], x["backend_call_wall_s"]
    in_ns3 = ns3_run + setup
    python = wall - in_ns3
    share = python / wall
    print(f"{res.summary['scenario']}: {res.summary['gpus']} GPUs, ns3 backend, "
          f"{res.sim.events:,} coordinator events, {x['packet_hops']:,} packet hops")
    print(f"  ns-3 build check / compile  : {t_build:6.2f} s  (hash sources; compiles only if they changed)")
    print(f"  ns-3 load (cppyy JIT)       : {t_load:6.2f} s  (once per process; not in simulate)")
    print(f"  prepare (not in simulate)   : {t_prep:6.2f} s")
    print(f"  simulate wall               : {wall:6.2f} s   (process CPU {cpu:.2f} s; wall > CPU means a busy machine)")
    print(f"    ns-3 setup (build fabric) : {setup:6.2f} s  {setup / wall:6.1%}")
    print(f"    ns-3 event loop (Run)     : {ns3_run:6.2f} s  {ns3_run / wall:6.1%}")
    print(f"    Python in backend calls   : {calls - ns3_run:6.2f} s  {(calls - ns3_run) / wall:6.1%}")
    print(f"    Python elsewhere          : {wall - calls - setup:6.2f} s  {(wall - calls - setup) / wall:6.1%}"
          "  (coordinator, planning, stats, summary)")
    print(f"  Python share of simulate    : {share:6.1%}   target < {TARGET_PYTHON_SHARE:.0%}   "
          f"{'OK' if share < TARGET_PYTHON_SHARE else 'ABOVE TARGET'}")
    whole = wall + t_load + t_prep
    print(f"  incl. cppyy load + prepare  : {(python + t_load + t_prep) / whole:6.1%} of {whole:.2f} s "
          "(what a one-off `heterosim run` pays outside the ns-3 event loop and fabric setup)")
    if prof:
        print("\nTop functions by own time:")
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
