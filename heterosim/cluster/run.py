"""Simulating a cluster scenario: prepare every job, run them together on one fabric, read per-job results.

``prepare`` validates and places every job (errors name the file, the job and the field), ``simulate``
runs the merged workload (heterosim/cluster/merge.py) on one network backend instance (flow or ns3,
with background traffic when the cluster has it) and cuts the run into per-job, per-iteration views
that the single-job result code (``make_summary``, breakdown) reads as if the job had run alone;
``fabric_report`` says which job's bytes crossed which link and where PFC pauses hit another job.
"""
from __future__ import annotations

import dataclasses
import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from heterosim.cluster.config import ClusterScenario, job_scenario, load_cluster_scenario
from heterosim.cluster.merge import JobCompute, JobRun, check_tp_in_nodes, merge, plan_with_barrier
from heterosim.errors import UserError
from heterosim.results.summary import busy_ns


@dataclass
class ClusterPrepared:
    scenario: ClusterScenario
    system: Any
    jobs: list[JobRun]
    file: str | None = None


@dataclass
class JobResult:
    name: str
    iterations: list[dict]
    """Per iteration: the single-job summary of that iteration (``make_summary``), plus its start/end."""
    alone: list[dict] | None = None
    """The same job's iterations with no other job and no background traffic (``--isolation-baseline``)."""


@dataclass
class ClusterResult:
    prepared: ClusterPrepared
    backend: str
    sim: Any
    merged_ir: Any
    jobs: list[JobResult]
    fabric: dict
    wall_s: float
    out_dir: Path | None = None
    summary: dict = field(default_factory=dict)
    jobs_run: list[JobRun] = field(default_factory=list)
    """The jobs this run simulated (program ids in ``merged_ir``)."""


def load(path: str | Path, overrides=None) -> ClusterScenario:
    return load_cluster_scenario(path, overrides)


def _job_error(err: UserError, job: JobRun | Any, index: int, name: str, file: str | None) -> UserError:
    """A job's plan error, located in the cluster file: the GPU count of a plan is the placement's."""
    where = f"jobs[{index}]"
    fld = err.field or ""
    if fld.startswith(("network", "--backend", "comm", "fabric")):  # the cluster's own settings
        err.file = err.file or file
        err.args = (err.one_line(),)
        return err
    if fld == "cluster" or fld.startswith("cluster."):
        err.field = f"{where}.placement"
        err.reason = f"does not fit its placement: {err.reason}"
    elif not fld.startswith(where):
        err.field = f"{where}.{fld}" if fld else where
    if not err.reason.startswith("job "):
        err.reason = f"job {name!r}: {err.reason}"
    err.file = file
    err.args = (err.one_line(),)
    return err


def prepare(cs: ClusterScenario) -> ClusterPrepared:
    """Build the fabric, place the jobs, compile each job's workload on its GPUs."""
    from heterosim.pipeline import compute_model
    from heterosim.cluster.placement import place_jobs
    from heterosim.hardware.catalog import get_device
    from heterosim.workload.compiler import compile_workload
    from heterosim.workload.memory import check_plan
    from heterosim.workload.plan import resolve_plan
    from topologies import build_system

    file = getattr(cs, "_source_file", None)
    try:
        system = build_system(cs.cluster, cs.fabric, file=file)
        placements = place_jobs(cs, system, file)
    except UserError as err:
        raise err.with_file(file) if file else err
    jobs = []
    for i, (job, ranks) in enumerate(zip(cs.jobs, placements)):
        sc = job_scenario(cs, i)
        try:
            world = len(ranks)
            resolve_plan(sc, world, file)
            devices = [system.gpus[r].device for r in ranks]
            check_plan(sc, world, devices, file, rank_groups=[system.gpus[r].group for r in ranks])
            prec = sc.training.precision
            for d in sorted(set(devices)):
                if not get_device(d).supports(prec):
                    raise UserError(f"{d} has no {prec} tensor cores", field="training.precision", value=prec)
            ir = compile_workload(sc, world, devices)
            compute = compute_model(sc)
        except UserError as err:
            raise _job_error(err, job, i, job.name, file) from None
        run = JobRun(i, job.name, sc, ir, compute, list(ranks), sc.training.iterations, job.start_ns)
        check_tp_in_nodes(run, system, file)
        jobs.append(run)
    return ClusterPrepared(cs, system, jobs, file)


def check(prep: ClusterPrepared, *, backend: str | None = None, work_budget: float | None = None) -> Any:
    """What ``api.check`` checks for one job (backend, comm options, background, header size), for the
    cluster; the work budget covers every job's iterations (plus each alone with an isolation baseline)."""
    from heterosim import budget
    from heterosim.pipeline import Prepared, check as api_check

    cs, file = prep.scenario, prep.file
    total = budget.WorkEstimate(0, 0, 0)
    for job in prep.jobs:
        p = Prepared(job.scenario, prep.system, job.ir, job.compute, file)
        try:
            est = api_check(p, backend=backend, simulating=False)
        except UserError as err:
            raise _job_error(err, job, job.index, job.name, file) from None
        total = total + est  # the merged run: no symmetry reduction (WorkEstimate.__add__)
    budget.check(total, budget.work_budget(work_budget), file)
    return total


def backend_name(prep: ClusterPrepared, backend: str | None) -> str:
    return backend or prep.scenario.network.backend


def simulate(prep: ClusterPrepared, *, backend: str | None = None, only: list[int] | None = None,
             background: bool = True, offsets: bool = True, progress=None) -> ClusterResult:
    """Run the jobs (``only``: these job indices) together; per-job per-iteration summaries."""
    from heterosim.pipeline import intra_config
    from heterosim.comm import plan_collective
    from heterosim.sim.coordinator import Coordinator
    from heterosim.sim.intra import effective_intra
    from netbackend.registry import create_backend

    cs, system = prep.scenario, prep.system
    name = backend_name(prep, backend)
    # copies: merge() records each job's program ids in the merged IR, which differ from run to run
    jobs = [dataclasses.replace(j) for j in prep.jobs if only is None or j.index in only]
    net_cfg = cs.network.model_copy(update={"backend": name})
    if name == "ns3" and net_cfg.acceleration.mode != "off":
        from netbackend.ns3.accel import check_acceleration

        try:
            check_acceleration(net_cfg)
        except UserError as err:
            raise err.with_file(prep.file or "scenario") from None
    merged = merge(jobs, system.num_gpus)
    t0 = time.monotonic()
    gc_was = gc.isenabled()
    gc.disable()  # as api.simulate: the run makes millions of objects and no cycles to free
    try:
        net = create_backend(name, system.net, net_cfg, cs.seed)
        if background and cs.network.background is not None:
            from netbackend.background import with_background

            try:
                net = with_background(net, cs.network.background, seed=cs.seed)
            except BaseException:
                net.close()
                raise
        intra = create_backend("flow", effective_intra(system.intra), intra_config(cs), cs.seed)
        try:
            coord = Coordinator(merged, system, JobCompute(jobs, merged), net, intra,
                                plan_collective=plan_with_barrier(plan_collective), comm_options=cs.comm.model_dump(),
                                progress=progress, record_messages=True, symmetry=False)
            for job in jobs:
                if offsets and job.start_ns:
                    for r in job.ranks:
                        coord.release_ns[coord.lane_of_rank[r]] = job.start_ns
            sim = coord.run(wall_limit_s=cs.network.wall_limit_s)
        finally:
            net.close()
            intra.close()
        wall = time.monotonic() - t0
        results = [JobResult(j.name, job_iterations(j, sim, system, name, wall, offsets)) for j in jobs]
    except UserError as err:
        raise err.with_file(prep.file) if prep.file else err
    finally:
        if gc_was:
            gc.enable()
    res = ClusterResult(prep, name, sim, merged, results, {}, wall, jobs_run=jobs)
    res.fabric = fabric_report(prep, jobs, sim, net_cfg, cs.seed)
    return res


def job_iterations(job: JobRun, sim, system, backend: str, wall_s: float, offsets: bool = True) -> list[dict]:
    """The job's iterations cut out of the merged run, each summarised as a single-job run would be."""
    from heterosim.pipeline import config_warnings
    from heterosim.results.summary import make_summary
    from heterosim.sim.coordinator import Lane, SimResult, _prepare_program

    local_of = {g: i for i, g in enumerate(job.ranks)}
    pid_of = {g: i for i, g in enumerate(job.programs)}
    lanes = [l for l in sim.lanes if l.ranks[0] in local_of]
    lanes.sort(key=lambda l: local_of[l.ranks[0]])
    progs = [_prepare_program(p.ops) for p in job.ir.programs]
    mine = set(local_of)
    msgs = [m for m in sim.messages if m.src in mine or m.dst in mine]
    view_system = SimpleNamespace(gpus=[system.gpus[r] for r in job.ranks])
    t_start = job.start_ns if offsets else 0
    out = []
    for k in range(job.iterations):
        views, t_end = [], t_start
        for lane in lanes:
            pid = pid_of[lane.program]
            n = len(job.ir.programs[pid].ops)
            base = k * job.iter_stride[pid]
            ends = lane.end_ns[base:base + n]
            t_end = max(t_end, max(ends) if ends else t_start)
            views.append((lane, pid, base, n))
        view_lanes = []
        for lane, pid, base, n in views:
            v = Lane(id=len(view_lanes), ranks=tuple(local_of[r] for r in lane.ranks), program=pid,
                     device=lane.device, slowdown=lane.slowdown)
            v.start_ns = [t - t_start for t in lane.start_ns[base:base + n]]
            v.end_ns = [t - t_start for t in lane.end_ns[base:base + n]]
            v.dur = lane.dur[base:base + n]
            v.comm_start_ns = {o - base: t - t_start for o, t in lane.comm_start_ns.items() if base <= o < base + n}
            v.done_count = n
            view_lanes.append(v)
        it_msgs = [m for m in msgs if t_start <= m.start_ns <= t_end and m.end_ns >= 0]
        net = [m for m in it_msgs if m.link == "net" and m.size_bytes > 0]
        view = SimResult(t_end - t_start, view_lanes, progs, {}, [], [], 0,
                         net_bytes=sum(m.size_bytes for m in net), net_messages=len(net),
                         all_messages=len(it_msgs), inter_node_busy_ns=busy_ns(net))
        s = make_summary(job.scenario, view_system, job.ir, view, backend=backend, wall_s=wall_s,
                         warnings=config_warnings(job.scenario, backend))
        s["start_ns"], s["end_ns"] = t_start, t_end
        out.append(s)
        t_start = t_end
    return out


def fabric_report(prep: ClusterPrepared, jobs: list[JobRun], sim, net_cfg, seed: int) -> dict:
    """Per directed fabric link: bytes and utilisation of each job, which links jobs shared, and (ns3) the
    PFC pauses on links carrying one job's traffic caused at a switch whose hottest port carried another's.

    Paths are recomputed with the ECMP function both backends route with (``netbackend.routing.Router``,
    same mode and seed), from each message's endpoints and flow key; bytes are wire bytes (payload plus
    one header per MTU-sized packet, as the flow backend counts them). ``background`` is what the backend
    counted on a link beyond the jobs' bytes (ns3 counts ACK and CNP frames there too)."""
    from netbackend.routing import Router

    system = prep.system
    router = Router(system.net, mode=net_cfg.ecmp, seed=seed)
    job_of_rank = {}
    for j in jobs:
        for r in j.ranks:
            job_of_rank[r] = j.name
    mtu, hdr = max(1, net_cfg.mtu_bytes), net_cfg.header_bytes
    per_link: dict[tuple[str, str], dict[str, int]] = {}
    for m in sim.messages:
        if m.link != "net" or m.size_bytes <= 0:
            continue
        wire = m.size_bytes + -(-m.size_bytes // mtu) * hdr
        jn = job_of_rank.get(m.src, "?")
        for lid in router.route(m.src_ep, m.dst_ep, m.flow_key)[1]:
            d = per_link.setdefault(router.link_name(lid), {})
            d[jn] = d.get(jn, 0) + wire
    rate = {}
    for lid in range(router.num_links):
        rate[router.link_name(lid)] = router.link_rate_gbps[lid]
    span_ns = max(sim.iteration_time_ns, 1)
    stats = sim.net_stats
    total = dict(getattr(stats, "link_bytes", {}) or {})
    links = []
    for key in sorted(set(per_link) | ({k for k in total if total[k]} if prep.scenario.network.background else set())):
        by_job = per_link.get(key, {})
        entry = {"link": f"{key[0]}->{key[1]}", "rate_gbps": rate.get(key, 0.0),
                 "bytes": dict(sorted(by_job.items())),
                 "utilization": {j: b * 8 / (rate.get(key, 1.0) * span_ns) for j, b in sorted(by_job.items())}}
        if prep.scenario.network.background is not None and key in total:
            bg = max(0, int(total[key]) - sum(by_job.values()))
            if bg:
                entry["bytes"]["background"] = bg
                entry["utilization"]["background"] = bg * 8 / (rate.get(key, 1.0) * span_ns)
        entry["shared_by"] = sorted(entry["bytes"])
        links.append(entry)
    shared = [e for e in links if len(e["shared_by"]) > 1]
    pairs: dict[str, int] = {}
    for e in shared:
        k = " + ".join(e["shared_by"])
        pairs[k] = pairs.get(k, 0) + 1
    out = {"span_ns": span_ns, "bytes_are": "wire bytes (payload + headers), paths from the ECMP hash",
           "links": links, "shared_links": len(shared), "links_used": len(links), "shared_by": pairs}
    extra = getattr(stats, "extra", None) or {}
    if "pfc_paused_ns" in extra:
        out["pfc"] = _pfc_attribution(extra, per_link)
    return out


def _pfc_attribution(extra: dict, per_link: dict) -> dict:
    """PFC pauses by who caused them and whom they hit: a paused port ``a->b`` stopped the jobs whose bytes
    cross it; ``b`` paused it because its buffer filled behind its most-queued egress port, whose jobs are
    taken as the cause (attribution by path and queue statistics, not per packet)."""
    paused = extra.get("pfc_paused_ns") or {}
    maxq = extra.get("max_queue_bytes") or {}
    events = []
    cross: dict[str, int] = {}
    for port, ns in sorted(paused.items()):
        if "->" not in port or not ns:
            continue
        a, b = port.split("->", 1)
        hit = sorted(per_link.get((a, b), {}))
        egress = [(q, p) for p, q in maxq.items() if p.startswith(b + "->")]
        hot = max(egress)[1] if egress else None
        cause = sorted(per_link.get(tuple(hot.split("->", 1)), {})) if hot else []
        events.append({"port": port, "paused_ns": int(ns), "jobs_hit": hit, "congested_port": hot,
                       "jobs_causing": cause})
        for c in cause:
            for h in hit:
                if c != h:
                    key = f"{c} -> {h}"
                    cross[key] = cross.get(key, 0) + int(ns)
    return {"paused_ports": events, "paused_ns_total": int(extra.get("pfc_paused_ns_total", 0)),
            "cross_job_paused_ns": cross}


def run(scenario: ClusterScenario | str | Path, *, backend: str | None = None, out_dir: str | Path | None = None,
        isolation_baseline: bool = False, overrides=None, work_budget: float | None = None,
        progress=None) -> ClusterResult:
    """Load, prepare, check, simulate together (and each job alone with ``isolation_baseline``), write."""
    from heterosim.cluster.results import summarize, write_results

    if isinstance(scenario, ClusterScenario) and overrides:
        raise UserError("overrides apply to a cluster scenario file; edit the ClusterScenario object instead",
                        field="overrides", value=overrides)
    cs = scenario if isinstance(scenario, ClusterScenario) else load(scenario, overrides)
    prep = prepare(cs)
    check(prep, backend=backend, work_budget=work_budget)
    res = simulate(prep, backend=backend, progress=progress)
    if isolation_baseline:
        for i, jr in enumerate(res.jobs):
            alone = simulate(prep, backend=backend, only=[prep.jobs[i].index], background=False, offsets=False)
            jr.alone = alone.jobs[0].iterations
    res.summary = summarize(res)
    if out_dir is not None:
        write_results(res, out_dir)
    return res
