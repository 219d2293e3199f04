"""zero_stage 0 and 1 compile exactly as before FSDP was added (issue 38: no change, no slowdown for existing
scenarios): the IR of existing scenarios is compared op by op with the one the code before the change
builds, extracted from git (the parent of the commit that added heterosim/workload/sharding.py) and run in a
child process in this same test run."""
from __future__ import annotations

from pathlib import Path

from git_baseline import assert_ir_unchanged

ROOT = Path(__file__).parents[2]

CASES = [
    ("quickstart zero 1", str(ROOT / "scenarios" / "quickstart.yaml"), []),
    ("quickstart zero 0", str(ROOT / "scenarios" / "quickstart.yaml"), ["parallelism.zero_stage=0"]),
    ("quickstart zero 1 no overlap", str(ROOT / "scenarios" / "quickstart.yaml"),
     ["parallelism.overlap_param_gather=false", "parallelism.overlap_grad_reduce=false"]),
    ("stage-tp", str(ROOT / "scenarios" / "stage-tp.yaml"), []),
]


def test_zero0_zero1_ir_unchanged(tmp_path):
    assert_ir_unchanged("heterosim/workload/sharding.py", CASES, tmp_path)
