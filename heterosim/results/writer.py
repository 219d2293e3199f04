"""Write a run's results atomically: into a temp dir next to DIR, then rename.

A run that fails leaves DIR as it was (no half-written results). DIR is only ever *replaced* when
HeteroSim made it: every results directory carries a ``.heterosim-results`` stamp, and anything else at
DIR (a regular file, a device, a FIFO, a symlink, a directory with other content) is refused with one
line and left untouched. An empty directory is taken over (nothing in it to lose).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from heterosim.errors import UserError

STAMP = ".heterosim-results"
"""Marks a directory HeteroSim created; only such a directory may be replaced by a new run."""


class OutputError(UserError):
    """An output location HeteroSim may not (or cannot) write."""


def _refuse(out: Path, field: str, reason: str) -> OutputError:
    return OutputError(reason, field=field, value=str(out))


def _non_empty(path: str | Path | None, field: str) -> Path:
    if path is None or str(path).strip() == "":
        raise OutputError("empty output path", field=field, value=str(path or ""))
    return Path(path)


def _lstat(path: Path, field: str):
    """The path's own status (links not followed), or None when nothing is there."""
    try:
        return path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refuse(path, field, f"cannot inspect ({exc.strerror})") from None


def check_out_dir(out_dir: str | Path | None, field: str = "--out") -> Path:
    """Why ``out_dir`` may not receive results (raises), or the Path when it may. Touches nothing."""
    out = _non_empty(out_dir, field)
    if out.name in ("", ".", "..") or str(out) in ("/",):
        raise _refuse(out, field, "names a directory, not a results folder of its own (use e.g. results/x)")
    st = _lstat(out, field)
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(out, field, "is a symbolic link; HeteroSim replaces only results folders it created")
        if not stat.S_ISDIR(st.st_mode):
            kind = "a regular file" if stat.S_ISREG(st.st_mode) else "a device, FIFO or socket"
            raise _refuse(out, field, f"exists and is {kind}; HeteroSim writes results only to a new folder "
                                      f"or one it created")
        try:
            entries = os.listdir(out)
        except OSError as exc:
            raise _refuse(out, field, f"cannot list ({exc.strerror})") from None
        if entries and STAMP not in entries:
            raise _refuse(out, field, f"exists with {len(entries)} entries and was not written by HeteroSim "
                                      f"(no {STAMP} stamp); choose a new folder")
    parent = out.parent
    probe = parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise _refuse(out, field, f"{probe} is not a directory")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise _refuse(out, field, f"{probe} is not writable")
    return out


def stamped(out_dir: str | Path) -> bool:
    """Whether ``out_dir`` is a real directory (not a link) that carries HeteroSim's stamp."""
    out = Path(out_dir)
    return out.is_dir() and not out.is_symlink() and (out / STAMP).is_file()


@contextmanager
def atomic_dir(out_dir: str | Path, field: str = "--out"):
    """Yield a temp dir next to ``out_dir``; on success it becomes ``out_dir`` (stamped)."""
    out = check_out_dir(out_dir, field)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as exc:
        raise _refuse(out, field, f"cannot create ({exc.strerror})") from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; results are meant to be shared
        (tmp / STAMP).write_text("written by HeteroSim; a new run may replace this folder\n")
        yield tmp
        check_out_dir(out, field)  # nothing appeared at DIR while we ran
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
            try:
                tmp.rename(out)
            except OSError:
                old.rename(out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        where = f" ({exc.filename})" if exc.filename else ""
        raise _refuse(out, field, f"cannot write results: {exc.strerror}{where}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_out_file(path: str | Path | None, field: str, magic: bytes | None = None) -> Path:
    """A single output file (``--png``, ``--json``): may be new, or an existing regular file HeteroSim
    wrote before (starts with ``magic``, or ``magic(first 4 KB)`` is true); never a directory, device, FIFO
    or someone else's file."""
    p = _non_empty(path, field)
    st = _lstat(p, field)
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(p, field, "exists and is not a regular file")
        if magic is not None:
            try:
                with open(p, "rb") as fh:
                    head = fh.read(4096)
            except OSError as exc:
                raise _refuse(p, field, f"cannot read ({exc.strerror})") from None
            ours = magic(head) if callable(magic) else head.startswith(magic)
            if not ours and st.st_size:
                raise _refuse(p, field, "exists and was not written by HeteroSim; choose a new file")
    probe = p.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise _refuse(p, field, f"{probe} is not a directory")
    return p


@contextmanager
def atomic_file(path: str | Path, field: str, magic: bytes | None = None):
    """Yield a temp path next to ``path``; on success it replaces ``path`` (checked by check_out_file)."""
    p = check_out_file(path, field, magic)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{p.name}.tmp-", suffix=p.suffix, dir=p.parent)
        os.close(fd)
    except OSError as exc:
        raise _refuse(p, field, f"cannot create ({exc.strerror})") from None
    tmp = Path(tmp_name)
    try:
        yield tmp
        check_out_file(p, field, magic)
        os.chmod(tmp, 0o666 & ~_umask())
        tmp.replace(p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _refuse(p, field, f"cannot write: {exc.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path, data) -> None:
    with open(path, "w") as fh:
        json.dump(data, fh, indent=2, default=_default)


def _default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)
