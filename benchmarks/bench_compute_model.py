"""Compute-model error against the measured H100 kernel table, per op class.

Two figures per class:
* the shape-space predictor's held-out error: fitted on 80% of the table's rows, tested on the other
  20% (several random splits, mean and worst split), target <= 5% MAPE per class;
* the analytical model's error against every measured row (what devices without a table get), with
  each row turned into the kernel the workload compiler emits for it.

    .venv/bin/python benchmarks/bench_compute_model.py [--splits 5] [--measurements FOLDER --device NAME]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from heterosim.hardware import ComputeModel, get_device
from heterosim.hardware.calibrate import analytic_errors, unfused_held_out
from heterosim.hardware.measured import BUILTIN, MeasuredTables, held_out_error


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measurements", default=None, help="folder of measured tables (default: the shipped H100)")
    ap.add_argument("--device", default="H100-SXM")
    ap.add_argument("--splits", type=int, default=5)
    args = ap.parse_args()
    dev = get_device(args.device)
    t0 = time.perf_counter()
    tables = MeasuredTables(args.measurements or BUILTIN[dev.name], dev)
    print(f"table: {tables.folder} ({len(tables.gemm_rows)} GEMMs, {len(tables.attn_rows)} attention, "
          f"{len(tables.ew_rows)} memory-bound rows)\n")
    print("shape-space predictor, held-out error (fit on 80%, test on 20%; "
          f"{args.splits} random splits)")
    per: dict[str, list] = {}
    for seed in range(args.splits):
        for cls, r in held_out_error(tables, 0.8, seed).items():
            per.setdefault(cls, []).append(r)
    print(f"{'op class':28} {'test rows':>9} {'MAPE':>7} {'worst split':>11} {'worst row':>9}")
    for cls, rs in sorted(per.items()):
        mape = [r["mape"] for r in rs]
        print(f"{cls:28} {sum(r['rows'] for r in rs) // len(rs):9d} {np.mean(mape):7.1%} {max(mape):11.1%} "
              f"{max(r['max'] for r in rs):9.0%}")
    print("\nanalytical model vs every measured row (signed: + = predicted slower)")
    print(f"{'op class':48} {'rows':>5} {'MAPE':>7} {'mean':>7} {'worst':>6}")
    for cls, errs in sorted(analytic_errors(tables, ComputeModel()).items()):
        e = np.array(errs)
        print(f"{cls:48} {len(e):5d} {np.abs(e).mean():7.1%} {e.mean():+7.1%} {np.abs(e).max():6.0%}")
    if any(r[0] == "unfused_fp16" for r in tables.attn_rows):
        # unfused attention's softmax rate per row length is fitted to these rows: its held-out error
        ho = [float(np.mean(unfused_held_out(tables, ComputeModel(), 0.8, seed))) for seed in range(args.splits)]
        print(f"{'attention unfused_fp16 fwd, softmax rates held out':48} {'':5} {np.mean(ho):7.1%} "
              f"(fit 80%, test 20%; worst split {max(ho):.1%})")
    print(f"\nwall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
