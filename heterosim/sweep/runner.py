"""run_sweep: expand, check every point's scenario, run the unfinished ones, tabulate, plot."""
from __future__ import annotations

import json
import math
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heterosim.errors import ConfigError, UserError
from heterosim.sweep.config import SweepConfig, load_sweep
from heterosim.sweep.executors import EXECUTORS, run_local, run_ray
from heterosim.sweep.expand import Point, expand
from heterosim.sweep.results import collect_rows, plot_summary, write_tables
from heterosim.sweep.worker import ERROR, SUMMARY, Outcome, PointTask, RunFn, run_scenario, write_error, write_point

#: Loader errors that mean the parameter path itself is wrong (fatal for the whole sweep).
_PATH_ERRORS = {"unknown field", "index out of range", "path does not name a mapping", "empty override path"}


@dataclass
class SweepResult:
    """What a sweep left behind, and how each point ended."""

    config: SweepConfig
    out_dir: Path
    points: list[Point]
    rows: list[dict[str, Any]]
    """One per point, as in results.csv."""
    table: Path
    parquet: Path | None = None
    plot: Path | None = None
    ran: list[str] = field(default_factory=list)
    """Ids of the points run by this call (the others were finished before, or invalid)."""
    batch: Any = None
    """What the batch engine ran (``heterosim.sweep.batched.BatchReport``), None when it was not tried."""

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(r["status"] for r in self.rows))

    @property
    def ok(self) -> bool:
        return all(r["status"] == "ok" for r in self.rows)


def resolve_out(cfg: SweepConfig, sweep_file: str | None, out: str | Path | None) -> Path:
    """--out, else the sweep's ``out`` (relative to the working directory, like a scenario's), else results/sweeps/NAME."""
    if out is not None:
        return Path(out)
    if cfg.out:
        return Path(cfg.out)
    name = cfg.name or (Path(sweep_file).stem if sweep_file else "sweep")
    return Path("results/sweeps") / name


def run_sweep(sweep: str | Path | SweepConfig, *, jobs: int = 1, executor: str = "local",
              address: str | None = None, out: str | Path | None = None, run_fn: RunFn | None = None,
              timeout_s: float | None = None, progress: bool = False, validate: bool = True,
              base_dir: str | Path | None = None, overrides: dict[str, Any] | None = None,
              batch: bool = True, engine: str = "auto") -> SweepResult:
    """Run every point of a sweep that has no summary.json yet; write results.csv/.parquet and summary.png.

    ``sweep``: a SWEEP.yaml path or a model (then its ``scenario`` is relative to ``base_dir``, default cwd).
    ``jobs``: points at once (0 = one per CPU locally, no cap on Ray). ``run_fn(task) -> summary dict`` replaces the real
    simulation (tests); it must be picklable (a module-level function) since it runs in a child process.
    ``timeout_s`` overrides the sweep file's. Failed points are recorded, never raised; bad sweep files
    and parameter paths that name no scenario field raise :class:`UserError`. ``overrides``: fields set on
    every point (the CLI's ``--measurements``); a point's own parameters win. A resumed sweep must use the
    overrides it started with. ``batch``: run the points that differ only in what the batch engine varies as
    batches (``heterosim.sweep.batched``; ``engine``: auto | jax | numpy), the others through the normal path;
    never with a ``run_fn``.
    """
    base_over = dict(overrides or {})
    if isinstance(sweep, SweepConfig):
        cfg, sweep_file, base = sweep.check(), None, Path(base_dir or Path.cwd()).resolve()
    else:
        sweep_file = str(sweep)
        cfg, base = load_sweep(sweep)
    if executor not in EXECUTORS:
        raise UserError(f"unknown executor (choose {' | '.join(EXECUTORS)})", field="--executor", value=executor)
    if jobs < 0:
        raise UserError("must be >= 0 (0 = one per CPU)", field="--jobs", value=jobs)
    if batch:
        from heterosim.whatif import pick_engine

        pick_engine(engine)  # (an unknown engine is refused before anything is written)
    timeout = timeout_s if timeout_s is not None else cfg.timeout_s
    if timeout is not None and (not math.isfinite(timeout) or timeout <= 0):
        raise UserError("must be a finite number of seconds > 0", field="--timeout" if timeout_s is not None
                        else "timeout_s", value=timeout)
    scenario = (base / cfg.scenario).resolve()
    if not scenario.is_file():
        raise ConfigError("scenario file not found", file=sweep_file, field="scenario", value=str(cfg.scenario))
    out_dir = resolve_out(cfg, sweep_file, out).resolve()
    points_dir = out_dir / "points"
    points = expand(cfg)

    resuming = _check_out(out_dir)  # before anything else: a folder that is not ours is refused untouched
    invalid = _check_points(points, scenario, sweep_file, base_over) if validate else {}
    if resuming:
        _check_resume_overrides(out_dir, base_over)
    _claim_out_dir(out_dir)
    _write_manifest(out_dir, cfg, sweep_file, scenario, points, base_over)

    todo: list[PointTask] = []
    for p in points:
        d = points_dir / p.id
        task = PointTask(p.id, str(scenario), {**base_over, **p.params}, str(d), cfg.backend,
                         str(out_dir / "logs" / f"{p.id}.log"), dict(p.params))
        if (d / SUMMARY).exists() and not (d / ERROR).exists():
            continue  # finished by an earlier invocation
        if d.exists():
            shutil.rmtree(d)
        if p.id in invalid:
            write_error(d, "invalid", invalid[p.id])
            write_point(d, task, Outcome("invalid", invalid[p.id]))
            continue
        todo.append(task)

    fn = run_fn or run_scenario
    with _Progress(len(points), len(points) - len(todo), enabled=progress, label=cfg.name or Path(sweep_file or "sweep").stem) as bar:
        def on_done(task: PointTask, outcome: Outcome) -> None:
            write_point(task.out_dir, task, outcome)
            bar.advance(outcome.status)

        report = None
        if todo and batch and run_fn is None:
            from heterosim.sweep import batched

            groups = batched.plan(todo, cfg.backend)
            report = batched.run_groups(groups, str(scenario), on_done, engine=engine)
            done = set(report.points)
            todo_normal = [t for t in todo if t.point_id not in done]
        else:
            todo_normal = todo
        if todo_normal:
            if executor == "local":
                run_local(todo_normal, fn, jobs=jobs or os.cpu_count() or 1, timeout_s=timeout, on_done=on_done)
            else:
                run_ray(todo_normal, fn, jobs=jobs, timeout_s=timeout, on_done=on_done, address=address)

    rows = collect_rows(points, points_dir, cfg.metrics)
    written = write_tables(rows, out_dir)
    title = f"{cfg.name or Path(sweep_file or 'sweep').stem} ({scenario.name})"
    plot = plot_summary(rows, list(cfg.parameters), cfg.metrics, out_dir / "summary.png", title=title)
    return SweepResult(cfg, out_dir, points, rows, written[0], written[1] if len(written) > 1 else None, plot,
                       [t.point_id for t in todo], report)


def _check_points(points: list[Point], scenario: Path, sweep_file: str | None,
                  base_over: dict[str, Any] | None = None) -> dict[str, str]:
    """Load every point's scenario now: a wrong path stops the sweep, a bad value marks its point invalid."""
    from heterosim.config.loader import load_scenario

    load_scenario(scenario, dict(base_over or {}))  # the base scenario itself must be valid (error names its file)
    invalid: dict[str, str] = {}
    for p in points:
        try:
            load_scenario(scenario, {**(base_over or {}), **p.params})
        except UserError as err:
            if err.reason in _PATH_ERRORS:
                param = next((k for k in p.params if err.field and (k == err.field or k.startswith(err.field + ".")
                                                                     or err.field.startswith(k))), err.field)
                raise ConfigError(f"{err.reason} in {scenario.name}", file=sweep_file,
                                  field=f"parameters.{param}", value=p.params.get(param, err.value)) from None
            invalid[p.id] = str(err)
    return invalid


def _check_out(out_dir: Path) -> bool:
    """Whether ``out_dir`` is a sweep folder to resume; raises if HeteroSim may not write there. Touches nothing.

    Only a folder HeteroSim stamped is resumed (or replaced point by point); a folder of the user's is
    refused even when it holds a file named ``sweep.json``, as ``run --out`` refuses it."""
    from heterosim.results.writer import check_out_dir, stamped

    check_out_dir(out_dir)  # new, empty, or stamped by HeteroSim; anything else raises
    return stamped(out_dir) and (out_dir / "sweep.json").is_file()


def _claim_out_dir(out_dir: Path) -> None:
    """Create (or resume in) a sweep folder that ``_check_out`` admitted (checked again: nothing changed since)."""
    from heterosim.results.writer import STAMP, OutputError

    _check_out(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / STAMP).write_text("written by HeteroSim (a sweep); re-running the sweep resumes here\n")
    except OSError as exc:
        raise OutputError(f"cannot create ({exc.strerror})", field="--out", value=str(out_dir)) from None


def _check_resume_overrides(out_dir: Path, base_over: dict[str, Any]) -> None:
    """Points finished under other command-line overrides (--measurements) would mix two compute models."""
    try:
        old = json.loads((out_dir / "sweep.json").read_text()).get("overrides", {})
    except (OSError, ValueError, AttributeError):
        return
    if old != base_over:
        key = next(iter(set(old) | set(base_over)))
        raise UserError(f"this sweep folder was started with {key} = {old.get(key, '(not set)')}; resume with the "
                        "same value or use another --out", field="--measurements" if key == "hardware.measurements"
                        else key, value=base_over.get(key, "(not set)"))


def _write_manifest(out_dir: Path, cfg: SweepConfig, sweep_file: str | None, scenario: Path,
                    points: list[Point], overrides: dict[str, Any] | None = None) -> None:
    data = {"sweep_file": sweep_file, "scenario": str(scenario), "config": cfg.model_dump(),
            "points": [{"id": p.id, "params": p.params} for p in points], "overrides": overrides or {}}
    tmp = out_dir / "sweep.json.tmp"
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(out_dir / "sweep.json")


class _Progress:
    """A rich progress bar with ETA over points (finished earlier ones count as done)."""

    def __init__(self, total: int, done: int, *, enabled: bool, label: str) -> None:
        self.total, self.done, self.enabled, self.label = total, done, enabled, label
        self.counts: Counter = Counter()
        self._prog = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._prog = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[state]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                  TimeRemainingColumn(), console=Console(stderr=True), transient=False)
            self._prog.__enter__()
            self._task = self._prog.add_task(f"sweep {self.label}", total=self.total, completed=self.done,
                                             state=f"({self.done} done before)" if self.done else "")
        return self

    def advance(self, status: str) -> None:
        self.counts[status] += 1
        if self._prog is not None:
            state = " ".join(f"{k}:{v}" for k, v in sorted(self.counts.items()))
            self._prog.update(self._task, advance=1, state=state)

    def __exit__(self, *exc) -> None:
        if self._prog is not None:
            self._prog.__exit__(*exc)
