"""PNG plots: per-lane timeline and breakdown bars (matplotlib, headless)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from heterosim.results.breakdown import BUCKETS  # noqa: E402

_COLORS = {"compute": "#4c72b0", "exposed_tp": "#dd8452", "exposed_cp": "#937860", "exposed_ep": "#da8bc3",
           "exposed_pp": "#c44e52", "exposed_dp": "#55a868", "bubble": "#8c8c8c", "idle": "#dddddd"}
_STREAM_COLORS = {"compute": "#4c72b0", "tp": "#dd8452", "cp": "#937860", "ep": "#da8bc3",
                  "pp_send": "#c44e52", "pp_recv": "#e17c7e", "dp": "#55a868"}


def plot_timeline(path, sim, ir, max_lanes: int = 32) -> None:
    from matplotlib.collections import PolyCollection

    lanes = sim.lanes[:: max(1, len(sim.lanes) // max_lanes)][:max_lanes]
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(lanes) + 1.5))
    pixel_ms = sim.iteration_time_ns / 1e6 / 2000  # bars closer than this look joined anyway
    shared: dict[tuple, dict] = {}  # lanes of mirrored replicas (symmetry reduction) share a timeline
    by_stream: dict[int, dict[str, np.ndarray]] = {}  # program -> stream -> its op ids
    polys: dict[str, list[np.ndarray]] = {}  # stream -> bar rectangles of every row: one collection each
    for row, lane in enumerate(lanes):
        prog = sim.programs[lane.program]
        key = (id(lane.start_ns), id(lane.end_ns), id(lane.comm_start_ns), lane.program)
        bars = shared.get(key)
        if bars is None:
            streams = by_stream.get(lane.program)
            if streams is None:  # (the coordinator's program info lists each stream's ops in order)
                streams = by_stream[lane.program] = {st: np.array(v) for st, v in zip(prog.stream_names, prog.streams)}
            # comm ops are drawn while their data moves, not while they wait for a peer
            start = np.array(lane.start_ns, dtype=np.int64)
            if lane.comm_start_ns:
                moving = lane.comm_start_ns
                start[np.fromiter(moving.keys(), np.int64, len(moving))] = np.fromiter(moving.values(), np.int64,
                                                                                       len(moving))
            end = np.array(lane.end_ns, dtype=np.int64)
            bars = {}
            for st in sorted(streams):
                sel = streams[st]
                s, e = start[sel], end[sel]
                keep = (s >= 0) & (e > s)
                if keep.any():
                    bars[st] = _merge_bars(s[keep] / 1e6, e[keep] / 1e6, pixel_ms)
            shared[key] = bars
        h = 0.8 / max(1, len(bars))
        for k, st in enumerate(bars):
            x0, x1 = bars[st]
            y0 = row - 0.4 + k * h
            verts = np.empty((len(x0), 4, 2))
            verts[:, 0, 0] = verts[:, 1, 0] = x0
            verts[:, 2, 0] = verts[:, 3, 0] = x1
            verts[:, (0, 3), 1] = y0
            verts[:, (1, 2), 1] = y0 + h
            polys.setdefault(st, []).append(verts)
    # one collection per stream, in the order streams first appear (legend order as before); drawing
    # 32 rows x 5 streams as separate collections cost ~0.3 s at 1,024 GPUs, the same bars
    for st, vs in polys.items():
        ax.add_collection(PolyCollection(np.concatenate(vs), color=_STREAM_COLORS.get(st, "#999999"),
                                         label=st))  # (as broken_barh)
    ax.autoscale_view()
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"r{l.ranks[0]} s{ir.program_of(l.ranks[0]).stage}" for l in lanes], fontsize=7)
    ax.set_xlabel("time (ms)")
    ax.set_title("Per-rank timeline (one row per TP group; bars per stream)")
    ax.invert_yaxis()
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    save_png(fig, path)


def save_png(fig, path, dpi: int = 110) -> None:
    """``tight_layout`` then ``savefig`` and close. The layout is done once, here: tight_layout leaves a
    placeholder layout engine behind, for which savefig draws the whole figure once more before drawing it
    to pixels (~0.1 s a plot); with the engine unset it does not (the same pixels and bytes)."""
    fig.tight_layout()
    fig.set_layout_engine(None)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def _merge_bars(start, end, gap: float):
    """(starts, ends) of the bars left when bars [start, end) separated by less than ``gap`` are joined (a
    1024-GPU run has 15k ops per row, far more than the pixels to draw them): sorted by start, a bar opens
    a new one where it starts at least ``gap`` after every bar before it has ended."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] - reach[:-1] >= gap
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return s[first], reach[last]


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
    save_png(fig, path)
