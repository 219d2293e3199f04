"""``heterosim sweep SWEEP.yaml``: registered on the main app by heterosim/cli.py.

    from heterosim.sweep.cli import sweep_command
    app.command("sweep")(sweep_command)

Exit codes: 0 all points ok, 1 some point failed (recorded in results.csv), 2 bad input.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from heterosim.results.tables import format_cell
from hscommon.errors import UserError

_err = Console(stderr=True)
_out = Console()


def sweep_command(
    sweep: Path = typer.Argument(..., help="Sweep YAML (scenario + parameters to vary)"),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Runs at once (0 = one per CPU; with ray: no cap)"),
    executor: str = typer.Option("local", "--executor", help="local | ray"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Results directory (default: the sweep's out, "
                                                              "else results/sweeps/NAME)"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per run (overrides timeout_s)"),
    measurements: Optional[str] = typer.Option(None, "--measurements",
                                               help="Kernel times for every point: builtin | none | folder"),
    batch: bool = typer.Option(True, "--batch/--no-batch", help="Run points that differ only in stragglers, degraded "
                               "links, per-hop latency, ECMP seed or NIC speed on the batch engine"),
    engine: str = typer.Option("auto", "--engine",
                               help="Batch engine driver: auto (jax where installed) | jax | numpy"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Run a scenario over a grid or list of parameter values; resumable; writes results.csv and summary.png."""
    from heterosim.hardware.measured import cli_spec
    from heterosim.sweep.runner import run_sweep

    try:
        overrides = {"hardware.measurements": cli_spec(measurements)} if measurements is not None else None
        res = run_sweep(sweep, jobs=jobs, executor=executor, address=address, out=out_dir, timeout_s=timeout,
                        progress=not quiet, overrides=overrides, batch=batch, engine=engine)
    except UserError as err:
        _err.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    if not quiet:
        print_sweep(res)
    if not res.ok:
        raise typer.Exit(1)


def print_sweep(res) -> None:
    """The table on the terminal: parameters, status and the first few metrics."""
    params = list(res.config.parameters)
    metrics = [m for m in (res.config.metrics or ["iteration_time_s", "mfu", "breakdown.exposed_comm_total"])
               if "*" not in m][:4]
    t = Table(title=f"sweep: {len(res.rows)} points ({', '.join(f'{k} {v}' for k, v in sorted(res.counts.items()))})")
    for c in ["id", *params, "status", *metrics]:
        t.add_column(c.split(".")[-1] if c in params else c, justify="left" if c in ("id", "status") else "right")
    for r in res.rows:
        cells = [r["id"], *(str(r.get(p)) for p in params), r["status"] if r["status"] == "ok" else
                 f"[red]{r['status']}[/]"]
        cells += [format_cell(r.get(m)) for m in metrics]
        t.add_row(*cells)
    _out.print(t)
    for r in res.rows:
        if r["status"] != "ok" and r.get("error"):
            _out.print(f"[red]{r['id']}[/] {r['status']}: {r['error']}", highlight=False, soft_wrap=True)
    if res.batch is not None:
        _out.print(res.batch.line(len(res.ran)), highlight=False, soft_wrap=True)
    extra = ", ".join(p.name for p in (res.parquet, res.plot) if p is not None)
    _out.print(f"results: {res.out_dir}/ (results.csv{', ' + extra if extra else ''}, points/<id>/)")


#: A stand-alone app too (``python -m heterosim.sweep.cli SWEEP.yaml``).
app = typer.Typer(add_completion=False)
app.command()(sweep_command)

if __name__ == "__main__":
    app()
