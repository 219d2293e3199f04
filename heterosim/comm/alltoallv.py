"""All-to-allv: an all-to-all whose pairs carry different byte counts (MoE dispatch / combine with uneven
routing: Megatron-Core's MoEAlltoAllTokenDispatcher calls ``all_to_all(ep_group, tokens, output_splits,
input_splits)`` with per-peer split sizes counted from the router's choices).

``routing_matrix`` gives the per-pair sizes of an expert-parallel dispatch under a per-rank load pattern;
``plan_alltoallv`` plans the flow schedule (direct, NCCL's order: destinations rotated per rank, each pair's
bytes split over the channels), ``largest_receiver_bytes`` the nccl-tests size of the all-to-all that moves
as much through the busiest rank.

How a training run uses it: the compiler gives each dispatch / combine op of uneven routing its rank's row of
the matrix (``Op.peer_bytes``, heterosim/workload/compiler.py ``_a2a_rows``; ``size_bytes`` is the largest
receiver's bytes, max load x what each rank sends), and the coordinator (heterosim/sim/coordinator.py
``Coordinator._what``) hands the group's rows to ``plan_alltoallv``: the flow and ns-3 backends run the
all-to-allv itself, with its per-pair sizes; inside one node the analytic NVLink model times its schedule.
benchmarks/moe_expert_parallel.py compares it with the uniform all-to-all sized ``largest_receiver_bytes``
(which moves more through an oversubscribed fabric core; docs/moe.md).
"""
from __future__ import annotations

from collections.abc import Sequence

from heterosim.comm.planner import (MAX_TRANSFERS, _auto_channels, _Builder, _checked_request, _fit, _layout,
                                    choose_protocol, split)
from heterosim.comm.schedule import FlowSchedule
from hscommon.errors import UserError


def routing_matrix(send_bytes: int, load: Sequence[float]) -> list[list[int]]:
    """Bytes rank i sends rank j in an expert-parallel dispatch where every rank sends ``send_bytes`` in total
    (its tokens x top-k x hidden x element size, its own share included) and rank j's experts receive
    ``load[j]`` x the mean (mean 1): ``s_ij = send_bytes x load[j] / n`` (rounded down; the remainder of row i
    goes to its own share). Rank j then receives ``send_bytes x load[j]``. The combine is the transpose."""
    n = len(load)
    if n < 1:
        raise UserError("needs at least one rank", field="load", value=list(load))
    if any(x < 0 for x in load) or abs(sum(load) - n) > 1e-9 * n:
        raise UserError(f"loads must be >= 0 with mean 1 (sum {n})", field="load", value=list(load))
    out = []
    for i in range(n):
        row = [int(send_bytes * load[j] / n) for j in range(n)]
        row[i] += send_bytes - sum(row)
        out.append(row)
    return out


def largest_receiver_bytes(sizes: Sequence[Sequence[int]]) -> int:
    """The nccl-tests size of the uniform all-to-all that moves as much through its busiest rank as the
    all-to-allv ``sizes`` (sizes[i][j]: bytes i sends j, own share included): the largest per-rank total sent
    or received."""
    n = len(sizes)
    rows = [sum(r) for r in sizes]
    cols = [sum(sizes[i][j] for i in range(n)) for j in range(n)]
    return max(rows + cols) if n else 0


def plan_alltoallv(ranks: Sequence[int], sizes: Sequence[Sequence[int]], system, *, protocol: str = "auto",
                   channels: int | None = None, max_transfers: int = MAX_TRANSFERS) -> FlowSchedule:
    """Flow schedule of an all-to-allv on ``ranks``: ``sizes[i][j]`` bytes from ranks[i] to ranks[j] (the
    diagonal, a rank's own share, moves no byte). Direct, as NCCL's all-to-all: for shift 1..n-1 rank i sends
    to rank i+shift, each pair's bytes split over the channels; ``size_bytes`` = :func:`largest_receiver_bytes`.
    Raises UserError (one line) for a matrix that is not n x n or has a negative entry."""
    n = len(ranks)
    if len(sizes) != n or any(len(r) != n for r in sizes):
        raise UserError(f"needs a {n} x {n} matrix of per-pair bytes", field="sizes", value=[len(r) for r in sizes])
    if any(x < 0 for r in sizes for x in r):
        raise UserError("per-pair bytes must be >= 0", field="sizes", value=min(min(r) for r in sizes))
    total = largest_receiver_bytes(sizes)
    ranks, _ = _checked_request("alltoall", ranks, total, system, "direct", protocol, channels, None)
    proto = protocol if protocol != "auto" else choose_protocol("direct", total, ranks, system)
    sched = FlowSchedule(op="alltoallv", algorithm="direct", protocol=proto, ranks=tuple(ranks), size_bytes=total)
    if n < 2 or total == 0:
        return sched
    b = _Builder(system, "ring", proto)
    b.conn_family = "p2p"
    layout = _layout(ranks, system)
    C = channels or _auto_channels("alltoall", "direct", layout, system)
    C = max(1, min(C, total // n or 1))
    C, _, _ = _fit(lambda c, k, g: n * (n - 1) * c, C, 1, 1, max_transfers)
    for shift in range(1, n):  # destinations rotated per rank (NCCL's order): no incast at one rank
        for i, src in enumerate(ranks):
            j = (i + shift) % n
            for c, piece in enumerate(split(sizes[i][j], C)):
                b.add(src, ranks[j], piece, (), c, shift, True)
    sched.transfers = b.ts
    sched.channels = C
    sched.inflation = b.inflation
    return sched
