"""All-to-allv (uneven MoE routing): per-pair sizes by hand, the flow schedule's bytes per rank, and on one node
the analytic time equal to the uniform all-to-all sized by the largest receiver (the stand-in training runs used
before they ran the all-to-allv itself)."""
from __future__ import annotations

import pytest

from heterosim.comm import intra_time_ns, plan_collective
from heterosim.comm.alltoallv import largest_receiver_bytes, plan_alltoallv, routing_matrix
from hscommon.errors import UserError
from topologies import build_system
from topologies.config import ClusterConfig, DeviceGroup, LeafSpineFabric

H100x2 = build_system(ClusterConfig(groups=[DeviceGroup(name="h", node_type="dgx-h100", num_nodes=2)]),
                      LeafSpineFabric())


def test_routing_matrix_by_hand():
    """4 ranks each sending 800 B, rank 0's experts getting 2.5x the mean, the others 0.5x: rank i sends
    800 x 2.5 / 4 = 500 B to rank 0 and 800 x 0.5 / 4 = 100 B to each other rank (own share included);
    rank 0 receives 4 x 500 = 2000 B = 2.5 x 800, the others 400 B."""
    m = routing_matrix(800, [2.5, 0.5, 0.5, 0.5])
    assert m == [[500, 100, 100, 100]] * 4
    assert largest_receiver_bytes(m) == 2000
    assert largest_receiver_bytes(routing_matrix(800, [1.0] * 4)) == 800  # even: the all-to-all's own size


def test_routing_matrix_rows_keep_their_total():
    m = routing_matrix(1000, [3.0, 0.0, 0.0])  # 1000 x 3 / 3 = 1000 to rank 0, nothing elsewhere
    assert m == [[1000, 0, 0], [1000, 0, 0], [1000, 0, 0]]
    m = routing_matrix(1001, [1.5, 0.75, 0.75])  # 500.5 -> 500, 250.25 -> 250: remainder to the own share
    assert [sum(r) for r in m] == [1001] * 3 and m[1] == [500, 251, 250]


def test_schedule_bytes_per_rank():
    """The 4-rank matrix above on ranks 0-3 of one node, 1 channel, Simple: rank 0 receives 3 x 500 B from its
    peers (its own share moves nothing), rank 1 sends 500 + 100 + 100 = 700 B and receives 3 x 100 B."""
    s = plan_alltoallv([0, 1, 2, 3], routing_matrix(800, [2.5, 0.5, 0.5, 0.5]), H100x2, protocol="simple",
                       channels=1)
    s.check()
    assert s.size_bytes == 2000 and s.op == "alltoallv"
    assert s.bytes_received(0) == 1500 and s.bytes_sent(1) == 700 and s.bytes_received(1) == 300
    assert len(s.transfers) == 4 * 3


def test_across_nodes_pairs_use_the_network():
    ranks = [0, 1, 8, 9]
    s = plan_alltoallv(ranks, routing_matrix(1 << 20, [2.5, 0.5, 0.5, 0.5]), H100x2, protocol="simple", channels=2)
    net = [t for t in s.transfers if t.link == "net"]
    assert {(t.src, t.dst) for t in net} == {(a, b) for a in (0, 1) for b in (8, 9)} | \
        {(a, b) for a in (8, 9) for b in (0, 1)}
    assert sum(t.size_bytes for t in s.transfers if t.dst == 0) == 3 * (1 << 20) * 2.5 / 4


@pytest.mark.parametrize("hot", [1.0, 1.5, 2.0, 4.0])
def test_one_node_time_is_the_largest_receivers(hot):
    """8 GPUs of a DGX H100, 16 MiB sent per rank, rank 0's experts receiving ``hot`` x the mean: NVLink ingress of
    rank 0 carries 7/8 x hot x 16 MiB in both the all-to-allv and the uniform all-to-all of size hot x 16 MiB
    (each of whose pairs carries hot x 2 MiB), and every other resource carries less, so the analytic model
    times them alike: inside a node the old stand-in was exact."""
    S = 16 << 20
    load = [hot] + [(8 - hot) / 7] * 7
    v = plan_alltoallv(list(range(8)), routing_matrix(S, load), H100x2)
    u = plan_collective("alltoall", list(range(8)), largest_receiver_bytes(routing_matrix(S, load)), H100x2)
    assert v.protocol == u.protocol and v.channels == u.channels
    assert intra_time_ns(v, H100x2) == pytest.approx(intra_time_ns(u, H100x2), rel=1e-6)


def test_bad_matrix_is_one_line():
    with pytest.raises(UserError, match="needs a 3 x 3 matrix"):
        plan_alltoallv([0, 1, 2], [[0, 1], [1, 0]], H100x2)
    with pytest.raises(UserError, match="must be >= 0"):
        plan_alltoallv([0, 1], [[0, -1], [1, 0]], H100x2)
    with pytest.raises(UserError, match="mean 1"):
        routing_matrix(100, [2.0, 2.0])
