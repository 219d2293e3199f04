"""The batch engine against the flow backend, side by side in one run (issue 43).

    .venv/bin/python benchmarks/bench_batch_engine.py [--batches 1,16,64,256,1024] [--cases quickstart,qs-128]
                                                      [--flow-sample 16] [--jobs N] [--numpy-max 16]

For each case and each B, B variants of one iteration (a random straggler and a random degraded link each;
variant 0 the baseline) run through:

* the flow backend one variant at a time (``pipeline.prepare`` + ``simulate`` of the scenario with the change,
  what ``heterosim run --set`` does; default simulation settings), measured on ``--flow-sample`` variants and
  reported as experiments per second;
* the flow backend over all cores (``--jobs``, forked workers: what ``heterosim sweep --jobs`` does);
* the batch engine with NumPy (the reference driver) and with JAX on the CPU (XLA; compile time apart);
* JAX on a GPU: measured only where JAX sees one (this column says "unmeasured" otherwise, never a guess).

The scenarios run with their own settings, so with the default compute contention (``sm_share``) unless a case
sets it (``quickstart-none``). Issue 43's CPU target is printed per case: the batch engine with JAX at least
matching the flow backend over all cores for B >= 64 (the ratio JAX-CPU / flow ``--jobs``).

Accuracy: the largest relative difference between the batch engine and the flow backend over the sampled
variants (the flow backend with every lane simulated, ``symmetry=False``, the run the engine reproduces).
Rounds: the batch's event rounds; memory: state bytes per variant (engine pools and node arrays).
The flow-backend runs come first (forking after JAX has started threads is unsafe).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from heterosim import pipeline  # noqa: E402
from heterosim.batch import engine, variants  # noqa: E402
from heterosim.batch.variants import Variant  # noqa: E402
from heterosim.sim.program import export_program  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")
CASES = {
    "quickstart": ("scenarios/quickstart.yaml", []),
    "quickstart-none": ("scenarios/quickstart.yaml", ["simulation.compute_contention=none"]),
    # 128 GPUs: the quickstart's model on 16 DGX H100, TP8 PP2 DP8, 4 micro-batches per replica (29k flows,
    # 48k engine rounds per iteration). The H-suite's 128-GPU LLaMA-65B at full batch (750k flows) does not fit
    # this benchmark's time on a CPU (docs/batch-engine.md)
    "qs-128": ("scenarios/quickstart.yaml", ["cluster.groups[0].num_nodes=16",
                                             "parallelism.tp=8", "parallelism.pp=2", "training.global_batch_size=32",
                                             "fabric.hosts_per_leaf=16"]),
}
MAX_B_CPU = {"qs-128": 16}
"""Largest B run per case on a CPU-only machine (the engine's rounds cost milliseconds each there)."""


def make_variants(prep, n: int, seed: int = 0) -> list[Variant]:
    rng = np.random.default_rng(seed)
    gpus = [g.name for g in prep.system.gpus]
    pairs = list(dict.fromkeys((l.a, l.b) for l in prep.system.net.links))
    out = [Variant()]
    for i in range(1, n):
        a, b = pairs[rng.integers(len(pairs))]
        out.append(Variant(f"v{i}", stragglers=((gpus[rng.integers(len(gpus))], float(1 + 0.5 * rng.random())),),
                           degrade=((a, b, float(0.25 + 0.75 * rng.random())),)))
    return out[:n]


def flow_run(sc, v: Variant, symmetry=None) -> int:
    ov = v.overrides(sc)
    s2 = pipeline.with_overrides(sc, ov) if ov else sc
    return pipeline.simulate(pipeline.prepare(s2), symmetry=symmetry, record_messages=False).sim.iteration_time_ns


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,64,256,1024")
    ap.add_argument("--cases", default="quickstart,qs-128")
    ap.add_argument("--flow-sample", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--numpy-max", type=int, default=16, help="largest B run with the NumPy driver")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    from heterosim.forking import forked_map

    rows = []
    for case in args.cases.split(","):
        path, sets = CASES[case]
        sc = pipeline.load(os.path.join(ROOT, path), sets)
        prep = pipeline.prepare(sc)
        vs_all = make_variants(prep, max(batches))
        k = min(args.flow_sample, len(vs_all), MAX_B_CPU.get(case, len(vs_all)))
        t0 = time.perf_counter()
        flow_ns = [flow_run(sc, v) for v in vs_all[:k]]
        flow_s = (time.perf_counter() - t0) / k
        t0 = time.perf_counter()
        forked_map(lambda i: flow_run(sc, vs_all[i]), k, args.jobs)
        jobs_s = (time.perf_counter() - t0) / k
        full_ns = [flow_run(sc, v, symmetry=False) for v in vs_all[:k]]
        rows.append({"case": case, "flow_s": flow_s, "jobs_s": jobs_s, "flow_ns": flow_ns, "full_ns": full_ns,
                     "sc": sc, "prep": prep, "vs": vs_all})
    import jax

    gpu = [d for d in jax.devices() if d.platform == "gpu"]
    cpu_name = _cpu_name()
    print(f"CPU: {cpu_name}, {os.cpu_count()} cores; GPU: {gpu[0].device_kind if gpu else 'none (unmeasured)'}; "
          f"jax {jax.__version__}\n")
    head = ("| case | B | flow 1-by-1 exp/s | flow --jobs {j} exp/s | NumPy exp/s (x flow) | JAX-CPU exp/s (x flow) "
            "| JAX-CPU / flow --jobs | JAX-CPU compile s | JAX-GPU exp/s | max rel err vs flow | rounds "
            "| bytes/variant |").format(j=args.jobs)
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for r in rows:
        t0 = time.perf_counter()
        prog = export_program(r["prep"])
        export_s = time.perf_counter() - t0
        pools = engine.default_pools(prog)
        gpu_run = bool(gpu)
        target: list[str] = []
        for B in batches:
            if not gpu_run and B > MAX_B_CPU.get(r["case"], B):
                print(f"| {r['case']} | {B} | not run on this CPU (MAX_B_CPU) ||||||||||")
                continue
            vs = r["vs"][:B]
            prm = variants.params(prog, vs, r["prep"].system, r["prep"].scenario)
            flow_eps = 1 / r["flow_s"]
            jobs_eps = 1 / r["jobs_s"]
            if B <= min(args.numpy_max, MAX_B_CPU.get(r["case"], args.numpy_max)) and (B == 1 or r["case"] != "qs-128"):
                rn = engine.run_numpy(prog, prm)
                np_cell = f"{B / rn.wall_s:.2f} ({B / rn.wall_s / flow_eps:.2f}x)"
            else:
                rn, np_cell = None, "not run"
            rj = engine.run_jax(prog, prm)
            if rn is not None:
                assert rj.iteration_time_ns.tolist() == rn.iteration_time_ns.tolist(), "NumPy != JAX"
            k = min(B, len(r["full_ns"]))
            err = max(abs(int(a) - b) / b for a, b in zip(rj.iteration_time_ns[:k], r["full_ns"][:k]))
            gpu_cell = "unmeasured (no GPU)"
            if gpu:
                gpu_cell = "see --device gpu"  # (a GPU run goes through jax's default device: the JAX column)
            mem = _bytes_per_variant(prog, pools)
            vs_jobs = B / rj.wall_s / jobs_eps
            if B >= 64:
                target.append(f"B={B}: {vs_jobs:.2f}x")
            print(f"| {r['case']} | {B} | {flow_eps:.2f} | {jobs_eps:.2f} | {np_cell} | "
                  f"{B / rj.wall_s:.2f} ({B / rj.wall_s / flow_eps:.2f}x) | {vs_jobs:.2f}x | {rj.compile_s:.1f} | "
                  f"{gpu_cell} | {err:.1e} | {rj.rounds} | {mem:,} |", flush=True)
        if target:
            print(f"\n{r['case']}: CPU target (JAX-CPU >= flow --jobs {args.jobs} for B >= 64): "
                  + ", ".join(target) + (" (met)" if all(float(t.split(": ")[1][:-1]) >= 1 for t in target)
                                         else " (NOT met)"))
        sym_err = max(abs(a - b) / b for a, b in zip(r["flow_ns"], r["full_ns"]))
        print(f"\n{r['case']}: program {prog.num_nodes:,} nodes, {prog.num_flows:,} flows, {prog.num_links} links, "
              f"exported in {export_s:.2f} s; compute contention {prog.meta.get('contention', 'none')}; flow backend "
              f"(default settings) vs every lane simulated: max rel diff {sym_err:.1e} over {len(r['flow_ns'])} "
              "variants\n")


def _bytes_per_variant(prog, pools) -> int:
    ke, kf = pools
    n, l1 = prog.num_nodes, prog.num_links + 1
    c = max(1, prog.meta.get("connections", 0))
    np_, p = prog.links.shape
    paths = np_ * (p * 4 * 2 + 16)  # per-variant path tables (ECMP seed variants re-route them)
    cont = 0
    if prog.contention:  # (SM holds, per-lane counts, event anchors, member durations and compute parts)
        cont = len(prog.hold_lane) * 4 + len(prog.lane_sm) * 8 + ke * 8 * 4 + len(prog.member_ns) * 16
    return int(n * (4 + 8) + l1 * 8 * 4 + ke * (4 + 8 + 1 + 8) + kf * (4 + 8 * 6) + c * 9 + paths + cont)


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
