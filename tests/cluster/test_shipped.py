"""The shipped cluster scenarios (scenarios/multi-job/) are sound: every job's plan uses exactly its
placed GPUs (tp x pp x dp x cp), placements do not overlap, every check a run makes passes, and each
example shows what it claims (spread shares links packed does not, the MoE job's traffic includes
expert-parallel all-to-all, the background scenario carries WebSearch traffic)."""
from __future__ import annotations

from pathlib import Path

import pytest

from heterosim.cluster import check, load, prepare
from heterosim.cluster.placement import leaf_of_node

ROOT = Path(__file__).resolve().parents[2] / "scenarios" / "multi-job"
FILES = sorted(ROOT.glob("*.yaml"))


def test_the_examples_are_there():
    assert {p.name for p in FILES} >= {"two-gpt-packed.yaml", "two-gpt-spread.yaml", "train-beside-moe.yaml",
                                       "beside-websearch.yaml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_shipped_cluster_scenario_is_sound(path):
    prep = prepare(load(path))
    check(prep)
    seen: set[int] = set()
    for job in prep.jobs:
        m = job.ir.meta
        assert m["tp"] * m["pp"] * m["dp"] * m["cp"] == len(job.ranks) == job.ir.world_size
        assert not seen & set(job.ranks)
        seen |= set(job.ranks)


def _leaves_of(prep, job) -> set[str]:
    leaves = leaf_of_node(prep.system)
    return {leaves[prep.system.gpus[r].node_index] for r in job.ranks}


def test_packed_jobs_keep_to_their_own_leaves_and_spread_jobs_share_them():
    packed = prepare(load(ROOT / "two-gpt-packed.yaml"))
    a, b = (_leaves_of(packed, j) for j in packed.jobs)
    assert a and b and not a & b
    spread = prepare(load(ROOT / "two-gpt-spread.yaml"))
    a, b = (_leaves_of(spread, j) for j in spread.jobs)
    assert a == b and len(a) == 4


def test_moe_example_has_expert_parallel_all_to_all_across_nodes():
    prep = prepare(load(ROOT / "train-beside-moe.yaml"))
    moe = next(j for j in prep.jobs if j.scenario.model.is_moe)
    assert any(op.collective == "alltoall" and op.group == "ep" for p in moe.ir.programs for op in p.ops)
    ep = moe.ir.groups["ep"][0]
    assert len({prep.system.gpus[moe.ranks[r]].node for r in ep}) > 1


def test_background_example_sends_websearch_between_the_other_nodes():
    cs = load(ROOT / "beside-websearch.yaml")
    prep = prepare(cs)
    bg = cs.network.background
    assert bg.cdf == "websearch" and bg.load > 0
    job_nics = {prep.system.gpus[r].nic for j in prep.jobs for r in j.ranks}
    assert bg.hosts and not job_nics & set(bg.hosts)
