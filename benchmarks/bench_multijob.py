"""Several jobs on one cluster: the shipped examples (scenarios/multi-job/), each job together with the
others and alone, side by side in one run: mean iteration time together / alone (the slowdown), exposed
communication by kind, links shared, and (ns3) PFC pauses one job caused on another. Also what simulating
them together costs against simulating each job alone (wall-clock ratio).

    PYTHONPATH=$PWD python benchmarks/bench_multijob.py [--backend flow|ns3] [--accel] [FILE ...]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from heterosim.cluster import check, load, prepare, simulate
from heterosim.cluster.results import summarize

EXAMPLES = ["two-gpt-packed", "two-gpt-spread", "train-beside-moe", "beside-websearch"]


def main() -> None:
    args = sys.argv[1:]
    backend = "flow"
    if "--backend" in args:
        backend = args[args.index("--backend") + 1]
        del args[args.index("--backend"):args.index("--backend") + 2]
    accel = "--accel" in args
    files = [a for a in args if not a.startswith("--")] or [f"scenarios/multi-job/{e}.yaml" for e in EXAMPLES]
    sets = ["network.acceleration.mode=auto"] if accel else []
    print(f"backend {backend}{' (acceleration auto)' if accel else ''}\n")
    print("| scenario | job | GPUs | iteration together | alone | slowdown | exposed comm together (alone), ms "
          "| links shared | wall together / alone |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in files:
        prep = prepare(load(f, sets))
        check(prep, backend=backend)
        t0 = time.monotonic()
        res = simulate(prep, backend=backend)
        t1 = time.monotonic()
        for jr, job in zip(res.jobs, prep.jobs):
            jr.alone = simulate(prep, backend=backend, only=[job.index], background=False,
                                offsets=False).jobs[0].iterations
        t2 = time.monotonic()
        s = summarize(res)
        fab = s["fabric"]
        shared = ", ".join(f"{k} {v}" for k, v in fab["shared_by"].items()) or "none"
        for j in s["jobs"]:
            exp = ", ".join(f"{k.upper()} {v * 1e3:.1f} ({j['alone']['exposed_comm_s_mean'][k] * 1e3:.1f})"
                            for k, v in j["exposed_comm_s_mean"].items() if v or j["alone"]["exposed_comm_s_mean"][k])
            print(f"| {Path(f).stem} | {j['name']} | {j['gpus']} | {j['iteration_time_s_mean'] * 1e3:.2f} ms | "
                  f"{j['alone']['iteration_time_s_mean'] * 1e3:.2f} ms | {j['slowdown']:.3f}x | {exp} | {shared} | "
                  f"{t1 - t0:.1f} s / {t2 - t1:.1f} s |")
        if "pfc" in fab:
            cross = ", ".join(f"{k}: {v / 1e3:.1f} us" for k, v in fab["pfc"]["cross_job_paused_ns"].items()) or "none"
            print(f"|  | PFC paused {fab['pfc']['paused_ns_total'] / 1e3:.1f} us; one job on another: {cross} "
                  f"|  |  |  |  |  |  |  |")


if __name__ == "__main__":
    main()
