"""Existing schedules (1f1b, interleaved, gpipe) compile exactly as before the zero-bubble schedule was added
(issue 38: no change for existing scenarios): the IR and memory of scenarios using each are compared op by op
with what the code before the change builds, extracted from git (the parent of the commit that added
heterosim/workload/zero_bubble.py) and run in a child process in this same test run."""
from __future__ import annotations

from pathlib import Path

from git_baseline import assert_ir_unchanged

ROOT = Path(__file__).parents[2]

QS = str(ROOT / "scenarios" / "quickstart.yaml")
CASES = [
    ("quickstart 1f1b", QS, []),
    ("quickstart gpipe", QS, ["parallelism.schedule=gpipe"]),
    ("quickstart interleaved", QS, ["parallelism.schedule=interleaved", "parallelism.virtual_stages=2"]),
    ("quickstart 1f1b full recompute tp overlap", QS, ["parallelism.recompute=full",
                                                       "parallelism.tp_comm_overlap=true"]),
    ("stage-tp", str(ROOT / "scenarios" / "stage-tp.yaml"), []),
    ("zero3", str(ROOT / "scenarios" / "fsdp" / "zero3.yaml"), []),
    ("zero2", str(ROOT / "scenarios" / "fsdp" / "zero2.yaml"), []),
]


def test_existing_schedules_ir_unchanged(tmp_path):
    assert_ir_unchanged("heterosim/workload/zero_bubble.py", CASES, tmp_path)
