"""The project's files at a git revision, for benchmarks that run it beside this tree."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extract(rev: str, into: str | Path) -> None:
    """Write the tree of ``rev`` (``git archive``: tracked files only) into the directory ``into``."""
    git = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=git.stdout, check=True)


def last_json_of_both(against: str, child_argv, prefix: str = "hs-rev-") -> dict:
    """Run a child command in the tree ``against`` (a directory, or a git revision extracted here) and in this
    tree, each with its own ``PYTHONPATH`` and working directory; ``child_argv(tree)`` is the command for a tree.
    Returns {``against``: JSON of the child's last stdout line, ``"this tree"``: the same for this tree}."""
    import json
    import os
    import sys
    import tempfile

    res = {}
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        old = against
        if not Path(old).is_dir():
            extract(against, tmp)
            old = tmp
        for label, tree in ((against, old), ("this tree", str(ROOT))):
            out = subprocess.run([sys.executable, *child_argv(tree)], env={**os.environ, "PYTHONPATH": tree},
                                 cwd=tree, capture_output=True, text=True, check=True).stdout
            res[label] = json.loads(out.strip().splitlines()[-1])
    return res
