"""The shipped FSDP scenarios (scenarios/fsdp) end to end on the flow backend (issue 38).

ZeRO-3 moves 3 Psi per GPU where ZeRO-1 moves 2 Psi, but its extra all-gathers are prefetched one unit ahead
on the data-parallel stream. Where a unit's all-gather takes less than the previous unit's compute (a fast
fabric) only the first all-gather and the last reduce-scatter are exposed -- the same exposure as ZeRO-1's
overlapped parameter gather and gradient reduce-scatter, whose buckets here are the same units (each unit is
larger than the 40 MB bucket) -- so the two take the same time. On a slow fabric the all-gathers outlast the
compute they hide behind, and the third Psi shows."""
from __future__ import annotations

from pathlib import Path

import pytest

from heterosim import api

ROOT = Path(__file__).parents[2]
FSDP = ROOT / "scenarios" / "fsdp"


def _run(name: str, overrides=()):
    return api.run(api.load(FSDP / name, list(overrides))).summary


@pytest.mark.parametrize("name", ["zero1.yaml", "zero2.yaml", "zero3.yaml", "hsdp.yaml"])
def test_shipped_scenario_runs(name):
    s = _run(name)
    assert s["iteration_time_ns"] > 0
    assert s["breakdown"]["exposed_comm"]["dp"] > 0


def test_zero3_slower_on_slow_fabric_close_on_fast():
    slow = ["fabric.uplink_gbps=100"]
    fast = ["fabric.uplink_gbps=3200"]
    t = {(z, f): _run(f"zero{z}.yaml", ov)["iteration_time_ns"] for z in (1, 3)
         for f, ov in (("slow", slow), ("fast", fast))}
    assert t[(3, "slow")] > 1.15 * t[(1, "slow")]
    assert t[(3, "fast")] == pytest.approx(t[(1, "fast")], rel=0.02)


def test_hsdp_keeps_parameter_gathers_inside_the_node():
    """shard_size 8 on 8-GPU nodes: every all-gather group is one node; only the gradient all-reduce crosses."""
    prep = api.prepare(api.load(FSDP / "hsdp.yaml"))
    ir, gpus = prep.ir, prep.system.gpus
    for g in ir.groups["shard"]:
        assert len({gpus[r].node_index for r in g}) == 1
    for g in ir.groups["replicate"]:
        assert len({gpus[r].node_index for r in g}) == 2
