"""Where a sweep's points run: local child processes, or tasks on a Ray cluster.

Both run every point in a process of its own, enforce the per-point timeout by
killing that process, and report each point's :class:`Outcome` to ``on_done`` as
soon as it is known (for the progress bar and so that a crash loses one point).
"""
from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import shutil
import signal
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Callable, Sequence

from hscommon.errors import UserError

from heterosim.sweep.worker import (SUMMARY, Outcome, PointTask, RunFn, child_main, execute, read_error,
                                    write_error)

OnDone = Callable[[PointTask, Outcome], None]
EXECUTORS = ("local", "ray")


def run_local(tasks: Sequence[PointTask], run_fn: RunFn, *, jobs: int, timeout_s: float | None,
              on_done: OnDone) -> None:
    """At most ``jobs`` spawned processes at once; one per point, never reused."""
    ctx = mp.get_context("spawn")  # fork would copy a half-initialised ns-3 / thread state
    pending = deque(tasks)
    running: dict[str, tuple[mp.process.BaseProcess, PointTask, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < max(1, jobs):
                task = pending.popleft()
                proc = ctx.Process(target=child_main, args=(run_fn, task), name=f"sweep-{task.point_id}")
                proc.start()
                running[task.point_id] = (proc, task, time.monotonic())
            for pid, (proc, task, t0) in list(running.items()):
                elapsed = time.monotonic() - t0
                if not proc.is_alive():
                    proc.join()
                    outcome = _judge_exit(proc.exitcode, task, elapsed)
                elif timeout_s is not None and elapsed > timeout_s:
                    _kill(proc)
                    outcome = Outcome("timeout", f"run exceeded timeout_s = {timeout_s:g} s and was killed", elapsed)
                    write_error(task.out_dir, outcome.status, outcome.error)
                else:
                    continue
                del running[pid]
                if outcome.status != "ok":
                    _remove_partial(task)
                on_done(task, outcome)
            if running:
                mp.connection.wait([p.sentinel for p, _, _ in running.values()], timeout=0.2)
    finally:
        for proc, _, _ in running.values():  # interrupted: leave no orphans behind
            _kill(proc)


def _judge_exit(exitcode: int | None, task: PointTask, elapsed: float) -> Outcome:
    out = Path(task.out_dir)
    err = read_error(out)
    if exitcode == 0 and err is None and (out / SUMMARY).exists():
        return Outcome("ok", wall_s=elapsed)
    if err is not None and exitcode == 0:
        return Outcome("error", err, elapsed)
    if exitcode is not None and exitcode < 0:
        try:
            why = f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            why = f"killed by signal {-exitcode}"
    else:
        why = f"exited with code {exitcode}"
    msg = f"run process {why}{_log_tail(task)}"
    write_error(out, "crash", msg)
    return Outcome("crash", msg, elapsed)


def _log_tail(task: PointTask) -> str:
    if not task.log_file:
        return ""
    try:
        lines = [ln.strip() for ln in Path(task.log_file).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return f" (last output: {lines[-1][:200]})" if lines else ""


def _remove_partial(task: PointTask) -> None:
    """A killed run can leave the results writer's temp dir (``.<id>.tmp-*``) behind."""
    out = Path(task.out_dir)
    for junk in list(out.parent.glob(f".{out.name}.tmp-*")) + list(out.parent.glob(f".{out.name}.old-*")):
        shutil.rmtree(junk, ignore_errors=True)


def _kill(proc) -> None:
    if proc.is_alive():
        proc.terminate()
        proc.join(2.0)
    if proc.is_alive():
        proc.kill()
        proc.join(5.0)


# ---------------------------------------------------------------- Ray

def _ray_point(run_fn: RunFn, task: PointTask) -> dict:
    """Runs on a Ray worker: the point into a local temp dir, its files shipped back as bytes.

    Workers need not share a filesystem with the driver, so the driver writes the files.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f"heterosim-{task.point_id}-"))
    try:
        local = PointTask(**{**task.__dict__, "out_dir": str(tmp / "out"), "log_file": None})
        outcome = execute(run_fn, local)
        files = {}
        base = Path(local.out_dir)
        if base.exists():
            for f in base.rglob("*"):
                if f.is_file():
                    files[str(f.relative_to(base))] = f.read_bytes()
        return {"status": outcome.status, "error": outcome.error, "wall_s": outcome.wall_s, "files": files}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_ray(tasks: Sequence[PointTask], run_fn: RunFn, *, jobs: int | None, timeout_s: float | None,
            on_done: OnDone, address: str | None = None) -> None:
    """Ray tasks with ``max_calls=1`` (a fresh worker process per point); ``jobs`` caps those in flight."""
    try:
        import ray
    except ImportError:
        raise UserError("needs the 'ray' package: pip install 'heterosim[ray]'", field="--executor",
                        value="ray") from None
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    remote = ray.remote(num_cpus=1, max_calls=1, max_retries=0)(_ray_point)
    pending = deque(tasks)
    limit = jobs if jobs and jobs > 0 else len(tasks)
    running: dict = {}
    try:
        while pending or running:
            while pending and len(running) < max(1, limit):
                task = pending.popleft()
                running[remote.remote(run_fn, task)] = (task, time.monotonic())
            ready, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
            for ref in ready:
                task, t0 = running.pop(ref)
                on_done(task, _ray_outcome(ray, ref, task, time.monotonic() - t0))
            if timeout_s is not None:
                now = time.monotonic()
                for ref, (task, t0) in list(running.items()):
                    if now - t0 > timeout_s:
                        ray.cancel(ref, force=True)
                        running.pop(ref)
                        outcome = Outcome("timeout", f"run exceeded timeout_s = {timeout_s:g} s and was cancelled",
                                          now - t0)
                        write_error(task.out_dir, outcome.status, outcome.error)
                        on_done(task, outcome)
    finally:
        for ref in running:
            ray.cancel(ref, force=True)


def _ray_outcome(ray, ref, task: PointTask, elapsed: float) -> Outcome:
    try:
        res = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - worker died (segfault, OOM): the point's result
        msg = f"ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        write_error(task.out_dir, "crash", msg)
        return Outcome("crash", msg, elapsed)
    out = Path(task.out_dir)
    if out.exists():
        shutil.rmtree(out)
    for rel, data in res["files"].items():
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return Outcome(res["status"], res["error"], res["wall_s"])
