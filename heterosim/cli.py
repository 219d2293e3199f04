"""``heterosim`` command line: a thin layer over :mod:`heterosim.api`.

Every user error becomes one line on stderr and exit code 2 (no traceback).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from hscommon.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="HeteroSim: LLM-training iteration time on heterogeneous GPU clusters, and why.")
console = Console(stderr=True)
out = Console()


def _fail(err: UserError) -> None:
    print(f"error: {err}", file=sys.stderr)
    raise typer.Exit(err.exit_code if hasattr(err, "exit_code") else 2)


@app.command()
def schema() -> None:
    """Print the scenario JSON Schema."""
    from heterosim.config.loader import scenario_json_schema

    print(scenario_json_schema())


@app.command()
def validate(scenario: Path = typer.Argument(..., help="Scenario YAML"),
             backend: Optional[str] = typer.Option(None, help="Network backend to check for (default: the scenario's)"),
             set_: List[str] = typer.Option([], "--set", help="Override a field: path=value")) -> None:
    """Every check `run` makes, without simulating: schema, references, plan, memory, network, work budget.

    Also takes the other kinds of HeteroSim YAML (cluster, traffic, sweep, topology, node catalog, model zoo:
    heterosim/filekinds.py) and checks each as the command that uses it would."""
    from heterosim import api
    from heterosim.filekinds import RUN_WITH, kind_of_file

    kind = kind_of_file(scenario)
    if kind == "cluster":
        from heterosim.cluster.cli import validate_cluster

        validate_cluster(scenario, backend, set_, _fail)
        return
    if kind != "training":
        from heterosim.validate_kinds import VALIDATORS

        try:
            detail = VALIDATORS[kind](scenario, backend, set_)
        except UserError as err:
            _fail(err.with_file(str(scenario)))
        out.print(f"[green]ok[/]: {scenario} — {detail}; use: {RUN_WITH[kind].format(file=scenario)}",
                  soft_wrap=True, highlight=False)
        return
    try:
        sc = api.load(scenario, set_)
        prep = api.prepare(sc)
        est = api.check(prep, backend=backend)
    except UserError as err:
        _fail(err)
    for w in api.config_warnings(sc, backend):  # the lines a run records in summary.json "warnings"
        print(f"warning: {w}", file=sys.stderr)
    mem = prep.ir.meta.get("memory_bytes") or []
    peak = max(mem) / 2**30 if mem else 0.0
    memory = f"peak memory {peak:.1f} GiB/GPU" if mem else "memory not modelled (recorded trace)"
    out.print(f"[green]ok[/]: {scenario} — {prep.system.num_gpus} GPUs, {len(prep.ir.programs)} programs, "
              f"{memory}, work {est.short()}", soft_wrap=True, highlight=False)
    preset = getattr(sc, "_framework_fields", None)
    if sc.training.framework is not None:  # what the preset filled in (the rest was the scenario's own)
        filled = ", ".join(f"{k}={v}" for k, v in (preset or {}).items()) or "nothing (every field given)"
        out.print(f"framework preset {sc.training.framework}: set {filled}", soft_wrap=True, highlight=False)
    breakdown = prep.ir.meta.get("memory_breakdown") or {}
    if breakdown:  # per stage (and micro-batch count), GiB
        cols = list(next(iter(breakdown.values())))
        t = Table("program", *cols, title="memory per GPU (GiB)")
        for name, terms in breakdown.items():
            t.add_row(name, *(f"{terms[c] / 2**30:.1f}" for c in cols))
        out.print(t)


@app.command()
def compile(scenario: Path, out_dir: Path = typer.Option(..., "--out", help="Directory for ir.json and summary.json"),
            set_: List[str] = typer.Option([], "--set", help="Override a field: path=value")) -> None:
    """Compile a scenario to the per-rank IR (no simulation)."""
    from heterosim import api
    from heterosim.results.writer import atomic_dir, check_out_dir, write_json

    try:
        check_out_dir(out_dir)
        prep = api.prepare(api.load(scenario, set_))
        api.check(prep, simulating=False)  # the IR of an invalid scenario is no use either
    except UserError as err:
        _fail(err)
    ir = prep.ir
    summary = {
        "ir_version": ir.version, "world_size": ir.world_size, "programs": len(ir.programs),
        "ops_per_rank": [len(ir.ops_of(r)) for r in range(ir.world_size)],
        "total_flops": ir.total_flops(), "model_flops_per_iteration": ir.meta.get("model_flops_per_iteration"),
        "memory_bytes_per_rank": ir.meta.get("memory_bytes"),
    }
    try:
        with atomic_dir(out_dir) as tmp:
            ir.to_json(tmp / "ir.json")
            write_json(tmp / "summary.json", summary)
    except UserError as err:
        _fail(err)
    out.print(f"IR v{ir.version}: {ir.world_size} ranks, {len(ir.programs)} programs, "
              f"{sum(summary['ops_per_rank'])} ops, {summary['total_flops']:.3e} FLOPs -> {out_dir}")


@app.command("export-chakra")
def export_chakra(scenario: Path, out_dir: Path = typer.Option(..., "--out", help="Folder for <name>.<rank>.et files"),
                  set_: List[str] = typer.Option([], "--set", help="Override a field: path=value"),
                  stream_deps: str = typer.Option("ctrl", "--stream-deps",
                                                  help="Stream order as ctrl_deps, or data_deps (for Chakra's older "
                                                       "feeder, which reads only data_deps)")) -> None:
    """Write the scenario's workload as Chakra execution traces, one ET file per rank (ASTRA-sim's input)."""
    from heterosim.chakra import export_chakra as _export

    try:
        res = _export(scenario, out_dir, overrides=set_, stream_deps=stream_deps)
    except UserError as err:
        _fail(err)
    out.print(f"Chakra ET: {res.ranks} ranks, {res.nodes} nodes, {res.process_groups} process groups "
              f"(comm_group.json) -> {out_dir}")


@app.command()
def run(scenario: Path = typer.Argument(Path("scenarios/quickstart.yaml"), help="Scenario YAML"),
        backend: Optional[str] = typer.Option(None, help="Network backend: flow | ns3 (default: the scenario's)"),
        out_dir: Optional[Path] = typer.Option(None, "--out", help="Results directory"),
        set_: List[str] = typer.Option([], "--set", help="Override a field: path=value"),
        measurements: Optional[str] = typer.Option(None, "--measurements",
                                                   help="Kernel times: builtin | none | folder of measured tables"),
        isolation_baseline: bool = typer.Option(False, "--isolation-baseline",
                                                help="Cluster scenarios: also run each job alone, report slowdowns"),
        quiet: bool = typer.Option(False, "--quiet", "-q")) -> None:
    """Simulate one training iteration (or, for a `kind: cluster` file, every job on one fabric) and write
    summary, trace, tables and plots."""
    from heterosim.cluster.cli import run_cluster
    from heterosim.filekinds import RUN_WITH, kind_of_file

    kind = kind_of_file(scenario)
    if kind == "cluster":  # several jobs on one cluster (heterosim/cluster)
        return run_cluster(scenario, backend, out_dir, set_, measurements, isolation_baseline, quiet, _fail)
    if kind != "training":  # a traffic study, a sweep, a topology...: say which command takes it
        _fail(UserError(f"is a {kind.replace('-', ' ')} file, not a training scenario; use: "
                        f"{RUN_WITH[kind].format(file=scenario)}", file=str(scenario)))
    if isolation_baseline:
        _fail(UserError("applies to cluster scenarios (kind: cluster) only", file=str(scenario),
                        field="--isolation-baseline", value=True))
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from heterosim import api
    from heterosim.results.writer import check_out_dir

    from heterosim.hardware.measured import cli_spec

    try:
        if measurements is not None:
            set_ = [*set_, f"hardware.measurements={cli_spec(measurements)}"]
        sc = api.load(scenario, set_)
        dest = out_dir if out_dir is not None else api.default_out_dir(sc)
        check_out_dir(dest, "--out" if out_dir is not None else "output.dir")  # refuse before simulating
        prep = api.prepare(sc)
        api.check(prep, backend=backend)
        with Progress(TextColumn("[bold]simulating"), BarColumn(), TextColumn("{task.completed}/{task.total} ops"),
                      TimeElapsedColumn(), console=console, disable=quiet, transient=True) as prog:
            task = prog.add_task("sim", total=None)
            result = api.simulate(prep, backend=backend, record_messages=api.messages_to_record(sc),
                                  progress=lambda done, total: prog.update(task, completed=done, total=total))
        dest = api.write_results(result, dest)
    except UserError as err:
        _fail(err)
    for w in result.summary.get("warnings", ()):  # once per run, --quiet or not
        print(f"warning: {w}", file=sys.stderr)
    if not quiet:
        print_summary(result.summary, dest)


@app.command()
def whatif(scenario: Path = typer.Argument(..., help="Scenario YAML"),
           vary: List[str] = typer.Option([], "--vary", help="link=F | gpu=S | stragglers=NxK@S | hop-latency=A,B | "
                                                             "ecmp-seed=A-B | nic=R | fail=switches|A:B"),
           out_dir: Path = typer.Option(..., "--out", help="Results directory (variants.csv, sensitivity.csv)"),
           set_: List[str] = typer.Option([], "--set", help="Override a field: path=value"),
           engine: str = typer.Option("auto", "--engine", help="auto (jax where installed) | jax | numpy"),
           batch: Optional[int] = typer.Option(None, "--batch", help="Variants per batched run (default: "
                                                           "heterosim.whatif.DEFAULT_BATCH)"),
           top: int = typer.Option(10, "--top", help="Rows of the ranked table to print"),
           quiet: bool = typer.Option(False, "--quiet", "-q")) -> None:
    """Many variants of one iteration (links degraded or failed, stragglers, per-hop latency, ECMP seeds, NIC
    speeds) in one batched run, ranked by impact (docs/batch-engine.md)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from heterosim.whatif import DEFAULT_BATCH, whatif as _whatif

    try:
        with Progress(TextColumn("[bold]variants"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, disable=quiet, transient=True) as prog:
            task = prog.add_task("whatif", total=None)
            res = _whatif(scenario, vary, out_dir, overrides=set_, engine=engine,
                          batch=DEFAULT_BATCH if batch is None else batch,
                          progress=lambda d, n: prog.update(task, completed=d, total=n))
    except UserError as err:
        _fail(err)
    if quiet:
        return
    t = Table(title=f"{res.info['scenario']}: {len(res.variants) - 1} variants, {res.info['engine']}, baseline "
                    f"{human_seconds(res.baseline_ns / 1e9)}")
    for c in ("rank", "variant", "iteration time", "vs baseline"):
        t.add_column(c)
    for k, (i, rel) in enumerate(res.ranked()[:top], 1):
        t.add_row(str(k), res.variants[i].name, human_seconds(res.times_ns[i] / 1e9), f"{rel:+.3%}")
    out.print(t)
    rr = res.info.get("flow_backend_reruns") or {}
    if rr.get("count"):
        out.print(f"{rr['count']} variant(s) run through the flow backend: a chain decision taken from the baseline "
                  "run would go the other way under them (variants.csv: engine, note)")
    out.print(f"results: {out_dir}/ (variants.csv, sensitivity.csv, summary.json, histogram.png, ranked.png)")


def print_summary(s: dict, dest: Path | None = None) -> None:
    b = s["breakdown"]
    t = Table(title=f"{s['scenario']} ({s['backend']} backend, {s['gpus']} GPUs)", show_header=False)
    t.add_row("iteration time", human_seconds(s["iteration_time_s"]))
    t.add_row("model TFLOP/s per GPU", f"{s['model_tflops_per_gpu']:.1f}")
    t.add_row("MFU", f"{s['mfu']:.1%}")
    t.add_row("tokens/s", f"{s['tokens_per_s']:,.0f}")
    t.add_row("compute", f"{b['compute']:.1%}")
    for k, v in b["exposed_comm"].items():
        if v > 0:
            t.add_row(f"exposed {k.upper()} comm", f"{v:.1%}")
        if k == "dp":
            for name, part in b.get("exposed_dp_detail", {}).items():
                t.add_row(f"  of which {name.replace('_', ' ').replace('fsdp', 'FSDP').replace('hsdp', 'HSDP')}",
                          f"{part:.1%}")
    t.add_row("pipeline bubble", f"{b['bubble']:.1%}")
    t.add_row("idle", f"{b['idle']:.1%}")
    t.add_row("inter-node comm share", f"{s['inter_node_comm_share']:.1%}")
    sim = s["simulation"]
    t.add_row("simulation", f"{sim['events']:,} events in {sim['wall_s']:.1f} s")
    if "outside_ns3_fraction" in sim:
        t.add_row("wall time outside ns-3", f"{sim['outside_ns3_fraction']:.1%}")
    acc = sim.get("acceleration")
    if acc:
        t.add_row("ns-3 acceleration", f"{acc['bytes_closed_form'] / 1e9:.2f} GB closed form, "
                  f"{acc['bytes_packet_level'] / 1e9:.2f} GB packet level, "
                  + (f"{acc['bytes_fluid'] / 1e9:.2f} GB fluid, " if acc.get("bytes_fluid") else "")
                  + f"{acc['bytes_fast_forwarded']} fast-forwarded, "
                  f"{acc['bytes_replayed']} replayed; {acc['partitions_closed_form']} partitions, "
                  f"{acc['handbacks']} hand-backs, {acc['memo_hits']} memo hits"
                  + (" (no partition qualified: plain packet level)" if acc["fallback_packet_level"] else ""))
        if (acc.get("fluid_pfc") or {}).get("possible_at"):
            t.add_row("fluid collisions", f"PFC could have paused at {len(acc['fluid_pfc']['possible_at'])} switches "
                      "(not simulated by the fluid model; network.json fluid_pfc)")
    out.print(t)
    for a in s.get("approximations", ()):  # summary.json "approximations": one line each, none for an exact run
        if a.get("bound_rel") is None:
            out.print(f"approximate: {a['name']}, bound not measured: {a['what']} ({a['doc']})")
        else:
            out.print(f"approximate: {a['name']}, within {a['bound_rel']:.2%} of the iteration time as measured by "
                      f"{a['measured_by']} ({a['doc']})")
    if dest is not None:
        out.print(f"results: {dest}/ (summary.json, trace.json -> ui.perfetto.dev, *.png; tables: output.tables)")


@app.command()
def collective(topology: Path = typer.Option(..., "--topology", help="Topology YAML (cluster + fabric)"),
               op: str = typer.Option("allreduce", "--op"),
               size: Optional[str] = typer.Option(None, "--size", help="e.g. 1GiB; omit for a 1KiB..8GiB sweep"),
               gpus: int = typer.Option(8, "--gpus"),
               algo: str = typer.Option("auto", "--algo", help="auto | ring | tree | hierarchical | nvls"),
               backend: str = typer.Option("flow", "--backend"),
               max_size: str = typer.Option("8GiB", "--max-size", help="Largest size of the sweep"),
               as_json: bool = typer.Option(False, "--json"),
               png: Optional[Path] = typer.Option(None, "--png", help="Write the busbw-vs-size curve here")) -> None:
    """One collective alone: time, algbw, busbw (nccl-tests definitions)."""
    from heterosim.collective import parse_size, run_collective, size_sweep
    from heterosim.results.writer import atomic_file, check_out_file
    from topologies import load_system

    dest = png if png is not None else (None if size or as_json else Path(f"results/collective-{op}-{gpus}gpus.png"))
    try:
        if dest is not None:
            check_out_file(dest, "--png", PNG_MAGIC)
        system = load_system(topology)
        sizes = [parse_size(size)] if size else size_sweep(1 << 10, parse_size(max_size, "--max-size"))
        results = [run_collective(system, op, s, gpus, algorithm=algo, backend=backend) for s in sizes]
    except UserError as err:
        _fail(err)
    rows = [r.as_dict() for r in results]
    if as_json:
        print(json.dumps(rows[0] if size else rows, indent=2))
    else:
        t = Table(title=f"{op} on {gpus} GPUs ({topology.name}, algo {algo}, {backend})")
        for col in ("size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"):
            t.add_column(col, justify="right")
        for r in rows:
            t.add_row(_human(r["size_bytes"]), f"{r['time_us']:.1f}", f"{r['algbw_GBps']:.2f}", f"{r['busbw_GBps']:.2f}")
        out.print(t)
    if dest is not None:
        from heterosim.results.collplots import plot_busbw

        try:
            with atomic_file(dest, "--png", PNG_MAGIC) as tmp:
                plot_busbw(tmp, rows, title=f"{op}, {gpus} GPUs, {topology.stem}")
        except UserError as err:
            _fail(err)
        if not as_json:
            out.print(f"curve: {dest}")


def human_seconds(t: float) -> str:
    """A duration with 4 significant digits in the unit that fits (s, ms, us, ns): a replayed microbenchmark's
    12 us iteration printed as "0.0000 s" before."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t * 1e9:.4g} ns"


def PNG_MAGIC(head: bytes) -> bool:
    """``--png`` replaces an existing file only when it is a curve ``collective`` wrote (its text chunk)."""
    from heterosim.results.collplots import is_our_png

    return is_our_png(head)


def _human(n: int) -> str:
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m:
            return f"{n / m:g}{unit}"
    return f"{n}B"


@app.command()
def calibrate(measurements: Path = typer.Argument(..., help="Folder with gemm.csv, attention.csv, elementwise.csv"),
              device: str = typer.Option("H100-SXM", "--device", help="Catalog device the timings were taken on"),
              out_file: Optional[Path] = typer.Option(None, "--out", help="Write fitted efficiency YAML here")) -> None:
    """Error of the analytical model and of the fitted predictor on your kernel timings, per op class."""
    from heterosim.hardware.calibrate import print_report

    try:
        print_report(measurements, device, out_file, out)
    except UserError as err:
        _fail(err)


@app.command("import-hf")
def import_hf(config: Path, name: Optional[str] = typer.Option(None, help="Zoo name (default: from the file)")) -> None:
    """Turn a HuggingFace config.json into a zoo YAML entry (printed)."""
    from heterosim.zoo.hf_import import hf_to_zoo_yaml

    try:
        print(hf_to_zoo_yaml(config, name or config.parent.name or "imported"))
    except UserError as err:
        _fail(err)


@app.command()
def zoo() -> None:
    """List the model zoo."""
    from heterosim.zoo import zoo_model, zoo_names

    t = Table("name", "layers", "hidden", "heads", "experts", "source")
    for n in zoo_names():
        m = zoo_model(n)
        t.add_row(n, str(m["num_layers"]), str(m["hidden_size"]), str(m["num_attention_heads"]),
                  str(m.get("num_experts", 0)), str(m.get("source", ""))[:50])
    out.print(t)


def _register_subcommands() -> None:
    """Commands that live next to their library code (planner, sweeps, studies)."""
    from heterosim.planner.cli import compare_suite_command, plan_command
    from heterosim.studies.cli import compare_command
    from heterosim.sweep.cli import sweep_command
    from heterosim.traffic.cli import traffic_command

    app.command("plan")(plan_command)
    app.command("compare-suite")(compare_suite_command)
    app.command("sweep")(sweep_command)
    app.command("compare")(compare_command)
    app.command("traffic")(traffic_command)


_register_subcommands()


def _click_exceptions() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(NoArgsIsHelpError, UsageError, ClickException) classes of every click that may back typer.

    typer >= 0.16 raises its vendored copy (``typer._click``) even when the real ``click`` is installed too
    (the ``ray`` extra brings it); older typer raises ``click``'s. Catching one family only let the other's
    usage errors through as tracebacks, so both are caught."""
    import importlib

    no_args, usage, click_exc = [], [], []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "NoArgsIsHelpError"):
            no_args.append(mod.NoArgsIsHelpError)
        usage.append(mod.UsageError)
        click_exc.append(mod.ClickException)
    return tuple(no_args), tuple(usage), tuple(click_exc)


def main() -> None:
    """Run the app; every error is one line on stderr (usage errors too, instead of a usage box)."""
    NoArgsIsHelpError, UsageError, ClickException = _click_exceptions()
    import warnings

    # A warning the library raises (a renamed field, ...) is one line on the console, not two with source.
    warnings.formatwarning = lambda message, category, *_a, **_k: f"warning: {message}\n"

    code = 0
    try:
        rv = app(standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except NoArgsIsHelpError as exc:
        print(exc.format_message(), file=sys.stderr)
        code = 2
    except UsageError as exc:  # bad flag or argument
        cmd = exc.ctx.info_name if exc.ctx is not None and exc.ctx.parent is not None else ""
        msg = exc.format_message().replace("\n", " ")
        print(f"error: {cmd + ': ' if cmd else ''}{msg}", file=sys.stderr)
        code = 2
    except ClickException as exc:
        print(f"error: {exc.format_message()}".replace("\n", " "), file=sys.stderr)
        code = exc.exit_code
    except typer.Exit as exc:
        code = exc.exit_code
    except UserError as err:  # anything raised outside a command's own handler
        print(f"error: {err}", file=sys.stderr)
        code = 2
    except PermissionError as err:  # e.g. --out in a folder owned by another user (a container's uid)
        print(f"error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        code = 2
    except (KeyboardInterrupt, typer.Abort):
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
