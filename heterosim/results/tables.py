"""ops.csv and messages.csv: every op and every message, for pandas/duckdb."""
from __future__ import annotations

import csv


def format_cell(v) -> str:
    """A table cell for humans: '-' for missing, 4 significant digits for floats."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_ops_csv(path, sim, ir) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["lane", "ranks", "stage", "op_id", "name", "kind", "stream", "phase", "microbatch", "layer",
                    "collective", "comm_kind", "bytes", "flops", "start_ns", "end_ns"])
        for lane in sim.lanes:
            prog = sim.programs[lane.program]
            ranks = " ".join(map(str, lane.ranks))
            stage = ir.program_of(lane.ranks[0]).stage
            for oid, op in enumerate(prog.ops):
                w.writerow([lane.id, ranks, stage, oid, op.name, op.kind, op.stream, op.phase, op.microbatch,
                            op.layer, op.collective, op.comm_kind, op.size_bytes, op.flops,
                            lane.start_ns[oid], lane.end_ns[oid]])


def write_messages_csv(path, sim) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "src_rank", "dst_rank", "src_ep", "dst_ep", "bytes", "link", "collective", "comm_kind",
                    "start_ns", "end_ns"])
        for m in sim.messages:
            w.writerow([m.id, m.src, m.dst, m.src_ep, m.dst_ep, m.size_bytes, m.link, m.collective, m.comm_kind,
                        m.start_ns, m.end_ns])
