"""Device-to-parallelism mapping: stages/replicas on device types, TP inside nodes, one-line errors."""
import pytest

from heterosim.api import prepare
from heterosim.errors import PlanError
from heterosim.planner.mapping import (apply_overrides, candidate_mappings, group_infos, map_ranks)

from .conftest import small_scenario


def _groups(sc):
    return group_infos(sc.cluster)


def test_stage_major_puts_each_stage_on_one_device_type():
    sc = small_scenario()  # 2 H100 nodes + 2 A100 nodes = 32 GPUs
    m = map_ranks(_groups(sc), tp=8, pp=2, dp=2, strategy="stage")
    assert m.stage_devices == [("H100-SXM",), ("A100-80",)]
    assert m.mixed_stages == 0
    # every DP replica is a full pipeline over both types
    assert m.replica_devices == [("A100-80", "H100-SXM")] * 2


def test_replica_major_puts_each_replica_on_one_device_type():
    sc = small_scenario()
    m = map_ranks(_groups(sc), tp=8, pp=2, dp=2, strategy="replica")
    assert m.replica_devices == [("H100-SXM",), ("A100-80",)]
    assert m.order == "tp-cp-ep-pp-dp"


def test_mapping_is_what_the_compiler_builds():
    """Applying the mapping's overrides gives the compiler exactly the mapped groups."""
    sc = small_scenario()
    m = map_ranks(_groups(sc), tp=4, pp=2, dp=4, strategy="stage", group_order=["a100", "h100"])
    sc2 = apply_overrides(sc, {"parallelism.tp": 4, "parallelism.pp": 2, **m.overrides(sc)})
    prep = prepare(sc2)
    ir, system = prep.ir, prep.system
    for tp_group in ir.groups["tp"]:
        stage = ir.program_of(tp_group[0]).stage
        replica = ir.groups["dp"][ir.group_id(tp_group[0], "dp")].index(tp_group[0])
        assert {system.gpus[r].device for r in tp_group} == {m.cells[stage][replica].device}
        assert len({system.gpus[r].node for r in tp_group}) == 1
    assert m.stage_devices == [("A100-80",), ("H100-SXM",)]


def test_candidate_mappings_are_distinct_and_cover_both_strategies():
    sc = small_scenario()
    ms = candidate_mappings(_groups(sc), 8, 2, 2)
    assert {m.strategy for m in ms} == {"stage", "replica"}
    assert len({m.key() for m in ms}) == len(ms)


def test_group_sizes_that_do_not_add_up_name_the_groups():
    sc = small_scenario()
    with pytest.raises(PlanError) as exc:
        map_ranks(_groups(sc), tp=8, pp=3, dp=2)
    msg = str(exc.value)
    assert "cluster.groups" in msg and "h100 (16)" in msg and "a100 (16)" in msg and "48" in msg


def test_tp_across_node_types_is_an_error_naming_the_group():
    # a 4-GPU GH200 node first: a TP group of 8 would take its 4 GPUs and 4 of the next DGX H100
    sc = small_scenario(groups=[
        {"name": "gh", "node_type": "gh200", "num_nodes": 1},
        {"name": "h100", "node_type": "dgx-h100", "num_nodes": 1},
        {"name": "gh2", "node_type": "gh200", "num_nodes": 1},
    ])
    with pytest.raises(PlanError) as exc:
        map_ranks(_groups(sc), tp=8, pp=1, dp=2)
    msg = str(exc.value)
    assert "span node types gh200 (group gh) and dgx-h100 (group h100)" in msg
    assert "cluster.groups[1] = 'h100'" in msg
    # two GH200 nodes back to back: TP 8 spans two nodes of one type
    with pytest.raises(PlanError) as exc:
        map_ranks(_groups(sc), tp=8, pp=1, dp=2, group_order=["h100", "gh", "gh2"])
    assert "tp = 8 does not divide the 4 GPUs per node of group gh" in str(exc.value)
    # TP 4 fits every node
    m = map_ranks(_groups(sc), tp=4, pp=1, dp=4)
    assert [c.device for c in m.cells[0]] == ["GH200", "H100-SXM", "H100-SXM", "GH200"]


def test_unknown_strategy_and_bad_group_order():
    sc = small_scenario()
    with pytest.raises(PlanError):
        map_ranks(_groups(sc), 8, 2, 2, strategy="diagonal")
    with pytest.raises(PlanError) as exc:
        map_ranks(_groups(sc), 8, 2, 2, group_order=["h100"])
    assert "every group once" in str(exc.value)
