"""Compile the heterosim-rdma ns-3 module against the pip ``ns3`` wheel, on first use.

The wheel's CMake config cannot be used (its imported targets point at the
build machine's include dirs, see shared/ns3-wheel-notes.md), so the module is
compiled with plain g++ against the wheel's include/ and lib64/.  Outputs go to
a cache directory keyed by the sources, compiler and wheel version, built in a
temporary directory and renamed into place, so concurrent first uses are safe.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from netbackend.cache import cache_root
from hscommon.errors import UserError

MODULE_DIR = Path(__file__).resolve().parent / "src" / "heterosim-rdma"
LIB_NAME = "libheterosim-rdma.so"
TEST_BIN = "heterosim-rdma-test"
FACADE_HEADER = "heterosim-rdma-sim.h"
BUILD_INFO = "build-info.json"
CXXFLAGS = ["-O2", "-std=c++20", "-fPIC", "-pthread", "-Wall", "-Wno-unused-variable"]
NS3_MODULES = ("core", "network", "point-to-point")
_INSTALL_HINT = "install with pip install 'heterosim[ns3]'"


@dataclass(frozen=True)
class Ns3Build:
    """Where a finished build lives."""

    root: Path
    library: Path
    include_dir: Path
    test_binary: Path
    facade_header: Path
    examples: tuple[Path, ...] = ()
    """The example programs (examples/*.cc), each named after its source."""

    def complete(self) -> bool:
        return self.library.exists() and self.test_binary.exists() and all(e.exists() for e in self.examples)


@dataclass(frozen=True)
class _Toolchain:
    cxx: str
    cxx_version: str
    ns3_prefix: Path
    ns3_version: str
    lib_prefix: str  # e.g. "ns3.44"


def _toolchain() -> _Toolchain:
    cxx = os.environ.get("CXX") or shutil.which("g++")
    if not cxx or not shutil.which(cxx):
        raise UserError(f"the ns-3 backend needs g++ to compile its C++ module; install g++ "
                        f"(e.g. apt-get install g++) and the ns3 wheel ({_INSTALL_HINT})",
                        field="network.backend", value="ns3")
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the ns-3 backend needs the ns3 Python wheel; {_INSTALL_HINT}",
                        field="network.backend", value="ns3")
    prefix = Path(list(spec.submodule_search_locations)[0])
    core = sorted((prefix / "lib64").glob("libns3*-core.so")) or sorted((prefix / "lib").glob("libns3*-core.so"))
    if not (prefix / "include" / "ns3").is_dir() or not core:
        raise UserError(f"the ns3 wheel at {prefix} has no headers or libraries; {_INSTALL_HINT}",
                        field="network.backend", value="ns3")
    try:
        version = importlib.metadata.version("ns3")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    lib_prefix = core[0].name[len("lib"):-len("-core.so")]
    return _Toolchain(cxx, out.stdout.splitlines()[0] if out.stdout else "", prefix, version, lib_prefix)


def _sources() -> tuple[list[Path], list[Path], list[Path], list[Path]]:
    lib = sorted(MODULE_DIR.glob("model/*.cc")) + sorted(MODULE_DIR.glob("helper/*.cc"))
    tests = sorted(MODULE_DIR.glob("test/*.cc"))
    examples = sorted(MODULE_DIR.glob("examples/*.cc"))
    headers = sorted(MODULE_DIR.glob("model/*.h")) + sorted(MODULE_DIR.glob("helper/*.h"))
    return lib, tests, examples, headers


def _key(tc: _Toolchain, files: list[Path]) -> str:
    h = hashlib.sha256()
    for part in (tc.cxx, tc.cxx_version, tc.ns3_version, str(tc.ns3_prefix), " ".join(CXXFLAGS)):
        h.update(part.encode() + b"\0")
    for f in files:
        h.update(str(f.relative_to(MODULE_DIR)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _run(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).splitlines()[-40:])
        raise RuntimeError(f"compiling the ns-3 module failed: {' '.join(cmd)}\n{tail}")


def _build_at(final: Path, examples: list[Path]) -> Ns3Build:
    return Ns3Build(final, final / LIB_NAME, final / "include", final / TEST_BIN,
                    final / "include" / "ns3" / FACADE_HEADER, tuple(final / e.stem for e in examples))


def _build_info(files: list[Path]) -> dict:
    """What a finished build must match to be used without a toolchain: the module's sources and
    the ns3 wheel it links against (version and place, since the library's rpath points there)."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(MODULE_DIR)).encode() + b"\0" + f.read_bytes() + b"\0")
    try:
        version = importlib.metadata.version("ns3")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    spec = importlib.util.find_spec("ns3")
    prefix = str(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else ""
    return {"sources_sha256": h.hexdigest(), "ns3_version": version, "ns3_prefix": prefix}


def _prebuilt(files: list[Path], examples: list[Path]) -> Ns3Build | None:
    """The build named by HETEROSIM_NS3_PREBUILT, if it matches these sources and this wheel.

    Lets an installation without a compiler or ns-3 headers (the Docker image's runtime stage)
    use the module compiled when it was made."""
    where = os.environ.get("HETEROSIM_NS3_PREBUILT")
    if not where:
        return None
    build = _build_at(Path(where), examples)
    try:
        info = json.loads((build.root / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return None
    if info != _build_info(files) or not build.complete():
        return None
    return build


def ensure_built(jobs: int = 2) -> Ns3Build:
    """Return the cached build, compiling it first if needed (never a manual step)."""
    lib_src, test_src, ex_src, headers = _sources()
    files = lib_src + test_src + ex_src + headers
    try:
        tc = _toolchain()
    except UserError:
        pre = _prebuilt(files, ex_src)
        if pre is not None:
            return pre
        raise
    key = _key(tc, files)
    root = cache_root()
    final = root / f"ns3-{key}"
    build = _build_at(final, ex_src)
    if build.complete():
        return build
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if build.complete():
            return build
        tmp = Path(tempfile.mkdtemp(prefix=f".ns3-{key}-", dir=root))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a shared cache must be readable by others
        try:
            _compile(tc, tmp, lib_src, test_src, ex_src, headers, jobs)
            (tmp / BUILD_INFO).write_text(json.dumps(_build_info(files)))
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return build


def _compile(tc: _Toolchain, out: Path, lib_src: list[Path], test_src: list[Path],
             ex_src: list[Path], headers: list[Path], jobs: int) -> None:
    inc = out / "include" / "ns3"
    inc.mkdir(parents=True)
    for hdr in headers:  # ns-3 convention: module headers are included as "ns3/x.h"
        shutil.copy2(hdr, inc / hdr.name)
    ns3_inc = tc.ns3_prefix / "include"
    ns3_lib = tc.ns3_prefix / ("lib64" if (tc.ns3_prefix / "lib64").is_dir() else "lib")
    base = [tc.cxx, *CXXFLAGS, f"-I{out / 'include'}", f"-I{ns3_inc}"]
    objs = []
    cmds = []
    for i, src in enumerate(lib_src + test_src + ex_src):
        obj = out / f"{i:02d}-{src.stem}.o"
        objs.append(obj)
        cmds.append([*base, f"-I{src.parent}", "-c", str(src), "-o", str(obj)])
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for fut in [pool.submit(_run, c) for c in cmds]:
            fut.result()
    libs = [f"-L{ns3_lib}", *(f"-l{tc.lib_prefix}-{m}" for m in NS3_MODULES),
            f"-Wl,-rpath,{ns3_lib}"]
    n_lib, n_test = len(lib_src), len(test_src)
    lib_objs = [str(o) for o in objs[:n_lib]]
    test_objs = [str(o) for o in objs[n_lib:n_lib + n_test]]
    _run([tc.cxx, "-shared", "-pthread", "-o", str(out / LIB_NAME), *lib_objs, *libs])
    program = [f"-L{out}", "-lheterosim-rdma", f"-Wl,-rpath,{out}", f"-Wl,-rpath,$ORIGIN", *libs]
    _run([tc.cxx, "-o", str(out / TEST_BIN), *test_objs, *program])
    for src, obj in zip(ex_src, objs[n_lib + n_test:]):  # each example is its own program
        _run([tc.cxx, "-o", str(out / src.stem), str(obj), *program])
    for o in objs:
        o.unlink()
