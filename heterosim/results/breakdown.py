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
DP_DETAIL = {"fsdp_param_allgather": "fsdp_allgather", "fsdp_grad_reducescatter": "fsdp_reducescatter",
             "fsdp_grad_replicate_allreduce": "hsdp_allreduce"}
"""Sharded data parallelism's collectives (heterosim/workload/sharding.py op names) -> the part of the exposed DP
bucket reported apart (``detail_<name>`` buckets, counted inside ``exposed_dp`` too)."""


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


class _ProgramView:
    """What the attribution reads of a program's ops, in flat lists: computed once per program and shared
    by its lanes (a 1,024-GPU run has 128 lanes of 16 programs, 15k ops each, and about 600k waits to split)."""

    __slots__ = ("deps", "exposed", "detail", "pp_recv", "prev", "compute_stream", "comm_ops", "has_pp_recv")

    def __init__(self, prog) -> None:
        ops = prog.ops
        self.deps = [op.deps for op in ops]
        self.exposed = [None if op.kind != "comm" else
                        (_EXPOSED.get(op.comm_kind or "dp") or f"exposed_{op.comm_kind or 'dp'}") for op in ops]
        """Per op: the bucket its data movement counts in (None: not a comm op)."""
        self.detail = [None if op.kind != "comm" else
                       next((f"detail_{v}" for k, v in DP_DETAIL.items() if op.name.startswith(k)), None)
                       for op in ops]
        """Per op: the part of its bucket it is also reported in (:data:`DP_DETAIL`), or None."""
        self.pp_recv = [op.collective == "recv" and (op.comm_kind or "dp") == "pp" for op in ops]
        self.has_pp_recv = any(op.collective == "recv" and op.comm_kind == "pp" for op in ops)
        self.prev = _stream_predecessors(prog)
        first = _first_compute(ops)
        self.compute_stream = prog.streams[prog.stream_of[first]] if first is not None else []
        self.comm_ops = [i for i, op in enumerate(ops) if op.kind == "comm"]


def lane_breakdown(lane, prog, iteration_ns: int, view: _ProgramView | None = None) -> dict[str, int]:
    out = dict.fromkeys(BUCKETS, 0)
    view = view or _ProgramView(prog)
    cursor = 0
    start_ns, end_ns = lane.start_ns, lane.end_ns
    busy = 0
    deps = view.deps
    for oid in view.compute_stream:
        s, e = start_ns[oid], end_ns[oid]
        if s > cursor:
            _attribute_wait(out, lane, view, deps[oid], cursor, s)
        busy += e - s
        cursor = e
    out["compute"] += busy
    if iteration_ns > cursor:
        # tail: comm still in flight after the last compute op (e.g. ZeRO param gather); the
        # rest is waiting for other ranks to finish, which in a pipeline is its drain.
        tail_comm = tuple(i for i in view.comm_ops if end_ns[i] > cursor)
        before = out["idle"]
        _attribute_wait(out, lane, view, tail_comm, cursor, iteration_ns)
        if view.has_pp_recv:
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


def _attribute_wait(out, lane, view: _ProgramView, deps, g0: int, g1: int) -> None:
    """Split a wait [g0, g1) of the compute stream along the chain of ops it waited on.

    The op that finished last is the blocker: the part of the wait while its
    data moved is exposed communication of its kind; before that, it was itself
    waiting, for its sender (a pipeline bubble) or for its own blocker (follow
    the chain), or for peers to arrive at a collective (idle).
    """
    cursor_end = g1
    end_ns, start_ns, moving_at = lane.end_ns, lane.start_ns, lane.comm_start_ns
    exposed, pp_recv, all_deps, prev, detail = view.exposed, view.pp_recv, view.deps, view.prev, view.detail
    idle = 0
    while True:
        # the blocker: the candidate (a dep, or the op before it on its stream) that ended last after g0,
        # the first such in order on a tie
        x, best = -1, g0
        for d in deps:
            t = end_ns[d]
            if t > best:
                x, best = d, t
        if x < 0:
            idle += cursor_end - g0
            break
        if best < cursor_end:
            idle += cursor_end - best
            cursor_end = best
        key = exposed[x]
        if key is None:
            # a compute op on another stream cannot block this one; treat as busy elsewhere
            idle += cursor_end - g0
            break
        s = start_ns[x]
        moving_from = moving_at.get(x, s)
        if moving_from > cursor_end:
            moving_from = cursor_end
        if moving_from < g0:
            moving_from = g0
        out[key] = out.get(key, 0) + cursor_end - moving_from
        sub = detail[x]
        if sub is not None:
            out[sub] = out.get(sub, 0) + cursor_end - moving_from
        cursor_end = moving_from
        if cursor_end <= g0:
            break
        if pp_recv[x]:
            out["bubble"] += cursor_end - g0
            break
        posted = s if s > g0 else g0
        if posted < cursor_end:
            idle += cursor_end - posted  # posted, waiting for peers to arrive
            cursor_end = posted
            if cursor_end <= g0:
                break
        p = prev[x]
        deps = all_deps[x] if p < 0 else (*all_deps[x], p)
    out["idle"] += idle


def breakdown(sim, ir) -> tuple[dict[str, float], list[dict[str, int]]]:
    """(overall fractions weighted by GPUs, per-lane nanosecond buckets)."""
    T = sim.iteration_time_ns
    # lanes that were not executed share their representative's timeline (symmetry reduction): one
    # breakdown per distinct timeline
    memo: dict[tuple[int, int], dict[str, int]] = {}
    views: dict[int, _ProgramView] = {}
    per_lane = []
    for lane in sim.lanes:
        key = (id(lane.end_ns), lane.program)
        b = memo.get(key)
        if b is None:
            prog = sim.programs[lane.program]
            view = views.get(lane.program)
            if view is None:
                view = views[lane.program] = _ProgramView(prog)
            b = memo[key] = lane_breakdown(lane, prog, T, view)
        per_lane.append(b)
    tot = defaultdict(float)
    gpus = 0
    for lane, b in zip(sim.lanes, per_lane):
        n = len(lane.ranks)
        gpus += n
        for k, v in b.items():
            tot[k] += v * n
    overall = {k: tot[k] / gpus / T if T else 0.0 for k in BUCKETS}
    for k in tot:
        if k.startswith("detail_"):
            overall[k] = tot[k] / gpus / T if T else 0.0
    return overall, per_lane
