"""Shared checks of the CLI's error contract (importable from any test, as ``tiny_scenario``):
bad input is one line on stderr, exit 2, no traceback, naming what was wrong."""
from __future__ import annotations

import subprocess
import sys

import pytest


def cli_in_process(capsys, monkeypatch, cwd, *args):
    """Run ``heterosim ARGS`` through the real entry point in this process; (exit code, stdout, stderr)."""
    from heterosim.cli import main

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["heterosim", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def cli_subprocess(*args, cwd=None):
    """Run ``python -m heterosim ARGS`` in a child process (a fresh interpreter, as a user runs it)."""
    return subprocess.run([sys.executable, "-m", "heterosim", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def one_line(code, err, *needles, out: str = "") -> str:
    """Exit 2, no traceback, exactly one non-empty stderr line, containing every needle; returns the line."""
    assert code == 2, err + out
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def one_line_message(exc_info, *needles) -> str:
    """A raised error's message is one line containing every needle (library-level checks)."""
    msg = str(exc_info.value)
    assert "\n" not in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


def validate_refuses(scenario, change, tmp_path, *needles) -> str:
    """``heterosim validate`` on a copy of the scenario file ``scenario`` edited by ``change(dict)`` is refused in
    one line (exit 2, no traceback) naming the copy's path and every needle; returns the line."""
    from pathlib import Path

    import yaml

    src = yaml.safe_load(Path(scenario).read_text())
    change(src)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(src))
    r = cli_subprocess("validate", path)
    return one_line(r.returncode, r.stderr, str(path), *needles, out=r.stdout)
