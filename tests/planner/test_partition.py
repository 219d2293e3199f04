"""Balancing, splitting and the fast memory model (must equal the workload memory model)."""
from dataclasses import replace
from pathlib import Path

import pytest

from heterosim.errors import PlanError
from heterosim.planner.mapping import apply_overrides
from heterosim.planner.partition import MemoryModel, balance_layers, split_microbatches, vstage_partition
from heterosim.workload.memory import memory_for_plan
from heterosim.workload.plan import resolve_plan

from .conftest import small_scenario


def test_balance_layers_proportional_to_speed():
    # stage 1 is 3x slower per layer: it gets about a third of stage 0's layers
    n = balance_layers(24, [1.0, 3.0], [0.0, 0.0])
    assert sum(n) == 24 and n == [18, 6]


def test_balance_layers_accounts_extras_and_caps():
    # equal speed, but the last stage carries the LM head worth 2 layers
    assert balance_layers(10, [1.0, 1.0], [0.0, 2.0]) == [6, 4]
    # a cap binds: the fast stage cannot take more than 5 layers
    assert balance_layers(12, [1.0, 3.0], [0.0, 0.0], caps=[5, 12]) == [5, 7]
    with pytest.raises(PlanError):
        balance_layers(12, [1.0, 1.0], [0.0, 0.0], caps=[5, 5])


def test_split_microbatches_makes_replicas_finish_together():
    m = split_microbatches(64, [1.0, 2.0], [0.0, 0.0])
    assert sum(m) == 64 and abs(m[0] - 2 * m[1]) <= 2
    # interleaving: multiples of pp
    m = split_microbatches(64, [1.0, 2.0], [0.0, 0.0], multiple=4)
    assert all(x % 4 == 0 for x in m) and sum(m) == 64


def test_vstage_partition_spreads_layers_over_chunks():
    assert vstage_partition([5, 3], 2) == [3, 2, 2, 1]


@pytest.mark.parametrize("over", [
    {"parallelism.schedule": "1f1b", "parallelism.recompute": "none"},
    {"parallelism.schedule": "interleaved", "parallelism.virtual_stages": 2, "parallelism.recompute": "selective"},
    {"parallelism.schedule": "1f1b", "parallelism.recompute": "full", "parallelism.zero_stage": 0},
    {"parallelism.schedule": "gpipe", "parallelism.recompute": "none"},
    {"parallelism.schedule": "1f1b", "parallelism.recompute": "none", "parallelism.zero_stage": 2},
    {"parallelism.schedule": "1f1b", "parallelism.recompute": "selective", "parallelism.zero_stage": 3},
    {"parallelism.schedule": "interleaved", "parallelism.virtual_stages": 2, "parallelism.recompute": "none",
     "parallelism.zero_stage": 3, "parallelism.reshard_after_forward": False},
])
def test_fast_memory_model_equals_workload_memory_model(over):
    sc = apply_overrides(small_scenario(), {"parallelism.pp": 4, "parallelism.tp": 2, **over})
    plan = resolve_plan(sc, 32)
    mm = MemoryModel(sc, plan)
    for layers in ([6, 6, 6, 6], [9, 7, 5, 3], [2, 10, 10, 2]):
        counts = vstage_partition(layers, plan.chunks)
        lists, start = [], 0
        for c in counts:
            lists.append(list(range(start, start + c)))
            start += c
        ref = memory_for_plan(sc, replace(plan, vstage_layers=lists))
        for (stage, m), d in ref.items():
            chunk_layers = [counts[c * plan.pp + stage] for c in range(plan.chunks)]
            assert mm.stage_need(stage, m, chunk_layers) == pytest.approx(d["total"], rel=1e-9)
