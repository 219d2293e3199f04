"""Load the compiled heterosim-rdma module into this process (once).

Only the binding facade header (standard-library types) is given to cppyy, so
loading costs about a second and no ns-3 header is parsed by cling: no
``from ns import ns`` (15 s) and none of its "Failed to materialize symbols"
warnings.  ns-3's simulator is a process-wide singleton: one simulation at a
time per process (see shared/ns3-wheel-notes.md); :func:`run_isolated` runs a
function in a child process for tests and sweeps.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

from hscommon.errors import NetworkError
from netbackend.ns3.build import ensure_built

_lock = threading.Lock()
_sim_class = None
_active: object | None = None


@contextlib.contextmanager
def _quiet_stderr():
    """Silence C-level stderr (cling chatter) while loading; Python errors still raise."""
    try:
        fd = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)
        os.close(devnull)


def sim_class():
    """The C++ ``ns3::HeterosimRdmaSim`` class, building and loading the module on first use."""
    global _sim_class
    with _lock:
        if _sim_class is None:
            build = ensure_built()
            with _quiet_stderr():
                import cppyy

                cppyy.add_include_path(str(build.include_dir))
                cppyy.load_library(str(build.library))
                cppyy.include(str(build.facade_header))
            _sim_class = cppyy.gbl.ns3.HeterosimRdmaSim
        return _sim_class


def acquire(owner: object) -> None:
    """Claim this process's single ns-3 simulation."""
    global _active
    with _lock:
        if _active is not None and _active is not owner:
            raise NetworkError("only one ns-3 simulation per process; close() the previous backend "
                               "first or use netbackend.ns3.run_isolated", field="network.backend",
                               value="ns3")
        _active = owner


def release(owner: object) -> None:
    global _active
    with _lock:
        if _active is owner:
            _active = None


def run_isolated(fn: Callable[..., Any], *args: Any, start_method: str = "spawn", **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` in a child process and return its result.

    A crash in C++ then takes down only the child; ``fn`` and its result must
    be picklable (a module-level function).  ``spawn`` is the default because
    forking a process that already holds an ns-3 simulation copies its state.
    """
    ctx = multiprocessing.get_context(start_method)
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        try:
            return pool.submit(fn, *args, **kwargs).result()
        except BrokenProcessPool as exc:
            raise NetworkError("the ns-3 child process died (C++ crash or out of memory)",
                               field="network.backend", value="ns3") from exc
