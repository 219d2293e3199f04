"""``heterosim calibrate``: how well the analytical model and the fitted predictor match a user's timings,
and efficiency parameters fitted to them (so other GPUs can bring their own measurements).

The fitted parameters are the analytical model's own (efficiency.yaml): per precision GEMM ``e_max``,
attention ``e_max``, and the memory-bound classes' ``mem_eff`` (elementwise: with its per-kind table),
each scaled by the geometric mean of measured / predicted time over that class's rows (one factor per
physical curve; the curve shapes stay those of the device's family); with unfused attention rows, the
softmax rate per row length (``fit_softmax_rows``).
"""
from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import yaml

from heterosim.hardware.compute import EFFICIENCY_FILE, ComputeModel, fp8_cast_s, gemm_s, unfused_attention_s
from heterosim.hardware.measured import MeasuredTables, actual_shape, held_out_error
from topologies._util import read_yaml

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
        # the table times the GEMM alone (torch._scaled_mm on fp8 operands), not Transformer Engine's cast
        pred -= fp8_cast_s(M, K, cm.params(dev, dt))
        size = "small" if 2.0 * m * n * k < 1e11 else "large"
        out.setdefault(f"gemm {dt} {size} (<0.1 / >=0.1 TFLOP)", []).append(pred / t - 1)
    impl = {"flash": "flash", "cudnn": "fused", "unfused_fp16": "unfused"}
    for kind, causal, b, h, s, d, fwd, bwd in tables.attn_rows:
        flops = 4.0 * b * h * s * s * d
        io = 2.0 * 4 * b * s * h * d
        if kind == "unfused_fp16":
            # the table's unfused op has no mask or dropout kernel: scores written (2 B), softmax read and
            # written (4 B), read by the second bmm (2 B) = 8 B per score element (the IR's 13 B adds dropout)
            io += 8.0 * b * h * s * s
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



def fit_softmax_rows(attn_rows: list, cm: ComputeModel, device) -> dict[int, float]:
    """Unfused attention's softmax rate per row length (``attention.softmax_row_eff``): per sequence length,
    the median over the table's unfused rows of the softmax's score bytes (read + written, 4 B per score)
    / (measured time - the GEMM model's two batched GEMMs - 3 launch gaps), as a fraction of HBM bandwidth."""
    p = cm.params(device, "fp16")
    by: dict[int, list[float]] = {}
    for kind, _causal, b, h, s, d, fwd, _bwd in attn_rows:
        if kind != "unfused_fp16":
            continue
        bh = b * h
        rest = fwd - gemm_s(s, s, d, p, bh, 2) - gemm_s(s, d, s, p, bh, 2) - 3 * p.launch_s
        if rest > 0:
            by.setdefault(s, []).append(4.0 * bh * s * s / rest / p.bw)
    return {s: round(float(np.median(v)), 3) for s, v in sorted(by.items())}


def unfused_held_out(tables: MeasuredTables, cm: ComputeModel, train_frac: float = 0.8,
                     seed: int = 0) -> list[float]:
    """|error| of the analytical unfused attention on held-out rows, its softmax rates refitted
    (``fit_softmax_rows``) on the other ``train_frac`` of the table's unfused rows."""
    rows = [r for r in tables.attn_rows if r[0] == "unfused_fp16"]
    idx = np.random.default_rng(seed).permutation(len(rows))
    ntr = int(round(train_frac * len(rows)))
    fitted = fit_softmax_rows([rows[i] for i in idx[:ntr]], cm, tables.device)
    p = copy.copy(cm.params(tables.device, "fp16"))
    p.sm_rows = (tuple(math.log(r) for r in fitted), tuple(fitted.values()))
    out = []
    for i in idx[ntr:]:
        _, _, b, h, s, d, fwd, _ = rows[i]
        nbytes = 8.0 * b * h * s * d + 8.0 * b * h * s * s  # Q, K, V, output; scores as analytic_errors counts
        out.append(abs((unfused_attention_s((s, s, d, b * h, "unfused", "fwd"), nbytes, p) + p.launch_s) / fwd - 1))
    return out


def _gm_ratio(errs: list[float]) -> float:
    """Geometric mean of predicted / measured."""
    return math.exp(float(np.mean([math.log1p(e) for e in errs])))


def fit_efficiency(tables: MeasuredTables, efficiency: str | Path = EFFICIENCY_FILE) -> dict:
    """An efficiency.yaml document whose entry for the device's family is fitted to the tables."""
    data = read_yaml(Path(efficiency)) or {}
    dev = tables.device
    fam = dev.family or "default"
    cm = ComputeModel(efficiency=efficiency)
    errs = analytic_errors(tables, cm)
    base = cm.efficiency.get(fam) or cm.efficiency["default"]
    over = copy.deepcopy((data.get("families") or {}).get(fam) or {})
    over.pop("source", None)

    def pooled(prefix):
        return [e for c, v in errs.items() if c.startswith(prefix) for e in v]

    gemm = over.setdefault("gemm", {}).setdefault("e_max", {})
    for prec in ("bf16", "fp8"):
        rows = pooled(f"gemm {prec} ")
        if rows:
            e = base["gemm"]["e_max"].get(prec, base["gemm"]["e_max"]["bf16"]) * _gm_ratio(rows)
            gemm[prec] = round(min(e, 1.0), 3)
            if prec == "bf16":
                gemm["fp16"] = gemm["bf16"]
    attn = pooled("attention flash") + pooled("attention cudnn")
    if attn:
        e = base["attention"]["e_max"].get("bf16", 0.5) * _gm_ratio(attn)
        over.setdefault("attention", {}).setdefault("e_max", {})["bf16"] = round(min(e, 1.0), 3)
        over["attention"]["e_max"]["fp16"] = over["attention"]["e_max"]["bf16"]
    if any(r[0] == "unfused_fp16" for r in tables.attn_rows):
        over.setdefault("attention", {})["softmax_row_eff"] = fit_softmax_rows(tables.attn_rows, cm, dev)
    ew = [e for c, v in errs.items() if c.startswith("memory-bound") and "adam" not in c for e in v]
    if ew:
        r = _gm_ratio(ew)
        el = over.setdefault("elementwise", {})
        el["mem_eff"] = round(min(base["elementwise"]["mem_eff"] * r, 1.0), 3)
        # the per-kind efficiencies are the same curve: scaled by the same factor
        el["kinds"] = {k: round(min(v * r, 1.0), 3) for k, v in base["elementwise"]["kinds"].items()}
    opt = pooled("memory-bound adam")
    if opt:
        over.setdefault("optimizer", {})["mem_eff"] = round(min(base["optimizer"]["mem_eff"] * _gm_ratio(opt), 1.0), 3)
    out = copy.deepcopy(data)
    out.setdefault("families", {})[fam] = {**over, "source": f"heterosim calibrate on {tables.folder} ({dev.name})"}
    return out


CALIBRATION_HEADER = "# written by heterosim calibrate: fitted efficiency parameters (hardware.efficiency)\n"
"""First line of an ``--out`` file; ``--out`` replaces only a file that starts with it."""


def calibrate(folder: str | Path, device, out: str | Path | None = None, splits: int = 5) -> dict:
    """Error per op class of the analytical model (before / after fitting) and of the predictor.

    ``out``: where the fitted parameters go (YAML), a new file or one an earlier ``calibrate`` wrote;
    anything else there is refused before fitting and left untouched."""
    from heterosim.results.writer import atomic_file, check_out_file

    magic = CALIBRATION_HEADER.encode()
    if out is not None:
        check_out_file(out, "--out", magic)
    tables = MeasuredTables(folder, device)
    before = analytic_errors(tables, ComputeModel())
    fitted = fit_efficiency(tables)
    report = {"before": before, "fitted_params": fitted["families"][device.family or "default"]}
    if out is not None:
        with atomic_file(out, "--out", magic) as tmp:
            tmp.write_text(CALIBRATION_HEADER + yaml.safe_dump(fitted, sort_keys=False))
        report["after"] = analytic_errors(tables, ComputeModel(efficiency=out))
    held: dict[str, list] = {}
    for seed in range(splits):
        for cls, r in held_out_error(tables, 0.8, seed).items():
            held.setdefault(cls, []).append(r["mape"])
    report["predictor"] = {c: float(np.mean(v)) for c, v in held.items()}
    return report


def print_report(folder, device_name: str, out_file, console) -> None:
    """The CLI's table: per op class, analytical MAPE before (and after) fitting, predictor held-out MAPE."""
    from rich.table import Table

    from heterosim.hardware.catalog import get_device

    dev = get_device(device_name)
    if out_file is not None and Path(out_file).exists() and Path(out_file).is_dir():
        from hscommon.errors import UserError
        raise UserError("--out must be a file path, not a folder", file=str(out_file))
    rep = calibrate(folder, dev, out_file)
    t = Table(title=f"analytical model vs {folder} ({dev.name})")
    for col in ("op class", "rows", "MAPE (built-in curves)") + (("MAPE (fitted)",) if "after" in rep else ()):
        t.add_column(col, justify="right")
    for cls in sorted(rep["before"]):
        b = np.abs(rep["before"][cls])
        row = [cls, str(len(b)), f"{b.mean():.1%}"]
        if "after" in rep:
            row.append(f"{np.abs(rep['after'][cls]).mean():.1%}")
        t.add_row(*row)
    console.print(t)
    p = Table(title="shape-space predictor, held-out error (fit 80%, test 20%, 5 splits)")
    p.add_column("op class")
    p.add_column("MAPE", justify="right")
    for cls, v in sorted(rep["predictor"].items()):
        p.add_row(cls, f"{v:.1%}")
    console.print(p)
    if out_file is not None:
        console.print(f"fitted efficiency parameters ({dev.family} family): {out_file}")
