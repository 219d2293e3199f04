"""Plans without parallelism.stage_dp compile exactly as before it was added (issue 38): the IR of existing
scenarios, op by op, against the code at the parent of the commit that added heterosim/workload/stage_dp.py."""
from __future__ import annotations

from pathlib import Path

from git_baseline import assert_ir_unchanged

ROOT = Path(__file__).parents[2]

CASES = [
    ("quickstart", str(ROOT / "scenarios" / "quickstart.yaml"), []),
    ("quickstart zero 0 gpipe", str(ROOT / "scenarios" / "quickstart.yaml"),
     ["parallelism.zero_stage=0", "parallelism.schedule=gpipe"]),
    ("stage-tp", str(ROOT / "scenarios" / "stage-tp.yaml"), []),
    ("zb-h1", str(ROOT / "scenarios" / "schedules" / "zb-h1.yaml"), []),
    ("zero3", str(ROOT / "scenarios" / "fsdp" / "zero3.yaml"), []),
]


def test_ir_unchanged_without_stage_dp(tmp_path):
    assert_ir_unchanged("heterosim/workload/stage_dp.py", CASES, tmp_path)
