"""Flow completion times and fabric statistics of one traffic run.

Ideal FCT follows the HPCC paper's definition of a flow's standalone FCT (base
RTT of its path + bytes with headers / line rate; ../shared/network-reference.md,
"Published evaluation setups"), with one adaptation: HeteroSim's backends
complete a message when its last byte reaches the receiver, not when the
sender sees the last ACK, so the base delay is the path's *one-way* base delay:
propagation of every link, the switch pipeline latency per switch (where the
backend models one) and store-and-forward of the last packet on every link
after the first. A flow alone on an idle fabric therefore has slowdown 1.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import networkx as nx

from heterosim.studies.compare import _pct, wire_bytes
from netbackend.config import NetworkConfig
from netbackend.topo import NetTopology

SIZE_BINS: tuple[tuple[str, int, float], ...] = (
    ("<=1KB", 0, 1_000),
    ("1KB-10KB", 1_000, 10_000),
    ("10KB-100KB", 10_000, 100_000),
    ("100KB-1MB", 100_000, 1_000_000),
    (">=1MB", 1_000_000, math.inf),
)
"""Flow-size bins in decimal units like the flow-size CDFs: lo < size <= hi, except that the first
bin starts at 0 inclusive and 1 MB belongs to ">=1MB" (the benchmark's two ends: <= 1 KB, >= 1 MB)."""

QUANTILE_BINS = 20
"""HPCC paper: slowdown per flow-size bin of 5 % of the flows each."""


def in_bin(size: int, lo: float, hi: float, name: str) -> bool:
    if name == ">=1MB":
        return size >= lo
    return (size > lo or lo == 0) and (size <= hi if hi != 1_000_000 else size < hi)


def switch_latency_modelled(backend: str) -> bool:
    """Does this backend add ``per_hop_latency_ns`` per switch? (A backend class may say so itself.)"""
    from netbackend.registry import backend_class

    cls = backend_class(backend)
    return bool(getattr(cls, "models_switch_latency", True))  # flow and ns3 both do


class IdealFct:
    """Standalone FCT per (size, src, dst); paths cached per host pair."""

    def __init__(self, topology: NetTopology, cfg: NetworkConfig, backend: str,
                 switch_latency: bool | None = None):
        self.topo, self.cfg, self.backend = topology, cfg, backend
        self.switch_latency_ns = cfg.per_hop_latency_ns if (
            switch_latency if switch_latency is not None else switch_latency_modelled(backend)) else 0
        self._paths: dict[tuple[str, str], list[tuple[float, int]]] = {}

    def hops(self, src: str, dst: str) -> list[tuple[float, int]]:
        """[(rate_gbps, delay_ns)] of every link on a shortest path (one BFS per source host)."""
        key = (src, dst)
        p = self._paths.get(key)
        if p is None:
            g = self.topo.graph
            for d, nodes in nx.single_source_shortest_path(g, src).items():
                if self.topo.is_host(d):
                    self._paths[(src, d)] = [(g.edges[a, b]["rate_gbps"], g.edges[a, b]["delay_ns"])
                                             for a, b in zip(nodes, nodes[1:])]
            p = self._paths[key]
        return p

    def __call__(self, size_bytes: int, src: str, dst: str) -> float:
        return ideal_fct_ns(size_bytes, self.hops(src, dst), self.cfg.mtu_bytes,
                            wire_bytes(size_bytes, self.cfg, self.backend) - size_bytes,
                            self.switch_latency_ns)


def ideal_fct_ns(size_bytes: int, hops: Sequence[tuple[float, int]], mtu_bytes: int, header_total_bytes: int,
                 switch_latency_ns: int = 0) -> float:
    """Base one-way delay + (payload + headers) / bottleneck line rate (rates in Gb/s = bits/ns)."""
    if not hops:
        return 0.0
    n = max(1, -(-size_bytes // mtu_bytes))
    hdr = header_total_bytes / n
    last_bits = (size_bytes - (n - 1) * mtu_bytes + hdr) * 8
    bottleneck = min(r for r, _ in hops)
    base = sum(d for _, d in hops) + (len(hops) - 1) * switch_latency_ns + sum(last_bits / r for r, _ in hops[1:])
    return base + (size_bytes + header_total_bytes) * 8 / bottleneck


# ---------------------------------------------------------------- summaries
def percentiles(values: list[float]) -> dict[str, Any]:
    v = sorted(values)
    return {"count": len(v), "p50": _pct(v, 0.50), "p95": _pct(v, 0.95), "p99": _pct(v, 0.99),
            "max": v[-1] if v else None}


def slowdown_summary(rows: list[tuple[int, float]]) -> dict[str, Any]:
    """``rows``: (size_bytes, slowdown) of the flows in the statistics."""
    out: dict[str, Any] = {"all": percentiles([s for _, s in rows])}
    out["by_size"] = [{"bin": name, "lo_bytes": lo, "hi_bytes": None if hi == math.inf else hi,
                       **percentiles([s for n, s in rows if in_bin(n, lo, hi, name)])}
                      for name, lo, hi in SIZE_BINS]
    out["by_size_quantile"] = quantile_bins(rows)
    return out


def quantile_bins(rows: list[tuple[int, float]], bins: int = QUANTILE_BINS) -> list[dict[str, Any]]:
    """Flows sorted by size, cut into ``bins`` groups of equal count (HPCC paper's figures)."""
    rows = sorted(rows)
    if not rows:
        return []
    out = []
    for b in range(bins):
        part = rows[b * len(rows) // bins:(b + 1) * len(rows) // bins]
        if part:
            out.append({"size_lo_bytes": part[0][0], "size_hi_bytes": part[-1][0],
                        **percentiles([s for _, s in part])})
    return out


def fabric_summary(extra: dict[str, Any], link_bytes: dict[tuple[str, str], int], topo: NetTopology,
                   sim_ns: int, warmup_ns: int) -> dict[str, Any]:
    """PFC, queues, ECN/CNP/drops and utilisation over the whole simulated time ``sim_ns``.

    None where the backend does not measure a figure (the flow backend has no queues).
    """
    n_ports = 2 * len(topo.links)
    paused = extra.get("pfc_paused_ns")
    pfc: dict[str, Any] = {"paused_fraction_overall": None, "paused_fraction_max_port": None,
                           "paused_fraction_per_port": None, "pause_frames": extra.get("pfc_pause_frames_total")}
    if isinstance(paused, dict) and sim_ns > 0:
        per = {p: v / sim_ns for p, v in sorted(paused.items(), key=lambda kv: -kv[1])}
        pfc.update(paused_fraction_overall=sum(paused.values()) / (n_ports * sim_ns),
                   paused_fraction_max_port=max(per.values(), default=0.0), paused_fraction_per_port=per)
    queue: dict[str, Any] = {"sampled_ports": extra.get("hot_ports"), "max_bytes": None, "mean_bytes_all_ports": None}
    samples = [q for t, _, q in extra.get("queue_samples") or [] if t >= warmup_ns]
    if extra.get("hot_ports") is not None:
        queue.update({f"sampled_{k}_bytes" if k != "count" else "samples": v
                      for k, v in percentiles(samples).items()})
    if isinstance(extra.get("max_queue_bytes"), dict):
        queue["max_bytes"] = max(extra["max_queue_bytes"].values(), default=0)
    if isinstance(extra.get("mean_queue_bytes"), dict) and n_ports:
        queue["mean_bytes_all_ports"] = sum(extra["mean_queue_bytes"].values()) / n_ports
    return {
        "pfc": pfc,
        "queue": queue,
        "ecn_marks": extra.get("ecn_marks"),
        "cnps_sent": extra.get("cnps_sent"),
        "drops": extra.get("drops"),
        "utilisation": utilisation(link_bytes, topo, sim_ns),
    }


def utilisation(link_bytes: dict[tuple[str, str], int], topo: NetTopology, sim_ns: int) -> dict[str, Any]:
    """Mean and max of bytes x 8 / (rate x time) per directed link, by link class."""
    rate = {}
    for link in topo.links:
        rate[(link.a, link.b)] = rate[(link.b, link.a)] = link.rate_gbps
    classes: dict[str, list[float]] = {"host_to_switch": [], "switch_to_host": [], "switch_to_switch": []}
    for (a, b), r in rate.items():
        u = link_bytes.get((a, b), 0) * 8 / (r * sim_ns) if sim_ns > 0 else 0.0
        cls = "host_to_switch" if topo.is_host(a) else "switch_to_host" if topo.is_host(b) else "switch_to_switch"
        classes[cls].append(u)
    if not link_bytes:
        return {c: None for c in classes}
    return {c: ({"mean": sum(v) / len(v), "max": max(v)} if v else None) for c, v in classes.items()}
