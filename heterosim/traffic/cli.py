"""``heterosim traffic``: a network-only traffic study from the command line (registered in heterosim/cli.py)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, get_args

import typer
from rich.console import Console
from rich.table import Table

from netbackend.config import CcKind
from hscommon.errors import UserError


def traffic_command(
        scenario: Path = typer.Argument(..., help="Traffic scenario YAML (see scenarios/traffic/)"),
        out: Path = typer.Option(..., "--out", help="Results directory (replaced atomically)"),
        cc: Optional[str] = typer.Option(None, "--cc", help="Comma-separated CC settings to run side by side "
                                         f"({' | '.join(get_args(CcKind))}); default: the scenario's network.cc"),
        jobs: Optional[int] = typer.Option(None, "--jobs", help="Parallel child processes (default: cores)"),
        backend: Optional[str] = typer.Option(None, "--backend", help="Network backend (default: the "
                                              "scenario's network.backend, ns3 unless set)"),
        set_: List[str] = typer.Option([], "--set", help="Override a field: path=value"),
) -> None:
    """Poisson flows from a size CDF, incasts and patterns on a fabric: FCT slowdown, PFC, queues."""
    from heterosim.traffic.run import run_traffic

    err_console = Console(stderr=True)
    if jobs is not None and jobs < 1:
        err_console.print(f"[bold red]error:[/] --jobs = {jobs}: must be >= 1", highlight=False)
        raise typer.Exit(2)
    try:
        summaries = run_traffic(scenario, out, ccs=cc, jobs=jobs, backend=backend, overrides=set_)
    except UserError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    s0 = summaries[0]
    t = Table(title=f"{s0['scenario']}: {s0['flows']['generated']:,} flows ({s0['backend']} backend)")
    t.add_column("metric")
    for s in summaries:
        t.add_column(s["cc"], justify="right")
    bins = {b["bin"]: i for i, b in enumerate(s0["slowdown"]["by_size"])}

    def pick(s, *path):
        for k in path:
            s = None if s is None else (s[k] if isinstance(s, list) else s.get(k))
        return s

    show = [("flows measured", ("flows", "finished_in_stats"), "{:,}"),
            ("unfinished", ("flows", "unfinished_in_stats"), "{:,}"),
            ("slowdown p50", ("slowdown", "all", "p50"), "{:.2f}"),
            ("slowdown p99", ("slowdown", "all", "p99"), "{:.2f}"),
            ("p95 slowdown <=1KB", ("slowdown", "by_size", bins["<=1KB"], "p95"), "{:.2f}"),
            ("p95 slowdown >=1MB", ("slowdown", "by_size", bins[">=1MB"], "p95"), "{:.2f}"),
            ("PFC paused fraction", ("pfc", "paused_fraction_overall"), "{:.2e}"),
            ("max queue (KB)", ("queue", "max_bytes"), "{:.0f}", 1e-3),
            ("ECN marks", ("ecn_marks",), "{:,}"), ("CNPs", ("cnps_sent",), "{:,}"), ("drops", ("drops",), "{:,}"),
            ("wall (s)", ("simulation", "wall_s"), "{:.1f}")]
    for label, path, fmt, *scale in show:
        vals = [pick(s, *path) for s in summaries]
        if all(v is None for v in vals):
            continue
        t.add_row(label, *("-" if v is None else fmt.format(v * scale[0] if scale else v) for v in vals))
    accs = [pick(s, "simulation", "acceleration") for s in summaries]
    if any(accs):
        t.add_row("ns-3 acceleration", *("-" if a is None else _shares(a) for a in accs))
    blind = [len(((a or {}).get("fluid_pfc") or {}).get("possible_at") or []) for a in accs]
    if any(blind):
        # The fluid model has no PFC: its "0 paused" is not a measurement where a PAUSE could have fired.
        t.add_row("PFC could have paused (fluid)", *(f"at {n} switches" if n else "-" for n in blind))
    Console().print(t)
    if any(blind):
        err_console.print("[bold yellow]warning:[/] network.acceleration.collisions: fluid does not simulate PFC, and "
                          "a PAUSE could have fired where it queued bytes, so its PFC figures (and the queues and "
                          "FCTs behind them) are not packet level's; collisions: packet simulates them "
                          "(summary.json: simulation.acceleration.fluid_pfc)", highlight=False, soft_wrap=True)
    files = "comparison.md/.csv/.json, <cc>/fct.csv, <cc>/summary.json" if cc else "fct.csv, summary.json"
    Console().print(f"results: {out}/ ({files}, slowdown_vs_size.png, queue_cdf.png)")


def _shares(acc: dict) -> str:
    """Where the bytes went under network.acceleration auto, as shares of the same total as the backend's
    own ``*_share`` figures (AcceleratedNs3Backend.stats: all five ways a byte can go)."""
    parts = {"closed form": acc.get("bytes_closed_form", 0), "packet": acc.get("bytes_packet_level", 0),
             "fluid": acc.get("bytes_fluid", 0), "fast-forwarded": acc.get("bytes_fast_forwarded", 0),
             "replayed": acc.get("bytes_replayed", 0)}
    total = sum(parts.values())
    return ", ".join(f"{v / total:.0%} {k}" for k, v in parts.items() if v) if total else "no bytes"
