"""Pipeline schedules: the order in which one pipeline rank runs its (micro-batch, chunk) passes.

Each function returns a list of ``(phase, microbatch, chunk)`` with phase
``"fwd"`` or ``"bwd"`` (zero-bubble schedules, :mod:`heterosim.workload.zero_bubble`, also ``"w"``: their
``"bwd"`` is the input-gradient pass only). The orders follow Megatron-LM's
``forward_backward_pipelining_{without,with}_interleaving`` (warm-up forwards,
steady one-forward-one-backward, cool-down backwards), so simulated bubbles and
in-flight activation counts match what Megatron does.
"""
from __future__ import annotations

from heterosim.errors import PlanError

Step = tuple[str, int, int]


def gpipe(pp: int, microbatches: int, rank: int) -> list[Step]:
    """All forwards, then all backwards (every micro-batch's activations held)."""
    _check(pp, microbatches, rank)
    return [("fwd", m, 0) for m in range(microbatches)] + [("bwd", m, 0) for m in range(microbatches)]


def one_f_one_b(pp: int, microbatches: int, rank: int) -> list[Step]:
    """PipeDream-flush 1F1B: pp-rank-1 warm-up forwards, then alternate, then drain."""
    _check(pp, microbatches, rank)
    warmup = min(pp - rank - 1, microbatches)
    out: list[Step] = [("fwd", m, 0) for m in range(warmup)]
    steady = microbatches - warmup
    for i in range(steady):
        out.append(("fwd", warmup + i, 0))
        out.append(("bwd", i, 0))
    out.extend(("bwd", m, 0) for m in range(steady, microbatches))
    return out


def _chunk_and_mb(k: int, pp: int, chunks: int, forward: bool) -> tuple[int, int]:
    """Megatron's mapping of the k-th virtual micro-batch to (micro-batch, chunk)."""
    group_size = pp * chunks
    in_group = k % group_size
    chunk = in_group // pp
    if not forward:
        chunk = chunks - 1 - chunk
    mb = (k // group_size) * pp + in_group % pp
    return mb, chunk


def interleaved(pp: int, microbatches: int, rank: int, chunks: int) -> list[Step]:
    """Interleaved 1F1B with ``chunks`` model chunks (virtual stages) per rank.

    Needs microbatches % pp == 0 (Megatron's original interleaved schedule)."""
    _check(pp, microbatches, rank)
    if chunks < 1:
        raise PlanError("must be >= 1", field="parallelism.virtual_stages", value=chunks)
    if microbatches % pp:
        raise PlanError(f"the interleaved schedule needs micro-batches per replica ({microbatches}) to be a "
                        f"multiple of pp ({pp})", field="parallelism.schedule", value="interleaved")
    total = microbatches * chunks
    if microbatches == pp:
        warmup = total
    else:
        warmup = min((pp - rank - 1) * 2 + (chunks - 1) * pp, total)
    out: list[Step] = []
    for k in range(warmup):
        mb, c = _chunk_and_mb(k, pp, chunks, True)
        out.append(("fwd", mb, c))
    steady = total - warmup
    for k in range(steady):
        mb, c = _chunk_and_mb(warmup + k, pp, chunks, True)
        out.append(("fwd", mb, c))
        mb, c = _chunk_and_mb(k, pp, chunks, False)
        out.append(("bwd", mb, c))
    for k in range(steady, total):
        mb, c = _chunk_and_mb(k, pp, chunks, False)
        out.append(("bwd", mb, c))
    return out


def schedule_for(name: str, pp: int, microbatches: int, rank: int, chunks: int = 1) -> list[Step]:
    """Dispatch on the config's ``parallelism.schedule`` name."""
    if name == "gpipe":
        return gpipe(pp, microbatches, rank)
    if name == "1f1b":
        return one_f_one_b(pp, microbatches, rank)
    if name == "interleaved":
        return interleaved(pp, microbatches, rank, chunks)
    if name == "zb-h1":
        from heterosim.workload.zero_bubble import zb_h1

        return zb_h1(pp, microbatches, rank)
    if name == "zb-v":
        from heterosim.workload.zero_bubble import zb_v

        return zb_v(pp, microbatches, rank)
    if name == "dualpipe":
        from heterosim.workload.dualpipe import dualpipe

        return dualpipe(pp, microbatches, rank)
    raise PlanError("unknown pipeline schedule (gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipe)", field="parallelism.schedule",
                    value=name)


def peak_in_flight(steps: list[Step], weights: list[float] | None = None) -> float:
    """Peak of (forward done, backward not yet) passes, each weighted by its chunk.

    With ``weights[chunk]`` = activation bytes of one micro-batch on that chunk
    this is the activation memory peak; without, the in-flight micro-batch count."""
    cur = peak = 0.0
    for phase, _, c in steps:
        w = 1.0 if weights is None else weights[c]
        if phase == "fwd":
            cur += w
            peak = max(peak, cur)
        else:
            cur -= w
    return peak


def _check(pp: int, microbatches: int, rank: int) -> None:
    if microbatches < 1:
        raise PlanError("no micro-batches to run", field="training.global_batch_size", value=microbatches)
    if not 0 <= rank < pp:
        raise ValueError(f"pipeline rank {rank} outside 0..{pp - 1}")
