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
from heterosim.hardware.measured import BUILTIN, MeasuredTables, actual_shape, held_out_error


def analytic_errors(tables: MeasuredTables, cm: ComputeModel) -> dict[str, list[float]]:
    """Signed relative error (predicted / measured - 1) of the analytical model per op class."""
    dev = tables.device
    out: dict[str, list[float]] = {}

    def kt(cls, flops, nbytes, shape, prec="bf16"):
        return cm.kernel_time_ns(cls, flops, nbytes, shape, dev, prec) * 1e-9

    for dt, ps, m, n, k, t in tables.gemm_rows:
        M, N, K = actual_shape(ps, m, n, k)
        eb = 1 if dt == "fp8" else 2
        pred = kt("gemm", 2.0 * M * N * K, float(eb * (M * K + K * N + M * N)), (M, N, K, ps), dt)
        size = "small" if 2.0 * m * n * k < 1e11 else "large"
        out.setdefault(f"gemm {dt} {size} (<0.1 / >=0.1 TFLOP)", []).append(pred / t - 1)
    impl = {"flash": "flash", "cudnn": "fused", "unfused_fp16": "unfused"}
    for kind, causal, b, h, s, d, fwd, bwd in tables.attn_rows:
        flops = 4.0 * b * h * s * s * d
        io = 2.0 * 4 * b * s * h * d
        if kind == "unfused_fp16":
            io += 13.0 * b * h * s * s
        for ps, t in (("fwd", fwd), ("bwd", bwd)):
            if t is None:
                continue
            mult = 1.0 if ps == "fwd" else 2.0
            pred = kt("attention", mult * flops, mult * io, (s, s, d, b * h, impl[kind], ps))
            out.setdefault(f"attention {kind} {ps}", []).append(pred / t - 1)
    for kind, nbytes, t in tables.ew_rows:
        if kind == "adam_fused_fp32_step":
            n = nbytes / 32
            pred = kt("optimizer", 12 * n, 30 * n, ("adam",))
        elif kind.endswith("_fwdbwd"):
            f = nbytes / 10 * 4  # forward bytes (4 B/elem of 10) ; backward kernel carries twice that
            pred = kt("elementwise", 0, f, (kind[:-7] + "_fwd",)) + kt("elementwise", 0, 2 * f, (kind[:-7] + "_bwd",))
            if kind.startswith("cross_entropy"):
                pred = kt("elementwise", 0, nbytes / 3, ("cross_entropy_fwd",)) + \
                    kt("elementwise", 0, 2 * nbytes / 3, ("cross_entropy_bwd",))
        else:
            pred = kt("elementwise", 0, nbytes, (kind,))
        out.setdefault(f"memory-bound {kind}", []).append(pred / t - 1)
    return out


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
    print(f"\nwall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
