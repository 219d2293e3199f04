"""The code as it was before a change, from git, for tests that compare a change's output with its parent's
("existing cases compile / run exactly as before"). Skips where there is no git checkout with that history."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def rev_before(added_path: str) -> str | None:
    """The parent of the commit that added ``added_path`` (repo-relative), or None without git or history."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    r = subprocess.run(["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H", "--", added_path],
                       capture_output=True, text=True)
    revs = r.stdout.split()
    return f"{revs[-1]}^" if r.returncode == 0 and revs else None


def require_rev_before(added_path: str) -> str:
    rev = rev_before(added_path)
    if rev is None:
        pytest.skip(f"needs a git checkout with the commit that added {added_path}")
    return rev


def tree_before(added_path: str, dest: Path) -> Path:
    """The whole tree at ``rev_before(added_path)``, extracted into ``dest``."""
    rev = require_rev_before(added_path)
    dest.mkdir(parents=True, exist_ok=True)
    git = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=git.stdout, check=True)
    return dest


def file_before(added_path: str, path: str) -> str:
    """The text of ``path`` at ``rev_before(added_path)``."""
    rev = require_rev_before(added_path)
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def run_script(pythonpath: str | Path, script: str, arg) -> dict:
    """``python -c script json(arg)`` with only ``pythonpath`` on the path; its stdout as JSON."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    r = subprocess.run([sys.executable, "-c", script, json.dumps(arg)], capture_output=True, text=True,
                       env=env, cwd=str(pythonpath), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


IR_SIGNATURE = r'''
import hashlib, json, sys
from heterosim import api
out = {}
for name, path, overrides in json.loads(sys.argv[1]):
    sc = api.load(path, overrides)
    ir = api.prepare(sc).ir
    progs = []
    for p in ir.programs:
        h = hashlib.sha256()
        for op in p.ops:
            h.update(repr((op.kind, op.name, op.phase, op.deps, op.stream, op.microbatch, op.layer, op.chunk,
                           op.flops, op.bytes, op.kernels, op.collective, op.group, op.size_bytes, op.peer_offset,
                           op.tag, op.comm_kind)).encode())
        comm = [op for op in p.ops if op.kind == "comm"]
        progs.append([len(p.ops), len(comm), sum(op.size_bytes for op in comm), h.hexdigest()])
    out[name] = {"programs": progs, "rank_program": ir.rank_program, "groups": sorted(ir.groups),
                 "memory": ir.meta["memory_bytes"], "breakdown": ir.meta["memory_breakdown"]}
print(json.dumps(out))
'''
"""Script for :func:`run_script`: per (name, scenario path, overrides) case, each program's op count, comm
count, comm bytes and a hash over every op's fields, the rank map, groups and memory: equal iff the IR is."""


def later_model_changes(base: Path) -> list[str]:
    """Overrides that give today's code the behaviour of a baseline older than a later model field:
    ``model.hidden_dropout`` (2026-11-28; at 0 the memory model keeps no dropout masks, Llama-family zoo
    entries set 0); code before it counted the masks for every model, i.e. behaved as 0.1 does now."""
    model_py = base / "heterosim" / "config" / "model.py"
    return [] if "hidden_dropout" in model_py.read_text() else ["model.hidden_dropout=0.1"]


def assert_ir_unchanged(added_path: str, cases: list, tmp_path: Path) -> None:
    """Every case's IR (:data:`IR_SIGNATURE`) is what the code before ``added_path``'s commit builds (today's
    code run with :func:`later_model_changes`, so that only the change under test is compared)."""
    base = tree_before(added_path, tmp_path / "base")
    before = run_script(base, IR_SIGNATURE, cases)
    later = later_model_changes(base)
    after = run_script(ROOT, IR_SIGNATURE, [[n, p, list(o) + later] for n, p, o in cases])
    assert set(before) == {c[0] for c in cases}
    for name in before:
        assert after[name] == before[name], name
