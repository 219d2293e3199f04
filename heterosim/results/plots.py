"""PNG plots: per-lane timeline and breakdown bars (matplotlib, headless)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from heterosim.results.breakdown import BUCKETS  # noqa: E402

_COLORS = {"compute": "#4c72b0", "exposed_tp": "#dd8452", "exposed_cp": "#937860", "exposed_ep": "#da8bc3",
           "exposed_pp": "#c44e52", "exposed_dp": "#55a868", "bubble": "#8c8c8c", "idle": "#dddddd"}
_STREAM_COLORS = {"compute": "#4c72b0", "tp": "#dd8452", "cp": "#937860", "ep": "#da8bc3",
                  "pp_send": "#c44e52", "pp_recv": "#e17c7e", "dp": "#55a868"}


def plot_timeline(path, sim, ir, max_lanes: int = 32) -> None:
    lanes = sim.lanes[:: max(1, len(sim.lanes) // max_lanes)][:max_lanes]
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(lanes) + 1.5))
    pixel_ms = sim.iteration_time_ns / 1e6 / 2000  # bars closer than this look joined anyway
    shared: dict[tuple, dict] = {}  # lanes of mirrored replicas (symmetry reduction) share a timeline
    for row, lane in enumerate(lanes):
        prog = sim.programs[lane.program]
        key = (id(lane.start_ns), id(lane.end_ns), id(lane.comm_start_ns), lane.program)
        bars = shared.get(key)
        if bars is None:
            per_stream: dict[str, list[tuple[float, float]]] = {}
            moving, start, end = lane.comm_start_ns, lane.start_ns, lane.end_ns
            for oid, op in enumerate(prog.ops):
                # comm ops are drawn while their data moves, not while they wait for a peer
                s, e = moving.get(oid, start[oid]), end[oid]
                if s >= 0 and e > s:
                    per_stream.setdefault(op.stream, []).append((s / 1e6, (e - s) / 1e6))
            bars = shared[key] = {st: _merge_bars(per_stream[st], pixel_ms) for st in sorted(per_stream)}
        h = 0.8 / max(1, len(bars))
        for k, st in enumerate(bars):
            ax.broken_barh(bars[st], (row - 0.4 + k * h, h),
                           color=_STREAM_COLORS.get(st, "#999999"), label=st if row == 0 else None)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"r{l.ranks[0]} s{ir.program_of(l.ranks[0]).stage}" for l in lanes], fontsize=7)
    ax.set_xlabel("time (ms)")
    ax.set_title("Per-rank timeline (one row per TP group; bars per stream)")
    ax.invert_yaxis()
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _merge_bars(bars: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """Join (start, width) bars separated by less than ``gap``: a 1024-GPU run has 15k ops
    per row, far more than the pixels to draw them."""
    out: list[list[float]] = []
    for start, width in sorted(bars):
        if out and start - (out[-1][0] + out[-1][1]) < gap:
            out[-1][1] = max(out[-1][1], start + width - out[-1][0])
        else:
            out.append([start, width])
    return [tuple(b) for b in out]


def plot_breakdown(path, summary: dict) -> None:
    rows = summary["per_rank"]
    stages: dict[tuple, list[dict]] = {}
    for r in rows:
        stages.setdefault((r["stage"], r["device"]), []).append(r)
    labels = [f"stage {s}\n{d}" for s, d in sorted(stages)]
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(labels) + 4.5), 4.5))
    bottoms = [0.0] * len(labels)
    for b in BUCKETS:
        vals = [sum(r[b] for r in stages[k]) / len(stages[k]) for k in sorted(stages)]
        ax.bar(labels, vals, bottom=bottoms, color=_COLORS[b], label=b)
        bottoms = [x + y for x, y in zip(bottoms, vals)]
    ax.set_ylabel("seconds per iteration")
    ax.set_title(f"{summary['scenario']}: {summary['iteration_time_s']:.3f} s/iter, MFU {summary['mfu']:.1%}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    plt.setp(ax.get_xticklabels(), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
