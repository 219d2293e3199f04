"""Zero-bubble pipeline schedules: the backward pass split into B (input gradient) and W (weight gradient).

Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024 (arXiv 2401.10241). A layer's backward
is two passes: B computes the gradient of the layer's input (the dgrad GEMMs, attention backward, norm,
activation and dropout backward) and is on the critical path to the previous stage; W computes the
weight gradients (the wgrad GEMMs) and can run later, to fill pipeline bubbles.

**ZB-H1** (the paper's Sec. 3.1, "memory efficient" handcrafted schedule; the authors' reference
implementation ``ZeroBubbleH1Pipeline.steps`` with ``enable_zbh1_exact_semantics``): on pipeline rank i of
p, with m micro-batches,

* warm-up: ``p - i - 1`` forwards (as 1F1B);
* ``i`` steps of one forward then one B, the W deferred;
* steady: forward, B, W (the oldest deferred W) until every forward is done;
* cool-down: B then W for the remaining micro-batches, then the ``i`` deferred W passes.

Rank 0 defers nothing (its B and W run back to back, a full backward). With equal-length stages and no
communication time the iteration takes ``m (F + B + W) + (p - 1)(F + B - W)`` where 1F1B takes
``m (F + B + W) + (p - 1)(F + B + W)`` (F, B, W the per-stage pass times; the paper's bubble of ZB-H1,
1/3 of 1F1B's when F = B = W). In the DeepSeek-V3 report's Table 2 notation, where B is the *full*
backward (B + W here), the same bubble is written ``(PP - 1)(F + B - 2W)``.

Memory (the paper's Table 1): a forward adds the micro-batch's activations M_B; B frees what only B needed
and keeps what W needs, M_W (each weight GEMM's saved input and its output gradient); W frees M_W. On rank
i ZB-H1 holds at most ``(p - i) M_B + i M_W <= p M_B``: its peak over ranks is rank 0's, 1F1B's peak.

A step is ``(phase, microbatch, chunk)`` as in :mod:`heterosim.workload.schedules`; phases here are
``fwd``, ``bwd`` (B only) and ``w``.
"""
from __future__ import annotations

from heterosim.errors import PlanError

Step = tuple[str, int, int]

SPLIT_W_SCHEDULES = ("zb-h1",)
"""Schedules whose ``bwd`` steps are B only and that run W as separate ``w`` steps."""


def zb_h1(pp: int, microbatches: int, rank: int) -> list[Step]:
    """ZB-H1 order of one pipeline rank (module docstring)."""
    if microbatches < 1:
        raise PlanError("no micro-batches to run", field="training.global_batch_size", value=microbatches)
    if not 0 <= rank < pp:
        raise ValueError(f"pipeline rank {rank} outside 0..{pp - 1}")
    m = microbatches
    out: list[Step] = []
    f = b = w = 0
    for _ in range(min(pp - rank - 1, m)):
        out.append(("fwd", f, 0))
        f += 1
    for _ in range(rank):  # forward + B, W deferred
        if f == m:
            break
        out += [("fwd", f, 0), ("bwd", b, 0)]
        f += 1
        b += 1
    while f < m:
        out += [("fwd", f, 0), ("bwd", b, 0), ("w", w, 0)]
        f += 1
        b += 1
        w += 1
    while b < m:
        out += [("bwd", b, 0), ("w", w, 0)]
        b += 1
        w += 1
    out += [("w", k, 0) for k in range(w, m)]
    return out


def splits_w(schedule: str) -> bool:
    """Whether ``schedule`` runs B and W as separate passes."""
    return schedule in SPLIT_W_SCHEDULES


def peak_retained(steps: list[Step], fwd_weights: list[float], w_weights: list[float]) -> float:
    """Peak bytes held over a split-backward schedule: ``fwd`` adds the chunk's activations (M_B), ``bwd``
    (B) swaps them for what W needs (M_W), ``w`` frees that (Qi et al. 2024, Table 1)."""
    cur = peak = 0.0
    for phase, _, c in steps:
        if phase == "fwd":
            cur += fwd_weights[c]
        elif phase == "bwd":
            cur += w_weights[c] - fwd_weights[c]
        else:
            cur -= w_weights[c]
        peak = max(peak, cur)
    return peak


def split_kernels(kernels) -> tuple[list, list]:
    """(B kernels, W kernels) of a backward kernel list: the wgrad GEMMs are W, everything else B."""
    b, w = [], []
    for k in kernels:
        (w if k[0] == "gemm" and k[3] and k[3][3] == "wgrad" else b).append(k)
    return b, w


def w_retained_bytes(fwd_kernels, gemm_eb: int, act_eb: int) -> float:
    """Bytes one micro-batch keeps from B until W for a list of forward kernels: each weight GEMM
    (m, n, k) keeps its input X (m x k, at the GEMM operand width, as Transformer Engine saves fp8
    inputs) and receives its output gradient dY (m x n, 16-bit activations) in B; W computes
    dW = X^T dY. For a GPT layer without TP this is 14 sbh + 18 sbh = 32 sbh bytes (QKV, projection, fc1,
    fc2 inputs 2 + 2 + 2 + 8; their output gradients 6 + 2 + 8 + 2), the paper's M_W. With sequence
    parallelism Megatron keeps the column-parallel GEMMs' input sharded and all-gathers it again; here the
    gathered shape is counted (an upper bound, by at most 4 sbh (1 - 1/t) per layer)."""
    total = 0.0
    for kern in fwd_kernels:
        if kern[0] != "gemm":
            continue
        m, n, k = kern[3][:3]
        groups = kern[1] / (2.0 * m * n * k)  # grouped (MoE expert) GEMMs
        total += groups * m * (k * gemm_eb + n * act_eb)
    return total
