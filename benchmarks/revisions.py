"""The project's files at a git revision, for benchmarks that run it beside this tree."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extract(rev: str, into: str | Path) -> None:
    """Write the tree of ``rev`` (``git archive``: tracked files only) into the directory ``into``."""
    git = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=git.stdout, check=True)
