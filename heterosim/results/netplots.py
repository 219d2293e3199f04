"""Network plots and per-port table from a backend's :class:`NetStats`.

Which figures appear depends on what the backend measured: the packet-level
ns-3 backend reports queues, PFC and ECN per port ("a->b" = egress of a towards
b); the flow backend reports little beyond FCTs. Every plot is skipped, not
failed, when its data is missing, so ``write_results`` works for any backend.
"""
from __future__ import annotations

import csv
import heapq
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MAX_FLOWS = 8
"""Flows drawn in flow_rates.png (the largest ones)."""


def plot_network(out_dir: Path, stats, message_bytes: dict[int, int] | None = None) -> list[Path]:
    """Write queue_depth.png, flow_rates.png, pfc_pause.png and network_stats.csv where data exists.

    ``message_bytes`` (message id -> payload bytes, e.g. from the coordinator's
    message records) lets flow_rates.png fall back to size/FCT average rates when
    the backend sampled no rates. Returns the files written.
    """
    out_dir = Path(out_dir)
    extra = dict(getattr(stats, "extra", None) or {})
    if message_bytes:
        extra["message_bytes"] = message_bytes
    written = []
    for fn, name in ((plot_queue_depth, "queue_depth.png"), (plot_flow_rates, "flow_rates.png"),
                     (plot_pfc_pause, "pfc_pause.png")):
        path = out_dir / name
        if fn(path, stats, extra):
            written.append(path)
    path = out_dir / "network_stats.csv"
    if write_port_table(path, stats, extra):
        written.append(path)
    return written


def _dict(extra: dict, key: str) -> dict:
    v = extra.get(key)
    return v if isinstance(v, dict) else {}


def _measured(extra: dict, key: str) -> dict | None:
    """The per-port dict, or None when the backend does not measure it (blank cells, not zeros)."""
    v = extra.get(key)
    return v if isinstance(v, dict) else None


def node_of_port(port: str) -> str:
    """'leaf0->spine1' -> 'leaf0' (the node whose egress queue the port is)."""
    return port.split("->", 1)[0]


# ---------------------------------------------------------------- queue depth
def plot_queue_depth(path: Path, stats, extra: dict) -> bool:
    samples = extra.get("queue_samples") or []
    series: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for row in samples:
        try:
            t, port, q = row
        except (TypeError, ValueError):
            continue
        xs, ys = series[str(port)]
        xs.append(int(t) / 1e6)
        ys.append(int(q) / 1e3)
    if not series:
        return False
    hot = [p for p in (extra.get("hot_ports") or []) if p in series] or sorted(series)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    step = sample_step([series[p][0] for p in hot])
    for port in hot:
        xs, ys = with_empty_samples(*series[port], step)
        ax.plot(xs, ys, lw=0.8, label=port)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("egress queue (KB)")
    ax.set_title(f"Queue depth of the {len(hot)} ports with the largest mean queue")
    ax.legend(fontsize=7, ncol=2)
    _save(fig, path)
    return True


def sample_step(all_xs: list[list[float]]) -> float:
    """The sampling interval: the smallest gap between consecutive samples of a port."""
    gaps = [b - a for xs in all_xs for a, b in zip(xs, xs[1:]) if b > a]
    return min(gaps) if gaps else 0.0


def with_empty_samples(xs: list[float], ys: list[float], step: float) -> tuple[list[float], list[float]]:
    """The backend stores only non-empty samples; put the empty queue back where samples are missing,
    so a line does not ramp across an idle gap."""
    if step <= 0:
        return xs, ys
    out_x, out_y = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        if i and x - xs[i - 1] > 1.5 * step:
            out_x += [xs[i - 1] + step, x - step]
            out_y += [0.0, 0.0]
        out_x.append(x)
        out_y.append(y)
    return out_x, out_y


# ---------------------------------------------------------------- flow rates
def flow_rate_series(stats, extra: dict, max_flows: int = MAX_FLOWS) -> tuple[str, dict[str, tuple[list, list]]]:
    """(kind, label -> (times_ms, gbps)): sampled rates if present, else average rate per message."""
    samples = extra.get("rate_samples_gbps") or []
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in samples:
        try:
            t, host, qp, gbps = row
        except (TypeError, ValueError):
            continue
        xs, ys = series[f"{host} qp{qp}"]
        xs.append(int(t) / 1e6)
        ys.append(float(gbps))
    if series:
        top = sorted(series, key=lambda k: (-sum(series[k][1]), k))[:max_flows]
        return "sampled", {k: series[k] for k in top}
    fct = getattr(stats, "fct_ns", None) or {}
    sizes = extra.get("message_bytes") or {}
    if not fct:
        return "none", {}
    # Without per-message sizes, rank by duration; the rate is then only known if sizes are.
    if sizes:
        chosen = heapq.nsmallest(max_flows, fct, key=lambda m: (-sizes.get(m, 0), m))  # = sorted()[:n]
        out = {}
        for m in chosen:
            s, e = fct[m]
            if e > s and sizes.get(m):
                out[f"msg {m}"] = ([s / 1e6, e / 1e6], [sizes[m] * 8 / (e - s)] * 2)
        return "average", out
    return "none", {}


def plot_flow_rates(path: Path, stats, extra: dict) -> bool:
    kind, series = flow_rate_series(stats, extra)
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for label, (xs, ys) in series.items():
        if kind == "sampled":
            ax.step(xs, ys, where="post", lw=0.9, label=label)
        else:
            ax.plot(xs, ys, lw=2, label=label)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("rate (Gb/s)")
    ax.set_title("Sending rate of the busiest queue pairs" if kind == "sampled"
                 else "Average rate of the largest messages (size / FCT)")
    ax.legend(fontsize=7, ncol=2)
    _save(fig, path)
    return True


# ---------------------------------------------------------------- PFC
def paused_ns_per_node(extra: dict) -> dict[str, int]:
    """Total PFC-paused egress time per node (switch or NIC), summed over its ports."""
    out: dict[str, int] = defaultdict(int)
    for port, ns in _dict(extra, "pfc_paused_ns").items():
        out[node_of_port(str(port))] += int(ns)
    return dict(out)


def plot_pfc_pause(path: Path, stats, extra: dict) -> bool:
    per_node = {n: v for n, v in paused_ns_per_node(extra).items() if v > 0}
    if not per_node:
        return False
    names = sorted(per_node, key=lambda n: (-per_node[n], n))[:40]
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(names) + 2), 4.5))
    ax.bar(names, [per_node[n] / 1e3 for n in names], color="#c44e52")
    ax.set_ylabel("paused egress time, summed over ports (us)")
    ax.set_title("PFC paused time per node")
    plt.setp(ax.get_xticklabels(), rotation=60, ha="right", fontsize=7)
    _save(fig, path)
    return True


# ---------------------------------------------------------------- table
PORT_COLUMNS = ("port", "node", "tx_bytes", "pfc_pause_frames_sent", "pfc_pause_frames_received", "pfc_paused_ns",
                "ecn_marks", "drops", "mean_queue_bytes", "max_queue_bytes")


def port_rows(stats, extra: dict) -> list[dict[str, Any]]:
    """One row per port that carried traffic or has any counter (blank: not measured by this backend)."""
    tx = {f"{a}->{b}": int(v) for (a, b), v in (getattr(stats, "link_bytes", None) or {}).items()}
    cols = {
        "tx_bytes": tx,
        "pfc_pause_frames_sent": _measured(extra, "pfc_pause_frames"),
        "pfc_pause_frames_received": _measured(extra, "pfc_pause_frames_received"),
        "pfc_paused_ns": _measured(extra, "pfc_paused_ns"),
        "ecn_marks": _measured(extra, "ecn_marks_per_port"),
        "drops": _measured(extra, "drops_per_port"),
        "mean_queue_bytes": _measured(extra, "mean_queue_bytes"),
        "max_queue_bytes": _measured(extra, "max_queue_bytes"),
    }
    ports = sorted(set().union(*(set(map(str, c)) for c in cols.values() if c)))
    rows = []
    for p in ports:
        row: dict[str, Any] = {"port": p, "node": node_of_port(p)}
        for k, c in cols.items():
            if c is None:
                row[k] = ""
                continue
            v = c.get(p, 0)
            row[k] = round(float(v), 1) if k == "mean_queue_bytes" else int(v)
        rows.append(row)
    return rows


def write_port_table(path: Path, stats, extra: dict) -> bool:
    rows = port_rows(stats, extra)
    if not rows:
        return False
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=PORT_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return True


def _save(fig, path: Path) -> None:
    from heterosim.results.plots import save_png

    save_png(fig, path)
