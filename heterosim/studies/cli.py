"""``heterosim compare``: the CC comparison from the command line (registered in heterosim/cli.py)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from hscommon.errors import UserError


def compare_command(
        scenario: Path = typer.Argument(..., help="Scenario YAML"),
        cc: str = typer.Option("dcqcn,hpcc,none", "--cc", help="Comma-separated presets: dcqcn | dcqcn_paper | dcqcn_cx | hpcc | timely | dctcp | swift | none"),
        out: Optional[Path] = typer.Option(None, "--out", help="Results directory (default results/<name>-compare)"),
        set_: List[str] = typer.Option([], "--set", help="Override a field: path=value"),
        backend: str = typer.Option("ns3", "--backend", help="Network backend (ns3 for packet-level CC)"),
        workers: Optional[int] = typer.Option(None, "--workers", help="Parallel child processes (default: cores)"),
        draws: int = typer.Option(1, "--draws", help="Runs per setting, each another draw of RED's marks "
                                                     "(network.rng_run); the table shows mean (min-max)"),
        measurements: Optional[str] = typer.Option(None, "--measurements",
                                                   help="Kernel times: builtin | none | folder of measured tables"),
) -> None:
    """Run one iteration under each congestion control and compare them side by side."""
    from heterosim import pipeline as api
    from heterosim.studies.compare import compare

    err_console = Console(stderr=True)
    from heterosim.results.writer import check_out_dir

    try:
        if workers is not None and workers < 1:
            raise UserError("must be >= 1", field="--workers", value=workers)
        if draws < 1:
            raise UserError("must be >= 1", field="--draws", value=draws)
        if measurements is not None:
            from heterosim.hardware.measured import cli_spec

            set_ = [*set_, f"hardware.measurements={cli_spec(measurements)}"]
        sc = api.load(scenario, set_)
        dest = out or Path(f"results/{sc.name}-compare")
        check_out_dir(dest, "--out" if out is not None else "output")  # refuse before simulating
        try:
            rows = compare(sc, cc, out=dest, backend=backend, workers=workers, draws=draws)
        except UserError as err:
            if err.field == "cc":  # the library's argument is the --cc flag here
                err.field = "--cc"
                err.args = (err.one_line(),)
            raise
    except UserError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    from heterosim.studies.compare import over_draws

    summary = over_draws(rows)  # cc -> metric -> (mean, min, max); one run each: all three the same
    t = Table(title=f"{sc.name}: congestion control ({backend})"
                    + (f", mean (min-max) over {draws} draws" if draws > 1 else ""))
    t.add_column("metric")
    for name in summary:
        t.add_column(name, justify="right")
    show = [("iteration time (s)", "iteration_time_s", "{:.4f}"), ("exposed comm (s)", "exposed_comm_s", "{:.4f}"),
            ("FCT slowdown p50", "slowdown_p50", "{:.2f}"), ("FCT slowdown p99", "slowdown_p99", "{:.2f}"),
            ("max queue (KB)", "max_queue_bytes", "{:.0f}", 1e-3), ("PFC paused (us)", "pfc_paused_ns_total",
                                                                    "{:.1f}", 1e-3),
            ("ECN marks", "ecn_marks", "{:,}"), ("CNPs", "cnps_sent", "{:,}")]
    for label, key, fmt, *scale in show:
        vals = [summary[n].get(key) for n in summary]
        if all(v is None for v in vals):
            continue

        def cell(v):
            if v is None:
                return "-"
            mean, lo, hi = (x * scale[0] if scale else x for x in v)
            one = fmt.format(round(mean) if fmt == "{:,}" else mean)
            return one if lo == hi else f"{one} ({fmt.format(lo)}-{fmt.format(hi)})"

        t.add_row(label, *(cell(v) for v in vals))
    Console().print(t)
    Console().print(f"results: {dest}/ (compare.csv, compare.md, compare.json, *.png)")
