"""Work estimate vs the work a run really does: estimated units, coordinator events and wall time, side by
side, for the quickstart scaled from 16 to 128 (and, with --big, 1024) GPUs. Sets DEFAULT_WORK_BUDGET's
"units per second" (heterosim/budget.py).

    PYTHONPATH=$PWD python benchmarks/bench_budget.py [--big]
"""
from __future__ import annotations

import sys
import time

from heterosim import api


def main() -> None:
    sizes = [(2, 32), (16, 256)] + ([(128, 1024)] if "--big" in sys.argv else [])
    print(f"{'GPUs':>6} {'est. units':>11} {'events':>9} {'events/units':>12} {'prepare s':>9} {'sim s':>7} "
          f"{'units/s':>8}")
    for nodes, gbs in sizes:
        sc = api.load("scenarios/quickstart.yaml", [f"cluster.groups[0].num_nodes={nodes}",
                                                    f"training.global_batch_size={gbs}", "fabric.hosts_per_leaf=16"])
        t0 = time.monotonic()
        prep = api.prepare(sc, work_budget=1e12)
        est = api.check(prep, work_budget=1e12)
        t1 = time.monotonic()
        res = api.simulate(prep, record_messages=False, work_budget=1e12)
        t2 = time.monotonic()
        ev = res.summary["simulation"]["events"]
        print(f"{nodes * 8:>6} {est.units:>11,} {ev:>9,} {ev / est.units:>12.2f} {t1 - t0:>9.1f} {t2 - t1:>7.1f} "
              f"{est.units / (t2 - t1):>8,.0f}")


if __name__ == "__main__":
    main()
