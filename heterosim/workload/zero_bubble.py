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

**ZB-V** (the paper's Sec. 6, "memory efficient zero bubble schedule"): the model is cut into 2p chunks
(virtual stages) placed in a V: rank i holds chunk 0 = virtual stage i and chunk 1 = virtual stage
2p - 1 - i, so a micro-batch's forward runs down the ranks 0..p-1 on chunk 0, turns on rank p-1 (a local
hand-off), runs back up on chunk 1 and ends (loss) on rank 0, which also starts its backward; the
backward retraces the V. The order is the handcrafted V schedule of the paper's figure, as ported to
PyTorch (``torch.distributed.pipelining.ScheduleZBVZeroBubble``, ``_calculate_single_rank_operations``; the
authors' repository builds the same V placement with a cost-aware greedy, ``zerobubble/scheduler/zbv.py``).
With n = max(m, 2p - 1) micro-batch slots, on rank i of p:

* warm-up: 2(p - i) - 1 chunk-0 forwards; i pairs (chunk-1 forward, chunk-0 forward); p - i triples
  (chunk-1 F, B, W);
* steady, while chunk-1 forwards lag chunk-0 forwards or chunk-0 forwards remain: (chunk-0 F if any left),
  chunk-0 B, W, chunk-1 F, B, W;
* cool-down: i pairs (chunk-0 B, chunk-1 B) with the W deferred; p - i pairs (chunk-0 B, oldest deferred
  chunk-0 W); then the deferred chunk-1 W passes, then the chunk-0 ones.

Slots of micro-batches m..n-1 are dropped (m < 2p - 1 leaves bubbles, as in PyTorch). With per-chunk pass
times f = b = w and m >= 2p - 1, every rank i runs without a gap from i f to i f + 2 m (f + b + w): the
paper's zero bubble (its parallelogram, whose skew the optimizer-step bypass would absorb). In a
synchronous iteration that skew stays: iteration = 2 m (f + b + w) + (p - 1) f. Each rank holds at most
2p chunk activations, i.e. p M_B of a whole stage, 1F1B's rank-0 peak, on every rank (Sec. 6).

A step is ``(phase, microbatch, chunk)`` as in :mod:`heterosim.workload.schedules`; phases here are
``fwd``, ``bwd`` (B only) and ``w``.
"""
from __future__ import annotations

from heterosim.errors import PlanError

Step = tuple[str, int, int]

SPLIT_W_SCHEDULES = ("zb-h1", "zb-v", "dualpipe")
"""Schedules whose ``bwd`` steps are B only and that run W as separate ``w`` steps."""

V_SCHEDULES = ("zb-v",)
"""Schedules that place two chunks per rank in a V (rank i: virtual stages i and 2p - 1 - i)."""


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


def zb_v(pp: int, microbatches: int, rank: int) -> list[Step]:
    """ZB-V order of one pipeline rank (module docstring); chunk 0 = virtual stage ``rank``, chunk 1 =
    virtual stage ``2 pp - 1 - rank``."""
    if microbatches < 1:
        raise PlanError("no micro-batches to run", field="training.global_batch_size", value=microbatches)
    if not 0 <= rank < pp:
        raise ValueError(f"pipeline rank {rank} outside 0..{pp - 1}")
    slots = max(microbatches, 2 * pp - 1)
    out: list[Step] = []
    nf = [0, 0]  # forwards issued per chunk
    nb = [0, 0]  # B passes issued per chunk
    nw = [0, 0]  # W passes issued per chunk

    def put(phase: str, chunk: int, count: list) -> None:
        out.append((phase, count[chunk], chunk))
        count[chunk] += 1

    for _ in range(2 * (pp - rank) - 1):
        put("fwd", 0, nf)
    for _ in range(rank):
        put("fwd", 1, nf)
        put("fwd", 0, nf)
    for _ in range(pp - rank):
        put("fwd", 1, nf)
        put("bwd", 1, nb)
        put("w", 1, nw)
    while nf[1] < nf[0] or nf[0] < slots:
        if nf[0] < slots:
            put("fwd", 0, nf)
        put("bwd", 0, nb)
        put("w", 0, nw)
        put("fwd", 1, nf)
        put("bwd", 1, nb)
        put("w", 1, nw)
    for _ in range(rank):
        put("bwd", 0, nb)
        put("bwd", 1, nb)
    for _ in range(pp - rank):
        put("bwd", 0, nb)
        put("w", 0, nw)
    while nw[1] < nb[1]:
        put("w", 1, nw)
    while nw[0] < nb[0]:
        put("w", 0, nw)
    return [s for s in out if s[1] < microbatches]


def v_stage(pp: int, stage: int, chunk: int) -> int:
    """Virtual stage (model order) of ``chunk`` on pipeline rank ``stage`` in a V placement."""
    return stage if chunk == 0 else 2 * pp - 1 - stage


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
