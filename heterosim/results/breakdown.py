"""Where the iteration time went, per lane (TP group) and overall.

Every nanosecond of a lane's compute stream between 0 and the iteration end is
put in one bucket:

* ``compute``: a compute op was running;
* ``exposed_<kind>``: the stream was idle because the op it waited for was a
  communication op whose data was moving (tp, cp, ep, pp, dp);
* ``bubble``: waiting on a pipeline receive whose sender had not sent yet
  (the pipeline fill/drain);
* ``idle``: waiting for anything else (slower peers before a collective, the
  end of the iteration on other ranks; in a pipeline that tail is its drain and
  counts as bubble).

The buckets sum to the iteration time for every lane.
"""
from __future__ import annotations

from collections import defaultdict

COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")
BUCKETS = ("compute", *[f"exposed_{k}" for k in COMM_KINDS], "bubble", "idle")
_EXPOSED = {k: f"exposed_{k}" for k in COMM_KINDS}


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def lane_breakdown(lane, prog, iteration_ns: int) -> dict[str, int]:
    out = dict.fromkeys(BUCKETS, 0)
    ops = prog.ops
    prev_on_stream = _stream_predecessors(prog)
    cursor = 0
    first = _first_compute(ops)
    start_ns, end_ns = lane.start_ns, lane.end_ns
    busy = 0
    for oid in prog.streams[prog.stream_of[first]] if first is not None else []:
        s, e = start_ns[oid], end_ns[oid]
        if s > cursor:
            _attribute_wait(out, lane, ops, prev_on_stream, ops[oid].deps, cursor, s)
        busy += e - s
        cursor = e
    out["compute"] += busy
    if iteration_ns > cursor:
        # tail: comm still in flight after the last compute op (e.g. ZeRO param gather); the
        # rest is waiting for other ranks to finish, which in a pipeline is its drain.
        tail_comm = tuple(i for i in range(len(ops)) if ops[i].kind == "comm" and lane.end_ns[i] > cursor)
        before = out["idle"]
        _attribute_wait(out, lane, ops, prev_on_stream, tail_comm, cursor, iteration_ns)
        if any(op.collective == "recv" and op.comm_kind == "pp" for op in ops):
            out["bubble"] += out["idle"] - before
            out["idle"] = before
    return out


def _first_compute(ops):
    return next((i for i, op in enumerate(ops) if op.stream == "compute"), None)


def _stream_predecessors(prog) -> list[int]:
    prev = [-1] * len(prog.ops)
    for stream in prog.streams:
        for a, b in zip(stream, stream[1:]):
            prev[b] = a
    return prev


def _attribute_wait(out, lane, ops, prev_on_stream, deps, g0: int, g1: int) -> None:
    """Split a wait [g0, g1) of the compute stream along the chain of ops it waited on.

    The op that finished last is the blocker: the part of the wait while its
    data moved is exposed communication of its kind; before that, it was itself
    waiting, for its sender (a pipeline bubble) or for its own blocker (follow
    the chain), or for peers to arrive at a collective (idle).
    """
    cursor_end = g1
    end_ns = lane.end_ns
    candidates = [d for d in deps if end_ns[d] > g0]
    while cursor_end > g0:
        if not candidates:
            out["idle"] += cursor_end - g0
            return
        x = candidates[0] if len(candidates) == 1 else max(candidates, key=end_ns.__getitem__)
        op = ops[x]
        end = min(cursor_end, end_ns[x])
        if end < cursor_end:
            out["idle"] += cursor_end - end
            cursor_end = end
        if op.kind != "comm":
            # a compute op on another stream cannot block this one; treat as busy elsewhere
            out["idle"] += max(0, cursor_end - max(g0, lane.start_ns[x]))
            cursor_end = max(g0, min(cursor_end, lane.start_ns[x]))
            candidates = []
            continue
        kind = op.comm_kind or "dp"
        moving_from = max(g0, min(cursor_end, lane.comm_start_ns.get(x, lane.start_ns[x])))
        out[_EXPOSED.get(kind) or f"exposed_{kind}"] += cursor_end - moving_from
        cursor_end = moving_from
        if cursor_end <= g0:
            return
        if op.collective == "recv" and kind == "pp":
            out["bubble"] += cursor_end - g0
            return
        posted = max(g0, lane.start_ns[x])
        if posted < cursor_end:
            out["idle"] += cursor_end - posted  # posted, waiting for peers to arrive
            cursor_end = posted
        candidates = [d for d in op.deps if end_ns[d] > g0]
        p = prev_on_stream[x]
        if p >= 0 and end_ns[p] > g0:
            candidates.append(p)


def breakdown(sim, ir) -> tuple[dict[str, float], list[dict[str, int]]]:
    """(overall fractions weighted by GPUs, per-lane nanosecond buckets)."""
    T = sim.iteration_time_ns
    # lanes that were not executed share their representative's timeline (symmetry reduction): one
    # breakdown per distinct timeline
    memo: dict[tuple[int, int], dict[str, int]] = {}
    per_lane = []
    for lane in sim.lanes:
        key = (id(lane.end_ns), lane.program)
        b = memo.get(key)
        if b is None:
            b = memo[key] = lane_breakdown(lane, sim.programs[lane.program], T)
        per_lane.append(b)
    tot = defaultdict(float)
    gpus = 0
    for lane, b in zip(sim.lanes, per_lane):
        n = len(lane.ranks)
        gpus += n
        for k, v in b.items():
            tot[k] += v * n
    overall = {k: tot[k] / gpus / T if T else 0.0 for k in BUCKETS}
    return overall, per_lane
