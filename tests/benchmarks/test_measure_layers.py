"""benchmarks/measure_layers.py: HeteroSim's whole-layer time against the shipped kernel measurements.

At a layer whose every kernel has its own row in the shipped H100 table (hidden 4096, 32 heads, one sequence
of 4,096 tokens: the GEMM rows of the QKV, projection, FC1 and FC2 shapes, the cuDNN attention row, the norm,
dropout-add and GeLU rows at 4,096 tokens), the layer's time is the sum of those rows, read here from the CSV
files. The simulator's compute path must give it within 1% (issue 42's target for a whole layer "within 1% of
the shipped measurements"); what a real layer adds beyond its kernels needs ``measure_layers.py measure`` on
a GPU.
"""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "heterosim" / "hardware" / "measured" / "h100-sxm"


def _module():
    spec = importlib.util.spec_from_file_location("measure_layers", ROOT / "benchmarks" / "measure_layers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(name):
    with open(TABLE / name, newline="") as f:
        return list(csv.DictReader(f))


def _gemm(pas, m, n, k):
    (r,) = [r for r in _rows("gemm.csv") if (r["dtype"], r["pass"], r["m"], r["n"], r["k"]) == ("bf16", pas, *map(str, (m, n, k)))]
    return float(r["ms"])


def _ew(kind, shape):
    (r,) = [r for r in _rows("elementwise.csv") if (r["kind"], r["shape"]) == (kind, shape)]
    return float(r["ms"])


def test_layer_time_equals_the_sum_of_its_measured_kernels_within_one_percent():
    h, T = 4096, 4096
    (att,) = [r for r in _rows("attention.csv") if (r["kind"], r["causal"], r["batch"], r["heads"], r["seq"],
                                                     r["head_dim"]) == ("cudnn", "1", "1", "32", "4096", "128")]
    shapes = [(T, 3 * h, h), (T, h, h), (T, 4 * h, h), (T, h, 4 * h)]  # QKV, projection, FC1, FC2 (forward m, n, k)
    ln, drop, gelu = _ew("layernorm_fwd", "4096x4096"), _ew("dropout_add_fwd", "4096x4096"), _ew("gelu_fwd", "4096x16384")
    fwd = sum(_gemm("fwd", *s) for s in shapes) + float(att["fwd_ms"]) + 2 * ln + 2 * drop + gelu
    # backward: dgrad + wgrad rows; the attention row's backward; LayerNorm and GeLU backward = their
    # forward+backward rows minus the forward; dropout-add backward (mask x gradient + residual gradient, no row
    # of its own) taken as its forward, the same traffic
    bwd = (sum(_gemm("dgrad", *s) + _gemm("wgrad", *s) for s in shapes) + float(att["bwd_ms"])
           + 2 * (_ew("layernorm_fwdbwd", "4096x4096") - ln) + (_ew("gelu_fwdbwd", "4096x16384") - gelu) + 2 * drop)
    pred_fwd, pred_total = _module().predicted_ms(h, 32, 1, T)
    assert pred_fwd == pytest.approx(fwd, rel=0.01)
    assert pred_total == pytest.approx(fwd + bwd, rel=0.01)


def test_compare_prints_measured_and_predicted(tmp_path):
    mod = _module()
    f = tmp_path / "layers.csv"
    f.write_text("hidden,heads,mbs,seq,fwd_ms,fwdbwd_ms,sustained_fwdbwd_ms,burst_sm_mhz,sustained_sm_mhz\n"
                 "4096,32,1,4096,3.2,10.0,11.0,1980,1755\n")
    out = mod.compare(str(f))
    pred = mod.predicted_ms(4096, 32, 1, 4096)[1]
    assert len(out) == 2 and f"{pred / 10.0 - 1:+.1%}" in out[1] and f"{pred / 11.0 - 1:+.1%}" in out[1]


def test_measure_refuses_an_existing_file(tmp_path):
    f = tmp_path / "mine.csv"
    f.write_text("user data\n")
    with pytest.raises(SystemExit, match="exists"):
        _module().measure(str(f), 1.0)
    assert f.read_text() == "user data\n"
