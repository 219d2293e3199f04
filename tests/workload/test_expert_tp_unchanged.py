"""Existing MoE plans compile exactly as before expert tensor parallelism (``parallelism.expert_tp``) and uneven
routing (``parallelism.moe_load_imbalance`` / ``moe_rank_load``) were added (issue 38: the default, expert_tp =
tp and even routing, is today's behaviour): the IR and memory of MoE and dense scenarios are compared op by op
with what the code before the change builds, extracted from git (the parent of the commit that added this file)
and run in a child process in this same test run. ``expert_tp`` set equal to ``tp`` and ``moe_load_imbalance``
1.0 given explicitly are compared against the same baseline."""
from __future__ import annotations

from pathlib import Path

from git_baseline import assert_ir_unchanged

ROOT = Path(__file__).parents[2]

QS = str(ROOT / "scenarios" / "quickstart.yaml")


def _moe_without_new_fields(tmp_path: Path) -> str:
    """scenarios/moe/uneven-routing.yaml less the fields the code before the change does not know."""
    text = (ROOT / "scenarios" / "moe" / "uneven-routing.yaml").read_text()
    kept = [line for line in text.splitlines() if "moe_load_imbalance:" not in line]
    assert len(kept) == len(text.splitlines()) - 1
    out = tmp_path / "moe-even.yaml"
    out.write_text("\n".join(kept) + "\n")
    return str(out)


MOE = "{moe}"
CASES = [
    ("moe tp2 ep8", MOE, []),
    ("moe allgather", MOE, ["parallelism.moe_dispatcher=allgather"]),
    ("moe ep4 cp2", MOE, ["parallelism.ep=4", "parallelism.cp=2"]),
    ("moe no sp", MOE, ["parallelism.sequence_parallel=false", "parallelism.ep=2"]),
    ("moe zero3", MOE, ["parallelism.zero_stage=3"]),
    ("moe pp2 zb-h1", MOE, ["parallelism.pp=2", "parallelism.ep=4", "parallelism.schedule=zb-h1"]),
    ("quickstart", QS, []),
]


def test_existing_moe_plans_ir_unchanged(tmp_path):
    moe = _moe_without_new_fields(tmp_path)
    cases = [(n, moe if p == MOE else p, o) for n, p, o in CASES]
    assert_ir_unchanged("tests/workload/test_expert_tp_unchanged.py", cases, tmp_path)
