"""summary.json: the numbers a user compares (Megatron-LM's definitions)."""
from __future__ import annotations

from statistics import mean
from typing import Any

from heterosim.results.breakdown import BUCKETS, breakdown


def iteration_figures(scenario, system, ir, T_ns: int) -> dict[str, Any]:
    """What follows from the iteration time alone (Megatron-LM's definitions): model FLOPs and tokens per
    iteration over the time, MFU against the GPUs' mean peak at the scenario's precision."""
    from heterosim.hardware import get_device

    T = T_ns / 1e9
    world = ir.world_size
    model_flops = float(ir.meta.get("model_flops_per_iteration", 0.0))
    tokens = int(ir.meta.get("tokens_per_iteration", scenario.training.global_batch_size * scenario.training.seq_length))
    peak = mean(get_device(g.device).peak_flops(scenario.training.precision) for g in system.gpus)
    tflops = model_flops / T / world / 1e12 if T else 0.0
    return {"iteration_time_s": T, "iteration_time_ns": T_ns, "model_tflops_per_gpu": tflops,
            "mfu": tflops * 1e12 / peak if peak else 0.0, "tokens_per_s": tokens / T if T else 0.0,
            "gpus": world, "model_flops_per_iteration": model_flops}


def make_summary(scenario, system, ir, sim, *, backend: str, wall_s: float,
                 warnings: list[str] | None = None) -> dict[str, Any]:
    """``warnings``: settings the run ignored, one line each (heterosim.pipeline.config_warnings)."""
    T_ns = sim.iteration_time_ns
    overall, per_lane = breakdown(sim, ir)
    per_rank = []
    for lane, b in zip(sim.lanes, per_lane):
        for r in lane.ranks:
            per_rank.append({"rank": r, "device": lane.device, "stage": ir.program_of(r).stage,
                             **{k: v / 1e9 for k, v in b.items() if not k.startswith("detail_")}})
    per_rank.sort(key=lambda x: x["rank"])
    exposed = {k[len("exposed_"):]: overall[k] for k in BUCKETS if k.startswith("exposed_")}
    # sharded data parallelism's own collectives, a part of the DP figure (results/breakdown.py DP_DETAIL)
    dp_detail = {k[len("detail_"):]: v for k, v in sorted(overall.items()) if k.startswith("detail_")}
    # counted during the run: message records may be partial (or absent) and stand for their copies
    net_bytes = sim.net_bytes
    inter_share = sim.inter_node_busy_ns / T_ns if T_ns else 0.0
    return {
        "scenario": scenario.name,
        "backend": backend,
        "warnings": list(warnings or []),
        **iteration_figures(scenario, system, ir, T_ns),
        "breakdown": {
            "compute": overall["compute"],
            "exposed_comm": exposed,
            "exposed_comm_total": sum(exposed.values()),
            **({"exposed_dp_detail": dp_detail} if dp_detail else {}),
            "bubble": overall["bubble"],
            "idle": overall["idle"],
            "unit": "fraction of iteration time, averaged over GPUs",
        },
        "inter_node_comm_share": inter_share,
        "network": {"bytes_inter_node": net_bytes, "messages": sim.all_messages},
        "per_rank": per_rank,
        "simulation": _simulation_stats(sim, wall_s),
        "approximations": approximations(scenario, sim, backend),
    }


HASHED_COPIES_BOUNDS = {
    # worst |reduced - full| / full of the iteration time, over issue 40's case and 100 random small fabrics and
    # plans (`benchmarks/bench_hash_agreement.py --small 100`) and the GPT-3 175B / short cases
    # (`bench_hash_agreement.py --cases ...`); the table: docs/symmetry-reduction.md, "Which mode is the default"
    "ops": 0.0466,
    "ops_and_replicas": 0.0466,
    "ops_and_shifted_replicas": 0.0466,
}
"""simulation.hashed_copies mode -> measured bound on the iteration time (relative), for the label."""

FLOW_LEVEL_BOUND = 0.0133
"""Flow-level (max-min fair) rates against ns-3 packet level, iteration time: GPT-3 175B b64 on 128 H100 +0.08%
(plain packet level), H1/H2-LLaMA-65B -1.32% / -1.33%, H3/H4-GPT-3 175B -0.005% / -0.10% (accelerated packet
level); `benchmarks/bench_ns3_training.py`, docs/symmetry-reduction.md "What a run labels as approximate"."""

ACCELERATION_BOUNDS = {
    # iteration time, accelerated against plain packet level on quickstart, H4-LLaMA-65B and GPT-3 175B b64
    # (`benchmarks/bench_ns3_accel.py --h4 --gpt3 [--collisions fluid]`, docs/packet-level-acceleration.md,
    # "Issue 12's targets on one tree")
    "packet": 0.0047,
    "fluid": 0.0013,
}


def approximations(scenario, sim, backend: str) -> list[dict]:
    """The approximations this run's result comes from, each with its measured bound (relative, on the iteration
    time) and what measured it; empty for an exact run (packet level, nothing reduced approximately)."""
    out = []
    if backend == "flow":
        out.append({"name": "backend=flow",
                    "what": "flow-level max-min fair rates instead of packets (no queues, ECN, PFC or CC dynamics)",
                    "bound_rel": FLOW_LEVEL_BOUND, "measured_by": "benchmarks/bench_ns3_training.py",
                    "measured_on": "5 training scenarios (128 GPUs) against ns-3 packet level",
                    "doc": "docs/symmetry-reduction.md"})
    if getattr(getattr(scenario, "network", None), "ecmp", None) == "adaptive":
        out.append({"name": "ecmp=adaptive",
                    "what": "adaptive routing as its ideal: every flow spread evenly over interchangeable next hops "
                            "(netbackend.routing.sprayed); no packet-level model sprays, so no bound is measured",
                    "bound_rel": None, "measured_by": None, "measured_on": None, "doc": "docs/network-model.md"})
    sym = getattr(sim, "symmetry", None) or {}
    mode = sym.get("hashed_copies")
    if sym.get("approximate") and mode in HASHED_COPIES_BOUNDS:
        out.append({"name": f"hashed_copies={mode}",
                    "what": "copies whose paths differ only in the links the ECMP hash chose are merged "
                            "(simulation.hashed_copies; exact: every copy its own flow)",
                    "bound_rel": HASHED_COPIES_BOUNDS[mode], "measured_by": "benchmarks/bench_hash_agreement.py",
                    "measured_on": "iteration time against the full run (symmetry off), 103 small fabrics and plans "
                                   "and GPT-3 175B at 256-4,096 GPUs",
                    "doc": "docs/symmetry-reduction.md"})
    acc = _acceleration_used(scenario, sim, backend)
    if acc is not None:
        out.append({"name": f"acceleration=auto (collisions: {acc})",
                    "what": "flows alone on their path computed in closed form"
                            + (", colliding flows by the fluid model (no PFC)" if acc == "fluid" else ""),
                    "bound_rel": ACCELERATION_BOUNDS[acc], "measured_by": "benchmarks/bench_ns3_accel.py",
                    "measured_on": "3 training scenarios against plain packet level (mode: off)",
                    "doc": "docs/packet-level-acceleration.md"})
    return out


def _acceleration_used(scenario, sim, backend: str) -> str | None:
    """The collision mode of ns-3's acceleration where it computed some bytes other than packet by packet; from the
    backend's report where there is one, else from the settings (a cluster job's view carries no report)."""
    if backend != "ns3":
        return None
    cfg = getattr(getattr(getattr(scenario, "network", None), "acceleration", None), "collisions", None)
    mode = getattr(getattr(getattr(scenario, "network", None), "acceleration", None), "mode", "off")
    extra = getattr(getattr(sim, "net_stats", None), "extra", None) or {}
    acc = extra.get("acceleration")
    if acc:
        if acc.get("fallback_packet_level") or not (acc.get("bytes_closed_form") or acc.get("bytes_fluid")
                                                    or acc.get("bytes_fast_forwarded") or acc.get("bytes_replayed")):
            return None
        return "fluid" if acc.get("bytes_fluid") else "packet"
    return (cfg or "packet") if mode == "auto" else None


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
