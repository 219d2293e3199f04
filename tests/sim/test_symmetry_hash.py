"""The approximate reductions under hashed ECMP (``simulation.hashed_copies``) against the full run.

Copies whose paths differ only in the links the ECMP hash chose ride as one group flow, each on its own
links, at the slowest copy's pace: the copies one op waits for (``ops``: ring positions, rails), and
also data-parallel replicas (``ops_and_replicas``). Issue 15's rule for a reduction that is not exact: iteration time and
breakdown within 0.5% of the full simulation (every lane, every transfer its own flow), which is the
reference computed in each test. Where today's exact reduction applies nothing may change, and
heterogeneous replicas, stragglers and degraded links must still split the replicas.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from heterosim import api
from test_symmetry import H100, _per_rank, _scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_run import flat_breakdown, stage_means  # noqa: E402  (the categories bench_run compares)

TOL = 0.005
"""Issue 15: within 0.5% where the reduction is not exact."""
LEAF16 = {"kind": "leaf_spine", "hosts_per_leaf": 16, "uplink_gbps": 400}


def _both(sc, mode="ops_and_replicas"):
    prep = api.prepare(api.with_overrides(sc, {"simulation.hashed_copies": mode}))
    return (api.simulate(prep, record_messages=False, symmetry=False),
            api.simulate(prep, record_messages=False, symmetry=True))


def _assert_agrees(full, red):
    T = full.sim.iteration_time_ns
    assert abs(red.sim.iteration_time_ns - T) <= TOL * T
    bf, br = flat_breakdown(full.summary["breakdown"]), flat_breakdown(red.summary["breakdown"])
    assert bf.keys() == br.keys()
    for k in bf:  # fractions of the iteration time
        assert abs(br[k] - bf[k]) <= TOL, k
    sf, sr = stage_means(full.summary), stage_means(red.summary)
    assert sf.keys() == sr.keys()
    Ts = full.summary["iteration_time_s"]
    for k in sf:  # mean seconds of a category on a stage's GPUs, against the iteration time
        assert abs(sr[k] - sf[k]) <= TOL * Ts, k
    # byte conservation: every copy's bytes were sent and arrived
    assert red.sim.net_bytes == full.sim.net_bytes == red.sim.net_stats.bytes_delivered
    assert red.sim.all_messages == full.sim.all_messages


def test_homogeneous_hashed_replicas_merge_within_half_a_percent():
    # 16 nodes, two per leaf: data-parallel rings and pipeline sends cross the spines, hashed
    sc = _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 16}], batch=32, fabric=LEAF16, ecmp="hash")
    full, red = _both(sc)
    sym = red.sim.symmetry
    assert sym["hashed_copies"] == "ops_and_replicas"
    assert sym["replica_classes"]["class_sizes"] == [8] and sym["lanes_simulated"] == 2
    assert sym["copies_sent"] > 0 and red.sim.events * 5 < full.sim.events
    _assert_agrees(full, red)


def test_homogeneous_hashed_ops_merge_rings_and_rails_not_replicas_within_half_a_percent():
    sc = _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 16}], batch=32, fabric=LEAF16, ecmp="hash")
    full, red = _both(sc, "ops")
    sym = red.sim.symmetry
    assert sym["hashed_copies"] == "ops"
    assert sym["replica_classes"] is None and sym["lanes_simulated"] == sym["lanes_total"] == 16
    assert sym["orbit_schedules"] > 0 and sym["merged_rail_groups"] > 0 and red.sim.events * 2 < full.sim.events
    _assert_agrees(full, red)


def test_heterogeneous_hashed_cluster_within_half_a_percent_and_kinds_never_merged():
    # replicas 0-1 on DGX H100 (400G NICs), 2-3 on DGX A100 (200G): rings and rails still merge as
    # group flows, but no replica stands for one of the other kind
    groups = [{"name": "h", "node_type": "dgx-h100", "num_nodes": 4},
              {"name": "a", "node_type": "dgx-a100", "num_nodes": 4}]
    sc = api.with_overrides(_scenario(groups, batch=32, fabric=LEAF16, ecmp="hash"),
                            {"parallelism.order": "tp-cp-ep-pp-dp"})
    full, red = _both(sc, "ops")
    sym = red.sim.symmetry
    # the data-parallel rings' link profiles (400G, 400G, 200G, 200G) repeat only after all four positions:
    # no replica stands for another (heterosim/sim/symmetry.py, _dp_ring_period), hash or not
    assert sym["replica_classes"] is None
    assert sym["copies_sent"] > 0
    _assert_agrees(full, red)


def test_exact_mode_merges_nothing_hashed():
    sc = _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 16}], batch=32, fabric=LEAF16, ecmp="hash")
    sc = api.with_overrides(sc, {"simulation.hashed_copies": "exact"})
    red = api.simulate(api.prepare(sc), record_messages=False, symmetry=True)
    assert red.sim.symmetry["hashed_copies"] == "exact"
    assert red.sim.symmetry["replica_classes"] is None and red.sim.symmetry["copies_sent"] == 0


def test_a_straggler_still_gets_its_own_class_under_hash():
    sc = _scenario([H100], batch=32, fabric=LEAF16, ecmp="hash",
                   cluster_extra={"stragglers": [{"gpu": "h-5/gpu3", "slowdown": 1.3}]})
    full, red = _both(sc)
    assert red.sim.symmetry["replica_classes"]["class_sizes"] == [3, 1]
    _assert_agrees(full, red)


def test_a_degraded_nic_link_still_splits_the_replicas_under_hash():
    sc = _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 16}], batch=16, fabric=LEAF16, ecmp="hash",
                   cluster_extra={"degraded_links": [{"a": "h-10/nic0", "factor": 0.25}]})
    full, red = _both(sc)
    assert red.sim.symmetry["replica_classes"] is None
    _assert_agrees(full, red)


@pytest.mark.parametrize("mode", ["ops", "ops_and_replicas", "ops_and_shifted_replicas"])
def test_nothing_changes_where_paths_are_not_hashed(mode):
    # rails pinned: today's exact reduction applies and stays bit-identical to the full run
    sc = _scenario([H100], pp=2)
    full, red = _both(sc, mode)
    assert red.sim.symmetry["replica_classes"]["class_sizes"] == [4]
    assert "shifted_groups" not in red.sim.symmetry  # (no warm-up, nothing shifted: replicas exactly alike)
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    assert red.summary["breakdown"] == full.summary["breakdown"]
    assert _per_rank(red) == _per_rank(full)


def test_a_bad_hashed_copies_is_a_one_line_error_naming_field_and_value():
    from heterosim.config.loader import scenario_from_dict
    from heterosim.errors import UserError

    d = _scenario([H100]).model_dump(exclude_none=True)
    d["simulation"] = {"hashed_copies": "fastest"}
    with pytest.raises(UserError) as err:
        scenario_from_dict(d)
    msg = str(err.value)
    assert "simulation.hashed_copies" in msg and "fastest" in msg and "\n" not in msg


def _pp4():
    # 16 nodes, two per leaf, PP4 DP4, 16 micro-batches per replica: pipeline sends cross the spines, hashed
    return _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 16}], pp=4, batch=64, fabric=LEAF16,
                     ecmp="hash")


def _worst_stage(full, red) -> float:
    sf, sr = stage_means(full.summary), stage_means(red.summary)
    return max(abs(sr[k] - sf[k]) for k in sf) / full.summary["iteration_time_s"]


def test_shifted_replicas_within_half_a_percent_and_closer_per_stage_than_lockstep():
    # ops_and_shifted_replicas: a warm-up of every replica measures each mirror's offset; its pipeline copies
    # then go as their own flows that late instead of in lockstep with the simulated replica
    sc = _pp4()
    full, shifted = _both(sc, "ops_and_shifted_replicas")
    sym = shifted.sim.symmetry
    assert sym["hashed_copies"] == "ops_and_shifted_replicas"
    assert sym["replica_classes"]["class_sizes"] == [4] and sym["lanes_simulated"] * 4 == sym["lanes_total"]
    assert sym["shifted_groups"] > 0 and sym["shifted_early"] == 0
    _assert_agrees(full, shifted)
    lockstep = api.simulate(api.prepare(api.with_overrides(sc, {"simulation.hashed_copies": "ops_and_replicas"})),
                            record_messages=False, symmetry=True)
    assert _worst_stage(full, shifted) < _worst_stage(full, lockstep)


def test_shifted_replicas_are_deterministic():
    prep = api.prepare(api.with_overrides(_pp4(), {"simulation.hashed_copies": "ops_and_shifted_replicas"}))
    a, b = (api.simulate(prep, record_messages=False, symmetry=True) for _ in range(2))
    assert a.sim.iteration_time_ns == b.sim.iteration_time_ns
    assert a.summary["breakdown"] == b.summary["breakdown"] and _per_rank(a) == _per_rank(b)
    assert a.sim.symmetry == b.sim.symmetry


def test_the_warm_up_is_the_every_replica_run_stopped_after_a_few_pipeline_transfers_per_pair():
    from heterosim.api import intra_config
    from heterosim.sim.coordinator import WARMUP_TRANSFERS, Coordinator
    from heterosim.sim.intra import effective_intra
    from netbackend.registry import create_backend

    sc = api.with_overrides(_pp4(), {"simulation.hashed_copies": "ops"})
    prep = api.prepare(sc)

    def coordinator():
        net = create_backend("flow", prep.system.net, sc.network, sc.seed)
        intra = create_backend("flow", effective_intra(prep.system.intra), intra_config(sc), sc.seed)
        return Coordinator(prep.ir, prep.system, prep.compute, net, intra, precision=sc.training.precision,
                           comm_options=sc.comm.model_dump(), record_messages=False, symmetry=True,
                           hashed_copies="ops")

    starts, ends = coordinator().warm_up()
    whole = coordinator()
    whole.run()
    # the same transfers start at the same instants as in the run to its end (it is that run, cut short) ...
    for (src, dst), log in starts.items():
        lane = whole.lanes[src]
        done = {op.tag: lane.comm_start_ns[op.id] for op in whole.programs[lane.program].ops
                if op.collective == "send" and whole.lane_of_rank[whole.ir.peer_of(lane.ranks[0], op.peer_offset)] == dst}
        assert len(log) >= min(WARMUP_TRANSFERS, len(done))
        assert all(done[tag] == t for tag, t in log.items())
        assert set(ends[(src, dst)]) <= set(log)
    # ... and it stops well before the iteration ends
    end = max(max(lane.end_ns) for lane in whole.lanes)
    assert max(max(log.values()) for log in starts.values()) < end / 2


def test_shifted_replicas_without_a_pipeline_need_no_warm_up_and_match_lockstep():
    # PP1: no pipeline sends to shift, so the warm-up measures nothing and the run is ops_and_replicas'
    sc = _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 4}], pp=1, batch=16, fabric=LEAF16,
                   ecmp="hash")
    a, b = (api.simulate(api.prepare(api.with_overrides(sc, {"simulation.hashed_copies": m})),
                         record_messages=False, symmetry=True) for m in ("ops_and_replicas", "ops_and_shifted_replicas"))
    assert b.sim.symmetry["replica_classes"]["class_sizes"] == [4] and b.sim.symmetry["shifted_groups"] == 0
    assert a.sim.iteration_time_ns == b.sim.iteration_time_ns and a.summary["breakdown"] == b.summary["breakdown"]


def _short():
    # a short iteration (8 micro-batches per replica, PP4 DP8, two nodes per leaf): the embedding all-reduce and
    # the data-parallel collectives after the drain are a large part of it (benchmarks/bench_hash_agreement.py
    # case "short")
    return _scenario([{"name": "h", "node_type": "dgx-h100", "num_nodes": 32}], pp=4, batch=64, fabric=LEAF16,
                     ecmp="hash")


def test_shifted_replicas_run_their_own_replica_local_collectives_on_a_short_iteration():
    # every replica's embedding all-reduce starts at once (after the data-parallel reduce-scatters) and the hash
    # makes their collisions differ, so the replicas end the iteration apart; a mirror riding in the simulated
    # replica's group flow would end with the slowest copy (1.1% of the iteration off at stages 0 and 3)
    full, red = _both(_short(), "ops_and_shifted_replicas")
    sym = red.sim.symmetry
    assert sym["replica_classes"]["class_sizes"] == [8] and sym["lanes_simulated"] == 4
    assert sym["shadow_schedules"] == 7  # one embedding all-reduce per mirrored replica
    _assert_agrees(full, red)

    def stage0_ends(res):
        return sorted({max(lane.end_ns) for lane in res.sim.lanes if lane.ranks[0] < 64})

    assert len(stage0_ends(full)) > 1 and len(stage0_ends(red)) > 1  # replicas end apart in both
    # the iteration ends with the latest replica, mirrored ones included
    assert red.sim.iteration_time_ns == max(max(lane.end_ns) for lane in red.sim.lanes)
    lockstep = api.simulate(api.prepare(api.with_overrides(_short(), {"simulation.hashed_copies": "ops_and_replicas"})),
                            record_messages=False, symmetry=True)
    assert _worst_stage(full, lockstep) > TOL > _worst_stage(full, red)


def test_cross_replica_collectives_wait_for_the_latest_mirrored_copy():
    # the data-parallel reduce-scatters start when the latest replica posts them: a mirror whose pipeline sends
    # run behind the simulated replica's (offsets from the warm-up) posts later
    from heterosim.sim.coordinator import Coordinator

    starts = []
    orig = Coordinator._start_ready

    def spy(self, ready, op):
        if op.group == "dp" and self._shifts:
            starts.append((self._now, max(self.lanes[l].start_ns[o] for i in ready for l, o in i.lane_ops.items())))
        return orig(self, ready, op)

    Coordinator._start_ready = spy
    try:
        red = api.simulate(api.prepare(api.with_overrides(_short(), {"simulation.hashed_copies":
                                                                     "ops_and_shifted_replicas"})),
                           record_messages=False, symmetry=True)
    finally:
        Coordinator._start_ready = orig
    assert red.sim.symmetry["delayed_collectives"] > 0
    assert all(t >= posted for t, posted in starts)
    assert any(t > posted for t, posted in starts)


def test_a_shifted_run_without_its_warm_up_is_refused_not_run_in_lockstep():
    from heterosim.api import intra_config
    from heterosim.errors import SimulationError
    from heterosim.sim.coordinator import Coordinator
    from heterosim.sim.intra import effective_intra
    from netbackend.registry import create_backend

    sc = _pp4()
    prep = api.prepare(sc)
    net = create_backend("flow", prep.system.net, sc.network, sc.seed)
    intra = create_backend("flow", effective_intra(prep.system.intra), intra_config(sc), sc.seed)
    coord = Coordinator(prep.ir, prep.system, prep.compute, net, intra, precision=sc.training.precision,
                        comm_options=sc.comm.model_dump(), record_messages=False, symmetry=True,
                        hashed_copies="ops_and_shifted_replicas")
    assert coord.needs_warm_up()
    with pytest.raises(SimulationError, match="warm-up"):
        coord.run()
