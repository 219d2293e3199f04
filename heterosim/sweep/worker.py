"""What runs inside a sweep's child process: one point, results into its directory.

Each run gets a fresh process because ns-3's simulator is a per-process singleton
(and a crash in native code must take down one point, not the sweep).
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

SUMMARY = "summary.json"
ERROR = "error.json"
POINT = "point.json"


@dataclass
class PointTask:
    """Everything a child needs to run one point (picklable, no open handles)."""

    point_id: str
    scenario: str
    """Absolute path of the base scenario YAML."""
    overrides: dict[str, Any]
    out_dir: str
    """The point's results directory (``OUT/points/<id>``)."""
    backend: str | None = None
    log_file: str | None = None
    """stdout/stderr of the child go here (native ns-3 output included)."""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """How one point ended, as the driver records it."""

    status: str
    """ok | error (the run raised) | crash (the process died) | timeout | invalid (the values do not validate)."""
    error: str = ""
    wall_s: float = 0.0


RunFn = Callable[[PointTask], dict]


def run_scenario(task: PointTask) -> dict:
    """The real run: load with the point's overrides, simulate, write results into ``task.out_dir``."""
    from heterosim import pipeline as api

    result = api.run(task.scenario, out_dir=task.out_dir, backend=task.backend, overrides=task.overrides)
    return result.summary


def execute(run_fn: RunFn, task: PointTask) -> Outcome:
    """Run one point in this process and leave summary.json or error.json behind.

    Never raises for a failed run: the failure is the point's result.
    """
    out = Path(task.out_dir)
    t0 = time.monotonic()
    try:
        summary = run_fn(task)
        if not (out / SUMMARY).exists():
            out.mkdir(parents=True, exist_ok=True)
            _write_json(out / SUMMARY, summary if summary is not None else {})
        return Outcome("ok", wall_s=time.monotonic() - t0)
    except BaseException as exc:  # noqa: BLE001 - a point's failure is data, not a sweep failure
        from hscommon.errors import UserError

        if isinstance(exc, KeyboardInterrupt):
            raise
        msg = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
        out.mkdir(parents=True, exist_ok=True)
        _write_json(out / ERROR, {"status": "error", "error": msg.replace("\n", " "),
                                  "traceback": traceback.format_exc()})
        return Outcome("error", msg, time.monotonic() - t0)


def child_main(run_fn: RunFn, task: PointTask) -> None:
    """Entry point of a spawned process: output to the point's log, exit 0 whatever the run did."""
    if task.log_file:
        Path(task.log_file).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(task.log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    execute(run_fn, task)
    sys.stdout.flush()
    sys.stderr.flush()


def read_error(out_dir: str | Path) -> str | None:
    path = Path(out_dir) / ERROR
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text()).get("error", "error")
    except (OSError, ValueError):
        return "error (unreadable error.json)"


def write_error(out_dir: str | Path, status: str, message: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / ERROR, {"status": status, "error": message})


def write_point(out_dir: str | Path, task: PointTask, outcome: Outcome) -> None:
    """point.json: which parameters this directory holds, and how the run ended."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / POINT, {"id": task.point_id, "params": task.params, "overrides": task.overrides,
                              "scenario": task.scenario, "backend": task.backend, **asdict(outcome)})


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
