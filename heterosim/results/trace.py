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
    # Serialized by hand: the static part of every op's event (name, args) is encoded once per
    # program, a timeline's events are joined once with a placeholder for the pid (lanes of mirrored
    # replicas share it), and only ts/dur are formatted per event (json.dump of 500k dicts is ~5x slower).
    static: dict[int, list[tuple[str, str]]] = {}
    shared: dict[tuple, str] = {}
    parts: list[str] = []
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
            chunk = shared[key] = _slices(prog, lane, static[lane.program])
        for pid, name in procs:
            parts.append(json.dumps({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}))
            parts.append(json.dumps({"ph": "M", "name": "process_sort_index", "pid": pid,
                                     "args": {"sort_index": pid}}))
            for tid, sname in enumerate(prog.stream_names):
                parts.append(json.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                         "args": {"name": sname}}))
            if chunk:
                parts.append(chunk.replace(_PID, str(pid)))
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
    meta = {"lanes_shown": len(lanes), "lanes_total": len(sim.lanes), "sampling": rule,
            "messages_shown": min(len(sim.messages), max_messages), "messages_total": len(sim.messages)}
    with open(path, "w") as fh:
        fh.write('{"traceEvents":[')
        fh.write(",\n".join(parts))
        fh.write(f'],"displayTimeUnit":"ns","metadata":{json.dumps(meta)}}}')


_PID = "\x00"
"""Stands for the pid in a joined timeline; JSON text never holds a raw NUL (json.dumps escapes it)."""


def _slices(prog, lane, templates) -> str:
    """Every op of the lane that ran as its X event, joined by ",\\n", the pid left as ``_PID``."""
    out = []
    append = out.append
    start, end, moving_at = lane.start_ns, lane.end_ns, lane.comm_start_ns
    for oid, (head, args) in enumerate(templates):
        s, e = start[oid], end[oid]
        if s < 0 or e < 0:
            continue
        if args[-1] == "\x01":  # comm: the slice covers the data movement; the wait for peers is an arg
            moving = moving_at.get(oid, s)
            append(f'{head}{moving / 1000.0},"dur":{max(e - moving, 0) / 1000.0},"args":{{{args[:-1]}'
                   f',"waited_for_peers_us":{(moving - s) / 1000.0}}}}}')
        else:
            append(f'{head}{s / 1000.0},"dur":{max(e - s, 0) / 1000.0},"args":{{{args}}}}}')
    return ",\n".join(out)


def _static_parts(prog) -> list[tuple[str, str]]:
    """Per op: (its X event's fields up to ``"ts":``, its args fields), JSON-encoded as json.dumps writes
    them; a comm op's args end in ``\\x01`` (a marker: it gets the wait-for-peers arg)."""
    js = _js
    strs: dict = {}  # a str encodes the same wherever it is (and never equals a non-str key)

    def st(v) -> str:
        out = strs.get(v) if type(v) is str else None
        if out is None:
            out = js(v)
            if type(v) is str:
                strs[v] = out
        return out

    out = []
    stream_of = prog.stream_of
    for oid, op in enumerate(prog.ops):
        mb, layer = op.microbatch, op.layer
        head = (f'{{"ph": "X", "name": {strs.get(op.name) or st(op.name)}, "cat": {strs.get(op.kind) or st(op.kind)}, '
                f'"tid": {stream_of[oid]},"pid":{_PID},"ts":')
        args = (f'"phase": {strs.get(op.phase) or st(op.phase)}, '
                f'"mb": {int.__repr__(mb) if type(mb) is int else js(mb)}, '
                f'"layer": {int.__repr__(layer) if type(layer) is int else js(layer)}')
        if op.kind == "comm":
            args += (f', "collective": {strs.get(op.collective) or st(op.collective)}, "bytes": {js(op.size_bytes)}, '
                     f'"group": {strs.get(op.group) or st(op.group)}\x01')
        else:
            args += f', "flops": {js(op.flops)}'
        out.append((head, args))
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
    slowest = max(sim.lanes, key=lambda l: (max(l.end_ns) if l.end_ns else -1, -l.id))
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
