"""trace.sample_lanes: the slowest path it keeps, where lanes of mirrored replicas share one timeline list."""
from types import SimpleNamespace

from heterosim.results.trace import sample_lanes


def _sim_ir(ends):
    """One lane per rank (rank r = lane r), 2 stages x 3 data-parallel replicas; ``ends[r]`` its end_ns list."""
    lanes = [SimpleNamespace(id=r, ranks=(r,), program=r % 2, end_ns=ends[r]) for r in range(6)]
    ir = SimpleNamespace(world_size=6, groups={"dp": [(0, 2, 4), (1, 3, 5)]},
                         program_of=lambda r: SimpleNamespace(stage=r % 2))
    return SimpleNamespace(lanes=lanes), ir


def test_slowest_replica_from_shared_and_own_timelines():
    shared = [5, 10]
    # replicas 0 and 2 share replica 0's lists; lane 3 (replica 1) ran its own and ends last
    sim, ir = _sim_ir([shared, [1, 2], shared, [3, 40], shared, [1, 2]])
    _, rule = sample_lanes(sim, ir)
    assert rule["slowest_tp_group_first_rank"] == 3
    assert rule["replicas"] == [0, 1, 2]


def test_slowest_tie_goes_to_the_first_lane():
    shared = [5, 10]
    sim, ir = _sim_ir([[1], shared, [1], shared, [1], [10]])
    _, rule = sample_lanes(sim, ir)
    assert rule["slowest_tp_group_first_rank"] == 1
