"""Congestion-control comparison: one training iteration under each CC setting, side by side.

Each setting runs in its own spawned child process (ns-3 holds one simulation
per process, and the children use both cores). Reported per setting: iteration
time, exposed communication, FCT slowdown (p50/p99 per flow-size bin), queue
depth, PFC paused time, ECN marks and CNPs. FCT slowdown = FCT / ideal FCT,
where the ideal is the message alone on its path: wire bytes (payload +
per-packet headers) at the NIC line rate, plus propagation, plus
store-and-forward of the last packet on later hops (plus the switch pipeline
latency where the backend models one).

With ``draws`` > 1 each setting runs that many times, ``network.rng_run`` 1, 2, ... (the same
scenario, another draw of the switches' RED marks and the fluid model's sampled CNPs): on a
hashed fabric one run's ECN marks can be a third of the next one's (docs/packet-level-acceleration.md,
"regime"), so a difference between settings is read against the spread of each setting's own draws.
"""
from __future__ import annotations

import csv
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, get_args

from heterosim.results.tables import format_cell
from heterosim.errors import UserError
from netbackend.config import CcKind, NetworkConfig

SIZE_BINS: tuple[tuple[str, int, float], ...] = (
    ("<64KiB", 0, 64 << 10),
    ("64KiB-1MiB", 64 << 10, 1 << 20),
    ("1-16MiB", 1 << 20, 16 << 20),
    (">=16MiB", 16 << 20, math.inf),
)
"""Flow-size bins for slowdown percentiles (lower bound inclusive)."""

CDF_POINTS = 400
"""Slowdown values kept per setting for the CDF plot (quantiles)."""

KNOWN_CCS = tuple(get_args(CcKind))

SCALAR_COLUMNS = (
    "cc", "rng_run", "iteration_time_s", "exposed_comm_s", "exposed_comm_fraction", "exposed_dp_s", "exposed_pp_s",
    "net_messages", "slowdown_p50", "slowdown_p99",
    *[f"slowdown_{q}_{b[0]}" for b in SIZE_BINS for q in ("p50", "p99")],
    "max_queue_bytes", "avg_queue_bytes", "hottest_port_mean_queue_bytes", "pfc_paused_ns_total",
    "pfc_pause_frames_total", "ecn_marks", "cnps_sent", "drops", "background_fct_p99_slowdown", "wall_s",
)


# ------------------------------------------------------------------ metrics
def wire_bytes(size_bytes: int, cfg: NetworkConfig, backend: str) -> int:
    """Payload plus per-packet headers (the ns-3 NIC puts at least 40 B on every packet)."""
    hdr = max(cfg.header_bytes, 40) if backend == "ns3" else cfg.header_bytes
    return size_bytes + -(-size_bytes // cfg.mtu_bytes) * hdr


class IdealFct:
    """Ideal FCT of a message alone on its (shortest) path, cached per host pair."""

    def __init__(self, topology, cfg: NetworkConfig, backend: str):
        self.topo, self.cfg, self.backend = topology, cfg, backend
        self._paths: dict[tuple[str, str], list[tuple[float, int]]] = {}

    def path(self, src: str, dst: str) -> list[tuple[float, int]]:
        """[(rate_gbps, delay_ns)] per hop."""
        key = (src, dst)
        p = self._paths.get(key)
        if p is None:
            import networkx as nx

            g = self.topo.graph
            nodes = nx.shortest_path(g, src, dst)
            p = [(g.edges[a, b]["rate_gbps"], g.edges[a, b]["delay_ns"]) for a, b in zip(nodes, nodes[1:])]
            self._paths[key] = p
        return p

    def __call__(self, size_bytes: int, src: str, dst: str) -> float:
        hops = self.path(src, dst)
        if not hops:
            return 0.0
        cfg = self.cfg
        wire = wire_bytes(size_bytes, cfg, self.backend)
        n = max(1, -(-size_bytes // cfg.mtu_bytes))
        hdr = (wire - size_bytes) // n
        full_bits = (cfg.mtu_bytes + hdr) * 8
        last_bits = (size_bytes - (n - 1) * cfg.mtu_bytes + hdr) * 8
        # Store-and-forward of the packet train: the finish time is the longest path through the
        # (packet, hop) grid of service times; the n-1 full packets give sum + (n-2) x slowest hop.
        last, cum, slowest = (0.0 if n == 1 else -math.inf), 0.0, 0.0
        for rate, _ in hops:
            if n > 1:
                cum += full_bits / rate
                slowest = max(slowest, full_bits / rate)
                last = max(last, cum + (n - 2) * slowest)
            last += last_bits / rate
        t = last + sum(d for _, d in hops)
        t += (len(hops) - 1) * cfg.per_hop_latency_ns  # both backends add the switch latency
        return t


def _pct(sorted_vals: list[float], q: float) -> float | None:
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * q
    lo, hi = int(math.floor(k)), int(math.ceil(k))
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def slowdowns(records, ideal: IdealFct) -> list[tuple[int, float]]:
    """(size_bytes, slowdown) per completed inter-node message."""
    out = []
    for m in records:
        if m.link != "net" or m.end_ns < 0 or m.size_bytes <= 0:
            continue
        base = ideal(m.size_bytes, m.src_ep, m.dst_ep)
        if base > 0:
            out.append((m.size_bytes, (m.end_ns - m.start_ns) / base))
    return out


def slowdown_metrics(pairs: list[tuple[int, float]]) -> dict[str, Any]:
    allv = sorted(s for _, s in pairs)
    row: dict[str, Any] = {"slowdown_p50": _pct(allv, 0.5), "slowdown_p99": _pct(allv, 0.99)}
    for name, lo, hi in SIZE_BINS:
        vals = sorted(s for n, s in pairs if lo <= n < hi)
        row[f"slowdown_p50_{name}"] = _pct(vals, 0.5)
        row[f"slowdown_p99_{name}"] = _pct(vals, 0.99)
        row[f"count_{name}"] = len(vals)
    return row


def network_metrics(stats, topology) -> dict[str, Any]:
    """Queue, PFC, ECN and CNP figures from NetStats (None where the backend does not measure them)."""
    x = dict(getattr(stats, "extra", None) or {})
    mean_q = x.get("mean_queue_bytes") if isinstance(x.get("mean_queue_bytes"), dict) else None
    max_q = x.get("max_queue_bytes") if isinstance(x.get("max_queue_bytes"), dict) else None
    n_ports = 2 * len(topology.links)
    return {
        "max_queue_bytes": max(max_q.values(), default=0) if max_q is not None else None,
        "avg_queue_bytes": sum(mean_q.values()) / n_ports if mean_q is not None and n_ports else None,
        "hottest_port_mean_queue_bytes": max(mean_q.values(), default=0.0) if mean_q is not None else None,
        "pfc_paused_ns_total": x.get("pfc_paused_ns_total"),
        "pfc_pause_frames_total": x.get("pfc_pause_frames_total"),
        "ecn_marks": x.get("ecn_marks"),
        "cnps_sent": x.get("cnps_sent"),
        "drops": x.get("drops"),
    }


def _queue_series(stats, ports: int = 3) -> dict[str, list[tuple[float, float]]]:
    x = getattr(stats, "extra", None) or {}
    hot = list(x.get("hot_ports") or [])[:ports]
    out: dict[str, list[tuple[float, float]]] = {p: [] for p in hot}
    for row in x.get("queue_samples") or []:
        t, p, q = row
        if p in out:
            out[p].append((t / 1e6, q / 1e3))
    return out


# ------------------------------------------------------------------ one setting (child process)
def run_setting(scenario, cc: str, backend: str) -> dict[str, Any]:
    """Simulate ``scenario`` with ``network.cc = cc``; scalar metrics plus series for plots."""
    from heterosim import pipeline as api

    t0 = time.perf_counter()
    sc = _with_network(scenario, cc=cc)
    prep = api.prepare(sc)
    res = api.simulate(prep, backend=backend, record_messages=True)
    s = res.summary
    T = s["iteration_time_s"]
    b = s["breakdown"]
    topo = prep.system.net
    cfg = sc.network.model_copy(update={"backend": backend})
    pairs = slowdowns(res.sim.messages, IdealFct(topo, cfg, backend))
    stats = res.sim.net_stats
    row: dict[str, Any] = {
        "cc": cc,
        "rng_run": sc.network.rng_run,
        "iteration_time_s": T,
        "exposed_comm_fraction": b["exposed_comm_total"],
        "exposed_comm_s": b["exposed_comm_total"] * T,
        "exposed_dp_s": b["exposed_comm"].get("dp", 0.0) * T,
        "exposed_pp_s": b["exposed_comm"].get("pp", 0.0) * T,
        "net_messages": len(pairs),
        **slowdown_metrics(pairs),
        **network_metrics(stats, topo),
    }
    bg = (getattr(stats, "extra", None) or {}).get("background")
    if bg and bg.get("flows"):
        ideal = IdealFct(topo, cfg, backend)
        vals = sorted((f - st) / ideal(n, a, d) for n, st, f, a, d in bg["flows"])
        row["background_fct_p99_slowdown"] = _pct(vals, 0.99)
    else:
        row["background_fct_p99_slowdown"] = None
    allv = sorted(sv for _, sv in pairs)
    row["_slowdown_cdf"] = [_pct(allv, i / (CDF_POINTS - 1)) for i in range(CDF_POINTS)] if allv else []
    row["_queues"] = _queue_series(stats)
    row["wall_s"] = time.perf_counter() - t0
    return row


def _child(payload: tuple) -> dict[str, Any]:
    """Child-process entry: user errors come back as values (one line), not tracebacks."""
    scenario, cc, backend = payload
    try:
        return run_setting(scenario, cc, backend)
    except UserError as err:
        return {"cc": cc, "_error": str(err)}


def run_per_cc(child, what, network: NetworkConfig, names: list[str], backend: str,
               workers: int | None, jobs: list[tuple[Any, str]] | None = None) -> list[dict[str, Any]]:
    """``child((what, cc, backend))`` for each CC setting (or for each ``(what, cc)`` of ``jobs``, in
    their order), each in a fresh spawned process (ns-3 keeps global state per process), after one
    probe child has built the backend for every setting so that an unsupported one fails as one line
    before any simulation.  A child reports its failure as ``{"_error": line, "cc": cc}``."""
    jobs = [(what, c) for c in names] if jobs is None else jobs
    ctx = multiprocessing.get_context("spawn")
    n = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx, max_tasks_per_child=1) as pool:
        problems = pool.submit(_probe, (backend, network, names)).result()
        for c in names:
            if problems.get(c):
                raise UserError(f"not supported by the {backend} backend: {problems[c]}", field="cc", value=c)
        rows = list(pool.map(child, [(w, c, backend) for w, c in jobs]))
    errors = [r for r in rows if "_error" in r]
    if errors:
        raise UserError(errors[0]["_error"], field="cc", value=errors[0]["cc"])
    return rows


def _probe(payload: tuple) -> dict[str, str | None]:
    """cc -> error line (or None): build the backend for each setting on a 2-host fabric."""
    backend, base_cfg, ccs = payload
    from netbackend.registry import create_backend
    from netbackend.topo import Link, NetTopology

    topo = NetTopology(hosts=["a", "b"], switches=["s"], links=[Link("a", "s", 100.0, 1000),
                                                              Link("s", "b", 100.0, 1000)])
    out: dict[str, str | None] = {}
    for cc in ccs:
        try:
            cfg = base_cfg.model_copy(update={"cc": cc, "backend": backend})
            # settings that name hosts of the real fabric (a slow receiver) have no host here
            cfg = cfg.model_copy(update={"transport": cfg.transport.model_copy(update={"rx_drain_gbps_per_host": {}})})
            create_backend(backend, topo, cfg, 0).close()
            out[cc] = None
        except UserError as err:
            out[cc] = str(err)
    return out


def _parse_ccs(ccs) -> list[str]:
    names = [c.strip() for c in (ccs.split(",") if isinstance(ccs, str) else ccs) if str(c).strip()]
    if not names:
        raise UserError("name at least one congestion control", field="cc", value=ccs)
    for c in names:
        if c not in KNOWN_CCS:
            raise UserError(f"unknown congestion control (choose from {', '.join(KNOWN_CCS)})", field="cc", value=c)
    if len(set(names)) != len(names):
        raise UserError("congestion control listed twice", field="cc", value=",".join(names))
    return names


def compare(scenario, ccs: list[str] | str, *, out: Path | str, overrides=None, backend: str = "ns3",
            workers: int | None = None, draws: int = 1) -> list[dict[str, Any]]:
    """Run ``scenario`` once per CC setting, or ``draws`` times each (``network.rng_run`` the scenario's, then
    the next ones), in child processes, and write compare.csv/.md/.json and plots; one row per run, setting by
    setting (:func:`over_draws` sums them up)."""
    from heterosim import pipeline as api
    from heterosim.config.scenario import Scenario

    names = _parse_ccs(ccs)
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise UserError("must be a whole number >= 1", field="draws", value=draws)
    sc = scenario if isinstance(scenario, Scenario) else api.load(scenario, overrides)
    if isinstance(scenario, Scenario) and overrides:
        raise UserError("overrides apply to a scenario file; pass an edited Scenario instead", field="overrides")
    from netbackend.registry import backend_class

    backend_class(backend)  # unknown backend: one line now, not in a child
    runs = [sc] + [_with_network(sc, rng_run=sc.network.rng_run + k) for k in range(1, draws)]
    jobs = [(run, c) for c in names for run in runs]
    rows = run_per_cc(_child, sc, sc.network, names, backend, workers, jobs=jobs)
    write_outputs(Path(out), rows, scenario_name=sc.name, backend=backend)
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]


def _with_network(sc, **fields):
    """``sc`` with these ``network`` fields replaced (its source file kept, for error messages)."""
    out = sc.model_copy(update={"network": sc.network.model_copy(update=fields)})
    if hasattr(sc, "_source_file"):
        out._source_file = sc._source_file  # type: ignore[attr-defined]
    return out


def over_draws(rows: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """cc -> metric -> (mean, min, max) over that setting's runs (its draws), for the numeric metrics
    every one of them has."""
    by_cc: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_cc.setdefault(r["cc"], []).append(r)
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    for cc, rs in by_cc.items():
        out[cc] = {}
        for c in SCALAR_COLUMNS[2:]:
            vals = [r.get(c) for r in rs]
            if vals and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                out[cc][c] = (sum(vals) / len(vals), min(vals), max(vals))
    return out


def overlapping(summary: dict[str, dict[str, tuple[float, float, float]]]) -> dict[str, list[tuple[str, str]]]:
    """metric -> the pairs of settings whose ranges over their draws overlap on it (with distinct means): their
    difference there is within what the draws alone move."""
    out: dict[str, list[tuple[str, str]]] = {}
    names = list(summary)
    for c in SCALAR_COLUMNS[2:]:
        if c == "wall_s":  # (the host's time, not the network's)
            continue
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                x, y = summary[a].get(c), summary[b].get(c)
                if x is None or y is None or x[0] == y[0]:
                    continue
                if x[1] <= y[2] and y[1] <= x[2]:
                    out.setdefault(c, []).append((a, b))
    return out


# ------------------------------------------------------------------ outputs
def write_outputs(out: Path, rows: list[dict[str, Any]], *, scenario_name: str = "", backend: str = "") -> None:
    from heterosim.results.writer import atomic_dir, write_json

    names = list(dict.fromkeys(r["cc"] for r in rows))
    draws = len(rows) // max(1, len(names))
    with atomic_dir(out) as tmp:
        cols = [c for c in SCALAR_COLUMNS if any(r.get(c) is not None for r in rows)]
        if draws == 1:
            cols = [c for c in cols if c != "rng_run"]  # (one run each: the column says nothing)
        with open(tmp / "compare.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(cols)
            for r in rows:
                w.writerow(["" if r.get(c) is None else r.get(c) for c in cols])
        md = [f"# CC comparison: {scenario_name} ({backend} backend)", ""]
        metrics = [c for c in cols if c not in ("cc", "rng_run")]
        if draws == 1:
            md += ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
            for c in metrics:
                md.append(f"| {c} | " + " | ".join(format_cell(r.get(c)) for r in rows) + " |")
            plotted = rows
        else:
            summary = over_draws(rows)
            md += [f"Each setting {draws} times (`network.rng_run` {rows[0]['rng_run']} to "
                   f"{rows[0]['rng_run'] + draws - 1}): mean [min, max] over its draws; every run in compare.csv.", "",
                   "| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
            for c in metrics:
                cells = []
                for n in names:
                    v = summary[n].get(c)
                    cells.append("" if v is None else f"{format_cell(v[0])} [{format_cell(v[1])}, {format_cell(v[2])}]")
                md.append(f"| {c} | " + " | ".join(cells) + " |")
            within = overlapping(summary)
            if within:
                md += ["", "Within the draws' spread (the settings' ranges overlap; compare more draws before "
                       "reading a difference): " + "; ".join(
                           f"{c} ({', '.join(f'{a} / {b}' for a, b in pairs)})" for c, pairs in within.items()) + "."]
            plotted = [{**next(r for r in rows if r["cc"] == n), **{c: v[0] for c, v in summary[n].items()},
                        "_range": {c: (v[1], v[2]) for c, v in summary[n].items()}} for n in names]
        md += ["", "FCT slowdown = FCT / ideal FCT (the message alone on its path: wire bytes at NIC line "
               "rate, propagation, store-and-forward); inter-node training messages only."]
        if backend == "flow":
            md.append("The flow backend does not model congestion control: its settings differ only by name"
                      + (", and it draws nothing at random: its draws are the same run." if draws > 1 else "."))
        (tmp / "compare.md").write_text("\n".join(md) + "\n")
        write_json(tmp / "compare.json", rows)
        plot_compare(tmp, plotted)


def plot_compare(out: Path, rows: list[dict[str, Any]]) -> None:
    """Bars per metric, the FCT-slowdown CDF and the hottest queues; ``rows``: one per setting (over draws: the
    means, ``_range`` their (min, max), and the first draw's series)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from heterosim.results.netplots import sample_step, with_empty_samples

    metrics = [("iteration_time_s", "iteration time (s)"), ("exposed_comm_s", "exposed comm (s)"),
               ("slowdown_p99", "p99 FCT slowdown"), ("max_queue_bytes", "max queue (bytes)"),
               ("pfc_paused_ns_total", "PFC paused (ns)"), ("ecn_marks", "ECN marks"), ("cnps_sent", "CNPs")]
    metrics = [m for m in metrics if any(r.get(m[0]) is not None for r in rows)]
    names = [r["cc"] for r in rows]
    cols = min(4, len(metrics))
    nrow = -(-len(metrics) // cols)
    fig, axes = plt.subplots(nrow, cols, figsize=(3.2 * cols, 3 * nrow), squeeze=False)
    for ax, (key, label) in zip(axes.flat, metrics):
        vals = [r.get(key) or 0 for r in rows]
        spans = [r.get("_range", {}).get(key) or (v, v) for r, v in zip(rows, vals)]  # (min, max) over draws
        err = [[v - lo for v, (lo, _) in zip(vals, spans)], [hi - v for v, (_, hi) in zip(vals, spans)]]
        ax.bar(names, vals, yerr=err if any(e for side in err for e in side) else None, capsize=3,
               color=[f"C{i}" for i in range(len(rows))])
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out / "compare_bars.png", dpi=110)
    plt.close(fig)

    if any(r.get("_slowdown_cdf") for r in rows):
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in rows:
            vals = r.get("_slowdown_cdf") or []
            if vals:
                ax.plot(vals, [i / (len(vals) - 1) for i in range(len(vals))], label=r["cc"])
        ax.set_xscale("log")
        ax.set_xlabel("FCT slowdown (FCT / ideal)")
        ax.set_ylabel("CDF of inter-node messages")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "fct_slowdown_cdf.png", dpi=110)
        plt.close(fig)

    if any(r.get("_queues") for r in rows):
        fig, axes = plt.subplots(len(rows), 1, figsize=(9, 2.4 * len(rows)), squeeze=False, sharex=True)
        for ax, r in zip(axes[:, 0], rows):
            queues = {port: pts for port, pts in (r.get("_queues") or {}).items() if pts}
            step = sample_step([[p[0] for p in pts] for pts in queues.values()])
            for port, pts in queues.items():  # (empty between bursts, not a ramp across the idle gap)
                ax.plot(*with_empty_samples([p[0] for p in pts], [p[1] for p in pts], step), lw=0.8, label=port)
            ax.set_title(f"{r['cc']}: hottest egress queues", fontsize=9)
            ax.set_ylabel("KB")
            if r.get("_queues"):
                ax.legend(fontsize=7)
        axes[-1, 0].set_xlabel("time (ms)")
        fig.tight_layout()
        fig.savefig(out / "queue_over_time.png", dpi=110)
        plt.close(fig)
