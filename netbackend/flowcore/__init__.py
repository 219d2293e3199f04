"""The flow backend's rate engine compiled (``rates.cc``), built on first use into the cache.

The same algorithm as :class:`netbackend.flow._PyRates`, operation for operation, so the rates are the
same to the bit; the refills that dominate large flow-level runs go several times faster
(``benchmarks/bench_run.py``, ``benchmarks/bench_planner.py``).
It is compiled with g++ against this Python's headers into ``<cache>/flowcore-<key>/``, keyed by the
source, flags and Python, in a temporary file renamed into place (concurrent first uses are safe); once
built it needs no compiler. Where it cannot be built (no g++, no headers) :func:`load` says why in
:data:`why_not` and the flow backend runs its Python engine: same results, slower.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

from netbackend.cache import cache_root
from hscommon.errors import UserError

SOURCE = Path(__file__).resolve().parent / "rates.cc"
CXXFLAGS = ["-O2", "-std=c++17", "-fPIC", "-shared", "-ffp-contract=off", "-fno-strict-aliasing", "-Wall"]
"""-ffp-contract=off: no fused multiply-add, so every operation rounds as Python's does."""

_module: ModuleType | None = None
why_not: str | None = None
"""Why the compiled engine is not in use (None: it is, or :func:`load` was not called yet)."""


def _compiler() -> str | None:
    cxx = os.environ.get("CXX") or "g++"
    return shutil.which(cxx)


def _key(include: str) -> str:
    """The source, flags and the Python it is for: a module built once is used without a compiler (the
    Docker image's runtime stage has none)."""
    h = hashlib.sha256()
    for part in (" ".join(CXXFLAGS), include, sys.version, importlib.machinery.EXTENSION_SUFFIXES[0]):
        h.update(part.encode() + b"\0")
    h.update(SOURCE.read_bytes())
    return h.hexdigest()[:16]


def _build() -> Path:
    include = sysconfig.get_paths()["include"]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    final = cache_root() / f"flowcore-{_key(include)}" / f"_flowcore{suffix}"
    if final.exists():
        return final
    cxx = _compiler()
    if cxx is None:
        raise OSError("no C++ compiler (g++ or $CXX) on PATH")
    if not (Path(include) / "Python.h").exists():
        raise OSError(f"no Python.h under {include} (install the Python development headers)")
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="._flowcore-", suffix=suffix, dir=final.parent)
    os.close(fd)
    try:
        res = subprocess.run([cxx, *CXXFLAGS, f"-I{include}", str(SOURCE), "-o", tmp], capture_output=True,
                             text=True, check=False)
        if res.returncode != 0:
            tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
            raise OSError(f"compiling {SOURCE.name} failed: {tail}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return final


def load(required: bool = False) -> ModuleType | None:
    """The compiled module (built first if needed), or None where it cannot be built (``required``: a
    one-line :class:`UserError` saying why instead)."""
    global _module, why_not
    if _module is None and why_not is None:
        try:
            path = _build()
            spec = importlib.util.spec_from_file_location("netbackend.flowcore._flowcore", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _module = module
        except (OSError, ImportError) as e:
            why_not = str(e)
    if _module is None and required:
        raise UserError(f"the compiled flow engine is not available: {why_not}", field="HETEROSIM_FLOW_ENGINE",
                        value="compiled")
    return _module
