"""Whole-layer timings on the local GPU, and HeteroSim's prediction of the same layers (issue 42's H100 target).

The shipped H100 table (``heterosim/hardware/measured/h100-sxm``) holds kernels, each replayed in a short
CUDA-graph burst. A training step runs a whole layer's kernels back to back for minutes, at the power limit.
This script measures what the table cannot show:

* ``measure`` (needs PyTorch + CUDA): one dense GPT layer as Megatron runs it (LayerNorm, fused QKV
  projection, causal SDPA on the cuDNN backend, output projection, dropout + residual, LayerNorm, FC1, GeLU
  (tanh), FC2, dropout + residual; bf16) forward and forward + backward, (a) as a CUDA-graph burst like the
  kernel table and (b) sustained for ``--sustain-s`` seconds, with the SM clock sampled during each
  (``nvidia-smi --query-gpu=clocks.sm``); writes ``layers.csv``.
* ``compare`` (CPU): HeteroSim's time for the same layers through its compute path (the kernels the workload
  compiler emits for one layer, timed by the compute model with the shipped table), beside a ``layers.csv``.

The six default shapes are the issue's (hidden 2304-12288, micro-batch 1-2, sequence 2048-4096).

    python benchmarks/measure_layers.py measure --out layers.csv          # on the GPU machine
    python benchmarks/measure_layers.py compare layers.csv                # here
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time

SHAPES = [  # (hidden, heads, micro-batch, sequence)
    (2304, 24, 2, 2048), (4096, 32, 1, 4096), (5120, 40, 1, 4096),
    (6144, 48, 2, 2048), (8192, 64, 1, 4096), (12288, 96, 1, 2048),
]
FIELDS = ["hidden", "heads", "mbs", "seq", "fwd_ms", "fwdbwd_ms", "sustained_fwdbwd_ms", "burst_sm_mhz",
          "sustained_sm_mhz"]


def _sm_clock_mhz() -> float:
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[0])


def _settled_median(xs: list[float]) -> float:
    """Median of the second half of a run's samples (the GPU has settled at its sustained clock by then)."""
    half = sorted(xs[len(xs) // 2:] or xs)
    return half[len(half) // 2]


def measure(out: str, sustain_s: float) -> None:
    import os

    if os.path.lexists(out):  # never replace a file HeteroSim did not write in this run
        sys.exit(f"measure_layers: --out {out}: exists; choose a new file")
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev, dt = "cuda", torch.bfloat16
    rows = []
    for h, heads, b, s in SHAPES:
        torch.manual_seed(0)
        ln1, ln2 = torch.nn.LayerNorm(h, device=dev, dtype=dt), torch.nn.LayerNorm(h, device=dev, dtype=dt)
        qkv, proj = torch.nn.Linear(h, 3 * h, device=dev, dtype=dt), torch.nn.Linear(h, h, device=dev, dtype=dt)
        fc1, fc2 = torch.nn.Linear(h, 4 * h, device=dev, dtype=dt), torch.nn.Linear(4 * h, h, device=dev, dtype=dt)
        x = torch.randn(s, b, h, device=dev, dtype=dt, requires_grad=True)

        def layer(inp):
            q, k, v = qkv(ln1(inp)).view(s, b, 3, heads, h // heads).permute(2, 1, 3, 0, 4)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.permute(2, 0, 1, 3).reshape(s, b, h)
            y = inp + F.dropout(proj(a), 0.1)
            return y + F.dropout(fc2(F.gelu(fc1(ln2(y)), approximate="tanh")), 0.1)

        grad = torch.randn(s, b, h, device=dev, dtype=dt)

        def fwd():
            with torch.no_grad():
                layer(x)

        def fwdbwd():
            layer(x).backward(grad)

        def timed(fn, n):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(n):
                fn()
            e1.record()
            torch.cuda.synchronize()
            return e0.elapsed_time(e1) / n

        row = {"hidden": h, "heads": heads, "mbs": b, "seq": s, "fwd_ms": timed(fwd, 10)}
        row["fwdbwd_ms"] = timed(fwdbwd, 10)
        row["burst_sm_mhz"] = _sm_clock_mhz()
        t_end, clocks = time.time() + sustain_s, []
        t0 = timed(fwdbwd, 1)
        reps = max(1, int(1000.0 / max(t0, 1e-3)))  # ~1 s per sample
        samples = []
        while time.time() < t_end:
            samples.append(timed(fwdbwd, reps))
            clocks.append(_sm_clock_mhz())
        row["sustained_fwdbwd_ms"] = _settled_median(samples)
        row["sustained_sm_mhz"] = _settled_median(clocks)
        rows.append(row)
        print(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)


def predicted_ms(hidden: int, heads: int, mbs: int, seq: int, device: str = "H100-SXM") -> tuple[float, float]:
    """(forward, forward + backward) of one such layer as HeteroSim times it: the kernels the workload compiler
    emits (``LayerShapes``: attention block and MLP, their backward), timed as one fused op each by the
    compute model with the shipped measurements, bf16, cuDNN fused attention (what ``measure`` runs)."""
    from types import SimpleNamespace

    from heterosim.config import ModelConfig
    from heterosim.hardware import ComputeModel, get_device
    from heterosim.workload.costs import LayerShapes, bwd_kernels
    from heterosim.workload.ir import Op

    model = ModelConfig(name="layer", num_layers=1, hidden_size=hidden, num_attention_heads=heads,
                        ffn_hidden_size=4 * hidden, vocab_size=51200, max_seq_length=seq)
    plan = SimpleNamespace(micro_batch=mbs, seq=seq, seq_local=seq, tp=1, sp=False, ep=1)
    sh = LayerShapes.of(model, plan, "bf16", "fused")
    cm, dev = ComputeModel(), get_device(device)

    def ns(kernels):
        op = Op(id=0, kind="compute", name="layer", op_class="layer", kernels=tuple(kernels),
                flops=sum(k[1] for k in kernels), bytes=sum(k[2] for k in kernels))
        return cm.op_time_ns(op, dev, "bf16")

    fwd = ns(sh.attn_all()) + ns(sh.mlp())
    bwd = ns(bwd_kernels(sh.attn_all(), 2)) + ns(bwd_kernels(sh.mlp(), 2))
    return fwd / 1e6, (fwd + bwd) / 1e6


def compare(path: str) -> list[str]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = [f"{'hidden':>6} {'mbs':>3} {'seq':>5} {'measured fwd+bwd ms':>19} {'sustained':>9} {'predicted':>9} "
           f"{'error (burst)':>13} {'error (sustained)':>17} {'SM MHz burst/sustained':>22}"]
    for r in rows:
        _, pred = predicted_ms(int(r["hidden"]), int(r["heads"]), int(r["mbs"]), int(r["seq"]))
        m, ms = float(r["fwdbwd_ms"]), float(r["sustained_fwdbwd_ms"])
        out.append(f"{r['hidden']:>6} {r['mbs']:>3} {r['seq']:>5} {m:19.3f} {ms:9.3f} {pred:9.3f} "
                   f"{pred / m - 1:+13.1%} {pred / ms - 1:+17.1%} "
                   f"{float(r['burst_sm_mhz']):>11.0f}/{float(r['sustained_sm_mhz']):<10.0f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", default="layers.csv")
    m.add_argument("--sustain-s", type=float, default=60.0)
    c = sub.add_parser("compare")
    c.add_argument("csv")
    args = ap.parse_args(argv)
    if args.cmd == "measure":
        measure(args.out, args.sustain_s)
    else:
        print("\n".join(compare(args.csv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
