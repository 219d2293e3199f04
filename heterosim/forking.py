"""Work in forked processes: a run's plots beside its other result files (:class:`ForkedTask`), a plan search's
or a suite's simulations side by side (:func:`forked_map`). Used by layers that do not otherwise know each other
(results, planner), so it lives here.

Fork, not spawn: the child starts with the parent's objects (a simulation result, built systems) without
pickling them. Only on Linux (:func:`can_fork`); elsewhere the work runs in the calling process.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback
from typing import Any, Callable

from heterosim.errors import UserError


class ForkedTask:
    """``fn(*args)`` in a forked child process while the caller goes on (``api.write_results``: the plots, while
    it writes the other files; importing matplotlib and drawing take ~1.4 s at 1,024 GPUs, as much as every
    other file together, and a second core is idle then). ``join`` waits for it and raises in the caller what
    the child raised; ``cancel`` kills and reaps it (the caller failed: e.g. nothing may be written after the
    caller's temp dir is removed). ``fn`` returns nothing: its work is what it writes.

    Runs ``fn`` inline, as before, where forking does not pay or is not safe: not Linux, one usable CPU, or
    other threads in this process (:func:`_fork_pays`)."""

    def __init__(self, fn, *args) -> None:
        self._pid = None
        if not _fork_pays():
            fn(*args)
            return
        sys.stdout.flush()  # (else the child would write again what the parent had buffered)
        sys.stderr.flush()
        try:
            r, w = os.pipe()
        except OSError:  # (out of descriptors: the work is still wanted, here)
            fn(*args)
            return
        try:
            pid = os.fork()
        except OSError:  # (no process to spare, e.g. EAGAIN at a process limit: here, as without a fork)
            os.close(r)
            os.close(w)
            fn(*args)
            return
        if pid == 0:  # the child: never returns into the caller's code
            code = 0
            try:
                os.close(r)
                fn(*args)
            except BaseException as exc:  # noqa: BLE001  (everything goes back to the parent)
                code = 1
                try:
                    exc.add_note(f"(in a forked child process)\n{traceback.format_exc()}")
                    data = pickle.dumps(exc)
                except Exception:  # noqa: BLE001  (an exception that does not pickle)
                    data = pickle.dumps(RuntimeError(traceback.format_exc()))
                try:
                    with os.fdopen(w, "wb") as fh:
                        fh.write(data)
                except BaseException:  # noqa: BLE001
                    pass
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(w)
        self._pid, self._r, self._name = pid, r, getattr(fn, "__qualname__", repr(fn))

    def join(self) -> None:
        """Wait for the child; raise what it raised."""
        if self._pid is None:
            return
        with os.fdopen(self._r, "rb") as fh:
            data = fh.read()
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            return
        if data:
            raise pickle.loads(data)
        why = f"killed by signal {-code}{' (out of memory?)' if code == -signal.SIGKILL else ''}" if code < 0 \
            else f"ended with status {code}"
        raise UserError(f"the forked process running {self._name} {why}; nothing was written")

    def cancel(self) -> None:
        """Kill the child and reap it (nothing it would write is wanted any more)."""
        if self._pid is None:
            return
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self._pid, 0)
        os.close(self._r)
        self._pid = None


def forked_map(fn: Callable[[int], Any], n: int, jobs: int, on_done: Callable[[int, Any], None] | None = None,
               field: str = "--jobs") -> list:
    """``[fn(0), ..., fn(n - 1)]``, ``jobs`` at a time in forked worker processes (what ``fn`` reads is inherited,
    not pickled; its results are pickled back), in order; ``on_done(k, result)`` as each finishes. The caller
    sees the exception ``fn`` raised; a worker that dies (a crash, the out-of-memory killer) is a one-line
    UserError naming ``field``, not a hang. One job, one item or no fork: in turn, here (:func:`map_forks`)."""
    if not map_forks(jobs, n):
        out = []
        for k in range(n):
            out.append(fn(k))
            if on_done is not None:
                on_done(k, out[-1])
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    global _FN
    _FN = fn
    out = [None] * n
    try:
        # (workers are forked at the first submit, after _FN is set)
        with ProcessPoolExecutor(min(jobs, n), mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(_call_fn, k): k for k in range(n)}
            for fut in as_completed(futures):
                k = futures[fut]
                out[k] = fut.result()
                if on_done is not None:
                    on_done(k, out[k])
    except BrokenProcessPool:
        raise UserError(f"a worker process died (a crash, or out of memory); {field} 1 runs the work in this "
                        f"process", field=field, value=jobs) from None
    finally:
        _FN = None
    return out


_FN: Callable[[int], Any] | None = None
""":func:`forked_map`'s function, inherited by its forked workers."""


def _call_fn(k: int):
    return _FN(k)


def map_forks(jobs: int, n: int) -> bool:
    """Whether :func:`forked_map` runs ``n`` items in forked workers with ``jobs`` (else in turn, in the caller:
    callers prepare shared state or word their progress by it)."""
    return jobs > 1 and n > 1 and can_fork()


def can_fork() -> bool:
    """Whether work may go to forked processes: on Linux only (elsewhere ``fork`` is absent, or unsafe with the
    system's frameworks)."""
    return sys.platform.startswith("linux")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as a container's CPU set limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _fork_pays() -> bool:
    """Fork for one task beside this process only with a second usable CPU (with one, the child only takes
    turns with the parent), and only from a single-threaded process: a fork copies the calling thread alone,
    so a lock another thread held (a notebook kernel's output stream, say) would stay held in the child."""
    import threading

    return can_fork() and usable_cpus() > 1 and threading.active_count() == 1
