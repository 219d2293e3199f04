"""Wall time of one simulated iteration: GPT-3 175B on 1024 A100 GPUs, flow backend.

Target (issue: coordinator): under 60 s on a 2-core machine. Prints the figures
and the ratio measured in this run; not a test.

    .venv/bin/python benchmarks/bench_run.py [--gpus 1024] [--no-write]

By default it does what ``heterosim run`` does: simulate, then write summary,
trace, tables and plots; ``--no-write`` times the simulation alone.
"""
from __future__ import annotations

import argparse
import tempfile
import time

from heterosim import api
from heterosim.config.loader import scenario_from_dict

TARGET_S = 60.0


def scenario(nodes: int, pp: int, batch: int) -> dict:
    return {
        "name": f"bench-gpt3-175b-{nodes * 8}",
        "model": "gpt3-175b",
        "parallelism": {"tp": 8, "pp": pp, "schedule": "1f1b", "sequence_parallel": True, "zero_stage": 1},
        "training": {"global_batch_size": batch, "micro_batch_size": 1, "seq_length": 2048, "precision": "bf16"},
        "cluster": {"groups": [{"name": "a100", "node_type": "dgx-a100", "num_nodes": nodes}]},
        "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 32, "uplink_gbps": 400},
        "network": {"backend": "flow"},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--pp", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1536)
    ap.add_argument("--no-write", dest="write", action="store_false",
                    help="time compile + simulate only (no trace, tables, plots)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    sc = scenario_from_dict(scenario(args.gpus // 8, args.pp, args.batch))
    prep = api.prepare(sc)
    t1 = time.perf_counter()
    res = api.simulate(prep, record_messages=args.write)
    t2 = time.perf_counter()
    if args.write:
        with tempfile.TemporaryDirectory() as d:
            api.write_results(res, d)
    t3 = time.perf_counter()
    s = res.summary
    total = t3 - t0
    print(f"GPT-3 175B, {args.gpus} GPUs (TP8 PP{args.pp} DP{args.gpus // 8 // args.pp}), batch {args.batch}, flow backend")
    print(f"  simulated iteration time : {s['iteration_time_s']:.3f} s  (MFU {s['mfu']:.1%}, "
          f"{s['model_tflops_per_gpu']:.1f} TFLOP/s/GPU)")
    print(f"  compile                  : {t1 - t0:.2f} s")
    print(f"  simulate                 : {t2 - t1:.2f} s  ({res.sim.events:,} events, {res.sim.events / (t2 - t1):,.0f} events/s)")
    if args.write:
        print(f"  write results            : {t3 - t2:.2f} s")
    print(f"  total wall               : {total:.2f} s   target {TARGET_S:.0f} s   ratio target/actual = {TARGET_S / total:.2f}")


if __name__ == "__main__":
    main()
