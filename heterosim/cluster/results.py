"""What a cluster run writes (atomically, into a stamped results folder like every run):

* ``summary.json``: per job its iterations (time, start/end, breakdown with exposed communication by
  kind, MFU), their mean, and with ``--isolation-baseline`` the same job alone and the slowdown; per
  fabric how many links jobs shared and by whom, and (ns3) PFC pauses one job's traffic caused on another's;
* ``fabric.json``: every fabric link a job used, bytes and utilisation per job (and background);
* ``network.json``: the backend's statistics, as for one job;
* ``trace.json``: Perfetto trace, a process per job (a track per TP group and stream, one for its
  iterations), network messages in a process per job;
* ``iterations.png``: each job's iteration time over simulated time (alone: dashed);
* ``ops``/``messages`` tables when ``output.tables`` asks (global ranks, as one merged run).
"""
from __future__ import annotations

import json
from pathlib import Path
from statistics import mean

from heterosim.results.breakdown import BUCKETS

_KEEP = ("iteration_time_s", "iteration_time_ns", "start_ns", "end_ns", "model_tflops_per_gpu", "mfu",
         "tokens_per_s", "breakdown", "inter_node_comm_share", "network")


def _iteration_row(k: int, s: dict) -> dict:
    return {"iteration": k, **{key: s[key] for key in _KEEP}}


def summarize(res) -> dict:
    from heterosim.pipeline import config_warnings  # settings the backend ignores, as a single job's summary

    cs = res.prepared.scenario
    jobs = []
    for job, jr in zip(res.jobs_run, res.jobs):
        its = jr.iterations
        times = [s["iteration_time_s"] for s in its]
        exposed = {k: mean(s["breakdown"]["exposed_comm"][k] * s["iteration_time_s"] for s in its)
                   for k in its[0]["breakdown"]["exposed_comm"]}
        entry = {
            "name": job.name, "model": job.scenario.model.name if hasattr(job.scenario.model, "name") else None,
            "gpus": len(job.ranks), "placement": [res.prepared.system.gpus[r].name for r in job.ranks],
            "start_ns": job.start_ns, "iterations_run": len(its),
            "iteration_time_s": times, "iteration_time_s_mean": mean(times),
            "exposed_comm_s_mean": exposed, "exposed_comm_total_s_mean": sum(exposed.values()),
            "mfu_mean": mean(s["mfu"] for s in its),
            "finished_at_s": its[-1]["end_ns"] / 1e9,
            "iterations": [_iteration_row(k, s) for k, s in enumerate(its)],
        }
        if jr.alone is not None:
            alone = [s["iteration_time_s"] for s in jr.alone]
            entry["alone"] = {"iteration_time_s": alone, "iteration_time_s_mean": mean(alone),
                              "exposed_comm_s_mean": {k: mean(s["breakdown"]["exposed_comm"][k] * s["iteration_time_s"]
                                                              for s in jr.alone)
                                                      for k in jr.alone[0]["breakdown"]["exposed_comm"]}}
            entry["slowdown"] = mean(times) / mean(alone) if mean(alone) else None
            entry["slowdown_per_iteration"] = [a / b if b else None for a, b in zip(times, alone)]
        jobs.append(entry)
    fab = res.fabric
    fabric = {"links_used": fab["links_used"], "shared_links": fab["shared_links"], "shared_by": fab["shared_by"],
              "max_utilization": _max_util(fab)}
    if "pfc" in fab:
        fabric["pfc"] = {"paused_ns_total": fab["pfc"]["paused_ns_total"],
                         "cross_job_paused_ns": fab["pfc"]["cross_job_paused_ns"]}
    return {"scenario": cs.name, "kind": "cluster", "backend": res.backend, "gpus": res.prepared.system.num_gpus,
            "makespan_s": res.sim.iteration_time_ns / 1e9, "jobs": jobs, "fabric": fabric,
            "background": cs.network.background.model_dump() if cs.network.background is not None else None,
            "simulation": {"events": res.sim.events, "wall_s": res.wall_s},
            "warnings": config_warnings(cs, res.backend)}


def _max_util(fab: dict) -> dict:
    """Per job (and background): its highest utilisation of any one link, and where."""
    best: dict[str, tuple[float, str]] = {}
    for e in fab["links"]:
        for j, u in e["utilization"].items():
            if u > best.get(j, (-1.0, ""))[0]:
                best[j] = (u, e["link"])
    return {j: {"utilization": u, "link": link} for j, (u, link) in sorted(best.items())}


def write_results(res, out_dir) -> Path:
    from heterosim.results.writer import atomic_dir, write_json

    from heterosim.results.tables import check_tables, write_tables

    cs = res.prepared.scenario
    out = Path(out_dir)
    check_tables(cs.output, res.prepared.file)
    with atomic_dir(out) as tmp:
        write_tables(tmp, cs.output, res.sim, res.merged_ir)  # global ranks; programs labelled "<job>: <stage>"
        write_json(tmp / "summary.json", res.summary)
        write_json(tmp / "fabric.json", res.fabric)
        stats = res.sim.net_stats
        if stats is not None:
            write_json(tmp / "network.json", {"messages": stats.messages, "bytes_delivered": stats.bytes_delivered,
                                              **{k: v for k, v in stats.extra.items()}})
        if cs.output.trace:
            write_trace(tmp / "trace.json", res)
        if cs.output.plots:
            plot_iterations(tmp / "iterations.png", res.summary)
    res.out_dir = out
    return out


def write_trace(path, res, max_events: int = 1_000_000) -> None:
    """A process per job (pid = job number + 1); a thread per TP group and stream; an ``iterations`` track."""
    sim, ir = res.sim, res.merged_ir
    jobs = res.jobs_run
    job_of_rank = {r: j for j in jobs for r in j.ranks}
    parts: list[str] = []
    shown = 0
    for j in jobs:
        pid = j.index + 1
        parts.append(json.dumps({"ph": "M", "name": "process_name", "pid": pid,
                                 "args": {"name": f"job {j.name} ({len(j.ranks)} GPUs)"}}))
        parts.append(json.dumps({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}))
        parts.append(json.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": 0,
                                 "args": {"name": "iterations"}}))
        jr = next(r for r in res.jobs if r.name == j.name)
        for k, s in enumerate(jr.iterations):
            parts.append(json.dumps({"ph": "X", "name": f"iteration {k}", "cat": "iteration", "pid": pid, "tid": 0,
                                     "ts": s["start_ns"] / 1000.0, "dur": (s["end_ns"] - s["start_ns"]) / 1000.0,
                                     "args": {"iteration_time_s": s["iteration_time_s"]}}))
    tids: dict[tuple[int, int, int], int] = {}
    for lane in sim.lanes:
        j = job_of_rank.get(lane.ranks[0])
        if j is None or not lane.end_ns:
            continue
        prog = sim.programs[lane.program]
        if shown + len(prog.ops) > max_events:
            continue
        pid = j.index + 1
        local = j.ranks.index(lane.ranks[0])
        for oid, op in enumerate(prog.ops):
            s, e = lane.start_ns[oid], lane.end_ns[oid]
            if s < 0 or e < 0 or op.collective == "barrier":
                continue
            st = prog.stream_of[oid]
            key = (pid, lane.id, st)
            tid = tids.get(key)
            if tid is None:
                tid = tids[key] = len(tids) + 1
                parts.append(json.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                         "args": {"name": f"ranks {local}-{local + len(lane.ranks) - 1} stage "
                                                          f"{ir.programs[lane.program].stage}: "
                                                          f"{prog.stream_names[st]}"}}))
            if op.kind == "comm":
                s = lane.comm_start_ns.get(oid, s)
            args = {"phase": op.phase, "mb": op.microbatch}
            if op.kind == "comm":
                args.update(collective=op.collective, bytes=op.size_bytes, group=op.group)
            parts.append(json.dumps({"ph": "X", "name": op.name, "cat": op.kind, "pid": pid, "tid": tid,
                                     "ts": s / 1000.0, "dur": max(e - s, 0) / 1000.0, "args": args}))
            shown += 1
    net_base = 1000 + len(res.prepared.jobs)
    named = set()
    for m in sim.messages[:200_000]:
        if m.end_ns < 0 or m.link != "net":
            continue
        j = job_of_rank.get(m.src)
        pid = net_base + (j.index if j is not None else 0)
        if pid not in named:
            named.add(pid)
            parts.append(json.dumps({"ph": "M", "name": "process_name", "pid": pid,
                                     "args": {"name": f"network messages: job {j.name if j else '?'}"}}))
        common = {"cat": "msg.net", "pid": pid, "tid": 0, "id": m.id, "name": f"{m.collective} {m.src}->{m.dst}"}
        parts.append(json.dumps({**common, "ph": "b", "ts": m.start_ns / 1000.0,
                                 "args": {"bytes": m.size_bytes, "src": m.src_ep, "dst": m.dst_ep}}))
        parts.append(json.dumps({**common, "ph": "e", "ts": m.end_ns / 1000.0}))
    meta = {"jobs": [j.name for j in jobs], "op_events": shown}
    with open(path, "w") as fh:
        fh.write('{"traceEvents":[')
        fh.write(",\n".join(parts))
        fh.write(f'],"displayTimeUnit":"ns","metadata":{json.dumps(meta)}}}')


def plot_iterations(path, summary: dict) -> None:
    """Each job's iteration times against the simulated time its iterations ended."""
    from heterosim.results import plots  # noqa: F401  (sets the headless backend)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    for k, job in enumerate(summary["jobs"]):
        ends = [it["end_ns"] / 1e9 for it in job["iterations"]]
        times = [t * 1e3 for t in job["iteration_time_s"]]
        line, = ax.plot(ends, times, marker="o", label=f"{job['name']} ({job['gpus']} GPUs)")
        if "alone" in job:
            ax.plot(ends, [t * 1e3 for t in job["alone"]["iteration_time_s"]], ls="--", color=line.get_color(),
                    label=f"{job['name']} alone")
    ax.set_xlabel("simulated time at the end of the iteration (s)")
    ax.set_ylabel("iteration time (ms)")
    ax.set_title(f"{summary['scenario']} ({summary['backend']}): iteration time per job")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["summarize", "write_results", "write_trace", "plot_iterations", "BUCKETS"]
