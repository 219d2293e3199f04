"""Placement policies on 8 DGX H100 nodes, two per leaf (16 NIC ports per leaf, 8 NICs per node), so
leaf k holds nodes 2k and 2k+1. Expected GPUs are worked out by hand from the policy definitions."""
from __future__ import annotations

import pytest

from heterosim.cluster.config import ClusterScenario
from heterosim.cluster.placement import leaf_of_node, place_jobs
from topologies import build_system

from .helpers import cluster


def _place(placements: list[dict], nodes: int = 8, groups=None):
    data = cluster([{"name": f"j{i}", "placement": p} for i, p in enumerate(placements)], nodes=nodes)
    if groups:
        data["cluster"]["groups"] = groups
    cs = ClusterScenario.model_validate(data)
    system = build_system(cs.cluster, cs.fabric)
    return [[system.gpus[r].name for r in ranks] for ranks in place_jobs(cs, system)], system


def _nodes(names: list[str]) -> list[str]:
    out = []
    for n in names:
        node = n.split("/")[0]
        if node not in out:
            out.append(node)
    return out


def test_leaves_hold_two_nodes_each():
    _, system = _place([{"policy": "packed", "num_gpus": 8}])
    leaves = leaf_of_node(system)
    assert leaves[0] == leaves[1] != leaves[2] == leaves[3] != leaves[4]


def test_packed_fills_lowest_nodes():
    (a,), _ = _place([{"policy": "packed", "num_gpus": 16}])
    assert a == [f"h100-{n}/gpu{j}" for n in (0, 1) for j in range(8)]


def test_spread_takes_one_node_per_leaf_in_turn():
    (a,), _ = _place([{"policy": "spread", "num_gpus": 32}])
    assert _nodes(a) == ["h100-0", "h100-2", "h100-4", "h100-6"]
    (a, b), _ = _place([{"policy": "spread", "num_gpus": 16}, {"policy": "packed", "num_gpus": 16}])
    assert _nodes(a) == ["h100-0", "h100-2"] and _nodes(b) == ["h100-1", "h100-3"]


def test_explicit_placements_go_first_whatever_the_order():
    (a, b), _ = _place([{"policy": "packed", "num_gpus": 8}, {"nodes": ["h100-0"]}])
    assert _nodes(a) == ["h100-1"] and _nodes(b) == ["h100-0"]


def test_random_is_seeded():
    runs = {s: _place([{"policy": "random", "num_gpus": 16, "seed": s}])[0][0] for s in range(6)}
    assert runs[3] == _place([{"policy": "random", "num_gpus": 16, "seed": 3}])[0][0]
    assert len({tuple(v) for v in runs.values()}) > 1
    for v in runs.values():  # whole nodes, in node order
        nodes = _nodes(v)
        assert len(nodes) == 2 and nodes == sorted(nodes, key=lambda n: int(n.split("-")[1]))
        assert v == [f"{n}/gpu{j}" for n in nodes for j in range(8)]


def test_rail_aligned_keeps_each_job_on_its_gpu_slots():
    (a, b, c), _ = _place([{"policy": "rail_aligned", "num_gpus": 16, "gpus_per_node": 4}] * 3)
    assert a == [f"h100-{n}/gpu{j}" for n in range(4) for j in range(4)]
    assert b == [f"h100-{n}/gpu{j}" for n in range(4, 8) for j in range(4)]
    assert c == [f"h100-{n}/gpu{j}" for n in range(4) for j in range(4, 8)]


def test_group_and_policy_within_group():
    groups = [{"name": "a100", "node_type": "dgx-a100", "num_nodes": 2},
              {"name": "h100", "node_type": "dgx-h100", "num_nodes": 2}]
    (a, b), _ = _place([{"group": "a100"}, {"policy": "packed", "num_gpus": 8, "group": "h100"}], groups=groups)
    assert _nodes(a) == ["a100-0", "a100-1"] and _nodes(b) == ["h100-0"]


@pytest.mark.parametrize("placement", [{"nodes": ["h100-3", "h100-1"]}, {"gpus": ["h100-2/gpu3", "h100-0/gpu5"]}])
def test_explicit_lists_keep_their_order(placement):
    (a,), _ = _place([placement])
    want = placement.get("gpus") or [f"{n}/gpu{j}" for n in placement["nodes"] for j in range(8)]
    assert a == want
