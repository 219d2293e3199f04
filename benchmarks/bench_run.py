"""Wall time, CPU time and peak memory of one simulated iteration at 128 to 10,752 GPUs (flow backend).

Targets (issue 15), printed as target/actual ratios measured in this run; not a test:

* GPT-3 175B on 1,024 A100 GPUs (TP8 PP16 DP8, batch 1,536): <= 10 s end to end, results included;
* the MLPerf-shaped GPT-3 175B on 10,752 H100 GPUs (``--mlperf``): <= 60 s end to end, peak RSS <= 4 GB.

    .venv/bin/python benchmarks/bench_run.py [--gpus 1024] [--no-write] [--full] [--compare]
    .venv/bin/python benchmarks/bench_run.py --mlperf
    .venv/bin/python benchmarks/bench_run.py --sizes 128,1024,4096,mlperf --before 37204f8 [--after HEAD] [--ecmp rail]
    .venv/bin/python benchmarks/bench_run.py --sizes 1024,4096 --engines

``--before REV`` runs each size twice, each in a fresh process (so peak RSS is its own): once with
the code of git revision REV (extracted with ``git archive``) and once with this tree, and prints
the before/after table (wall, CPU, peak RSS, events, iteration time) with the ratios.

``--engines`` does the same with this tree twice: the flow backend's Python rate engine, then the compiled one.

``--gpus N`` keeps the 1,024-GPU shape per replica (TP8 PP16, 192 micro-batches per replica, so
batch = 1.5 N). It prints events/s, simulated vs total lanes (TP groups), the replica classes and
collective orbits the symmetry reduction found. ``--full`` simulates every lane and transfer (the
reference); ``--compare`` runs both in this process and prints the speed-up and their agreement.
By default it does what ``heterosim run`` does (summary, trace, plots; tables as ``output.tables``,
i.e. summary only); ``--no-write`` times compile + simulate alone.
Wall time on a shared machine is noisy: CPU seconds of this process are printed beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import revisions
from heterosim import api
from heterosim.config.loader import scenario_from_dict

TARGET_1024_S = 10.0
TARGET_MLPERF_S = 60.0
TARGET_MLPERF_RSS_GB = 4.0


def scenario(nodes: int, pp: int, batch: int, ecmp: str = "hash") -> dict:
    """GPT-3 175B on DGX A100 nodes, TP8, leaf-spine (the 1,024-GPU benchmark of the coordinator issue)."""
    return {
        "name": f"bench-gpt3-175b-{nodes * 8}",
        "model": "gpt3-175b",
        "parallelism": {"tp": 8, "pp": pp, "schedule": "1f1b", "sequence_parallel": True, "zero_stage": 1},
        "training": {"global_batch_size": batch, "micro_batch_size": 1, "seq_length": 2048, "precision": "bf16"},
        "cluster": {"groups": [{"name": "a100", "node_type": "dgx-a100", "num_nodes": nodes}]},
        "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 32, "uplink_gbps": 400},
        "network": {"backend": "flow", "ecmp": ecmp},
    }


def mlperf_scenario() -> dict:
    """GPT-3 175B as NVIDIA's MLPerf Training v3.1 submission on Eos: 10,752 H100 (1,344 DGX H100), TP4 PP8
    with 12 virtual stages, DP 336, global batch 2,688, sequence length 2,048, FP8, sequence parallel,
    distributed optimizer (configuration as stated in issue 15); selective recomputation, as Megatron-LM
    runs with sequence parallelism (without it the last stage does not fit in 80 GB here). Fabric: rail-optimized, non-blocking
    (oversubscription 1), 400G NICs, rails pinned to spines."""
    return {
        "name": "bench-mlperf-gpt3-175b-10752",
        "model": "gpt3-175b",
        "parallelism": {"tp": 4, "pp": 8, "schedule": "interleaved", "virtual_stages": 12,
                        "sequence_parallel": True, "zero_stage": 1, "recompute": "selective"},
        "training": {"global_batch_size": 2688, "micro_batch_size": 1, "seq_length": 2048, "precision": "fp8"},
        "cluster": {"groups": [{"name": "h100", "node_type": "dgx-h100", "num_nodes": 1344}]},
        "fabric": {"kind": "rail_optimized", "nodes_per_block": 32, "oversubscription": 1.0, "uplink_gbps": 400},
        "network": {"backend": "flow", "ecmp": "rail"},
    }


def bytecode_note() -> str:
    """Whether this process may cache compiled bytecode (``PYTHONDONTWRITEBYTECODE`` / ``-B`` turn it off, as
    some sandboxes do): without it the project's modules are compiled from source in every process. Measured at
    1,024 GPUs: ~0.1 s per process, ~0.06 s of it inside the timed phases (the rest at import)."""
    return ("bytecode caching off (PYTHONDONTWRITEBYTECODE or -B: modules compiled from source each run)"
            if sys.dont_write_bytecode else "bytecode caching on")


def peak_rss_gb() -> float:
    """This process's peak RSS plus that of the children it waited for (the plots are drawn in a forked child:
    counted as if both peaks held at once, an upper bound)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (own + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024 ** 2  # Linux: KiB


def cpu_s() -> float:
    """CPU seconds of this process and of the children it waited for (the forked plotting child)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def one(sc, *, write: bool, symmetry: bool) -> dict:
    t0, c0 = time.perf_counter(), cpu_s()
    prep = api.prepare(sc)
    t1, c1 = time.perf_counter(), cpu_s()
    res = api.simulate(prep, record_messages=api.messages_to_record(sc) if write else False, symmetry=symmetry)
    t2, c2 = time.perf_counter(), cpu_s()
    if write:
        with tempfile.TemporaryDirectory() as d:
            api.write_results(res, d)
    t3, c3 = time.perf_counter(), cpu_s()
    return {"res": res, "compile": t1 - t0, "simulate": t2 - t1, "write": t3 - t2, "total": t3 - t0,
            "cpu": c3 - c0, "cpu_compile": c1 - c0, "cpu_simulate": c2 - c1, "cpu_write": c3 - c2}


def report(label: str, r: dict, write: bool) -> None:
    res = r["res"]
    s = res.summary
    sim = res.sim
    print(f"  [{label}]")
    print(f"    simulated iteration time : {s['iteration_time_s']:.6f} s  (MFU {s['mfu']:.1%}, "
          f"{s['model_tflops_per_gpu']:.1f} TFLOP/s/GPU)")
    print(f"    compile                  : {r['compile']:.2f} s ({r['cpu_compile']:.2f} s CPU)")
    print(f"    simulate                 : {r['simulate']:.2f} s ({r['cpu_simulate']:.2f} s CPU; {sim.events:,} events, "
          f"{sim.events / r['simulate']:,.0f} events/s)")
    if write:
        print(f"    write results            : {r['write']:.2f} s ({r['cpu_write']:.2f} s CPU)")
    print(f"    total                    : {r['total']:.2f} s wall, {r['cpu']:.2f} s CPU")
    sym = sim.symmetry
    if sym:
        rc = sym.get("replica_classes")
        print(f"    lanes simulated / total  : {sym['lanes_simulated']} / {sym['lanes_total']}")
        if rc:
            print(f"    replica classes          : {rc['classes']} of {rc['replicas']} replicas "
                  f"(sizes {rc['class_sizes']})")
        else:
            print("    replica classes          : none (every replica simulated)")
        if sym["orbit_schedules"]:
            print(f"    collective orbits        : {sym['orbit_schedules']:,} schedules, {sym['orbit_transfers']:,} "
                  f"transfers as {sym['orbit_flows']:,} flows")
        print(f"    flow copies sent in groups: {sym['copies_sent']:,}")
    else:
        print(f"    lanes simulated / total  : {len(sim.lanes)} / {len(sim.lanes)} (no reduction)")
    print(f"    messages (all copies)    : {sim.all_messages:,}; inter-node bytes {sim.net_bytes:,}")


def scenario_for(size: str, pp: int = 16, batch: int | None = None, ecmp: str = "hash"):
    """(scenario, title, target seconds or None) for a size: a GPU count (1,024-GPU shape) or 'mlperf'."""
    if size == "mlperf":
        return (scenario_from_dict(mlperf_scenario()),
                "GPT-3 175B MLPerf shape, 10,752 H100 (TP4 PP8 v12 DP336), batch 2,688, rail-optimized",
                TARGET_MLPERF_S)
    gpus = int(size)
    batch = batch or gpus * 3 // 2
    return (scenario_from_dict(scenario(gpus // 8, pp, batch, ecmp)),
            f"GPT-3 175B, {gpus} A100 (TP8 PP{pp} DP{gpus // 8 // pp}), batch {batch}, leaf-spine, {ecmp} ECMP",
            TARGET_1024_S if gpus == 1024 else None)


def measure_json(size: str, write: bool, ecmp: str = "hash") -> None:
    """One run in this process, printed as one JSON line (what --before compares)."""
    import heterosim

    sc, _, _ = scenario_for(size, ecmp=ecmp)
    r = one(sc, write=write, symmetry=True)
    sim = r["res"].sim
    print(json.dumps({"size": size, "code": str(Path(heterosim.__file__).parent.parent),
                      "iteration_ns": sim.iteration_time_ns, "events": sim.events,
                      "compile_s": r["compile"], "simulate_s": r["simulate"], "write_s": r["write"],
                      "wall_s": r["total"], "cpu_s": r["cpu"], "rss_gb": peak_rss_gb(),
                      "cpu_compile_s": r["cpu_compile"], "cpu_simulate_s": r["cpu_simulate"],
                      "cpu_write_s": r["cpu_write"],
                      "lanes": (sim.symmetry or {}).get("lanes_simulated", len(sim.lanes)),
                      "lanes_total": (sim.symmetry or {}).get("lanes_total", len(sim.lanes)),
                      "breakdown": flat_breakdown(r["res"].summary["breakdown"]),
                      "stages": stage_means(r["res"].summary)}))


def flat_breakdown(b: dict) -> dict:
    """The breakdown's categories (fractions of the iteration averaged over GPUs), one level."""
    return {"compute": b["compute"], "bubble": b["bubble"], "idle": b["idle"],
            **{f"exposed_{k}": v for k, v in b["exposed_comm"].items()}}


def stage_means(summary: dict) -> dict:
    """Per pipeline stage, every category's mean seconds over the stage's GPUs ("stage/category" keys)."""
    acc: dict = {}
    for r in summary["per_rank"]:
        for k, v in r.items():
            if k in ("compute", "bubble", "idle") or k.startswith("exposed_"):
                acc.setdefault(f"{r['stage']}/{k}", []).append(v)
    return {k: sum(v) / len(v) for k, v in acc.items()}


def agreement(a: dict, b: dict) -> str:
    """After vs before: iteration time (relative), the largest breakdown and per-stage category difference
    (in percent of the iteration). Where before is the full simulation (hash ECMP: nothing was merged),
    this is the reduction's agreement with it (issue 15: within 0.5% where not exact)."""
    T = b["iteration_ns"]
    cat = max(abs(a["breakdown"][k] - b["breakdown"][k]) for k in b["breakdown"])
    st = max(abs(a["stages"][k] - b["stages"][k]) for k in b["stages"]) / (T / 1e9)
    return (f"iteration {(a['iteration_ns'] - T) / T:+.2e} relative, breakdown max {cat:.3%}, "
            f"per-stage max {st:.3%} of the iteration")


def _pairs(sizes: list[str], sides: list[tuple[str, str, dict]], write: bool, ecmp: str) -> list[list[dict]]:
    """Each size run once per side (label, code tree, extra environment), each in its own process."""
    rows = []
    for size in sizes:
        pair = []
        for label, tree, env in sides:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--json", size, "--ecmp", ecmp] + \
                ([] if write else ["--no-write"])
            out = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": tree, **env}, check=True, capture_output=True,
                                 text=True).stdout
            pair.append(json.loads(out.strip().splitlines()[-1]))
            brief = {k: v for k, v in pair[-1].items() if k not in ("breakdown", "stages")}
            print(f"  {size:>6} {label}: {brief}", flush=True)
        rows.append(pair)
    return rows


def before_after(sizes: list[str], rev: str, write: bool, after: str | None = None, ecmp: str = "hash") -> None:
    """Each size with the code of ``rev`` and with this tree (or git revision ``after``), each in its
    own process; one table."""
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as old, tempfile.TemporaryDirectory() as new:
        for r, d in ((rev, old), (after, new)):
            if r is not None:
                revisions.extract(r, d)
        new = new if after is not None else str(here)
        rows = _pairs(sizes, [("before", old, {}), ("after ", new, {})], write, ecmp)
    print(f"\nbefore = git {rev}, after = {'git ' + after if after else 'this tree'}; flow backend, symmetry reduction on; "
          f"leaf-spine sizes with {ecmp} ECMP; "
          f"{'results written (summary, trace, plots)' if write else 'compile + simulate only'}; "
          f"{bytecode_note()}")
    _table(rows)


def engines(sizes: list[str], write: bool, ecmp: str = "hash") -> None:
    """Each size with the flow backend's Python rate engine (before) and its compiled one (after), this tree,
    each in its own process; one table (the results must be identical: the engines agree to the bit)."""
    here = str(Path(__file__).resolve().parent.parent)
    rows = _pairs(sizes, [("python  ", here, {"HETEROSIM_FLOW_ENGINE": "python"}),
                          ("compiled", here, {"HETEROSIM_FLOW_ENGINE": "compiled"})], write, ecmp)
    print(f"\nbefore = the Python rate engine, after = the compiled one (this tree); flow backend, symmetry reduction "
          f"on; leaf-spine sizes with {ecmp} ECMP; "
          f"{'results written (summary, trace, plots)' if write else 'compile + simulate only'}; {bytecode_note()}")
    _table(rows)


def _table(rows: list[list[dict]]) -> None:
    print(f"{'GPUs':>6} | {'wall s (before/after)':>22} {'x':>5} | {'CPU s':>15} {'x':>5} | {'peak RSS GB':>11} | "
          f"{'events':>17} | {'iteration s (before/after)':>26} | lanes")
    for b, a in rows:
        gpus = "10752" if a["size"] == "mlperf" else a["size"]
        print(f"{gpus:>6} | {b['wall_s']:10.1f} {a['wall_s']:10.1f} {b['wall_s'] / a['wall_s']:5.1f} | "
              f"{b['cpu_s']:7.1f} {a['cpu_s']:7.1f} {b['cpu_s'] / a['cpu_s']:5.1f} | {b['rss_gb']:5.2f} {a['rss_gb']:5.2f} | "
              f"{b['events']:8,} {a['events']:8,} | {b['iteration_ns'] / 1e9:12.6f} {a['iteration_ns'] / 1e9:12.6f} | "
              f"{a['lanes']}/{a['lanes_total']}")
        print(f"{'':>6}   CPU s compile / simulate / write: "
              + "  ->  ".join(f"{x['cpu_compile_s']:.2f} / {x['cpu_simulate_s']:.2f} / {x['cpu_write_s']:.2f}"
                              for x in (b, a)))
        print(f"{'':>6}   agreement after vs before: {agreement(a, b)}")
        _, _, target = scenario_for(a["size"])
        if target is not None:
            print(f"{'':>6}   target {target:.0f} s end to end: ratio target/actual = {target / a['wall_s']:.2f} (wall), "
                  f"{target / a['cpu_s']:.2f} (CPU)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--pp", type=int, default=16)
    ap.add_argument("--batch", type=int, default=None, help="default 1.5 x GPUs (192 micro-batches per replica)")
    ap.add_argument("--ecmp", choices=("hash", "rail"), default="hash",
                    help="leaf-spine paths: hashed (default, as in the issue) or rails pinned to spines")
    ap.add_argument("--mlperf", action="store_true", help="GPT-3 175B, 10,752 H100, MLPerf shape")
    ap.add_argument("--no-write", dest="write", action="store_false",
                    help="time compile + simulate only (no summary files, trace, plots)")
    ap.add_argument("--full", action="store_true", help="no symmetry reduction")
    ap.add_argument("--compare", action="store_true", help="run reduced and full, print the ratio")
    ap.add_argument("--sizes", default=None, help="comma-separated GPU counts and/or 'mlperf' (with --before)")
    ap.add_argument("--before", default=None, metavar="REV", help="git revision to compare with (fresh processes)")
    ap.add_argument("--after", default=None, metavar="REV", help="with --before: this revision instead of the tree")
    ap.add_argument("--engines", action="store_true",
                    help="with --sizes: the flow backend's Python vs compiled rate engine (fresh processes)")
    ap.add_argument("--json", default=None, metavar="SIZE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.json:
        measure_json(args.json, args.write, args.ecmp)
        return
    if args.before or args.engines:
        sizes = [x.strip() for x in (args.sizes or ("mlperf" if args.mlperf else str(args.gpus))).split(",")]
        if args.engines:
            engines(sizes, args.write, args.ecmp)
        else:
            before_after(sizes, args.before, args.write, args.after, args.ecmp)
        return
    if args.mlperf:
        sc = scenario_from_dict(mlperf_scenario())
        title = "GPT-3 175B MLPerf shape, 10,752 H100 (TP4 PP8 v12 DP336), batch 2,688, rail-optimized"
        target, gpus = TARGET_MLPERF_S, 10752
    else:
        batch = args.batch or args.gpus * 3 // 2
        sc = scenario_from_dict(scenario(args.gpus // 8, args.pp, batch, args.ecmp))
        title = (f"GPT-3 175B, {args.gpus} A100 (TP8 PP{args.pp} DP{args.gpus // 8 // args.pp}), batch {batch}, "
                 f"leaf-spine, {args.ecmp} ECMP")
        target, gpus = (TARGET_1024_S if args.gpus == 1024 else None), args.gpus
    print(title + ", flow backend; " + bytecode_note())
    runs = []
    if not args.full or args.compare:
        runs.append(("reduced", one(sc, write=args.write, symmetry=True)))
    if args.full or args.compare:
        runs.append(("full", one(sc, write=args.write, symmetry=False)))
    for label, r in runs:
        report(label, r, args.write)
    r = runs[0][1]
    rss = peak_rss_gb()
    print(f"  peak RSS (process)         : {rss:.2f} GB" + (f"   target {TARGET_MLPERF_RSS_GB:.0f} GB, ratio "
                                                           f"target/actual = {TARGET_MLPERF_RSS_GB / rss:.2f}"
                                                           if args.mlperf else ""))
    if target is not None:
        print(f"  end to end ({runs[0][0]})       : {r['total']:.2f} s wall, {r['cpu']:.2f} s CPU; target {target:.0f} s;"
              f" ratio target/actual = {target / r['total']:.2f} (wall), {target / r['cpu']:.2f} (CPU)")
    if len(runs) == 2:
        a, b = runs[0][1], runs[1][1]
        ta, tb = a["res"].sim.iteration_time_ns, b["res"].sim.iteration_time_ns
        print(f"  speed-up reduced vs full   : {b['simulate'] / a['simulate']:.1f}x simulate, "
              f"{b['total'] / a['total']:.1f}x end to end, {b['cpu'] / a['cpu']:.1f}x CPU")
        print(f"  agreement                  : iteration time reduced {ta} ns vs full {tb} ns "
              f"({(ta - tb) / tb:+.2e} relative)")
    del gpus


if __name__ == "__main__":
    main()
