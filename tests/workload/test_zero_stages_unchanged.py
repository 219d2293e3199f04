"""zero_stage 0 and 1 compile exactly as before FSDP was added (issue 38: no change, no slowdown for existing
scenarios): the IR of existing scenarios is compared op by op with the one the code before the change
builds, extracted from git (the parent of the commit that added heterosim/workload/sharding.py) and run in a
child process in this same test run."""
from __future__ import annotations

from pathlib import Path

from git_baseline import IR_SIGNATURE as SIGNATURE, run_script, tree_before

ROOT = Path(__file__).parents[2]

CASES = [
    ("quickstart zero 1", str(ROOT / "scenarios" / "quickstart.yaml"), []),
    ("quickstart zero 0", str(ROOT / "scenarios" / "quickstart.yaml"), ["parallelism.zero_stage=0"]),
    ("quickstart zero 1 no overlap", str(ROOT / "scenarios" / "quickstart.yaml"),
     ["parallelism.overlap_param_gather=false", "parallelism.overlap_grad_reduce=false"]),
    ("stage-tp", str(ROOT / "scenarios" / "stage-tp.yaml"), []),
]






def test_zero0_zero1_ir_unchanged(tmp_path):
    base = tree_before("heterosim/workload/sharding.py", tmp_path / "base")
    before = run_script(base, SIGNATURE, CASES)
    after = run_script(ROOT, SIGNATURE, CASES)
    assert set(before) == {c[0] for c in CASES}
    for name in before:
        assert after[name] == before[name], name
