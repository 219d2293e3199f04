"""Run a traffic study: every flow through a network backend, once per CC setting.

One setting = one simulation through the :class:`~netbackend.base.NetworkBackend`
interface (send, advance, collect completions, ``stats()``). Flows are handed to
the backend ``LOOKAHEAD_NS`` ahead of their start, so a packet-level backend runs
in C++ between completions. Several settings (``--cc a,b,c``) run side by side,
each in its own spawned process (ns-3 holds one simulation per process), with the
CC-name parsing and backend probe of ``heterosim compare``.
"""
from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

from heterosim.errors import UserError
from heterosim.results.summary import acceleration_summary
from heterosim.studies.compare import _parse_ccs, run_per_cc
from heterosim.traffic.build import KINDS, TrafficPlan, load_traffic, plan
from heterosim.traffic.config import TrafficScenario
from heterosim.traffic.metrics import IdealFct, SIZE_BINS, fabric_summary, percentiles, slowdown_summary

LOOKAHEAD_NS = 100_000
"""Flows are sent to the backend up to this far ahead of their start (as netbackend.background does)."""

QUEUE_CDF_POINTS = 200
"""Queue-depth quantiles kept per setting for the overlaid queue CDF."""

FCT_COLUMNS = ("id", "kind", "src", "dst", "size_bytes", "start_ns", "fct_ns", "ideal_fct_ns", "slowdown",
               "in_stats")


def simulate(p: TrafficPlan, *, cc: str | None = None, backend: str | None = None) -> dict[str, Any]:
    """One simulation of the plan; returns the summary and the per-flow rows (picklable)."""
    sc = p.scenario
    name = backend or sc.network.backend
    cfg = sc.network.model_copy(update={"backend": name, **({"cc": cc} if cc else {})})
    finish, stats, sim_ns, wall, t_setup = run_flows(p, cfg)
    return summarize(p, cfg, name, finish, stats, sim_ns, wall, t_setup)


def run_flows(p: TrafficPlan, cfg) -> tuple[dict[int, int], Any, int, float, float]:
    """The plan's flows on a backend set up by ``cfg`` (its ``backend`` names which): (flow id -> finish
    ns, the backend's stats, simulated ns, wall s, set-up wall s).  For callers that want the raw
    stats (``benchmarks/bench_ns3_accel.py`` compares acceleration modes on them)."""
    from netbackend.registry import create_backend

    sc = p.scenario
    name = cfg.backend
    t0 = time.perf_counter()
    finish: dict[int, int] = {}
    net = create_backend(name, p.topology, cfg, sc.seed)
    t_setup = time.perf_counter() - t0
    try:
        stop = sc.stop_ns
        it = iter(p.flows)
        nxt = next(it, None)
        while True:
            horizon = net.now_ns + LOOKAHEAD_NS
            while nxt is not None and nxt.start_ns <= horizon:
                net.send(nxt)
                nxt = next(it, None)
            if nxt is None and net.pending() == 0:
                break
            bound = nxt.start_ns if nxt is not None else None
            if stop is not None:
                bound = stop if bound is None else min(bound, stop)
            for c in net.advance(bound):
                finish[c.id] = c.finish_ns
            if stop is not None and net.now_ns >= stop:
                break
        sim_ns = net.now_ns
        stats = net.stats()
    finally:
        net.close()
    return finish, stats, sim_ns, time.perf_counter() - t0, t_setup


def summarize(p: TrafficPlan, cfg, backend: str, finish: dict[int, int], stats, sim_ns: int,
              wall_s: float, setup_wall_s: float = 0.0) -> dict[str, Any]:
    sc, topo = p.scenario, p.topology
    ideal = IdealFct(topo, cfg, backend)
    rows: list[tuple] = []
    stat_rows: list[tuple[int, float]] = []
    by_kind: dict[str, list[float]] = {k: [] for k in KINDS}
    unfinished = 0
    for m in p.flows:
        in_stats = m.start_ns >= sc.warmup_ns
        base = ideal(m.size_bytes, m.src, m.dst)
        f = finish.get(m.id)
        fct = None if f is None else f - m.start_ns
        slow = None if fct is None else fct / base
        rows.append((m.id, p.kinds[m.id], m.src, m.dst, m.size_bytes, m.start_ns, fct, round(base, 3),
                     None if slow is None else round(slow, 6), int(in_stats)))
        if in_stats:
            if slow is None:
                unfinished += 1
            else:
                stat_rows.append((m.size_bytes, slow))
                by_kind[p.kinds[m.id]].append(slow)
    extra = dict(stats.extra or {})
    capacity_bytes = sum(topo.host_rate_gbps[h] for h in topo.hosts) / 8.0 * sc.duration_ns
    offered = {k: 0 for k in KINDS}
    for m in p.flows:
        offered[p.kinds[m.id]] += m.size_bytes
    wl = sc.workload
    target = (wl.poisson.load if wl.poisson else 0.0) + sum(i.load or 0.0 for i in wl.incast)
    hops = extra.get("packet_hops")
    summary = {
        "scenario": sc.name,
        "cc": cfg.cc,
        "backend": backend,
        "fabric": {"hosts": len(topo.hosts), "switches": len(topo.switches), "links": len(topo.links)},
        "duration_ns": sc.duration_ns,
        "warmup_ns": sc.warmup_ns,
        "simulated_ns": sim_ns,
        "flows": {
            "generated": len(p.flows),
            **{k: sum(1 for v in p.kinds.values() if v == k) for k in KINDS},
            "in_stats": len(stat_rows) + unfinished,
            "finished_in_stats": len(stat_rows),
            "unfinished_in_stats": unfinished,
        },
        "offered_load": {"target_poisson_plus_incast": target,
                         **{k: v / capacity_bytes for k, v in offered.items()},
                         "total": sum(offered.values()) / capacity_bytes,
                         "is": "payload bytes of the generated flows / (hosts' total line rate x duration_ns)"},
        "ideal_fct": ("one-way base delay (propagation + switch latency + store-and-forward of the last packet) "
                      "+ (payload + headers) / bottleneck line rate"),
        "slowdown": {**slowdown_summary(stat_rows),
                     "by_kind": {k: percentiles(v) for k, v in by_kind.items() if v}},
        **fabric_summary(extra, stats.link_bytes or {}, topo, sim_ns, sc.warmup_ns),
        "simulation": {"wall_s": wall_s, "setup_wall_s": setup_wall_s, "packet_hops": hops,
                       "packet_hops_per_s": (hops / (wall_s - setup_wall_s) if hops and wall_s > setup_wall_s
                                             else None),
                       "backend_wall_s": extra.get("ns3_wall_s"),
                       "note": "PFC, queue and utilisation figures cover the whole simulated time"},
    }
    acc = acceleration_summary(extra)
    if acc:
        summary["simulation"]["acceleration"] = acc
    samples = sorted(q for t, _, q in extra.get("queue_samples") or [] if t >= sc.warmup_ns)
    qcdf = [samples[min(len(samples) - 1, i * len(samples) // QUEUE_CDF_POINTS)]
            for i in range(QUEUE_CDF_POINTS)] if samples else []
    return {"cc": cfg.cc, "summary": summary, "fct_rows": rows, "_queue_cdf": qcdf}


# ------------------------------------------------------------------ several settings
def _child(payload: tuple) -> dict[str, Any]:
    """Child process: simulate the parent's plan; user errors come back as one line."""
    p, cc, backend = payload
    try:
        return simulate(p, cc=cc, backend=backend)
    except UserError as err:
        return {"cc": cc, "_error": str(err)}


def run_traffic(scenario: TrafficScenario | str | Path, out: str | Path, *, ccs: list[str] | str | None = None,
                jobs: int | None = None, backend: str | None = None,
                overrides: list[str] | None = None) -> list[dict[str, Any]]:
    """Simulate the scenario once per CC setting and write the outputs to ``out`` (atomically).

    Without ``ccs``: the scenario's own ``network.cc``. Returns each setting's summary.
    """
    from netbackend.registry import backend_class

    sc = scenario if isinstance(scenario, TrafficScenario) else load_traffic(scenario, overrides)
    name = backend or sc.network.backend
    backend_class(name)  # unknown backend: one line now, not in a child
    names = _parse_ccs(ccs) if ccs is not None else [sc.network.cc]
    p = plan(sc)  # every input error surfaces here, before any simulation
    if len(names) == 1 and name != "ns3":
        results = [simulate(p, cc=names[0], backend=name)]
    else:
        results = run_per_cc(_child, p, sc.network, names, name, jobs)
    write_outputs(Path(out), results, multi=ccs is not None)
    return [r["summary"] for r in results]


# ------------------------------------------------------------------ outputs
COMPARE_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("flows_in_stats", ("flows", "finished_in_stats")),
    ("unfinished", ("flows", "unfinished_in_stats")),
    ("slowdown_p50", ("slowdown", "all", "p50")),
    ("slowdown_p95", ("slowdown", "all", "p95")),
    ("slowdown_p99", ("slowdown", "all", "p99")),
    *[(f"slowdown_{q}_{b[0]}", ("slowdown", "by_size", i, q)) for i, b in enumerate(SIZE_BINS)
      for q in ("p50", "p95", "p99")],
    ("pfc_paused_fraction", ("pfc", "paused_fraction_overall")),
    ("pfc_paused_fraction_max_port", ("pfc", "paused_fraction_max_port")),
    ("pfc_pause_frames", ("pfc", "pause_frames")),
    ("queue_p99_bytes_hot_ports", ("queue", "sampled_p99_bytes")),
    ("queue_max_bytes", ("queue", "max_bytes")),
    ("ecn_marks", ("ecn_marks",)),
    ("cnps_sent", ("cnps_sent",)),
    ("drops", ("drops",)),
    ("host_uplink_utilisation", ("utilisation", "host_to_switch", "mean")),
    ("fabric_link_utilisation", ("utilisation", "switch_to_switch", "mean")),
    ("packet_hops", ("simulation", "packet_hops")),
    ("packet_hops_per_s", ("simulation", "packet_hops_per_s")),
    ("wall_s", ("simulation", "wall_s")),
)


def _get(d: Any, path: tuple) -> Any:
    for k in path:
        if d is None:
            return None
        d = d[k] if isinstance(d, list) else d.get(k)
    return d


def comparison_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"cc": r["cc"], **{col: _get(r["summary"], path) for col, path in COMPARE_COLUMNS}} for r in results]


def write_fct_csv(path: Path, rows: list[tuple]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FCT_COLUMNS)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])


def write_outputs(out: Path, results: list[dict[str, Any]], *, multi: bool) -> None:
    """Single setting: fct.csv, summary.json, plots in ``out``. Several: one folder per setting
    plus comparison.md/.csv/.json and overlaid plots."""
    from heterosim.results.tables import format_cell
    from heterosim.results.writer import atomic_dir, write_json
    from heterosim.traffic.plots import plot_queue_cdf, plot_slowdown_vs_size

    with atomic_dir(out) as tmp:
        for r in results:
            d = tmp / r["cc"] if multi else tmp
            d.mkdir(exist_ok=True)
            write_fct_csv(d / "fct.csv", r["fct_rows"])
            write_json(d / "summary.json", r["summary"])
            if not multi:
                plot_slowdown_vs_size(d / "slowdown_vs_size.png", results)
                plot_queue_cdf(d / "queue_cdf.png", results)
        if multi:
            rows = comparison_rows(results)
            cols = ["cc"] + [c for c, _ in COMPARE_COLUMNS if any(r.get(c) is not None for r in rows)]
            with open(tmp / "comparison.csv", "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(cols)
                for r in rows:
                    w.writerow(["" if r.get(c) is None else r.get(c) for c in cols])
            s0 = results[0]["summary"]
            md = [f"# Traffic study: {s0['scenario']} ({s0['backend']} backend)", "",
                  f"{s0['fabric']['hosts']} hosts, {s0['fabric']['switches']} switches; flows arriving in "
                  f"{s0['duration_ns'] / 1e6:g} ms, warm-up {s0['warmup_ns'] / 1e6:g} ms excluded; "
                  f"simulated {max(r['summary']['simulated_ns'] for r in results) / 1e6:g} ms.", "",
                  "| metric | " + " | ".join(r["cc"] for r in rows) + " |",
                  "|---|" + "---|" * len(rows)]
            for c in cols[1:]:
                md.append(f"| {c} | " + " | ".join(format_cell(r.get(c)) for r in rows) + " |")
            md += ["", "Slowdown = FCT / ideal FCT; ideal = " + s0["ideal_fct"] + ".",
                   "Size bins in decimal bytes (1KB = 1000 B). PFC paused fraction = paused time summed over "
                   "ports / (ports x simulated time); queue p99 over samples of the hottest ports after the "
                   "warm-up."]
            if s0["backend"] == "flow":
                md.append("The flow backend does not model congestion control: settings differ only by name.")
            (tmp / "comparison.md").write_text("\n".join(md) + "\n")
            write_json(tmp / "comparison.json", rows)
            plot_slowdown_vs_size(tmp / "slowdown_vs_size.png", results)
            plot_queue_cdf(tmp / "queue_cdf.png", results)
