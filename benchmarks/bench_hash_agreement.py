"""Agreement of the approximate hash-ECMP reductions (``simulation.hashed_copies``) with the full run.

Under hashed ECMP the copies of a transfer (replicas, ring positions, rails) take paths the hash chose,
so no exact replica reduction exists (benchmarks/hash_replica_signatures.py). ``ops`` sends the copies
one op waits for (ring positions, rails) as one group flow anyway, each copy on its own hashed links,
the group at its slowest copy's pace; ``ops_and_replicas`` also simulates data-parallel replicas once;
``ops_and_shifted_replicas`` too, with the mirrors' pipeline sends shifted by offsets a warm-up measured.
The issue's rule for a reduction that is not exact: within 0.5% of the full simulation. This prints, for
each case, the full run (every lane and transfer, the reference) against each reduced one:

* iteration time, and its relative difference;
* the breakdown (compute, exposed comm per dim, bubble, idle; fractions of the iteration averaged over
  GPUs): the largest difference of a category, in percent of the iteration;
* per pipeline stage, every category's mean seconds over the stage's GPUs: the largest difference, in
  percent of the iteration;
* CPU seconds of each simulation and their ratio.

    .venv/bin/python benchmarks/bench_hash_agreement.py [--cases 256,512,1024,hetero512,short]
        [--modes ops,ops_and_replicas,ops_and_shifted_replicas]
    .venv/bin/python benchmarks/bench_hash_agreement.py --small 60 [--small-seed 40]

``--small N``: issue 40's case (4 DGX H100, GPT-3 1.7B cut to 4 layers, TP4 PP2 DP4, one node per leaf, hash
ECMP, at 2:1 and 1:1) and N random small fabrics and plans (2-8 GPUs and NICs per node, 1-2 nodes per leaf,
1:1-4:1, hash or rails pinned, TP/PP/DP, order, 1-8 micro-batches, seed), every mode's iteration time against
the full run: the matrix behind the default (docs/symmetry-reduction.md).

Cases: a GPU count is bench_run.py's GPT-3 175B shape (TP8 PP16, DP = GPUs / 128, leaf-spine, hash
ECMP); ``hetero512`` is GPT-3 175B on 32 DGX H100 (400G NICs) + 32 DGX A100 (200G NICs), TP4 PP8 DP16,
interleaved, H100 replicas given twice the micro-batches (the H2 suite's plan, scaled to 512 GPUs);
``short`` is a short iteration (GPT-3 1.7B, 32 DGX H100, TP8 PP4 DP8, 8 micro-batches per replica, two
nodes per leaf), where the pipeline fill, the embedding all-reduce and the data-parallel collectives weigh.
Not a test: the full runs take minutes at 1,024 GPUs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_run import flat_breakdown, scenario, scenario_for, stage_means  # noqa: E402

from heterosim import api  # noqa: E402
from heterosim.config.loader import scenario_from_dict  # noqa: E402

TOLERANCE = 0.005
"""Issue 15: a reduction that is not exact must be within 0.5% of the full simulation."""


def hetero_scenario() -> dict:
    """GPT-3 175B on 32 DGX H100 + 32 DGX A100: the H2 suite's (scenarios/suites/h-suite/h2-gpt3-175b.yaml)
    plan at 4x its size, DP16 (replicas 0-7 H100, 8-15 A100), hash ECMP over a leaf-spine."""
    return {
        "name": "hetero-gpt3-175b-512", "model": "gpt3-175b",
        "parallelism": {"tp": 4, "pp": 8, "dp": 16, "sequence_parallel": True, "zero_stage": 1,
                        "schedule": "interleaved", "virtual_stages": 4, "recompute": "selective",
                        "layer_partition": [3] * 32, "order": "tp-cp-ep-pp-dp"},
        "training": {"global_batch_size": 1536, "micro_batch_size": 1, "seq_length": 2048, "precision": "bf16",
                     "microbatch_split": [128] * 8 + [64] * 8},
        "cluster": {"groups": [{"name": "h100", "node_type": "dgx-h100", "num_nodes": 32},
                               {"name": "a100", "node_type": "dgx-a100", "num_nodes": 32}]},
        "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 16, "uplink_gbps": 400},
        "network": {"backend": "flow", "ecmp": "hash"},
        "output": {"trace": False, "plots": False},
    }


def short_scenario() -> dict:
    """A short iteration: GPT-3 1.7B on 32 DGX H100 (400G NICs, two nodes per leaf), TP8 PP4 DP8, 8 micro-batches
    per replica (1F1B). The pipeline fill and drain, the embedding all-reduce (stage 0 with stage 3) and the
    data-parallel collectives are a large part of it, so where a replica stands against the others shows."""
    return {
        "name": "short-gpt3-1.7b-256", "model": "gpt3-1.7b",
        "parallelism": {"tp": 8, "pp": 4, "schedule": "1f1b", "sequence_parallel": True, "zero_stage": 1},
        "training": {"global_batch_size": 64, "micro_batch_size": 1, "seq_length": 2048, "precision": "bf16"},
        "cluster": {"groups": [{"name": "h", "node_type": "dgx-h100", "num_nodes": 32}]},
        "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 16, "uplink_gbps": 400},
        "network": {"backend": "flow", "ecmp": "hash"},
        "output": {"trace": False, "plots": False},
    }


SMALL_MODES = ("exact", "ops", "ops_and_replicas", "ops_and_shifted_replicas")


def small_scenario(*, gpus_per_node: int, nodes: int, nodes_per_leaf: int, oversubscription: float, ecmp: str,
                   tp: int, pp: int, micro_batches: int, order: str = "tp-cp-ep-dp-pp", seed: int = 0,
                   sequence_parallel: bool = False, zero_stage: int = 0) -> dict:
    """A small fabric and plan (the matrix below and tests/sim/test_hash_default.py's property test): DGX H100
    nodes cut to ``gpus_per_node`` GPUs and as many 400G NICs, ``nodes_per_leaf`` nodes on each leaf of a
    leaf-spine at ``oversubscription``:1, GPT-3 1.7B cut to two layers per stage, TP x PP x DP filling the
    nodes, ``micro_batches`` per replica (1F1B)."""
    world = gpus_per_node * nodes
    dp = world // (tp * pp)
    assert dp * tp * pp == world and gpus_per_node % tp == 0, (world, tp, pp)
    return {
        "name": "small", "model": {"zoo": "gpt3-1.7b", "num_layers": 2 * pp}, "seed": seed,
        "parallelism": {"tp": tp, "pp": pp, "order": order, "sequence_parallel": sequence_parallel,
                        "zero_stage": zero_stage},
        "training": {"global_batch_size": micro_batches * dp, "micro_batch_size": 1, "seq_length": 2048},
        "cluster": {"groups": [{"name": "h", "node_type": "dgx-h100", "num_nodes": nodes,
                                "overrides": {"gpus_per_node": gpus_per_node, "nics_per_node": gpus_per_node}}]},
        "fabric": {"kind": "leaf_spine", "hosts_per_leaf": gpus_per_node * nodes_per_leaf, "uplink_gbps": 400,
                   "oversubscription": oversubscription},
        "network": {"backend": "flow", "ecmp": ecmp},
        "output": {"trace": False, "plots": False},
    }


def issue40_scenario(oversubscription: float) -> dict:
    """Issue 40's case: 4 DGX H100, GPT-3 1.7B cut to 4 layers, TP4 PP2 DP4, one node per leaf, hashed ECMP
    (8 micro-batches per replica, seed 1: -0.999% at 2:1 and -0.579% at 1:1 with ops_and_shifted_replicas)."""
    return small_scenario(gpus_per_node=8, nodes=4, nodes_per_leaf=1, oversubscription=oversubscription,
                          ecmp="hash", tp=4, pp=2, micro_batches=8, seed=1)


def draw_small(rng) -> dict:
    """One random point of the small-fabric matrix (the property test draws the same space with hypothesis):
    at least two nodes and two data-parallel replicas, hashed ECMP three times in four (where the modes differ)."""
    while True:
        gpn, nodes = rng.choice([2, 4, 8]), rng.choice([2, 4, 8])
        tp = rng.choice([t for t in (1, 2, 4, 8) if t <= gpn])
        pp = rng.choice([1, 2, 4])
        if (gpn * nodes) % (tp * pp) == 0 and gpn * nodes // (tp * pp) >= 2:
            break
    return dict(gpus_per_node=gpn, nodes=nodes, nodes_per_leaf=rng.choice([1, 2]),
                oversubscription=float(rng.choice([1, 2, 3, 4])), ecmp=rng.choice(["hash", "hash", "hash", "rail"]),
                tp=tp, pp=pp, micro_batches=rng.choice([1, 2, 4, 8]),
                order=rng.choice(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]), seed=rng.randrange(1000))


def matrix(points: int, modes: list[str], seed: int = 40) -> list[dict]:
    """``points`` random small fabrics and plans (issue 40's case at 2:1 and 1:1 first): each mode's iteration time
    against the full run, and wall seconds of each simulation."""
    import random

    rng = random.Random(seed)
    cases = [("issue40 2:1", issue40_scenario(2.0)), ("issue40 1:1", issue40_scenario(1.0)),
             ("issue40 2:1, dp outermost, 1 micro-batch, seed 0", small_scenario(
                 gpus_per_node=8, nodes=4, nodes_per_leaf=1, oversubscription=2.0, ecmp="hash", tp=4, pp=2,
                 micro_batches=1, order="tp-cp-ep-pp-dp", seed=0))]
    cases += [(f"random {i}", small_scenario(**draw_small(rng))) for i in range(points)]
    rows = []
    for label, d in cases:
        sc = scenario_from_dict(d)
        prep = api.prepare(sc)
        t0 = time.perf_counter()
        full = api.simulate(prep, record_messages=False, symmetry=False)
        row = {"case": label, "params": d, "full_s": time.perf_counter() - t0, "T": full.sim.iteration_time_ns}
        for mode in modes:
            p = api.prepare(api.with_overrides(sc, {"simulation.hashed_copies": mode}))
            t0 = time.perf_counter()
            red = api.simulate(p, record_messages=False, symmetry=True)
            row[mode] = ((red.sim.iteration_time_ns - row["T"]) / row["T"], time.perf_counter() - t0)
        rows.append(row)
        print(f"  {label}: {_describe(d)} full {row['T'] / 1e6:.3f} ms; "
              + "; ".join(f"{m} {row[m][0]:+.3%}" for m in modes), flush=True)
    return rows


def _describe(d: dict) -> str:
    g = d["cluster"]["groups"][0]
    par = d["parallelism"]
    gpn = g["overrides"]["gpus_per_node"]
    dp = g["num_nodes"] * gpn // (par["tp"] * par["pp"])
    return (f"{g['num_nodes']}x{gpn} GPUs, {d['fabric']['hosts_per_leaf'] // gpn}/leaf, "
            f"{d['fabric']['oversubscription']:g}:1, {d['network']['ecmp']}, TP{par['tp']} PP{par['pp']} DP{dp}, "
            f"{par['order'].split('-')[-1]} outermost, {d['training']['global_batch_size'] // dp} micro-batches, "
            f"seed {d['seed']}")


def print_matrix(rows: list[dict], modes: list[str]) -> None:
    print("\nsmall-fabric matrix: iteration time of each simulation.hashed_copies mode (symmetry on) against the "
          "full run (symmetry off); flow backend")
    print(f"{'mode':>26} | {'cases':>5} | {'max |rel|':>9} | {'cases > 0.5%':>12} | {'worst case':<60} | "
          f"{'wall s full':>11} {'mode':>8}")
    full_s = sum(r["full_s"] for r in rows)
    for m in modes:
        worst = max(rows, key=lambda r: abs(r[m][0]))
        bad = sum(abs(r[m][0]) > TOLERANCE for r in rows)
        print(f"{m:>26} | {len(rows):>5} | {abs(worst[m][0]):9.3%} | {bad:>12} | "
              f"{worst['case'] + ': ' + format(worst[m][0], '+.3%'):<60} | {full_s:11.2f} {sum(r[m][1] for r in rows):8.2f}")


def speed(sizes: list[str], modes: list[str]) -> None:
    """The cost of each mode on bench_run.py's large scenarios (hash ECMP), measured side by side in one process."""
    rows = []
    for size in sizes:
        sc, title, _ = scenario_for(size.strip())
        for mode in modes:
            prep = api.prepare(api.with_overrides(sc, {"simulation.hashed_copies": mode}))
            w0, c0 = time.perf_counter(), time.process_time()
            res = api.simulate(prep, record_messages=False, symmetry=True)
            rows.append((title, mode, time.perf_counter() - w0, time.process_time() - c0, res.sim.iteration_time_ns,
                         res.sim.symmetry["lanes_simulated"], res.sim.symmetry["lanes_total"]))
            print(f"  {rows[-1]}", flush=True)
    print(f"\n{'scenario':>40} {'mode':>26} | {'wall s':>7} {'CPU s':>7} | {'iteration s':>12} | lanes")
    for title, mode, w, c, T, ls, lt in rows:
        print(f"{title[:40]:>40} {mode:>26} | {w:7.1f} {c:7.1f} | {T / 1e9:12.6f} | {ls}/{lt}")


def case(name: str):
    if name == "short":
        return scenario_from_dict(short_scenario()), "GPT-3 1.7B, 32 DGX H100, TP8 PP4 DP8, 8 micro-batches each"
    if name == "hetero512":
        return scenario_from_dict(hetero_scenario()), "GPT-3 175B, 32 DGX H100 + 32 DGX A100, TP4 PP8 DP16"
    gpus = int(name)
    return (scenario_from_dict(scenario(gpus // 8, 16, gpus * 3 // 2, "hash")),
            f"GPT-3 175B, {gpus} A100, TP8 PP16 DP{gpus // 128}")


def run(sc, symmetry: bool) -> tuple:
    prep = api.prepare(sc)
    c0 = time.process_time()
    res = api.simulate(prep, record_messages=False, symmetry=symmetry)
    return res, time.process_time() - c0


def compare(name: str, modes: list[str]) -> list[dict]:
    sc, title = case(name)
    full, cpu_full = run(sc, False)
    return [agree(name, title, mode, full, cpu_full, *run(api.with_overrides(sc, {"simulation.hashed_copies": mode}),
                                                         True)) for mode in modes]


def agree(name, title, mode, full, cpu_full, red, cpu_red) -> dict:
    T = full.sim.iteration_time_ns
    d_iter = (red.sim.iteration_time_ns - T) / T
    bf, br = flat_breakdown(full.summary["breakdown"]), flat_breakdown(red.summary["breakdown"])
    d_cat = max(abs(br[k] - bf[k]) for k in bf)
    worst_cat = max(bf, key=lambda k: abs(br[k] - bf[k]))
    sf, sr = stage_means(full.summary), stage_means(red.summary)
    worst_stage = max(sf, key=lambda k: abs(sr[k] - sf[k]))
    d_stage = abs(sr[worst_stage] - sf[worst_stage]) / full.summary["iteration_time_s"]
    sym = red.sim.symmetry
    return {"name": name, "mode": mode, "title": title, "iter_full": T, "iter_red": red.sim.iteration_time_ns, "d_iter": d_iter,
            "d_cat": d_cat, "worst_cat": worst_cat, "d_stage": d_stage, "worst_stage": worst_stage,
            "cpu_full": cpu_full, "cpu_red": cpu_red, "events_full": full.sim.events, "events_red": red.sim.events,
            "lanes": f"{sym['lanes_simulated']}/{sym['lanes_total']}",
            "classes": (sym["replica_classes"] or {}).get("class_sizes")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="256,512,1024,hetero512")
    ap.add_argument("--modes", default="ops,ops_and_replicas,ops_and_shifted_replicas",
                    help="simulation.hashed_copies values to compare")
    ap.add_argument("--small", type=int, default=None, metavar="N",
                    help="instead: issue 40's case and N random small fabrics and plans, every mode (exact too)")
    ap.add_argument("--small-seed", type=int, default=40)
    ap.add_argument("--speed", default=None, metavar="SIZES",
                    help="instead: bench_run.py's sizes (e.g. 1024,mlperf), simulated once per mode in this process "
                         "(symmetry on): wall and CPU s of the simulation and the iteration, side by side")
    args = ap.parse_args()
    if args.speed:
        speed(args.speed.split(","), args.modes.split(",") if args.modes != ap.get_default("modes")
              else ["exact", "ops_and_shifted_replicas"])
        return
    if args.small is not None:
        modes = list(SMALL_MODES) if args.modes == ap.get_default("modes") else args.modes.split(",")
        print_matrix(matrix(args.small, modes, args.small_seed), modes)
        return
    rows = []
    for name in args.cases.split(","):
        for r in compare(name.strip(), args.modes.split(",")):
            rows.append(r)
            print(f"  {r['title']}: {r}", flush=True)
    print("\nfull = every lane and transfer (symmetry off); reduced = symmetry on with simulation.hashed_copies as"
          " named; hash ECMP; flow backend")
    print(f"{'case':>9} {'mode':>16} | {'iteration s full':>16} {'reduced':>12} {'rel':>9} | {'breakdown max':>13} | "
          f"{'per stage max':>13} | {'CPU s full':>10} {'reduced':>8} {'x':>5} | lanes   | within 0.5%")
    for r in rows:
        ok = max(abs(r["d_iter"]), r["d_cat"], r["d_stage"]) <= TOLERANCE
        print(f"{r['name']:>9} {r['mode']:>16} | {r['iter_full'] / 1e9:16.6f} {r['iter_red'] / 1e9:12.6f} {r['d_iter']:+9.2e} | "
              f"{r['d_cat']:12.3%}  | {r['d_stage']:12.3%}  | {r['cpu_full']:10.1f} {r['cpu_red']:8.1f} "
              f"{r['cpu_full'] / r['cpu_red']:5.1f} | {r['lanes']:7} | {'yes' if ok else 'NO'}")
        print(f"{'':>26}   worst breakdown category {r['worst_cat']}; worst stage/category {r['worst_stage']}; "
              f"events {r['events_full']:,} -> {r['events_red']:,}; replica classes {r['classes']}")


if __name__ == "__main__":
    main()
