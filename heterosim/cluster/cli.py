"""``heterosim run CLUSTER.yaml``: the command-line side of a cluster run (heterosim/cli.py dispatches here)."""
from __future__ import annotations

from pathlib import Path

from heterosim.cluster.config import is_cluster_file
from heterosim.errors import UserError

__all__ = ["is_cluster_file", "run_cluster", "validate_cluster"]


def run_cluster(path: Path, backend, out_dir, set_, measurements, isolation_baseline: bool, quiet: bool, fail) -> None:
    from rich.console import Console
    from rich.table import Table

    from heterosim.cluster import check, load, prepare, simulate
    from heterosim.cluster.results import summarize, write_results
    from heterosim.results.writer import check_out_dir

    try:
        if measurements is not None:
            raise UserError("a cluster scenario sets measured kernel tables per job (jobs[i].hardware.measurements)",
                            file=str(path), field="--measurements", value=measurements)
        cs = load(path, set_)
        dest = out_dir if out_dir is not None else Path(cs.output.dir or f"results/{cs.name}")
        check_out_dir(dest, "--out" if out_dir is not None else "output.dir")  # refuse before simulating
        prep = prepare(cs)
        check(prep, backend=backend)
        res = simulate(prep, backend=backend)
        if isolation_baseline:
            for jr, job in zip(res.jobs, prep.jobs):
                jr.alone = simulate(prep, backend=backend, only=[job.index], background=False,
                                    offsets=False).jobs[0].iterations
        res.summary = summarize(res)
        write_results(res, dest)
    except UserError as err:
        fail(err)
        return
    import sys

    for w in res.summary.get("warnings", []):  # settings the backend ignores (summary.json "warnings")
        print(f"warning: {w}", file=sys.stderr)
    if quiet:
        return
    s = res.summary
    t = Table(title=f"{s['scenario']} ({s['backend']} backend, {s['gpus']} GPUs, {len(s['jobs'])} jobs)")
    for col in ("job", "GPUs", "iters", "mean iter", "alone", "slowdown", "exp. comm", "done at"):
        t.add_column(col, justify="right" if col != "job" else "left")
    for j in s["jobs"]:
        alone = j.get("alone")
        t.add_row(j["name"], str(j["gpus"]), str(j["iterations_run"]), f"{j['iteration_time_s_mean'] * 1e3:.2f} ms",
                  f"{alone['iteration_time_s_mean'] * 1e3:.2f} ms" if alone else "-",
                  f"{j['slowdown']:.3f}x" if alone else "-",
                  f"{j['exposed_comm_total_s_mean'] * 1e3:.2f} ms", f"{j['finished_at_s']:.4f} s")
    out = Console()
    out.print(t)
    fab = s["fabric"]
    shared = ", ".join(f"{k}: {v}" for k, v in fab["shared_by"].items()) or "none"
    out.print(f"fabric: {fab['links_used']} links used, {fab['shared_links']} shared ({shared})", highlight=False)
    if "pfc" in fab:
        cross = ", ".join(f"{k}: {v / 1e3:.1f} us" for k, v in fab["pfc"]["cross_job_paused_ns"].items()) or "none"
        out.print(f"PFC: {fab['pfc']['paused_ns_total'] / 1e3:.1f} us paused in all; caused by one job on another: "
                  f"{cross}", highlight=False)
    out.print(f"results: {res.out_dir}/ (summary.json, fabric.json, trace.json -> ui.perfetto.dev, iterations.png)")


def validate_cluster(path: Path, backend, set_, fail) -> None:
    """Every check ``run`` makes (placements, each job's plan and memory, backend, work budget), no simulation."""
    from rich.console import Console

    from heterosim.cluster import check, load, prepare

    try:
        prep = prepare(load(path, set_))
        est = check(prep, backend=backend)
    except UserError as err:
        fail(err)
        return
    import sys

    from heterosim.pipeline import config_warnings

    for w in config_warnings(prep.scenario, backend):  # what a run records in summary.json "warnings"
        print(f"warning: {w}", file=sys.stderr)
    out = Console()
    out.print(f"[green]ok[/]: {path} — {prep.system.num_gpus} GPUs, {len(prep.jobs)} jobs, "
              f"work {est.short()}",
              soft_wrap=True, highlight=False)
    gpus = prep.system.gpus
    for job in prep.jobs:
        nodes = sorted({gpus[r].node for r in job.ranks}, key=lambda n: (len(n), n))
        out.print(f"  {job.name}: {len(job.ranks)} GPUs on {', '.join(nodes)}; {job.iterations} iteration(s) from "
                  f"{job.start_ns} ns", soft_wrap=True, highlight=False)
