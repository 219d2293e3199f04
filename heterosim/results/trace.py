"""trace.json in the Chrome trace-event format (opens in ui.perfetto.dev).

One process per lane (a TP group; its ranks run in lock-step), one thread per
stream (compute, tp, pp_send, pp_recv, dp, ...). Network messages appear as
async slices under a "network" process, so the flows of one collective line up
under the ops that caused them.
"""
from __future__ import annotations

import json


def write_trace(path, sim, ir, *, max_messages: int = 200_000) -> None:
    events = []
    for lane in sim.lanes:
        prog = sim.programs[lane.program]
        pid = lane.id
        ranks = lane.ranks
        label = f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"
        events.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": f"{label} stage {ir.program_of(ranks[0]).stage} ({lane.device})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
        for tid, sname in enumerate(prog.stream_names):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": sname}})
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
            events.append({"ph": "X", "name": op.name, "cat": op.kind, "pid": pid, "tid": prog.stream_of[oid],
                           "ts": s / 1000.0, "dur": max(e - s, 0) / 1000.0, "args": args})
    net_pid = len(sim.lanes)
    events.append({"ph": "M", "name": "process_name", "pid": net_pid, "args": {"name": "network messages"}})
    for m in sim.messages[:max_messages]:
        if m.end_ns < 0:
            continue
        name = f"{m.collective} {m.src}->{m.dst}"
        common = {"cat": f"msg.{m.link}", "pid": net_pid, "tid": 0, "id": m.id, "name": name}
        events.append({**common, "ph": "b", "ts": m.start_ns / 1000.0,
                       "args": {"bytes": m.size_bytes, "link": m.link, "src": m.src_ep, "dst": m.dst_ep}})
        events.append({**common, "ph": "e", "ts": m.end_ns / 1000.0})
    with open(path, "w") as fh:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, fh)
