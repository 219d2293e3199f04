"""One training job from scenario to results: load, prepare (plan + compile), check, simulate, write.

The public face is :mod:`heterosim.api`, which re-exports these and adds the cluster (several jobs)
entry points. Layers that run single jobs themselves (cluster runs, the planner, sweeps) import this
module, not ``heterosim.api``, so that ``api`` stays the top of the import graph (no cycle through
``heterosim.cluster``).
"""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from heterosim.config.loader import load_scenario
from heterosim.config.scenario import Scenario
from heterosim.errors import UserError
from heterosim.workload.ir import IR

if TYPE_CHECKING:
    from heterosim.budget import WorkEstimate


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


@contextmanager
def _gc_paused():
    """The cyclic collector off for a phase that allocates hundreds of thousands of objects and frees few
    (compiling, simulating, writing results): it would walk the growing heap again and again (a third of a
    1,000-GPU run; ~0.5 s of its compile and of its write). Nothing there makes cycles that must be freed
    during the phase; collection resumes afterwards (as it was).

    What the phase made then goes to the oldest generation without a walk (``gc.freeze`` and ``unfreeze``
    relink lists; not when the process froze objects of its own): the young collections that follow would
    otherwise walk all of it only to keep it (0.28 s of a 1,024-GPU run, measured with ``gc.callbacks``).
    Its few garbage cycles wait for a full collection, run every ``_FULL_EVERY`` phases so that a process
    running many simulations (sweeps, the planner) does not pile them up."""
    global _phases
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
                _phases += 1
                if _phases % _FULL_EVERY == 0:
                    gc.collect()
            gc.enable()


_FULL_EVERY = 8
"""Phases of ``_gc_paused`` between its full collections: one ``heterosim run`` has three (compile,
simulate, write), so a single run never pays one; a sweep pays one every few runs, and the garbage
cycles left waiting are those of at most eight phases (~12k objects after a 1,024-GPU simulation)."""
_phases = 0


def with_overrides(scenario: Scenario, overrides: list[str] | dict | None) -> Scenario:
    """The scenario with ``--set``-style overrides applied and everything re-validated."""
    if not overrides:
        return scenario
    from heterosim.config.frameworks import without_preset_values
    from heterosim.config.loader import scenario_from_dict

    file = getattr(scenario, "_source_file", None) or "<scenario>"
    base = Path(file).parent if file and not file.startswith("<") else None
    # the framework preset's values go back to being defaults (an override may name another framework)
    data = without_preset_values(scenario.model_dump(exclude_unset=False), getattr(scenario, "_framework_fields", {}))
    return scenario_from_dict(data, file=file, base=base, overrides=overrides)


def prepare(scenario: Scenario, *, measurements: str | None = None, work_budget: float | None = None,
            system=None, compute=None) -> Prepared:
    """Check the scenario cheapest first, then build the system and compile the IR.

    Order: GPUs from the node catalog (nothing built), the plan's divisibility rules, the work the
    compiler would do (budget), then the system, memory fit, precision support, the IR. ``system`` and
    ``compute``: already built for this scenario's cluster + fabric and hardware (the planner shares them
    across candidates)."""
    file = getattr(scenario, "_source_file", None)
    if scenario.workload is not None:
        return _prepare_recorded(scenario, file, measurements)
    with _gc_paused():
        return _prepare(scenario, file, measurements, work_budget, system, compute)


def _prepare(scenario: Scenario, file, measurements, work_budget, system, compute) -> Prepared:
    from heterosim import budget
    from heterosim.workload.compiler import compile_workload
    from heterosim.workload.memory import check_plan
    from heterosim.workload.plan import resolve_plan
    from topologies import build_system
    from topologies.build import cluster_gpus

    try:
        world = cluster_gpus(scenario.cluster, file)
        plan = resolve_plan(scenario, world, file)
        limit = budget.work_budget(work_budget)
        budget.check(budget.estimate_before_compile(scenario, plan, [plan.dp * plan.cp] * plan.pp), limit, file,
                     "compiling this scenario")
        system = system or build_system(scenario.cluster, scenario.fabric, file=file)
        rank_devices = [g.device for g in system.gpus]
        check_plan(scenario, system.num_gpus, rank_devices, file, rank_groups=[g.group for g in system.gpus])
        _check_precision(scenario, system, file)
        ir = compile_workload(scenario, system.num_gpus, rank_devices)
        if scenario.parallelism.stage_tp is not None:  # uneven TP: say so before simulating (uniform TP: coordinator)
            from heterosim.workload.groups import check_tp_in_nodes

            check_tp_in_nodes(ir.groups["tp"], [g.node for g in system.gpus], scenario.parallelism.stage_tp, file)
        compute = compute or compute_model(scenario, measurements)
    except UserError as err:
        raise err.with_file(file) if file else err
    return Prepared(scenario, system, ir, compute, file)


def _prepare_recorded(scenario: Scenario, file: str | None, measurements: str | None) -> Prepared:
    """A scenario whose workload is a folder of Chakra ET files (``workload.chakra``, relative to the file)."""
    from heterosim.chakra.importer import import_workload
    from topologies import build_system

    wl = scenario.workload
    folder = Path(wl.chakra).expanduser()
    if not folder.is_absolute() and file and not file.startswith("<"):
        folder = Path(file).parent / folder
    try:
        from heterosim.hardware import get_device

        system = build_system(scenario.cluster, scenario.fabric, file=file)
        compute = compute_model(scenario, measurements)
        device, prec = get_device(system.gpus[0].device), scenario.training.precision
        ir = import_workload(folder, system, retime=wl.timing == "compute_model", file=file,
                             time_op=lambda op: compute.op_time_ns(op, device, prec), options=wl)
    except UserError as err:
        raise err.with_file(file) if file else err
    return Prepared(scenario, system, ir, compute, file)


def _check_precision(scenario: Scenario, system, file: str | None) -> None:
    """fp8 needs fp8 tensor cores on every GPU (Transformer Engine refuses fp8 on A100 and older)."""
    from heterosim.hardware.catalog import get_device

    prec = scenario.training.precision
    for gi, group in enumerate(scenario.cluster.groups):
        gpu = next(g.device for g in system.gpus if g.group == group.name)
        dev = get_device(gpu)
        if prec == "fp8" and not dev.supports(prec):
            raise UserError(f"{gpu} (cluster.groups[{gi}], {group.name}) has no fp8 tensor cores; use bf16",
                            file=file, field="training.precision", value=prec)


def check(prepared: Prepared, *, backend: str | None = None, work_budget: float | None = None,
          simulating: bool = True) -> "WorkEstimate":
    """Every check ``simulate`` makes before it starts, without simulating (``validate`` runs this too):
    the backend exists, the comm options fit the system, background traffic is well-formed, and the
    work fits the budget (``simulating=False``: not that one, for ``compile``). Returns the work estimate."""
    from heterosim import budget
    from heterosim.comm.planner import plan_collective
    from netbackend.registry import backend_class

    sc, file = prepared.scenario, prepared.file
    name = backend if backend is not None else sc.network.backend
    try:
        if not isinstance(name, str) or not name.strip():
            raise UserError("empty backend name (flow | ns3)", field="--backend" if backend is not None
                            else "network.backend", value=name)
        try:
            cls = backend_class(name)
        except UserError as err:
            if backend is not None:
                err.field = "--backend"
                err.args = (err.one_line(),)
            raise
        except ImportError as exc:
            raise UserError(f"backend cannot be loaded ({exc})", field="network.backend", value=name) from None
        net = sc.network
        if net.header_bytes >= net.mtu_bytes:  # cross-field rule of the network config (no payload would fit)
            raise UserError(f"must be below mtu_bytes ({net.mtu_bytes})", field="network.header_bytes",
                            value=net.header_bytes)
        cls.check_config(prepared.system.net, net.model_copy(update={"backend": name}))  # what building it checks
        comm = sc.comm
        world = list(range(prepared.system.num_gpus))
        plan_collective("allreduce", world, 0, prepared.system, algorithm=comm.algorithm, protocol=comm.protocol,
                        channels=comm.channels)
        bg = sc.network.background
        if bg is not None:
            from netbackend.background import BackgroundTraffic

            if bg.load >= 1.0:
                raise UserError("must be below 1 (at line rate the offered load never drains)",
                                field="network.background.load", value=bg.load)
            BackgroundTraffic.from_config(bg, prepared.system.net, seed=sc.seed)
        est = budget.estimate(prepared.ir, sc, name, comm.channels, system=prepared.system,
                              symmetry=_symmetry(sc, name))
        if simulating:
            budget.check(est, budget.work_budget(work_budget), file)
    except UserError as err:
        raise err.with_file(file) if file else err
    return est


def config_warnings(scenario: Scenario, backend: str | None = None) -> list[str]:
    """Settings the backend ignores, one line each (the flow backend: packet-level ``network`` settings;
    ``FlowBackend.config_warnings``). ``validate`` prints them, and a run records them in summary.json's
    ``warnings`` (printed once by ``run``): the one place both take them from."""
    from netbackend.registry import backend_class

    name = backend if backend is not None else scenario.network.backend
    fn = getattr(backend_class(name), "config_warnings", None)
    return list(fn(scenario.network)) if fn is not None else []


def compute_model(scenario: Scenario, measurements: str | None = None):
    """The scenario's compute model: ``hardware.measurements`` (builtin | none | folder, relative to the
    scenario file) picks the measured kernel tables; ``measurements`` is a generic CSV (Python API)."""
    from heterosim.hardware import ComputeModel

    hw = scenario.hardware
    spec = hw.measurements
    if spec not in ("builtin", "none"):
        file = getattr(scenario, "_source_file", None)
        p = Path(spec).expanduser()
        if not p.is_absolute() and file:
            p = Path(file).parent / p
        if not p.is_dir():
            raise UserError("not a folder of measured tables (gemm.csv, attention.csv, elementwise.csv)",
                            file=file, field="hardware.measurements", value=str(p))
        spec = str(p)
    return ComputeModel(measurements, tables=spec, tables_device=hw.measured_device)


def framework_summary(prepared: Prepared) -> dict[str, Any]:
    """The framework behaviour the run assumed: padded vocabulary, attention kernel and compute-time
    source per device, gradient-reduction precision, memory allowance; with ``training.framework``, the
    preset's name and the fields it set (the others were the user's: heterosim/config/frameworks.py)."""
    from heterosim.hardware import get_device
    from heterosim.hardware.compute import attention_impl

    meta, tr = prepared.ir.meta, prepared.scenario.training
    devs = sorted({g.device for g in prepared.system.gpus})
    out = {
        "vocab_size": meta.get("vocab_size"), "padded_vocab_size": meta.get("padded_vocab_size"),
        "attention": {d: attention_impl(tr.attention, get_device(d).family) for d in devs},
        "compute_source": {d: prepared.compute.source(get_device(d)) for d in devs},
        "grad_reduce_dtype": tr.grad_reduce_dtype,
        "memory_overhead_bytes": tr.memory_overhead_bytes,
    }
    if tr.framework is not None:  # (no keys added to runs without a preset)
        out["preset"] = tr.framework
        from heterosim.config.frameworks import get_preset

        out["preset_fields"] = dict(getattr(prepared.scenario, "_framework_fields", None) or {})
        # what a field the preset set cannot express of the framework (frameworks.yaml ``note``)
        out["preset_notes"] = {r.path: r.note for r in get_preset(tr.framework).fields
                               if r.note and r.path in out["preset_fields"]}
    return out


def intra_config(scenario: Scenario):
    """NVLink/PCIe flows carry no RoCE headers and cross no Ethernet switch pipeline."""
    return scenario.network.model_copy(update={"header_bytes": 0, "per_hop_latency_ns": 0, "backend": "flow"})


def simulate(prepared: Prepared, *, backend: str | None = None,
             progress: Callable[[int, int], None] | None = None, record_messages: bool | int = True,
             work_budget: float | None = None, symmetry: bool | None = None) -> RunResult:
    """Run one iteration (``training.iterations`` times, reporting the last).

    ``record_messages``: keep a record per message (True), none (False), or the first N (an int:
    what a trace shows). ``symmetry``: None = ``simulation.symmetry`` (off with background traffic)."""
    from heterosim.results.summary import make_summary

    check(prepared, backend=backend, work_budget=work_budget)
    sc = prepared.scenario
    name = backend or sc.network.backend
    net_cfg = sc.network.model_copy(update={"backend": name})  # (check ran the backend's check_config on it)
    t0 = time.monotonic()
    # The simulation allocates millions of small objects and frees few (_gc_paused).
    with _gc_paused():
        try:
            sim = _simulate_iterations(prepared, sc, name, net_cfg, progress, record_messages, symmetry)
            wall = time.monotonic() - t0
            summary = make_summary(sc, prepared.system, prepared.ir, sim, backend=name, wall_s=wall,
                                   warnings=config_warnings(sc, name))
        except UserError as err:  # runtime errors (comm planner, backends) name the scenario file too
            raise err.with_file(prepared.file) if prepared.file else err
        summary["framework"] = framework_summary(prepared)
    return RunResult(prepared, sim, summary, name)


@contextmanager
def _backends(prepared, sc, name, net_cfg, it: int, background: bool = True):
    """(network backend, intra-node flow backend) of iteration ``it``, closed on exit; ``background``: the
    scenario's background traffic on the network (if any)."""
    from heterosim.sim.intra import effective_intra
    from netbackend.registry import create_backend

    net = create_backend(name, prepared.system.net, net_cfg, sc.seed + it)
    if background and sc.network.background is not None:
        from netbackend.background import with_background

        try:
            net = with_background(net, sc.network.background, seed=sc.seed + it)
        except BaseException:
            net.close()
            raise
    try:
        intra = create_backend("flow", effective_intra(prepared.system.intra), intra_config(sc), sc.seed + it)
    except BaseException:
        net.close()
        raise
    try:
        yield net, intra
    finally:
        net.close()
        intra.close()


def _simulate_iterations(prepared, sc, name, net_cfg, progress, record_messages, symmetry):
    from heterosim.sim.coordinator import Coordinator

    sim = None
    for it in range(sc.training.iterations):
        with _backends(prepared, sc, name, net_cfg, it) as (net, intra):
            sym_on = _symmetry(sc, name) if symmetry is None else symmetry
            coord = Coordinator(prepared.ir, prepared.system, prepared.compute, net, intra,
                                precision=sc.training.precision, comm_options=sc.comm.model_dump(),
                                progress=progress, record_messages=bool(record_messages),
                                message_limit=None if isinstance(record_messages, bool) else record_messages,
                                symmetry=sym_on,
                                hashed_copies=getattr(getattr(sc, "simulation", None), "hashed_copies", None),
                                contention=getattr(getattr(sc, "simulation", None), "compute_contention", None))
            if coord.needs_warm_up():
                coord.shift_replicas_by(_warm_up(coord, prepared, sc, name, net_cfg, it))
            sim = coord.run(wall_limit_s=sc.network.wall_limit_s)
    return sim


def _warm_up(main, prepared, sc, name, net_cfg, it: int) -> dict:
    """Pipeline transfer start times of every replica over the run's first transfers (``hashed_copies:
    ops_and_shifted_replicas``): the same iteration, every replica simulated (``ops``), on backends of its own."""
    from heterosim.sim.coordinator import Coordinator

    with _backends(prepared, sc, name, net_cfg, it, background=False) as (net, intra):
        coord = Coordinator(prepared.ir, prepared.system, prepared.compute, net, intra,
                            precision=sc.training.precision, comm_options=sc.comm.model_dump(),
                            record_messages=False, symmetry=True, hashed_copies="ops", like=main,
                            replica_classes=False, contention=main._ct.model.name if main._ct else "none")
        return coord.warm_up(wall_limit_s=sc.network.wall_limit_s)


def _symmetry(sc: Scenario, backend: str) -> bool:
    """Symmetry reduction (heterosim/sim/symmetry.py) unless asked off. Flow backend only: its copies of a
    flow provably share one max-min rate; packet-level copies do not (DCQCN is not perfectly fair), and
    background traffic is not symmetric."""
    sim = getattr(sc, "simulation", None)
    return (sim is None or sim.symmetry) and sc.network.background is None and backend == "flow"


def write_results(result: RunResult, out_dir: str | Path) -> Path:
    """summary.json, trace.json, network.json, plots and the tables asked for (``output.tables``), atomically.

    The plots are drawn by a forked child (:class:`~heterosim.forking.ForkedTask`) while this process
    writes the other files: at 1,024 GPUs each side takes ~1 s. The results modules are imported with the
    collector paused (matplotlib makes ~100k objects): imported before, they set off collections that walk the
    whole simulation result (0.4 s at 1,024 GPUs)."""
    with _gc_paused():
        from heterosim.forking import ForkedTask
        from heterosim.results.tables import check_tables, write_tables
        from heterosim.results.trace import write_trace
        from heterosim.results.writer import atomic_dir, write_json

        sc = result.prepared.scenario
        out = Path(out_dir)
        check_tables(sc.output, result.prepared.file)
        with atomic_dir(out) as tmp:
            plotting = ForkedTask(_write_plots, tmp, result) if sc.output.plots else None
            try:
                write_json(tmp / "summary.json", result.summary)
                if sc.output.trace:
                    write_trace(tmp / "trace.json", result.sim, result.prepared.ir)
                write_tables(tmp, sc.output, result.sim, result.prepared.ir)
                stats = result.sim.net_stats
                if stats is not None:
                    write_json(tmp / "network.json", {"messages": stats.messages,
                                                      "bytes_delivered": stats.bytes_delivered,
                                                      **{k: v for k, v in stats.extra.items()}})
            except BaseException:
                if plotting is not None:
                    plotting.cancel()
                raise
            if plotting is not None:
                plotting.join()
    result.out_dir = out
    return out


def _write_plots(tmp: Path, result: RunResult) -> None:
    """timeline.png, breakdown.png and the network plots (netplots, when the run has network statistics)."""
    from heterosim.results import plots

    plots.plot_timeline(tmp / "timeline.png", result.sim, result.prepared.ir)
    plots.plot_breakdown(tmp / "breakdown.png", result.summary)
    try:
        from heterosim.results.netplots import plot_network
    except ImportError:
        return
    stats = result.sim.net_stats
    if stats is not None:
        plot_network(tmp, stats, message_bytes={m.id: m.size_bytes for m in result.sim.messages if m.link == "net"})


def run(scenario: Scenario | str | Path, *, out_dir: str | Path | None = None, backend: str | None = None,
        overrides: list[str] | dict | None = None, progress=None, work_budget: float | None = None) -> RunResult:
    """Load (if a path) or re-validate with ``overrides`` (if a Scenario), prepare, simulate, write."""
    if isinstance(scenario, Scenario):
        scenario = with_overrides(scenario, overrides)
    else:
        scenario = load(scenario, overrides)
    if scenario.output.tables != "summary":
        from heterosim.results.tables import table_format

        table_format(scenario.output.table_format, 0, getattr(scenario, "_source_file", None))  # before simulating
    prepared = prepare(scenario, work_budget=work_budget)
    result = simulate(prepared, backend=backend, progress=progress, work_budget=work_budget,
                      record_messages=messages_to_record(scenario))
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
