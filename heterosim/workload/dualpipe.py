"""DualPipe (DeepSeek-V3 technical report, arXiv 2412.19437, Sec. 3.2.1, Fig. 5 and Table 2): a bidirectional
pipeline. The model's pp stages are held twice: chunk 0 of rank i is stage i of the forward direction (micro-batches
fed at rank 0, loss on rank pp - 1), chunk 1 is stage pp - 1 - i of the reverse direction (fed at rank pp - 1, loss
on rank 0); half of the m micro-batches go each way (here ids 0 .. m/2 - 1 forward, m/2 .. m - 1 reverse). Each
backward is split into B (input gradient) and W (weight gradient) as in the zero-bubble schedules.

The order is DeepSeek's reference implementation (``deepseek-ai/DualPipe``, ``dualpipe/dualpipe.py``,
``DualPipe.step``: steps 1-8) with half_rank = min(i, pp - 1 - i), local phase 0 / 1 = the rank's first / second
direction (swapped on the second half of the ranks):

1. 2 (pp/2 - half_rank - 1) forwards of phase 0;
2. half_rank + 1 pairs (F phase 0, F phase 1);
3. pp/2 - half_rank - 1 triples (B phase 1 with its W deferred, the oldest deferred W, F phase 1);
4. m/2 - pp + half_rank + 1 rounds of (F phase 0 & full backward phase 1) then (F phase 1 & full backward
   phase 0) -- each "&" one overlapped F&B chunk; on the two middle ranks the very first pair runs F then
   the full backward one after the other;
5. pp/2 - half_rank - 1 rounds of (full backward phase 1, F phase 1 & full backward phase 0);
6. half_rank + 1 pairs (backward phase 1, backward phase 0), the W of the later ones deferred (the switch in
   the middle of the loop, by half_rank's parity);
7. pp/2 - half_rank - 1 pairs (oldest deferred W, B phase 0 with its W deferred);
8. the remaining deferred W passes.

A step is ``(phase, microbatch, chunk)``: ``fwd``; ``fb`` = the forward half of an overlapped F&B chunk, always
followed by the ``bwd_full`` and ``w`` of its backward half; ``bwd`` (B, its W deferred) and ``w`` (W); a full
backward is ``bwd_full`` then ``w`` at once, its input gradient sent after both (DualPipe's non-zero-bubble
``_backward_chunk`` runs them as one autograd call). HeteroSim runs the F&B chunk as
its two halves interleaved block by block on the rank's one compute stream (the compiler's ``_Prog.zip_halves``,
the report's Fig. 4 pairing), so one half's TP / EP collectives run while the other half computes; both receives
are posted before the pair and both sends issued after its W, as DualPipe's ``_forward_backward_chunk`` posts them.
The SM split between communication and computation is not modelled.

Timing (no communication time, per-stage pass times F, B, W): the iteration is m (F + B + W) +
(pp/2 - 1)(2F + B - W). Table 2 writes DualPipe's bubble (PP/2 - 1)(F&B + B' - 3W) with B' = B + W the full
backward; with F&B = F + B' that is (PP/2 - 1)(F + 2B - W): the two agree when F = B (tested both ways).
"""
from __future__ import annotations

from heterosim.errors import PlanError

Step = tuple[str, int, int]


def dualpipe(pp: int, microbatches: int, rank: int) -> list[Step]:
    """DualPipe order of one pipeline rank (module docstring). Needs pp even and microbatches even, >= 2 pp."""
    check(pp, microbatches)
    if not 0 <= rank < pp:
        raise ValueError(f"pipeline rank {rank} outside 0..{pp - 1}")
    half_ranks, half = pp // 2, microbatches // 2
    hr = min(rank, pp - 1 - rank)
    second = rank >= half_ranks
    middle = rank in (half_ranks - 1, half_ranks)
    nf = [0, 0]  # forwards issued per direction
    nb = [0, 0]  # backwards (B) issued per direction
    deferred: list[tuple[int, int]] = []  # (mb, chunk) of B passes whose W waits (FIFO)
    out: list[Step] = []

    def mb(direction: int, k: int) -> int:
        return k if direction == 0 else half + k

    def fwd(phase: int, kind: str = "fwd") -> None:
        d = phase ^ second
        out.append((kind, mb(d, nf[d]), d))
        nf[d] += 1

    def bwd(phase: int, zb: bool = False) -> None:
        d = phase ^ second
        step = (mb(d, nb[d]), d)
        nb[d] += 1
        if zb:
            out.append(("bwd",) + step)
            deferred.append(step)
        else:  # a full backward: B and W in one autograd call, its gradient sent after both
            out.extend([("bwd_full",) + step, ("w",) + step])

    def weight() -> None:
        out.append(("w",) + deferred.pop(0))

    def pair(phase0: int, phase1: int) -> None:
        fwd(phase0, "fb")
        bwd(phase1)

    for _ in range(2 * (half_ranks - hr - 1)):
        fwd(0)
    for _ in range(hr + 1):
        fwd(0)
        fwd(1)
    for _ in range(half_ranks - hr - 1):
        bwd(1, zb=True)
        weight()
        fwd(1)
    for i in range(half - pp + hr + 1):
        if i == 0 and middle:  # DualPipe: "we don't overlap these two chunks to further reduce bubble size"
            fwd(0)
            bwd(1)
        else:
            pair(0, 1)
        pair(1, 0)
    for _ in range(half_ranks - hr - 1):
        bwd(1)
        pair(1, 0)
    zb = False
    for i in range(hr + 1):
        if i == (hr + 1) // 2 and hr % 2 == 1:
            zb = True
        bwd(1, zb)
        if i == (hr + 1) // 2 and hr % 2 == 0:
            zb = True
        bwd(0, zb)
    for _ in range(half_ranks - hr - 1):
        weight()
        bwd(0, zb=True)
    for _ in range(hr + 1):
        weight()
    assert not deferred
    return out


def check(pp: int, microbatches: int) -> None:
    """DualPipe's own preconditions (``assert num_ranks % 2 == 0``, ``num_chunks % 2 == 0 and num_chunks >=
    num_ranks * 2`` in ``DualPipe.step``) as one-line errors."""
    if pp < 2 or pp % 2:
        raise PlanError("DualPipe needs an even number of pipeline stages >= 2", field="parallelism.pp", value=pp)
    if microbatches % 2 or microbatches < 2 * pp:
        raise PlanError(f"DualPipe needs an even number of micro-batches per replica >= 2 pp = {2 * pp} (half go "
                        f"each way), got {microbatches}", field="training.global_batch_size", value=microbatches)


PLAIN = {"fb": "fwd", "bwd_full": "bwd"}


def as_plain(steps: list[Step]) -> list[Step]:
    """The steps with DualPipe's ``fb`` / ``bwd_full`` as plain ``fwd`` / ``bwd`` (for the memory walk)."""
    return [(PLAIN.get(s[0], s[0]),) + s[1:] for s in steps]
