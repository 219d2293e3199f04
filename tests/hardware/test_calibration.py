"""The compute model's kernel efficiencies (physical bounds), and a crude per-layer estimate of published runs
printed as a diagnostic table (the runs themselves are asserted end to end in test_calibration_end_to_end.py).

The estimate adds what the compute model does not own (TP collectives at the measured NVSwitch busbw,
the pipeline bubble, Adam) in the simplest way, so the check is loose (+-25%): it catches an efficiency
curve that is off by a lot, not the last few percent (the full simulator does that end to end).
"""
from __future__ import annotations

import pytest

from heterosim.config import ModelConfig
from heterosim.hardware import ComputeModel, get_device
from heterosim.hardware.calibration import LayerShape, layer_kernels, layer_model_flops
from heterosim.zoo import zoo_model

NVSWITCH_BUSBW = {"A100-80": 230e9, "H100-SXM": 360e9}  # A100: nccl-tests #149; H100: ~NVLink4 share


def _model(name):
    return ModelConfig(**zoo_model(name))


def estimate_iteration_s(cm, gpu, precision, model, *, tp, pp, vp, gbs, mb, seq, dp=1, flash, selective,
                         tp_overlap=0.0):
    dev = get_device(gpu)
    L = LayerShape.of(model)
    t = lambda ks: sum(cm.kernel_time_ns(c, f, b, s, dev, precision) for c, f, b, s in ks) * 1e-9
    fwd = t(layer_kernels(L, mb, seq, tp, flash=flash, phase="fwd"))
    bwd = t(layer_kernels(L, mb, seq, tp, flash=flash, phase="bwd"))
    if selective:  # recompute the attention core in backward
        bwd += t(layer_kernels(L, mb, seq, tp, flash=flash, phase="attn_core"))
    coll = mb * seq * L.hidden * 2 * (tp - 1) / tp / NVSWITCH_BUSBW[gpu] if tp > 1 else 0.0
    comm = 10 * coll * (1 - tp_overlap)  # SP: 2 AG + 2 RS forward, 2 AG + 2 RS + 2 AG (wgrad) backward
    layers_per_stage = model.num_layers / pp
    tok = mb * seq
    logits = t([("gemm", 2.0 * tok * model.vocab_size / tp * L.hidden, 0.0, (tok, model.vocab_size // tp, L.hidden))]) * 3
    per_mb = layers_per_stage * (fwd + bwd + comm) + logits
    n_mb = gbs // (mb * dp)
    bubble = (pp - 1) / vp
    params_per_gpu = (12 * model.num_layers * L.hidden ** 2) / (tp * pp * dp)
    opt = t([("optimizer", 0.0, 32.0 * params_per_gpu, None)])
    return per_mb * (n_mb + bubble) + opt


def model_flops(model, gbs, seq):
    L = LayerShape.of(model)
    head = 3 * 2.0 * gbs * seq * L.hidden * model.vocab_size
    return model.num_layers * layer_model_flops(L, gbs, seq) + head


# (zoo name, tp, pp, vp, gbs, mb, measured s/iter): Korthikanti et al. 2022 Table 5, SP + selective.
KORTHIKANTI = [("gpt3-22b", 8, 1, 1, 4, 4, 1.10), ("gpt3-175b", 8, 8, 3, 64, 1, 13.75),
               ("gpt3-529.6b", 8, 35, 3, 280, 1, 37.83), ("gpt3-1t", 8, 64, 1, 512, 1, 71.49)]
# NeMo 24.07 DGX H100 FP8 (zoo name, gpus, gbs, mb, seq, tp, pp, vp, model TFLOP/s per GPU).
NEMO = [("gpt3-175b", 128, 256, 1, 2048, 4, 8, 6, 782), ("gpt3-175b", 512, 2048, 2, 2048, 4, 8, 6, 842),
        ("llama2-70b", 64, 128, 1, 4096, 4, 4, 20, 759), ("llama2-7b", 8, 128, 1, 4096, 1, 1, 1, 776)]


def korthikanti_ratios(cm):
    out = []
    for name, tp, pp, vp, gbs, mb, measured in KORTHIKANTI:
        est = estimate_iteration_s(cm, "A100-80", "fp16", _model(name), tp=tp, pp=pp, vp=vp, gbs=gbs, mb=mb,
                                   seq=2048, flash=False, selective=True)
        out.append((name, est, measured, est / measured))
    return out


def nemo_ratios(cm):
    out = []
    for name, gpus, gbs, mb, seq, tp, pp, vp, tflops in NEMO:
        m = _model(name)
        dp = gpus // (tp * pp)
        est = estimate_iteration_s(cm, "H100-SXM", "fp8", m, tp=tp, pp=pp, vp=vp, gbs=gbs, mb=mb, seq=seq, dp=dp,
                                   flash=True, selective=False, tp_overlap=0.8)
        est_tflops = model_flops(m, gbs, seq) / gpus / est / 1e12
        out.append((name, gpus, est_tflops, tflops, est_tflops / tflops))
    return out


# The published runs are asserted end to end, through the simulator itself, in
# test_calibration_end_to_end.py; the crude estimate above is a diagnostic table only (``python -m``), since
# a check against an estimator written in the test says nothing about the simulator.


def test_gpt3_175b_layer_gemm_efficiency_is_physical():
    cm = ComputeModel()
    L = LayerShape.of(_model("gpt3-175b"))
    for gpu, lo, hi in (("A100-80", 0.6, 0.9), ("H100-SXM", 0.5, 0.85)):
        for _, _, _, mnk in (k for k in layer_kernels(L, 1, 2048, 8) if k[0] == "gemm"):
            assert lo < cm.gemm_efficiency(*mnk, get_device(gpu), "bf16") < hi


if __name__ == "__main__":  # print the calibration table
    cm = ComputeModel()
    for row in korthikanti_ratios(cm):
        print("A100 %-12s est %7.2f s  measured %6.2f s  ratio %.2f" % row)
    for row in nemo_ratios(cm):
        print("H100 fp8 %-10s %4d GPUs est %5.0f TF/s measured %4d  ratio %.2f" % row)


def test_calibrate_scales_the_per_kind_memory_bound_table(tmp_path):
    # a GPU whose memory-bound kernels all take 1.3x the shipped H100 times: the fitted parameters must move
    # every kind's efficiency (listed kinds included), so the analytical model follows the user's rows
    import csv

    from heterosim.hardware import get_device
    from heterosim.hardware.calibrate import calibrate
    from heterosim.hardware.measured import BUILTIN

    src = BUILTIN["H100-SXM"] / "elementwise.csv"
    with open(src, newline="") as fh:
        rows = list(csv.DictReader(fh))
    folder = tmp_path / "mine"
    folder.mkdir()
    with open(folder / "elementwise.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({**r, "ms": f"{float(r['ms']) * 1.3:.6f}"})
    rep = calibrate(folder, get_device("H100-SXM"), tmp_path / "eff.yaml", splits=1)
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    assert mean(rep["before"]["memory-bound gelu_fwd"]) < -0.2       # the built-in curve: ~1/1.3 - 1 = -23%
    assert abs(mean(rep["after"]["memory-bound gelu_fwd"])) < 0.05   # fitted
    kinds = rep["fitted_params"]["elementwise"]["kinds"]
    assert kinds["gelu_fwd"] == pytest.approx(0.89 / 1.3, rel=0.05)


def test_softmax_row_rates_are_the_documented_fit_and_predict_held_out_rows():
    # efficiency.yaml's hopper softmax_row_eff is what fit_softmax_rows gives on the shipped table (the
    # procedure its comment documents), and refitted on 80% of the unfused rows it predicts the rest within 5%
    import numpy as np

    from heterosim.hardware import ComputeModel, get_device
    from heterosim.hardware.calibrate import fit_softmax_rows, unfused_held_out
    from heterosim.hardware.measured import BUILTIN, MeasuredTables

    dev = get_device("H100-SXM")
    tables = MeasuredTables(BUILTIN["H100-SXM"], dev)
    cm = ComputeModel()
    shipped = cm.efficiency["hopper"]["attention"]["softmax_row_eff"]
    assert fit_softmax_rows(tables.attn_rows, cm, dev) == pytest.approx({int(k): v for k, v in shipped.items()},
                                                                         abs=0.002)
    assert np.mean([np.mean(unfused_held_out(tables, cm, 0.8, seed)) for seed in range(3)]) < 0.05
