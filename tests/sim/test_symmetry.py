"""Symmetry reduction (heterosim/sim/symmetry.py): the reduced simulation against the full one.

The full simulation (every lane, every transfer its own flow) is the reference. Where the network
is uncongested and paths are rail-pinned, the reduced run must be bit-identical (iteration time and
breakdown); with hashed ECMP and ``simulation.hashed_copies: exact``, copies whose links the hash
chose are never merged, so exact too (the approximate ``ops`` and ``ops_and_replicas`` are checked against
the full run in tests/sim/test_symmetry_hash.py). Heterogeneous groups, stragglers and degraded links must split the replicas into classes, with the same exactness.
"""
from __future__ import annotations

import pytest

from heterosim import api
from heterosim.comm import plan_collective
from heterosim.config.loader import scenario_from_dict
from heterosim.sim.symmetry import schedule_orbits

RAIL = {"kind": "rail_optimized", "nodes_per_block": 8}


def _scenario(groups, *, pp=2, batch=16, fabric=None, ecmp="rail", cluster_extra=None):
    cluster = {"groups": groups, **(cluster_extra or {})}
    return scenario_from_dict({
        "name": "sym", "model": "gpt3-1.7b",
        "parallelism": {"tp": 8, "pp": pp, "schedule": "1f1b", "sequence_parallel": True, "zero_stage": 1},
        "training": {"global_batch_size": batch, "micro_batch_size": 1, "seq_length": 2048, "precision": "bf16"},
        "cluster": cluster, "fabric": fabric or RAIL, "network": {"backend": "flow", "ecmp": ecmp},
        "output": {"trace": False, "plots": False}})


def _both(sc):
    prep = api.prepare(sc)
    full = api.simulate(prep, record_messages=False, symmetry=False)
    red = api.simulate(prep, record_messages=False, symmetry=True)
    return full, red


def _per_rank(res):
    return [{k: v for k, v in r.items()} for r in res.summary["per_rank"]]


H100 = {"name": "h", "node_type": "dgx-h100", "num_nodes": 8}


def test_homogeneous_uncongested_is_bit_identical():
    full, red = _both(_scenario([H100]))
    sym = red.sim.symmetry
    assert sym["lanes_simulated"] == 2 and sym["lanes_total"] == 8  # one replica of 4 (PP2)
    assert sym["replica_classes"]["classes"] == 1
    assert sym["orbit_schedules"] > 0
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert red.summary["breakdown"] == full.summary["breakdown"]
    assert _per_rank(red) == _per_rank(full)
    # byte conservation: every copy's bytes are counted, as in the full run
    assert red.sim.net_bytes == full.sim.net_bytes
    assert red.sim.all_messages == full.sim.all_messages
    assert red.sim.net_stats.bytes_delivered == full.sim.net_stats.bytes_delivered
    assert red.summary["inter_node_comm_share"] == full.summary["inter_node_comm_share"]


def test_hashed_ecmp_over_spines_is_simulated_copy_by_copy_and_exact():
    # two nodes per leaf: data-parallel and pipeline traffic crosses the spines, where the ECMP hash puts
    # each copy on its own links and so among its own collisions (a group of copies takes one rate, the
    # slowest copy's: that made the reduced run 0.97% slow). Such paths are never alike: nothing is merged.
    sc = _scenario([H100], fabric={"kind": "leaf_spine", "hosts_per_leaf": 16, "uplink_gbps": 400}, ecmp="hash")
    sc = api.with_overrides(sc, {"simulation.hashed_copies": "exact"})  # (approximate: test_symmetry_hash.py)
    full, red = _both(sc)
    assert red.sim.symmetry["replica_classes"] is None
    assert red.sim.symmetry["copies_sent"] == 0
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert red.summary["breakdown"] == full.summary["breakdown"]
    assert _per_rank(red) == _per_rank(full)


def test_hashed_ecmp_inside_one_leaf_still_reduces_exactly():
    # all 64 NICs on one leaf: no path has a choice for the hash to make, so the replicas are one class
    sc = _scenario([H100], fabric={"kind": "leaf_spine", "hosts_per_leaf": 64, "uplink_gbps": 400}, ecmp="hash")
    full, red = _both(sc)
    assert red.sim.symmetry["replica_classes"]["class_sizes"] == [4]
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert red.summary["breakdown"] == full.summary["breakdown"]
    assert _per_rank(red) == _per_rank(full)


def _hetero(groups):
    sc = _scenario(groups, fabric={"kind": "rail_optimized", "nodes_per_block": 16})
    return sc.model_copy(update={"parallelism": sc.parallelism.model_copy(update={"order": "tp-cp-ep-pp-dp"})})


def test_heterogeneous_blocks_leave_no_two_replicas_alike_and_stay_exact():
    # four H100 replicas then four A100 replicas: the rings' link profiles repeat only after all 8
    # positions, so each position's dp traffic runs at its own times and no replica stands for another
    groups = [{"name": "h", "node_type": "dgx-h100", "num_nodes": 8},
              {"name": "a", "node_type": "dgx-a100", "num_nodes": 8}]
    full, red = _both(_hetero(groups))
    assert red.sim.symmetry["replica_classes"] is None
    assert red.sim.symmetry["orbit_schedules"] > 0
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert _per_rank(red) == _per_rank(full)


def test_a_straggler_gets_its_own_class():
    sc = _scenario([H100], cluster_extra={"stragglers": [{"gpu": "h-5/gpu3", "slowdown": 1.3}]})
    full, red = _both(sc)
    rc = red.sim.symmetry["replica_classes"]
    assert rc["classes"] == 2 and rc["class_sizes"] == [3, 1]
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert _per_rank(red) == _per_rank(full)


def test_a_degraded_nic_link_leaves_no_two_replicas_alike():
    # DP8 PP2 on 16 nodes; node 10 is replica 2 of stage 1. Its slow hop delays the stage-1 dp ring's
    # steps differently at every position (measured: the dp flows still in flight when micro-batch 0's
    # activations arrive end at other times on h-8 than on h-13), so pipeline traffic into replica 0
    # and into replica 5 meets different contention: the replicas must all be simulated (the
    # neighbours-only rule that kept 0, 4, 5, 6, 7 as one class was 10 us off on rank 96)
    sc = _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 16}], batch=16,
                   fabric={"kind": "rail_optimized", "nodes_per_block": 16},
                   cluster_extra={"degraded_links": [{"a": "h-10/nic0", "factor": 0.25}]})
    full, red = _both(sc)
    assert red.sim.symmetry["replica_classes"] is None
    assert red.sim.symmetry["orbit_schedules"] > 0
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert red.summary["breakdown"] == full.summary["breakdown"]
    assert _per_rank(red) == _per_rank(full)


def test_no_replicas_no_reduction():
    full, red = _both(_scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 2}], batch=8))
    assert red.sim.symmetry["replica_classes"] is None
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns


# --------------------------------------------------------------------------- collective orbits

@pytest.fixture(scope="module")
def system():
    from topologies import build_system

    return build_system({"groups": [{"name": "h", "node_type": "dgx-h100", "num_nodes": 4}]}, RAIL)


def test_ring_over_aligned_nodes_is_one_orbit_per_step(system):
    ranks = (0, 8, 16, 24)
    sched = plan_collective("allgather", ranks, 64 << 20, system, algorithm="ring", channels=2)
    orb = schedule_orbits(sched.transfers, ranks, system)
    assert orb is not None
    # a ring step is 4 transfers, one per position: orbits of 4 (hand: n positions shift into each other)
    assert all(len(m) == 4 for m in orb.members)
    assert len(orb.reps) * 4 == len(sched.transfers)
    # every member of an orbit sits at the same step and channel
    for m in orb.members:
        assert len({(sched.transfers[i].step, sched.transfers[i].channel) for i in m}) == 1
    assert all(o > d for o, ds in enumerate(orb.deps) for d in ds)  # orbits wait only on earlier steps


def test_tree_is_not_reduced(system):
    ranks = (0, 8, 16, 24)
    sched = plan_collective("allreduce", ranks, 1 << 20, system, algorithm="tree", channels=1)
    assert schedule_orbits(sched.transfers, ranks, system) is None


def test_message_records_stop_at_the_limit_and_counters_do_not():
    prep = api.prepare(_scenario([H100]))
    few = api.simulate(prep, record_messages=5)
    assert len(few.sim.messages) == 5 and all(m.end_ns >= m.start_ns for m in few.sim.messages)
    full = api.simulate(prep, record_messages=True, symmetry=False)
    # the inter-node share counted during the run equals the one computed from every record
    from heterosim.results.summary import _inter_node_share

    assert full.summary["inter_node_comm_share"] == pytest.approx(_inter_node_share(full.sim), rel=1e-12)
    assert full.sim.net_bytes == sum(m.size_bytes for m in full.sim.messages if m.link == "net")
    assert few.sim.net_bytes == full.sim.net_bytes


def test_pipeline_sends_ride_their_rails_as_copies_and_stay_bit_identical():
    # TP8: a pipeline send is 8 transfers, one per rail; with rails alike they are one flow with copies
    sc = _scenario([H100], pp=2)
    prep = api.prepare(sc)
    full = api.simulate(prep, record_messages=True, symmetry=False)
    red = api.simulate(prep, record_messages=True, symmetry=True)
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert _per_rank(red) == _per_rank(full)
    assert red.sim.net_bytes == full.sim.net_bytes and red.sim.all_messages == full.sim.all_messages
    # the full run has a flow per rail (8) per replica (DP4) for every pipeline send; the reduced one one
    full_sends = sum(1 for m in full.sim.messages if m.collective == "send")
    red_sends = sum(1 for m in red.sim.messages if m.collective == "send")
    assert red_sends > 0 and red_sends * 8 * 4 == full_sends


def test_rails_sharing_spines_unevenly_are_not_merged():
    # one node per leaf, 3 spines, rails pinned: rails 0, 3, 6 share spine 0's links, 2 and 5 spine 2's,
    # so a pipeline send's rails do not all get one rate; they must be simulated one by one
    fabric = {"kind": "leaf_spine", "hosts_per_leaf": 8, "num_spines": 3, "uplink_gbps": 400}
    full, red = _both(_scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 4}], pp=2, batch=8,
                                fabric=fabric))
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert _per_rank(red) == _per_rank(full)
    assert red.sim.symmetry["merged_rail_groups"] == 0


def test_with_hashed_ecmp_pipeline_rails_are_not_merged():
    # each rail's NIC links also carry what the hash put there, rail by rail, so one rate for all of a
    # send's rails would be wrong (a 256-GPU TP4 run was 146 us off): every rail is its own flow
    # stages adjacent (order tp-pp-dp): a replica's two stages share a leaf, so its sends are not hashed
    # and look alike rail by rail, while the data-parallel rings cross the spines, hashed
    fabric = {"kind": "leaf_spine", "hosts_per_leaf": 16, "uplink_gbps": 400}
    sc = _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 4}], pp=2, batch=8, fabric=fabric,
                   ecmp="hash")
    sc = api.with_overrides(sc, {"parallelism.order": "tp-cp-ep-pp-dp", "simulation.hashed_copies": "exact"})
    prep = api.prepare(sc)
    full = api.simulate(prep, record_messages=True, symmetry=False)
    red = api.simulate(prep, record_messages=True, symmetry=True)
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    sends = [sum(1 for m in r.sim.messages if m.collective == "send") for r in (full, red)]
    lanes = red.sim.symmetry["lanes_simulated"] / red.sim.symmetry["lanes_total"]
    assert sends[1] == sends[0] * lanes > 0  # the simulated lanes' sends, one flow per rail
