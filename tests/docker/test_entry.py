"""The image's entry point (docker/entry.sh) and the CLI's answer to an unwritable results folder.

entry.sh runs here as it does in the container, with a stand-in `heterosim` that prints the uid
it runs as; the uid switch needs root (setpriv), as the container's default start has.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "docker" / "entry.sh"
NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="switching uid needs root and setpriv (util-linux)")


@pytest.fixture
def world(request):
    """A world-readable temp tree (pytest's tmp_path is 0700, closed to other uids)."""
    d = Path(tempfile.mkdtemp(prefix="hs-entry-"))
    d.chmod(0o755)
    bin_dir = d / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "heterosim"
    fake.write_text('#!/bin/sh\necho "uid=$(id -u) gid=$(id -g) args=$*"\n')
    fake.chmod(0o755)
    results = d / "results"
    results.mkdir()
    request.addfinalizer(lambda: shutil.rmtree(d, ignore_errors=True))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HETEROSIM_RESULTS_DIR": str(results)}
    return d, results, env


def _entry(args, env, as_uid=None):
    cmd = ["sh", str(ENTRY), *args]
    if as_uid is not None:
        cmd = ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=30)


@needs_root
def test_root_start_runs_as_the_owner_of_the_results_folder(world):
    _, results, env = world
    os.chown(results, 4321, 8765)
    res = _entry(["run", "x.yaml", "--out", f"{results}/q"], env)
    assert res.returncode == 0, res.stderr
    # a bare subcommand gets `heterosim` in front, as with `docker run IMAGE run ...`
    assert res.stdout.strip() == f"uid=4321 gid=8765 args=run x.yaml --out {results}/q"


@needs_root
def test_root_owned_results_folder_keeps_root(world):
    _, results, env = world
    res = _entry(["heterosim", "--help"], env)
    assert res.returncode == 0 and res.stdout.startswith("uid=0 "), res.stdout + res.stderr


@needs_root
def test_uid_that_cannot_write_results_gets_one_line_hint(world):
    _, results, env = world
    results.chmod(0o755)  # root-owned, not writable by nobody
    res = _entry(["run", "x.yaml", "--out", f"{results}/q"], env, as_uid=NOBODY)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot write {results}" in lines[0] and f"uid {NOBODY}" in lines[0]
    assert "-u" in lines[0] and "HETEROSIM_UID" in lines[0]
    # a command that writes nothing there is not stopped
    res = _entry(["heterosim", "--help"], env, as_uid=NOBODY)
    assert res.returncode == 0 and res.stdout.startswith(f"uid={NOBODY} ")
    # and a uid that can write runs as itself
    results.chmod(0o777)
    res = _entry(["run", "x.yaml", "--out", f"{results}/q"], env, as_uid=NOBODY)
    assert res.returncode == 0 and res.stdout.startswith(f"uid={NOBODY} ")


def test_cli_permission_error_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    """Wherever writing fails for lack of permission, the CLI says so in one line (exit 2)."""
    from heterosim import api, cli

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", "/results/quickstart")

    monkeypatch.setattr(api, "load", denied)
    monkeypatch.setattr(sys, "argv", ["heterosim", "run", "scenarios/quickstart.yaml", "--out", "/results/quickstart"])
    with pytest.raises(SystemExit) as ei:
        cli.main()
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == ["error: /results/quickstart: Permission denied"]
