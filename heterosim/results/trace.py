"""trace.json in the Chrome trace-event format (opens in ui.perfetto.dev).

One process per rank, one thread per stream (compute, tp, pp_send, pp_recv,
dp, ...). The ranks of a TP group run in lock-step, so when a process per rank
would exceed ``max_events``, a process per TP group is written instead and its
name lists the ranks; when even that is too much (1024 GPUs x 15k ops), every
pipeline stage keeps at least one TP group and the others fill the budget, with
the omission said in the trace's metadata. Network messages appear as async
slices under a "network messages" process.
"""
from __future__ import annotations

import json


def write_trace(path, sim, ir, *, max_messages: int = 200_000, max_events: int = 500_000) -> None:
    events = []
    per_rank = sum(len(sim.programs[l.program].ops) * len(l.ranks) for l in sim.lanes) <= max_events
    lanes = sim.lanes if per_rank else _lanes_within(sim, max_events)
    for lane in lanes:
        prog = sim.programs[lane.program]
        ranks = lane.ranks
        stage = ir.program_of(ranks[0]).stage
        if per_rank:
            procs = [(r, f"rank {r} stage {stage} ({lane.device})") for r in ranks]
        else:
            procs = [(ranks[0], f"ranks {ranks[0]}-{ranks[-1]} (TP group) stage {stage} ({lane.device})")]
        slices = _lane_slices(lane, prog)
        for pid, name in procs:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
            for tid, sname in enumerate(prog.stream_names):
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": sname}})
            events.extend({**e, "pid": pid} for e in slices)
    net_pid = ir.world_size
    events.append({"ph": "M", "name": "process_name", "pid": net_pid, "args": {"name": "network messages"}})
    for m in sim.messages[:max_messages]:
        if m.end_ns < 0:
            continue
        name = f"{m.collective} {m.src}->{m.dst}"
        common = {"cat": f"msg.{m.link}", "pid": net_pid, "tid": 0, "id": m.id, "name": name}
        events.append({**common, "ph": "b", "ts": m.start_ns / 1000.0,
                       "args": {"bytes": m.size_bytes, "link": m.link, "src": m.src_ep, "dst": m.dst_ep}})
        events.append({**common, "ph": "e", "ts": m.end_ns / 1000.0})
    meta = {"lanes_shown": len(lanes), "lanes_total": len(sim.lanes),
            "messages_shown": min(len(sim.messages), max_messages), "messages_total": len(sim.messages)}
    with open(path, "w") as fh:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns", "metadata": meta}, fh)


def _lanes_within(sim, budget: int) -> list:
    """TP groups to show: the first of each program (every stage appears), then others in order."""
    size = {l.id: len(sim.programs[l.program].ops) for l in sim.lanes}
    first = {}
    for lane in sim.lanes:
        first.setdefault(lane.program, lane)
    chosen = {l.id for l in first.values()}
    used = sum(size[i] for i in chosen)
    for lane in sim.lanes:
        if lane.id not in chosen and used + size[lane.id] <= budget:
            chosen.add(lane.id)
            used += size[lane.id]
    return [l for l in sim.lanes if l.id in chosen]


def _lane_slices(lane, prog) -> list[dict]:
    """Complete ("X") events of one lane; comm slices cover the data movement only."""
    out = []
    for oid, op in enumerate(prog.ops):
        s, e = lane.start_ns[oid], lane.end_ns[oid]
        if s < 0 or e < 0:
            continue
        args = {"phase": op.phase, "mb": op.microbatch, "layer": op.layer}
        if op.kind == "comm":
            # the slice covers the data movement; the wait for peers is an argument
            moving = lane.comm_start_ns.get(oid, s)
            args.update(collective=op.collective, bytes=op.size_bytes, group=op.group,
                        waited_for_peers_us=(moving - s) / 1000.0)
            s = moving
        else:
            args.update(flops=op.flops)
        out.append({"ph": "X", "name": op.name, "cat": op.kind, "tid": prog.stream_of[oid],
                    "ts": s / 1000.0, "dur": max(e - s, 0) / 1000.0, "args": args})
    return out
