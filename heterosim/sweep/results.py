"""A sweep's table (results.csv, results.parquet) and plot (summary.png), from its point directories.

The table is rebuilt from the directories every time, so a resumed sweep's table
holds the points of earlier invocations too.
"""
from __future__ import annotations

import csv
import json
import math
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Sequence

from heterosim.sweep.config import DEFAULT_METRICS
from heterosim.sweep.expand import Point
from heterosim.sweep.worker import ERROR, POINT, SUMMARY

#: network.json values are tabulated under this prefix (``net.pfc_pause_frames``...).
NET_PREFIX = "net."
#: In summary.json, a nested mapping with more entries than this (per rank, per link) is not a column.
_MAX_NESTED = 64
#: Plotted when the sweep names no metrics (the first that exist).
DEFAULT_PLOT_METRICS = ("iteration_time_s", "mfu", "breakdown.exposed_comm_total")


def flatten(data: Any, prefix: str = "", max_nested: int | None = _MAX_NESTED) -> dict[str, Any]:
    """Nested dicts -> {'a.b.c': scalar}; lists and mappings larger than ``max_nested`` are dropped."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        if prefix and max_nested is not None and len(data) > max_nested:
            return out
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}.", max_nested))
    elif isinstance(data, (int, float, str, bool)) or data is None:
        if prefix:
            out[prefix[:-1]] = data
    return out


def select_metrics(summary: dict, network: dict | None, patterns: Sequence[str] | None) -> dict[str, Any]:
    """The metric columns of one point: named keys, ``a.*`` wildcards, ``net.*`` from network.json."""
    flat = flatten(summary or {})
    if patterns is None:
        chosen = _match(flat, DEFAULT_METRICS)
        # the network's top-level numeric totals (PFC pauses, ECN marks, CNPs, drops...); per-port
        # and per-switch breakdowns only when asked for (their keys differ from point to point)
        chosen.update({NET_PREFIX + k: v for k, v in (network or {}).items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)})
        return chosen
    net = {NET_PREFIX + k: v for k, v in flatten(network or {}, max_nested=None).items()}
    return _match({**flat, **net}, patterns)


def _match(flat: dict[str, Any], patterns: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pat in patterns:
        if any(c in pat for c in "*?["):
            for k, v in flat.items():
                if fnmatchcase(k, pat):
                    out[k] = v
        elif pat in flat:
            out[pat] = flat[pat]
    return out


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def collect_rows(points: Sequence[Point], points_dir: Path, metrics: Sequence[str] | None) -> list[dict[str, Any]]:
    """One row per point: id, parameters, status, error, wall_s, metrics."""
    rows = []
    for p in points:
        d = points_dir / p.id
        row: dict[str, Any] = {"id": p.id, **p.params}
        summary = _read_json(d / SUMMARY)
        meta = _read_json(d / POINT) or {}
        err = _read_json(d / ERROR)
        if summary is not None and err is None:
            row.update(status="ok", error="")
        elif err is not None:
            row.update(status=err.get("status", "error"), error=err.get("error", ""))
        else:
            row.update(status="not_run", error="")
        row["wall_s"] = meta.get("wall_s")
        if summary is not None and err is None:
            row.update(select_metrics(summary, _read_json(d / "network.json"), metrics))
        rows.append(row)
    return rows


def columns_of(rows: Sequence[dict]) -> list[str]:
    cols: list[str] = []
    seen = set()
    for r in rows:
        for k in r:
            if k not in seen:
                seen.add(k)
                cols.append(k)
    return cols


def write_tables(rows: Sequence[dict], out: Path) -> list[Path]:
    """results.csv always; results.parquet when pyarrow is importable."""
    cols = columns_of(rows)
    written = []
    csv_path = out / "results.csv"
    tmp = csv_path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, restval="")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    tmp.replace(csv_path)
    written.append(csv_path)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    columns = {c: [r.get(c) for r in rows] for c in cols}
    for c, vals in columns.items():  # a column mixing types (100 and "auto") is stored as text
        kinds = {type(v) for v in vals if v is not None}
        if len(kinds) > 1 and not kinds <= {int, float}:
            columns[c] = [None if v is None else str(v) for v in vals]
        elif kinds == {int, float}:
            columns[c] = [None if v is None else float(v) for v in vals]
    pq_path = out / "results.parquet"
    pq.write_table(pa.table(columns), pq_path)
    written.append(pq_path)
    return written


def plot_summary(rows: Sequence[dict], params: Sequence[str], metrics: Sequence[str] | None, path: Path,
                 title: str = "") -> Path | None:
    """Each metric vs the first parameter, one line per combination of the other parameters."""
    ok = [r for r in rows if r.get("status") == "ok"]
    wanted = list(metrics) if metrics else list(DEFAULT_PLOT_METRICS)
    names = [m for m in wanted if "*" not in m and any(_num(r.get(m)) is not None for r in ok)][:4]
    if not ok or not names or not params:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_name, others = params[0], list(params[1:])
    xs_all = _unique([r[x_name] for r in ok])
    numeric_x = all(_num(v) is not None and not isinstance(v, bool) for v in xs_all)
    pos = {repr(v): (float(v) if numeric_x else i) for i, v in enumerate(xs_all)}
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        groups.setdefault(tuple(repr(r.get(o)) for o in others), []).append(r)
    fig, axes = plt.subplots(len(names), 1, figsize=(7, 2.8 * len(names)), squeeze=False, sharex=True)
    for ax, m in zip(axes[:, 0], names):
        for key, rs in groups.items():
            pts = sorted((pos[repr(r[x_name])], _num(r.get(m))) for r in rs if _num(r.get(m)) is not None)
            if not pts:
                continue
            label = ", ".join(f"{o.split('.')[-1]}={rs[0].get(o)}" for o in others) or None
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_ylabel(m)
        ax.grid(alpha=0.3)
        if others and len(groups) > 1:
            ax.legend(fontsize=7)
    ax = axes[-1, 0]
    ax.set_xlabel(x_name)
    if not numeric_x:
        ax.set_xticks(list(pos.values()), [str(v) for v in xs_all])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def _unique(vals: Iterable[Any]) -> list[Any]:
    out, seen = [], set()
    for v in vals:
        if repr(v) not in seen:
            seen.add(repr(v))
            out.append(v)
    try:
        return sorted(out)
    except TypeError:
        return out
