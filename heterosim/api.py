"""The library API the CLI is a thin layer over.

    from heterosim.api import load, run
    result = run(load("scenarios/quickstart.yaml"), out_dir="results/qs")
    print(result.summary["iteration_time_s"])
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from heterosim.config.loader import load_scenario
from heterosim.config.scenario import Scenario
from heterosim.errors import UserError
from heterosim.workload.ir import IR


@dataclass
class Prepared:
    """A validated scenario with its hardware and compiled workload."""

    scenario: Scenario
    system: Any
    ir: IR
    compute: Any
    file: str | None = None


@dataclass
class RunResult:
    prepared: Prepared
    sim: Any
    summary: dict[str, Any]
    backend: str
    out_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def load(path: str | Path, overrides: list[str] | dict | None = None) -> Scenario:
    return load_scenario(path, overrides)


def prepare(scenario: Scenario, *, measurements: str | None = None) -> Prepared:
    """Build the system, check the plan against it, compile the IR."""
    from heterosim.hardware import ComputeModel
    from heterosim.workload.compiler import compile_workload
    from heterosim.workload.memory import check_plan
    from topologies import build_system

    file = getattr(scenario, "_source_file", None)
    system = build_system(scenario.cluster, scenario.fabric, file=file)
    rank_devices = [g.device for g in system.gpus]
    check_plan(scenario, system.num_gpus, rank_devices, file, rank_groups=[g.group for g in system.gpus])
    ir = compile_workload(scenario, system.num_gpus, rank_devices)
    if scenario.parallelism.stage_tp is not None:  # uneven TP: say so before simulating (uniform TP: coordinator)
        from heterosim.workload.groups import check_tp_in_nodes

        check_tp_in_nodes(ir.groups["tp"], [g.node for g in system.gpus], scenario.parallelism.stage_tp, file)
    return Prepared(scenario, system, ir, ComputeModel(measurements), file)


def intra_config(scenario: Scenario):
    """NVLink/PCIe flows carry no RoCE headers and cross no Ethernet switch pipeline."""
    return scenario.network.model_copy(update={"header_bytes": 0, "per_hop_latency_ns": 0, "backend": "flow"})


def simulate(prepared: Prepared, *, backend: str | None = None,
             progress: Callable[[int, int], None] | None = None, record_messages: bool | int = True,
             symmetry: bool | None = None) -> RunResult:
    """Run one iteration (``training.iterations`` times, reporting the last).

    ``record_messages``: keep a record per message (True), none (False), or the first N (an int:
    what a trace shows). ``symmetry``: None = ``simulation.symmetry`` (off with background traffic)."""
    from heterosim.results.summary import make_summary

    sc = prepared.scenario
    name = backend or sc.network.backend
    net_cfg = sc.network.model_copy(update={"backend": name})
    sim = None
    t0 = time.monotonic()
    # The simulation allocates millions of small objects and frees few: the cyclic collector would walk
    # the whole heap again and again (a third of the run at 1,000+ GPUs). Nothing here makes cycles
    # that must be freed during the run; collection resumes afterwards.
    gc_was = gc.isenabled()
    gc.disable()
    try:
        sim = _simulate_iterations(prepared, sc, name, net_cfg, progress, record_messages, symmetry)
        wall = time.monotonic() - t0
        summary = make_summary(sc, prepared.system, prepared.ir, sim, backend=name, wall_s=wall)
    finally:
        if gc_was:
            gc.enable()
    return RunResult(prepared, sim, summary, name)


def _simulate_iterations(prepared, sc, name, net_cfg, progress, record_messages, symmetry):
    from heterosim.sim.coordinator import Coordinator
    from heterosim.sim.intra import effective_intra
    from netbackend.registry import create_backend

    sim = None
    for it in range(sc.training.iterations):
        net = create_backend(name, prepared.system.net, net_cfg, sc.seed + it)
        if sc.network.background is not None:
            from netbackend.background import with_background

            try:
                net = with_background(net, sc.network.background, seed=sc.seed + it)
            except BaseException:
                net.close()
                raise
        intra = create_backend("flow", effective_intra(prepared.system.intra), intra_config(sc), sc.seed + it)
        try:
            coord = Coordinator(prepared.ir, prepared.system, prepared.compute, net, intra,
                                precision=sc.training.precision, comm_options=sc.comm.model_dump(),
                                progress=progress, record_messages=bool(record_messages),
                                message_limit=None if isinstance(record_messages, bool) else record_messages,
                                symmetry=_symmetry(sc, name) if symmetry is None else symmetry)
            sim = coord.run(wall_limit_s=sc.network.wall_limit_s)
        finally:
            net.close()
            intra.close()
    return sim


def _symmetry(sc: Scenario, backend: str) -> bool:
    """Symmetry reduction (heterosim/sim/symmetry.py) unless asked off. Flow backend only: its copies of a
    flow provably share one max-min rate; packet-level copies do not (DCQCN is not perfectly fair), and
    background traffic is not symmetric."""
    sim = getattr(sc, "simulation", None)
    return (sim is None or sim.symmetry) and sc.network.background is None and backend == "flow"


def write_results(result: RunResult, out_dir: str | Path) -> Path:
    """summary.json, trace.json, network.json, plots and the tables asked for (``output.tables``), atomically."""
    from heterosim.results import plots
    from heterosim.results.tables import table_format, write_messages_table, write_ops_table
    from heterosim.results.trace import write_trace
    from heterosim.results.writer import atomic_dir, write_json

    sc = result.prepared.scenario
    out = Path(out_dir)
    fmt = sc.output.table_format
    if sc.output.tables != "summary":
        table_format(fmt, 0, result.prepared.file)  # a missing pyarrow says so before anything is written
    with atomic_dir(out) as tmp:
        write_json(tmp / "summary.json", result.summary)
        if sc.output.trace:
            write_trace(tmp / "trace.json", result.sim, result.prepared.ir)
        if sc.output.tables in ("ops", "all"):
            write_ops_table(tmp, result.sim, result.prepared.ir, fmt)
        if sc.output.tables == "all":
            write_messages_table(tmp, result.sim, fmt)
        stats = result.sim.net_stats
        if stats is not None:
            write_json(tmp / "network.json", {"messages": stats.messages, "bytes_delivered": stats.bytes_delivered,
                                              **{k: v for k, v in stats.extra.items()}})
        if sc.output.plots:
            plots.plot_timeline(tmp / "timeline.png", result.sim, result.prepared.ir)
            plots.plot_breakdown(tmp / "breakdown.png", result.summary)
            try:
                from heterosim.results.netplots import plot_network
            except ImportError:
                plot_network = None
            if plot_network is not None and stats is not None:
                plot_network(tmp, stats, message_bytes={m.id: m.size_bytes for m in result.sim.messages
                                                        if m.link == "net"})
    result.out_dir = out
    return out


def run(scenario: Scenario | str | Path, *, out_dir: str | Path | None = None, backend: str | None = None,
        overrides: list[str] | None = None, progress=None) -> RunResult:
    """Load (if a path), prepare, simulate and (if out_dir) write results."""
    if not isinstance(scenario, Scenario):
        scenario = load(scenario, overrides)
    if scenario.output.tables != "summary":
        from heterosim.results.tables import table_format

        table_format(scenario.output.table_format, 0, getattr(scenario, "_source_file", None))  # before simulating
    prepared = prepare(scenario)
    result = simulate(prepared, backend=backend, progress=progress, record_messages=messages_to_record(scenario))
    if out_dir is not None:
        write_results(result, out_dir)
    return result


def messages_to_record(scenario: Scenario) -> bool | int:
    """Every message for the message table; the first ones for a trace (it shows at most that many); else none."""
    from heterosim.results.trace import MAX_TRACE_MESSAGES

    if scenario.output.tables == "all":
        return True
    return MAX_TRACE_MESSAGES if scenario.output.trace else False


def default_out_dir(scenario: Scenario) -> Path:
    return Path(scenario.output.dir or f"results/{scenario.name}")


__all__ = ["load", "prepare", "simulate", "run", "write_results", "Prepared", "RunResult", "UserError"]
