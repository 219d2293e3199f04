"""``heterosim plan`` and ``heterosim compare-suite``: registered on the main app by heterosim/cli.py.

    from heterosim.planner.cli import compare_suite_command, plan_command
    app.command("plan")(plan_command)
    app.command("compare-suite")(compare_suite_command)

Exit codes: 0 ok, 2 bad input (one line on stderr).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from hscommon.errors import UserError

_err = Console(stderr=True)
_out = Console()


def PLAN_MAGIC(head: bytes) -> bool:
    """``--write`` replaces only a scenario that ``plan --write`` wrote (its ``# plan:`` comment)."""
    return head.startswith(b"# plan: ") or b"\n# plan: " in head
JSON_MAGIC = b'{\n  "written_by": "heterosim plan"'
"""Start of a ``--json`` plan report (its first key): ``--json`` replaces only such a file."""


def _fail(err: UserError) -> None:
    _err.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _jobs(jobs: int | None) -> int:
    """``--jobs``: at least 1; unset, the CPUs this process may use."""
    from heterosim.forking import usable_cpus

    if jobs is not None and jobs < 1:
        raise UserError("must be >= 1", field="--jobs", value=jobs)
    return jobs or usable_cpus()


def plan_command(
    scenario: Path = typer.Argument(..., help="Scenario YAML (its cluster, model and batch are kept)"),
    top: int = typer.Option(5, "--top", "-k", help="Best plans to show (and simulate)"),
    backend: str = typer.Option("flow", "--backend", help="Network backend for the simulated plans: flow | ns3"),
    simulate: Optional[int] = typer.Option(None, "--simulate", help="Plans to simulate (default --top; 0 = "
                                                                    "estimates only)"),
    max_candidates: Optional[int] = typer.Option(None, "--max-candidates", help="Stop scoring after this many"),
    set_: List[str] = typer.Option([], "--set", help="Override a scenario field first: path=value"),
    measurements: Optional[str] = typer.Option(None, "--measurements",
                                               help="Kernel times: builtin | none | folder of measured tables"),
    write: Optional[Path] = typer.Option(None, "--write", help="Write the best plan as a scenario YAML here"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the ranked plans as JSON here"),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Plans simulated at once, in forked processes "
                                                                "(default: the CPUs this process may use)"),
    stage_dp: bool = typer.Option(True, "--stage-dp/--no-stage-dp", help="Also search per-stage DP widths "
                                  "(parallelism.stage_dp; only where device groups differ in size)"),
    fsdp: bool = typer.Option(True, "--fsdp-fallback/--no-fsdp-fallback", help="Where no plan fits in memory, "
                              "search again with fully sharded data parallelism (parallelism.zero_stage: 3)"),
) -> None:
    """Search mappings, parallel sizes and non-uniform partitions; rank the best by simulated time."""
    from heterosim import pipeline as api
    from heterosim.planner.search import plan_report

    from heterosim.results.writer import check_out_file

    try:
        if top < 1:
            raise UserError("must be >= 1", field="--top", value=top)
        if simulate is not None and simulate < 0:
            raise UserError("must be >= 0", field="--simulate", value=simulate)
        if max_candidates is not None and max_candidates < 1:
            raise UserError("must be >= 1", field="--max-candidates", value=max_candidates)
        jobs = _jobs(jobs)
        if write is not None:
            check_out_file(write, "--write", PLAN_MAGIC)
        if json_out is not None:
            check_out_file(json_out, "--json", JSON_MAGIC)
        if measurements is not None:  # relative to the working directory, as on run/compare/sweep
            from heterosim.hardware.measured import cli_spec

            set_ = [*set_, f"hardware.measurements={cli_spec(measurements)}"]
        sc = api.load(scenario, set_)
        rep = plan_report(sc, top_k=top, backend=backend, max_candidates=max_candidates, simulate=simulate,
                          progress=lambda msg: _err.print(f"[dim]{msg}[/]"), jobs=jobs, stage_dp=stage_dp,
                          fsdp_fallback=fsdp)
    except UserError as err:
        _fail(err)
    print_plan(rep)
    try:
        if write is not None and rep.best is not None:
            write_plan_scenario(scenario, rep.best, write, set_)
            _out.print(f"best plan written to {write}")
        if json_out is not None:
            import json

            from heterosim.results.writer import atomic_file

            with atomic_file(json_out, "--json", JSON_MAGIC) as tmp:
                tmp.write_text(json.dumps(report_dict(rep), indent=2))
    except UserError as err:
        _fail(err)


def report_dict(rep) -> dict:
    """The ranked plans as JSON-ready data; ``written_by`` comes first, so a later ``--json`` knows the file."""
    def cand(c):
        return {"plan": c.short(), "label": c.label, "mapping": c.mapping.describe(), "layers": c.layers,
                "microbatch_split": c.split, "aware": c.aware, "est_time_s": c.est_time_s,
                "sim_time_s": c.sim_time_s, "sim_backend": c.sim_backend, "mfu": c.mfu,
                "mem_headroom": c.mem_headroom, "speedup_vs_naive": c.speedup_vs_naive, "why": c.why,
                "stage_dp": c.stage_dp, "overrides": c.overrides}

    return {"written_by": "heterosim plan", "candidates": [cand(c) for c in rep.candidates], "naive": cand(rep.naive) if rep.naive else None,
            "enumerated": rep.enumerated, "pruned_divisibility": rep.pruned_divisibility,
            "pruned_memory": rep.pruned_memory, "scored": rep.scored, "scoring_s": rep.scoring_s,
            "candidates_per_minute": rep.candidates_per_minute, "simulated": rep.simulated,
            "simulation_s": rep.simulation_s,
            "calibration": [{"plan": p, "est_s": e, "sim_s": s} for p, e, s in rep.calibration],
            "notes": rep.notes}


def print_plan(rep) -> None:
    t = Table(title="Plans (sim = simulated iteration time; est = closed-form estimate)")
    for col in ("#", "plan", "layers/stage", "mb/replica", "est s", "sim s", "MFU", "HBM free", "vs naive"):
        t.add_column(col, overflow="fold")
    rows = list(enumerate(rep.candidates, 1)) + ([("naive", rep.naive)] if rep.naive else [])
    for i, c in rows:
        t.add_row(str(i), c.short(), _compact(c.layers), _compact(c.split),
                  f"{c.est_time_s:.3f}", "-" if c.sim_time_s is None else f"{c.sim_time_s:.3f}",
                  f"{c.mfu:.1%}", f"{c.mem_headroom:.0%}",
                  "-" if c.speedup_vs_naive is None else f"{c.speedup_vs_naive:.2f}x")
    _out.print(t)
    for i, c in rows:
        _out.print(f"[bold]{i}[/] {c.why}", highlight=False, soft_wrap=True)
    _out.print(f"scored {rep.scored} candidates ({rep.enumerated} configurations, {rep.pruned_divisibility} "
               f"pruned by divisibility, {rep.pruned_memory} by memory) in {rep.scoring_s:.2f} s = "
               f"{rep.candidates_per_minute:.0f}/min; simulated {rep.simulated} in {rep.simulation_s:.1f} s",
               highlight=False)
    for p, e, s in rep.calibration:
        _out.print(f"  estimate {e:.3f} s vs simulated {s:.3f} s ({(e / s - 1) * 100:+.1f}%): {p}", highlight=False)
    if rep.best is not None:
        _out.print("overrides of the best plan:", highlight=False)
        for k, v in rep.best.overrides.items():
            if k != "cluster.groups":
                _out.print(f"  --set {k}={_flow(v)}", highlight=False, soft_wrap=True)
        if "cluster.groups" in rep.best.overrides:
            _out.print("  cluster.groups reordered: " + ", ".join(g["name"] for g in rep.best.overrides["cluster.groups"]),
                       highlight=False)
    for n in rep.notes:
        _err.print(f"[yellow]note:[/] {n}", highlight=False, soft_wrap=True)


def _compact(xs: list[int]) -> str:
    if len(set(xs)) == 1:
        return f"{xs[0]} x{len(xs)}"
    return "/".join(map(str, xs))


def _flow(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, list):
        return "[" + ",".join(map(str, v)) + "]"
    return str(v)


def write_plan_scenario(src: Path, cand, dest: Path, set_: list[str] | None = None) -> None:
    """The source YAML with the plan's overrides applied (references such as ``model: gpt3-175b`` kept)."""
    import yaml

    from heterosim.config.loader import _iter_overrides, load_yaml, set_path

    data = load_yaml(src)
    for k, v in _iter_overrides(set_ or [], str(src)):
        set_path(data, k, v, file=str(src))
    for k, v in cand.overrides.items():
        set_path(data, k, v, file=str(src))
    from heterosim.results.writer import atomic_file

    lead = []
    for line in Path(src).read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith(("# plan:", "# why:")):
            lead.append(line)
    est = f"estimated {cand.est_time_s:.2f} s" + (f", simulated {cand.sim_time_s:.2f} s ({cand.sim_backend})"
                                                 if cand.sim_time_s is not None else "")
    lead.append(f"# plan: {cand.short()} ({est})")
    lead.append(f"# why: {cand.why}")
    with atomic_file(dest, "--write", PLAN_MAGIC) as tmp:
        tmp.write_text("\n".join(lead) + "\n"
                       + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110))


def compare_suite_command(
    directory: Path = typer.Argument(Path("scenarios/suites/h-suite"), help="Directory of scenario YAMLs"),
    backend: str = typer.Option("flow", "--backend", help="flow | ns3"),
    out: Path = typer.Option(Path("results/h-suite"), "--out", help="Writes suite.csv and suite.md here"),
    naive: bool = typer.Option(True, "--naive/--no-naive", help="Also simulate the uniform plan of each"),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Scenarios run at once, in forked processes "
                                                                "(default: the CPUs this process may use)"),
) -> None:
    """Run every scenario of a suite; table of time, breakdown, inter-node share (CSV + markdown)."""
    from heterosim.planner.suite import suite_table, write_suite
    from heterosim.results.writer import check_out_dir

    paths = sorted(directory.glob("*.yaml"))
    if not paths:
        _fail(UserError("no *.yaml scenarios here", file=str(directory)))
    try:
        check_out_dir(out)  # refuse before simulating (write_suite checks again when it writes)
        rows = suite_table(paths, backend, naive=naive, progress=lambda m: _err.print(f"[dim]{m}[/]"),
                           jobs=_jobs(jobs))
    except UserError as err:
        _fail(err)
    try:
        csv_path, md_path = write_suite(rows, out)
    except UserError as err:
        _fail(err)
    _out.print(md_path.read_text())
    _out.print(f"wrote {csv_path} and {md_path}")
