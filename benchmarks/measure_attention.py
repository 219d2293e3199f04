"""Time attention kernels on the local GPU the way the shipped H100 table was taken (needs PyTorch + CUDA).

Writes rows in the format of ``heterosim/hardware/measured/h100-sxm/attention.csv``:
``kind,causal,batch,heads,seq,head_dim,fwd_ms,bwd_ms,eager_fwd_ms,eager_bwd_ms,graphed``.

* ``flash`` / ``cudnn``: ``torch.nn.functional.scaled_dot_product_attention``, bf16, causal, restricted to
  the FlashAttention-2 or the cuDNN fused-attention backend; ``bwd_ms`` = (forward + backward) - forward,
  the backward by ``.backward()`` on leaf q, k, v (their ``.grad`` accumulate), as the shipped rows were
  taken: re-measuring three shipped shapes this way gave backward within +0.1..+2.6% of them, while
  ``torch.autograd.grad`` (no accumulation, as inside a training step) gave 3-8% less.
* ``unfused_fp16``: fp16 ``baddbmm`` (Q K^T, scaled), ``softmax``, ``bmm`` with V; forward only, no mask.

Method: random inputs; each op warmed up, then ``n`` calls captured in one CUDA graph and the graph
replayed 7 times, timed with CUDA events: ``*_ms`` = median per call (no CPU launch gaps). ``eager_*`` =
median of 10 single eager calls bracketed by events. ``graphed`` = 1 where the capture worked.

    python benchmarks/measure_attention.py --out attention-extra.csv [--shapes extra]
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKEND = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def _events_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _graphed_ms(fn, eager_ms: float) -> float | None:
    """Median per-call time of n calls replayed from one CUDA graph (None if capture fails)."""
    n = max(1, min(50, int(20.0 / max(eager_ms, 1e-3))))
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                fn()
        g.replay()
        torch.cuda.synchronize()
        return _events_ms(g.replay, 7) / n
    except RuntimeError:
        torch.cuda.synchronize()
        return None


def time_fused(kind: str, bh: int, s: int, d: int) -> tuple:
    q, k, v = (torch.randn(1, bh, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    go = torch.randn(1, bh, s, d, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel([BACKEND[kind]]):
        def fwd():  # the training forward (inputs require grad: the kernel keeps its softmax statistics)
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwdbwd():  # .backward() as for the shipped rows: q, k, v are leaves, so their .grad accumulate
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(go)

        for _ in range(3):
            fwd(), fwdbwd()
        torch.cuda.synchronize()
        ef, efb = _events_ms(fwd, 10), _events_ms(fwdbwd, 10)
        gf, gfb = _graphed_ms(fwd, ef), _graphed_ms(fwdbwd, efb)
    graphed = gf is not None and gfb is not None
    f, fb = (gf, gfb) if graphed else (ef, efb)
    return f, fb - f, ef, efb - ef, int(graphed)


def time_unfused(bh: int, s: int, d: int) -> tuple:
    q, k, v = (torch.randn(bh, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    buf = torch.empty(bh, s, s, device="cuda", dtype=torch.float16)
    scale = 1.0 / math.sqrt(d)

    def fwd():
        scores = torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0, alpha=scale)
        torch.bmm(torch.softmax(scores, dim=-1), v)

    for _ in range(3):
        fwd()
    torch.cuda.synchronize()
    ef = _events_ms(fwd, 10)
    gf = _graphed_ms(fwd, ef)
    return (gf if gf is not None else ef), None, ef, None, int(gf is not None)


# Shapes the first table lacked (added to it 2026-11-22): sequences 1k and 16k, head dims 64 and 256
# (per TP rank, batch 1).
EXTRA = ([(kind, h, s, 128) for kind in ("cudnn", "flash") for s in (1024, 16384)
          for h in (2, 3, 4, 6, 8, 12, 16, 24, 32, 40)]
         + [(kind, h, s, d) for kind in ("cudnn", "flash") for d in (64, 256) for s in (2048, 8192)
            for h in (2, 4, 8, 12, 16, 24, 32)]
         + [(kind, h, 4096, d) for kind in ("cudnn", "flash") for d in (64, 256) for h in (4, 8, 16, 32)]
         + [("unfused_fp16", h, s, 128) for s in (1024, 16384) for h in (2, 3, 4, 6, 8, 12, 16)]
         + [("unfused_fp16", 24, 16384, 128)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    cols = ["kind", "causal", "batch", "heads", "seq", "head_dim", "fwd_ms", "bwd_ms", "eager_fwd_ms",
            "eager_bwd_ms", "graphed"]
    with open(args.out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for kind, h, s, d in EXTRA:
            try:
                r = time_unfused(h, s, d) if kind == "unfused_fp16" else time_fused(kind, h, s, d)
            except (RuntimeError, torch.OutOfMemoryError) as exc:  # a backend that does not take the shape
                print(f"skip {kind} h={h} s={s} d={d}: {str(exc).splitlines()[0][:120]}", flush=True)
                torch.cuda.empty_cache()
                continue
            fmt = ["" if x is None else (f"{x:.5f}" if isinstance(x, float) else str(x)) for x in r]
            w.writerow([kind, 0 if kind == "unfused_fp16" else 1, 1, h, s, d, *fmt])
            fh.flush()
            print(kind, h, s, d, fmt, flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
