"""The work estimate (heterosim/budget.py) against real runs, per backend and mode, side by side.

Each point is a real run of a shipped scenario (scenarios/quickstart.yaml scaled, the GPT-3 175B shapes of
bench_run.py and bench_ns3_training.py, the MLPerf-shaped 10,752-GPU GPT-3 175B), compiled and simulated in a
fresh process: its wall seconds (compile + simulation, what the budget bounds), CPU seconds and coordinator
events, beside the estimate's counts and predicted seconds, and measured / predicted. A point past
``--timeout`` seconds is stopped and its row says so (then measured > timeout).

``--fit`` prints the rates (budget.RATES) these measurements give, to paste into heterosim/budget.py
(:func:`fit`: relative least squares on CPU seconds). ``--json F`` keeps the measurements; ``--from F`` shows
them beside the estimate of this tree without running anything (to refit after changing the estimate).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_budget.py [--fit] [--json runs.json] [--only flow-sym,ns3]
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_budget.py --from runs.json --fit
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_budget.py --list
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

# (mode, label, scenario spec). Spec: ["quickstart", nodes, batch] | ["gpt3", nodes, pp, batch] | ["mlperf"] |
# ["ns3-gpt3", batch] (bench_ns3_training's 128-H100 TP8 PP8 shape). "check" rows are admitted-by-default checks.
POINTS = [
    ("flow-sym", "quickstart 16 GPUs", ["quickstart", 2, 32]),
    ("flow-sym", "quickstart 128 GPUs", ["quickstart", 16, 256]),
    ("flow-sym", "quickstart 1,024 GPUs", ["quickstart", 128, 2048]),
    ("flow-sym", "GPT-3 175B 128 A100 (TP8 PP16)", ["gpt3", 16, 16, 192]),
    ("flow-sym", "GPT-3 175B 768 A100 (TP8 PP16 DP6)", ["gpt3", 96, 16, 1152]),
    ("flow-sym", "GPT-3 175B MLPerf 10,752 H100", ["mlperf"]),
    ("flow", "quickstart 16 GPUs", ["quickstart", 2, 32]),
    ("flow", "quickstart 64 GPUs", ["quickstart", 8, 128]),
    ("flow", "quickstart 128 GPUs", ["quickstart", 16, 256]),
    ("flow", "GPT-3 175B 128 A100 (TP8 PP16)", ["gpt3", 16, 16, 192]),
    ("ns3", "quickstart 16 GPUs, batch 8", ["quickstart", 2, 8]),
    ("ns3", "quickstart 16 GPUs", ["quickstart", 2, 32]),
    ("ns3", "quickstart 32 GPUs", ["quickstart", 4, 64]),
    ("ns3-auto", "quickstart 16 GPUs", ["quickstart", 2, 32]),
    ("ns3-auto", "quickstart 32 GPUs", ["quickstart", 4, 64]),
    ("ns3-auto", "GPT-3 175B 128 H100 b16 (TP8 PP8)", ["ns3-gpt3", 16]),
]


def load(spec: list):
    from heterosim import api
    from heterosim.config.loader import scenario_from_dict

    kind = spec[0]
    if kind == "quickstart":
        return api.load(str(ROOT / "scenarios/quickstart.yaml"),
                        [f"cluster.groups[0].num_nodes={spec[1]}", f"training.global_batch_size={spec[2]}",
                         "fabric.hosts_per_leaf=16"])
    if kind == "gpt3":
        import bench_run

        return scenario_from_dict(bench_run.scenario(spec[1], spec[2], spec[3]))
    if kind == "mlperf":
        import bench_run

        return scenario_from_dict(bench_run.mlperf_scenario())
    if kind == "ns3-gpt3":
        import bench_ns3_training

        return scenario_from_dict(bench_ns3_training.scenario(spec[1]))
    raise SystemExit(f"unknown scenario spec {spec}")


def backend_of(mode: str) -> tuple[str, list[str], bool]:
    """(backend, overrides, symmetry) of a mode."""
    return {"flow-sym": ("flow", [], True), "flow": ("flow", [], False),
            "ns3": ("ns3", ["network.acceleration.mode=off"], False),
            "ns3-auto": ("ns3", ["network.acceleration.mode=auto"], False)}[mode]


def run_point(mode: str, spec: list) -> dict:
    """One point in this process: the estimate, then compile + simulate timed (the estimate is not timed)."""
    from heterosim import api
    from heterosim.pipeline import with_overrides

    backend, overrides, symmetry = backend_of(mode)
    t0, c0 = time.perf_counter(), time.process_time()
    sc = load(spec)
    sc = with_overrides(sc, overrides + [f"network.backend={backend}", f"simulation.symmetry={str(symmetry).lower()}"])
    prep = api.prepare(sc, work_budget=1e12)
    t1 = time.perf_counter()
    est = api.check(prep, work_budget=1e12)
    t2 = time.perf_counter()
    res = api.simulate(prep, record_messages=False, work_budget=1e12, symmetry=symmetry)
    t3, c3 = time.perf_counter(), time.process_time()
    return {"mode": est.mode, "ops": est.ops, "messages": est.messages, "packets": est.packets, "gpus": est.gpus,
            "items": est.items, "predicted_s": est.seconds, "wall_s": (t1 - t0) + (t3 - t2),
            "cpu_s": c3 - c0, "estimate_s": t2 - t1, "events": res.sim.events}


def measure(mode: str, spec: list, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        p = subprocess.run([sys.executable, __file__, "--point", json.dumps([mode, spec])], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"stopped": timeout}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1])


def estimate_only(mode: str, spec: list) -> dict:
    from heterosim import api
    from heterosim.pipeline import with_overrides

    backend, overrides, symmetry = backend_of(mode)
    sc = with_overrides(load(spec), overrides + [f"network.backend={backend}",
                                              f"simulation.symmetry={str(symmetry).lower()}"])
    est = api.check(api.prepare(sc, work_budget=1e12), work_budget=1e12)
    return {"mode": est.mode, "ops": est.ops, "messages": est.messages, "packets": est.packets, "gpus": est.gpus,
            "items": est.items, "predicted_s": est.seconds}


def _nnls_relative(X: list[list[float]], y: list[float]) -> list[float]:
    """Non-negative coefficients minimising the squared *relative* errors sum(((X c - y) / y)^2): lstsq on
    the rows divided by y, dropping any column whose coefficient comes out negative and solving again."""
    import numpy as np

    A = np.array(X, dtype=float) / np.array(y, dtype=float)[:, None]
    b = np.ones(len(y))
    cols = list(range(A.shape[1]))
    while True:
        c, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
        if (c >= 0).all() or len(cols) == 1:
            out = [0.0] * A.shape[1]
            for j, v in zip(cols, c):
                out[j] = max(float(v), 0.0)
            return out
        cols.pop(int(np.argmin(c)))


def fit(rows: list[tuple[str, str, dict]]) -> dict:
    """The rates these measurements give, fitted on CPU seconds (a run's wall time on an unloaded core):
    per GPU from the symmetry runs (GPUs from 16 to 10,752); overhead and per work item per flow mode; the ns-3
    modes keep the flow backend's per GPU and per item (the coordinator is the same) and fit overhead and
    per packet. Relative least squares, coefficients >= 0."""
    from heterosim.budget import Rate

    by_mode: dict[str, list[dict]] = {}
    for mode, _, r in rows:
        if "cpu_s" in r:
            by_mode.setdefault(mode, []).append(r)
    out: dict[str, Rate] = {}
    g = 0.0
    for mode in ("flow-sym", "flow"):
        pts = by_mode.get(mode, [])
        if not pts:
            continue
        y = [r["cpu_s"] for r in pts]
        if mode == "flow-sym":
            a, g, i = _nnls_relative([[1.0, r["gpus"], r["items"]] for r in pts], y)
        else:
            a, i = _nnls_relative([[1.0, r["items"]] for r in pts], [v - g * r["gpus"] for v, r in zip(y, pts)])
        out[mode] = Rate(float(f"{a:.3g}"), float(f"{g:.3g}"), float(f"{i:.3g}"), 0.0)
    base = out.get("flow", Rate(0.0, g, 0.0, 0.0))
    for mode in ("ns3", "ns3-auto"):
        pts = by_mode.get(mode, [])
        if not pts:
            continue
        y = [r["cpu_s"] - base.s_per_gpu * r["gpus"] - base.s_per_item * r["items"] for r in pts]
        a, p = _nnls_relative([[1.0, r["packets"]] for r in pts], [max(v, 1e-3) for v in y])
        out[mode] = Rate(float(f"{a:.3g}"), base.s_per_gpu, base.s_per_item, float(f"{p:.3g}"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--point", help=argparse.SUPPRESS)
    ap.add_argument("--only", help="comma-separated modes: flow-sym, flow, ns3, ns3-auto")
    ap.add_argument("--timeout", type=float, default=300.0, help="stop a point after this many seconds")
    ap.add_argument("--fit", action="store_true", help="print the rates these measurements give")
    ap.add_argument("--list", action="store_true", help="the points, and the estimate alone for each (no runs)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--from", dest="from_json", help="no runs: the measurements of a --json file, beside the "
                    "estimate this tree makes (to refit after changing the estimate)")
    args = ap.parse_args()
    if args.point:
        mode, spec = json.loads(args.point)
        print(json.dumps(run_point(mode, spec)))
        return
    modes = set(args.only.split(",")) if args.only else None
    points = [p for p in POINTS if modes is None or p[0] in modes]
    print(f"# bench_budget.py, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; wall = compile + simulate in a fresh process")
    print(f"{'mode':9} {'scenario':36} {'items':>9} {'packets':>9} {'events':>9} {'pred. s':>8} {'wall s':>8} "
          f"{'CPU s':>7} {'CPU/pred':>8} {'wall/pred':>9}")
    rows = []
    measured = {}
    if args.from_json:
        keep = ("wall_s", "cpu_s", "events", "stopped", "error")
        measured = {(m, lab): {k: v for k, v in r.items() if k in keep}
                    for m, lab, r in json.loads(Path(args.from_json).read_text())}
    for mode, label, spec in points:
        if args.from_json:
            r = {**estimate_only(mode, spec), **measured.get((mode, label), {"error": "not in --from"})}
        else:
            r = estimate_only(mode, spec) if args.list else measure(mode, spec, args.timeout)
        if "predicted_s" not in r:  # stopped or failed: the estimate alone, in this process
            r = {**estimate_only(mode, spec), **r}
        rows.append((mode, label, r))
        if "wall_s" in r:
            meas = (f"{r['wall_s']:8.2f} {r['cpu_s']:7.2f} {r['cpu_s'] / r['predicted_s']:8.2f} "
                    f"{r['wall_s'] / r['predicted_s']:9.2f}")
            ev = f"{r['events']:>9,}"
        else:
            meas = (f"{'>' + format(r['stopped'], '.0f'):>8} {'':7} {'':8} {'>' + format(r['stopped'] / r['predicted_s'], '.2f'):>9}"
                    if "stopped" in r else f"  {r.get('error', 'not run')}")
            ev = f"{'':>9}"
        print(f"{mode:9} {label:36} {r['items']:>9,} {r['packets']:>9,} {ev} {r['predicted_s']:8.2f} {meas}",
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([[m, lab, r] for m, lab, r in rows], indent=1))
    if args.fit:
        for mode, rate in fit(rows).items():
            print(f"    {mode!r}: {rate!r},")


if __name__ == "__main__":
    main()
