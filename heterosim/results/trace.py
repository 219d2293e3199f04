"""trace.json in the Chrome trace-event format (opens in ui.perfetto.dev).

One process per rank, one thread per stream (compute, tp, pp_send, pp_recv,
dp, ...). The ranks of a TP group run in lock-step, so when a process per rank
would exceed ``max_events``, a process per TP group is written instead and its
name lists the ranks; when even that is too much (1024 GPUs x 15k ops), TP groups
are sampled by a fixed rule (:func:`sample_lanes`: every stage, a few DP replicas,
the slowest path), and the rule is written in the trace's metadata
(``metadata.sampling``). Network messages (the first ``MAX_TRACE_MESSAGES``)
appear as async slices under a "network messages" process.
"""
from __future__ import annotations

import json


MAX_TRACE_MESSAGES = 200_000
"""Network messages shown in a trace (Perfetto stays responsive up to a few 100k async slices)."""


def write_trace(path, sim, ir, *, max_messages: int = MAX_TRACE_MESSAGES, max_events: int = 500_000) -> None:
    per_rank = sum(len(sim.programs[l.program].ops) * len(l.ranks) for l in sim.lanes) <= max_events
    rule = {"rule": "all ranks" if per_rank else "all TP groups (one process each)"}
    if per_rank or sum(len(sim.programs[l.program].ops) for l in sim.lanes) <= max_events:
        lanes = sim.lanes
    else:
        lanes, rule = sample_lanes(sim, ir)
    # Serialized by hand: the static part of every op's event (name, args) is encoded once per program as
    # a %-format of its numbers, a timeline's events are formatted by one ``%`` of all its numbers with a
    # placeholder for the pid (lanes of mirrored replicas share it), and the file is written in pieces, as
    # bytes (json.dump of 500k dicts is ~5x slower; one f-string per event ~3x).
    static: dict[int, list[str]] = {}
    shared: dict[tuple, bytes] = {}
    with open(path, "wb") as fh:
        fh.write(b'{"traceEvents":[')
        sep = b""
        parts: list[str] = []

        def flush() -> None:
            nonlocal sep
            if parts:
                fh.write(sep + ",\n".join(parts).encode())
                sep = b",\n"
                parts.clear()

        for lane in lanes:
            prog = sim.programs[lane.program]
            if lane.program not in static:
                static[lane.program] = _static_parts(prog)
            ranks = lane.ranks
            stage = ir.program_of(ranks[0]).stage
            if per_rank:
                procs = [(r, f"rank {r} stage {stage} ({lane.device})") for r in ranks]
            else:
                procs = [(ranks[0], f"ranks {ranks[0]}-{ranks[-1]} (TP group) stage {stage} ({lane.device})")]
            # lanes of mirrored replicas (symmetry reduction) share their representative's timeline lists
            key = (id(lane.start_ns), id(lane.end_ns), id(lane.comm_start_ns), lane.program)
            chunk = shared.get(key)
            if chunk is None:
                chunk = shared[key] = _slices(prog, lane, static[lane.program]).encode()
            for pid, name in procs:
                parts.append(json.dumps({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}))
                parts.append(json.dumps({"ph": "M", "name": "process_sort_index", "pid": pid,
                                         "args": {"sort_index": pid}}))
                for tid, sname in enumerate(prog.stream_names):
                    parts.append(json.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                             "args": {"name": sname}}))
                if chunk:
                    flush()
                    fh.write(sep)  # (apart: "sep + chunk" would copy the whole timeline once more)
                    fh.write(chunk.replace(_PID_B, str(pid).encode()))
        net_pid = ir.world_size
        parts.append(json.dumps({"ph": "M", "name": "process_name", "pid": net_pid,
                                 "args": {"name": "network messages"}}))
        # the same fields as json.dumps of each event's dict, with the strings encoded once per distinct value
        enc: dict = {}

        def j(x) -> str:
            v = enc.get(x)
            if v is None:
                v = enc[x] = json.dumps(x)
            return v

        for m in sim.messages[:max_messages]:
            if m.end_ns < 0:
                continue
            common = (f'"cat": {j(f"msg.{m.link}")}, "pid": {net_pid}, "tid": 0, "id": {m.id}, '
                      f'"name": {j(f"{m.collective} {m.src}->{m.dst}")}')
            parts.append(f'{{{common}, "ph": "b", "ts": {m.start_ns / 1000.0}, "args": {{"bytes": {m.size_bytes}, '
                         f'"link": {j(m.link)}, "src": {j(m.src_ep)}, "dst": {j(m.dst_ep)}}}}}')
            parts.append(f'{{{common}, "ph": "e", "ts": {m.end_ns / 1000.0}}}')
        flush()
        meta = {"lanes_shown": len(lanes), "lanes_total": len(sim.lanes), "sampling": rule,
                "messages_shown": min(len(sim.messages), max_messages), "messages_total": len(sim.messages)}
        fh.write(f'],"displayTimeUnit":"ns","metadata":{json.dumps(meta)}}}'.encode())


_PID = "\x00"
"""Stands for the pid in a joined timeline; JSON text never holds a raw NUL (json.dumps escapes it)."""
_PID_B = _PID.encode()


def _slices(prog, lane, templates: list[str]) -> str:
    """Every op of the lane that ran as its X event, joined by ",\\n", the pid left as ``_PID``: the op's
    template (:func:`_static_parts`) formatted with its numbers, all in one ``%``. A comm op's slice covers
    the data movement (from ``comm_start_ns``), the wait for peers is an arg."""
    import numpy as np

    n = len(templates)
    if not n:
        return ""
    s = np.fromiter(lane.start_ns, np.int64, n)
    e = np.fromiter(lane.end_ns, np.int64, n)
    comm = _comm_mask(prog)
    ts = s.copy()
    moving_at = lane.comm_start_ns
    if moving_at:
        ids = np.fromiter(moving_at.keys(), np.int64, len(moving_at))
        at = np.fromiter(moving_at.values(), np.int64, len(moving_at))
        sel = comm[ids]
        ts[ids[sel]] = at[sel]
    kept = np.flatnonzero((s >= 0) & (e >= 0))
    if not len(kept):
        return ""
    ts, s, e, c = ts[kept], s[kept], e[kept], comm[kept]
    ns = np.empty((len(kept), 3), dtype=np.int64)
    ns[:, 0] = ts
    ns[:, 1] = np.maximum(e - ts, 0)
    ns[:, 2] = ts - s
    take = np.ones((len(kept), 3), dtype=bool)
    take[:, 2] = c
    fmt = ",\n".join([templates[i] for i in kept.tolist()])
    return fmt % _micros(ns[take])


_REM: list = []
"""r -> ".r" as repr writes the fraction of n/1000 for n % 1000 == r, a numpy object array (made on first use)."""


def _micros(ns):
    """Each ns count (an int64 array) as ``x / 1000.0`` prints (repr), as (integer part, ".fraction") pairs for
    two ``%s``: the decimal n/1000 itself when it has at most 15 digits (0 <= n < 10**15), which converts to the
    same double as the division and is its shortest repr, since two decimals of 15 digits or fewer never
    share a double. Half the CPU of formatting the floats; other values are formatted as floats."""
    import numpy as np

    if not _REM:
        _REM.append(np.array([f".{r:03d}".rstrip("0") if r else ".0" for r in range(1000)], dtype=object))
    args = np.empty(2 * len(ns), dtype=object)
    if len(ns) and (ns.min() < 0 or ns.max() >= 10 ** 15):
        args[0::2] = (ns / 1000.0).tolist()
        args[1::2] = ""
    else:
        q, r = np.divmod(ns, 1000)
        args[0::2] = q.tolist()
        args[1::2] = _REM[0][r]
    return tuple(args.tolist())


_COMM: dict[int, tuple] = {}


def _comm_mask(prog):
    """Which ops of the program are comm ops (numpy bool array; cached by program object)."""
    import numpy as np

    hit = _COMM.get(id(prog))
    if hit is None or hit[0] is not prog:
        hit = (prog, np.fromiter((op.kind == "comm" for op in prog.ops), bool, len(prog.ops)))
        if len(_COMM) > 64:
            _COMM.clear()
        _COMM[id(prog)] = hit
    return hit[1]


def _memo(cache: dict, key, make):
    """``cache[key]``, made by ``make()`` the first time; ``key`` None: made each time, not kept
    (a value that is not a plain str/int could print differently however it compares)."""
    v = cache.get(key) if key is not None else None
    if v is None:
        v = make()
        if key is not None:
            cache[key] = v
    return v


def _static_parts(prog) -> list[str]:
    """Per op: its X event as a %-format of its numbers (two ``%s`` each, :func:`_micros`: ts, dur, and for a
    comm op the wait for peers), the pid left as ``_PID``, every other field JSON-encoded as json.dumps writes
    it (``%`` doubled). The text before "mb" (name, cat, tid, phase) and after "layer" (the comm fields, or
    the flops) is made once per distinct value and reused: the ops of a program repeat them per micro-batch
    and layer (a third less CPU). Reused only for values of one type (str names, int sizes, nonzero float
    flops), whose equal keys are equal text."""
    js = _js
    strs: dict = {}  # a str encodes the same wherever it is (and never equals a non-str key)

    def st(v) -> str:
        out = strs.get(v) if type(v) is str else None
        if out is None:
            out = js(v).replace("%", "%%")
            if type(v) is str:
                strs[v] = out
        return out

    heads: dict = {}
    tails: dict = {}
    flops_tails: dict = {}
    out = []
    append = out.append
    stream_of = prog.stream_of
    ints = (int.__repr__, st)  # numbers never hold a '%'
    for oid, op in enumerate(prog.ops):
        kind, name, phase, tid = op.kind, op.name, op.phase, stream_of[oid]
        hk = (name, kind, tid, phase) if type(name) is str and type(kind) is str and type(phase) is str else None
        head = _memo(heads, hk, lambda: (
            f'{{"ph": "X", "name": {st(name)}, "cat": {st(kind)}, "tid": {tid},"pid":{_PID},"ts":%s%s,'
            f'"dur":%s%s,"args":{{"phase": {st(phase)}, "mb": '))
        if kind == "comm":
            coll, size, group = op.collective, op.size_bytes, op.group
            tk = (coll, size, group) if type(size) is int and type(coll) is str and type(group) is str else None
            tail = _memo(tails, tk, lambda: (
                f', "collective": {st(coll)}, "bytes": {js(size)}, "group": {st(group)},'
                f'"waited_for_peers_us":%s%s}}}}'))
        else:
            flops = op.flops
            tail = _memo(flops_tails, flops if type(flops) is float and flops else None,
                         lambda: f', "flops": {js(flops)}}}}}')
        mb, layer = op.microbatch, op.layer
        append(f'{head}{ints[type(mb) is not int](mb)}, "layer": {ints[type(layer) is not int](layer)}{tail}')
    return out


_JS: dict = {}


def _js(v) -> str:
    """json.dumps of one scalar, strings and other values encoded once (a trace repeats them 100k times)."""
    if type(v) is int:
        return int.__repr__(v)
    key = (type(v), v)
    out = _JS.get(key)
    if out is None:
        out = json.dumps(v)
        if len(_JS) < 100_000:
            _JS[key] = out
    return out


SAMPLED_REPLICAS = 2
"""Data-parallel replicas shown in full in a sampled trace (the first and the last)."""


def sample_lanes(sim, ir) -> tuple[list, dict]:
    """TP groups to show when not all fit, and the rule that chose them (written in the trace metadata).

    Rule: every pipeline stage (the first TP group of every program), every TP group of the first and
    the last data-parallel replica, and every TP group of the replica holding the TP group that
    finishes last (the slowest path: a pipeline's critical path runs through all its stages).
    """
    pos = _replica_of_rank(ir)
    replica = lambda lane: pos[lane.ranks[0]]  # noqa: E731
    first: dict[int, int] = {}
    for lane in sim.lanes:
        first.setdefault(lane.program, lane.id)
    D = max(pos) + 1 if pos else 1
    wanted = {0, D - 1}
    last: dict[int, int] = {}  # lanes of mirrored replicas share their representative's end_ns list: one max each

    def end_of(lane) -> int:
        t = last.get(id(lane.end_ns))
        if t is None:
            t = last[id(lane.end_ns)] = max(lane.end_ns) if lane.end_ns else -1
        return t

    slowest = max(sim.lanes, key=lambda l: (end_of(l), -l.id))
    wanted.add(replica(slowest))
    chosen = set(first.values()) | {l.id for l in sim.lanes if replica(l) in wanted}
    lanes = [l for l in sim.lanes if l.id in chosen]
    rule = {"rule": "every stage (first TP group of each program) + every TP group of data-parallel replicas "
                    "first, last and the one holding the TP group that finishes last (slowest path)",
            "replicas": sorted(wanted), "replicas_total": D, "slowest_tp_group_first_rank": slowest.ranks[0],
            "stages": sorted({ir.program_of(l.ranks[0]).stage for l in lanes})}
    return lanes, rule


def _replica_of_rank(ir) -> list[int]:
    """Rank -> its data-parallel replica (position in its dp group; 0 without data parallelism)."""
    pos = [0] * ir.world_size
    for g in ir.groups.get("dp", []):
        for i, r in enumerate(g):
            pos[r] = i
    return pos
