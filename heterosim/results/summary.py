"""summary.json: the numbers a user compares (Megatron-LM's definitions)."""
from __future__ import annotations

from statistics import mean
from typing import Any

from heterosim.results.breakdown import BUCKETS, breakdown


def make_summary(scenario, system, ir, sim, *, backend: str, wall_s: float,
                 warnings: list[str] | None = None) -> dict[str, Any]:
    """``warnings``: settings the run ignored, one line each (heterosim.pipeline.config_warnings)."""
    from heterosim.hardware import get_device

    T_ns = sim.iteration_time_ns
    T = T_ns / 1e9
    world = ir.world_size
    precision = scenario.training.precision
    model_flops = float(ir.meta.get("model_flops_per_iteration", 0.0))
    tokens = int(ir.meta.get("tokens_per_iteration", scenario.training.global_batch_size * scenario.training.seq_length))
    peak = mean(get_device(g.device).peak_flops(precision) for g in system.gpus)
    tflops = model_flops / T / world / 1e12 if T else 0.0
    overall, per_lane = breakdown(sim, ir)
    per_rank = []
    for lane, b in zip(sim.lanes, per_lane):
        for r in lane.ranks:
            per_rank.append({"rank": r, "device": lane.device, "stage": ir.program_of(r).stage,
                             **{k: v / 1e9 for k, v in b.items()}})
    per_rank.sort(key=lambda x: x["rank"])
    exposed = {k[len("exposed_"):]: overall[k] for k in BUCKETS if k.startswith("exposed_")}
    # counted during the run: message records may be partial (or absent) and stand for their copies
    net_bytes = sim.net_bytes
    inter_share = sim.inter_node_busy_ns / T_ns if T_ns else 0.0
    return {
        "scenario": scenario.name,
        "backend": backend,
        "warnings": list(warnings or []),
        "iteration_time_s": T,
        "iteration_time_ns": T_ns,
        "model_tflops_per_gpu": tflops,
        "mfu": tflops * 1e12 / peak if peak else 0.0,
        "tokens_per_s": tokens / T if T else 0.0,
        "gpus": world,
        "model_flops_per_iteration": model_flops,
        "breakdown": {
            "compute": overall["compute"],
            "exposed_comm": exposed,
            "exposed_comm_total": sum(exposed.values()),
            "bubble": overall["bubble"],
            "idle": overall["idle"],
            "unit": "fraction of iteration time, averaged over GPUs",
        },
        "inter_node_comm_share": inter_share,
        "network": {"bytes_inter_node": net_bytes, "messages": sim.all_messages},
        "per_rank": per_rank,
        "simulation": _simulation_stats(sim, wall_s),
    }


def _simulation_stats(sim, wall_s: float) -> dict:
    out = {"events": sim.events, "wall_s": wall_s, "events_per_s": sim.events / wall_s if wall_s else 0.0}
    if getattr(sim, "symmetry", None):
        out["symmetry"] = sim.symmetry
    extra = getattr(sim.net_stats, "extra", None) or {}
    if "ns3_wall_s" in extra and wall_s:
        # how much of the run was spent outside the packet simulator (coordinator + Python);
        # building the fabric (and loading the module) counts as ns-3 time
        inside = extra["ns3_wall_s"] + extra.get("setup_wall_s", 0.0)
        out["ns3_wall_s"] = inside
        out["outside_ns3_fraction"] = max(0.0, 1.0 - inside / wall_s)
    acc = acceleration_summary(extra)
    if acc:
        out["acceleration"] = acc
    return out


def acceleration_summary(extra: dict) -> dict | None:
    """What a summary keeps of the ns-3 backend's ``acceleration`` report (network.acceleration auto,
    netbackend/ns3/accel.py): the bytes each way went, and where the fluid model's PFC blind spot may
    matter (``fluid_pfc``); None without one.  Shared by the training and traffic summaries."""
    acc = extra.get("acceleration")
    if not acc:
        return None
    out = {k: acc[k] for k in ("bytes_packet_level", "bytes_closed_form", "bytes_fast_forwarded", "bytes_replayed",
                               "partitions_closed_form", "handbacks", "memo_hits", "fallback_packet_level", "note")}
    for k in ("bytes_migrated", "migrations", "messages_rate_limited", "not_qualified", "bytes_fluid", "fluid_pfc"):
        if k in acc:
            out[k] = acc[k]
    return out


def busy_ns(msgs) -> int:
    """Time during which some of these messages were in flight (union of their intervals)."""
    busy, cur0, cur1 = 0, None, None
    for a, b in sorted((m.start_ns, m.end_ns) for m in msgs):
        if cur1 is None or a > cur1:
            if cur1 is not None:
                busy += cur1 - cur0
            cur0, cur1 = a, b
        else:
            cur1 = max(cur1, b)
    if cur1 is not None:
        busy += cur1 - cur0
    return busy


def _inter_node_share(sim) -> float:
    """Fraction of iteration time during which some inter-node transfer was in flight."""
    busy = busy_ns(m for m in sim.messages if m.link == "net" and m.end_ns >= 0)
    return busy / sim.iteration_time_ns if sim.iteration_time_ns else 0.0
