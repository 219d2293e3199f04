"""Analytical intra-node timing: calibration against published nccl-tests busbw, resource sharing."""
from __future__ import annotations

import pytest

from heterosim.comm import busbw_GBps, intra_time_ns, plan_collective
from heterosim.comm.schedule import FlowSchedule, Transfer
from hscommon.errors import UserError
from topologies import build_system
from topologies.config import ClusterConfig, DeviceGroup, LeafSpineFabric


def system(*types):
    return build_system(ClusterConfig(groups=[DeviceGroup(name=f"g{i}", node_type=t, num_nodes=1)
                                              for i, t in enumerate(types)]), LeafSpineFabric())


H100 = system("dgx-h100", "dgx-h100")
A100 = system("dgx-a100")
L40S = system("pcie-l40s")
GIB = 1 << 30


def busbw(sys_, algorithm, ranks=tuple(range(8)), size=GIB, op="allreduce"):
    s = plan_collective(op, list(ranks), size, sys_, algorithm=algorithm)
    return busbw_GBps(op, len(ranks), size, intra_time_ns(s, sys_))


def test_h100_ring_calibration():
    # nccl-tests on DGX H100, 1 GiB all-reduce, ring: ~360-380 GB/s busbw
    assert 355 <= busbw(H100, "ring") <= 385


def test_h100_nvls_calibration():
    # NVLS (NVLink SHARP) on DGX H100: ~450-480 GB/s busbw
    assert 450 <= busbw(H100, "nvls") <= 490


def test_a100_ring_calibration():
    # DGX A100 ring all-reduce ~230 GB/s (NVIDIA/nccl-tests issue 149)
    assert busbw(A100, "ring") == pytest.approx(230, rel=0.06)


def test_ring_allgather_matches_link_efficiency():
    bw = busbw(H100, "ring", op="allgather")
    assert 355 <= bw <= 385


def test_small_messages_are_latency_bound():
    t_small = intra_time_ns(plan_collective("allreduce", list(range(8)), 8 << 10, H100), H100)
    assert 5_000 < t_small < 40_000  # NCCL LL all-reduce on 8 GPUs: ~10-20 us
    s_simple = plan_collective("allreduce", list(range(8)), 8 << 10, H100, algorithm="ring", protocol="simple")
    assert intra_time_ns(s_simple, H100) > t_small  # Simple pays more latency per step


def test_time_grows_with_size_and_more_ranks_share_links():
    sizes = [1 << 16, 1 << 20, 1 << 24, 1 << 28]
    times = [intra_time_ns(plan_collective("allreduce", list(range(8)), sz, H100), H100) for sz in sizes]
    assert times == sorted(times) and times[-1] > 10 * times[1]


def test_broadcast_chain_pipeline_fill():
    # 8-rank chain with 2 channels and 8 chunks: fill adds (n-2)/K of the bandwidth term
    s = plan_collective("broadcast", list(range(8)), GIB, H100, algorithm="ring", channels=2)
    t = intra_time_ns(s, H100)
    ideal = GIB / (450 * 0.81)
    assert t > ideal * 1.05


def _manual(transfers):
    return FlowSchedule("send", "direct", "simple", (0, 1, 2, 3), 0, transfers)


def test_pcie_switch_uplink_sharing():
    sz = 1 << 28
    g = L40S.gpus
    same = _manual([Transfer(0, 0, 1, sz, "pcie", g[0].name, g[1].name)])
    cross = _manual([Transfer(0, 0, 2, sz, "pcie", g[0].name, g[2].name)])
    two_cross = _manual([Transfer(0, 0, 2, sz, "pcie", g[0].name, g[2].name),
                         Transfer(1, 1, 3, sz, "pcie", g[1].name, g[3].name)])
    t_same, t_cross, t_two = (intra_time_ns(x, L40S) for x in (same, cross, two_cross))
    assert t_same == pytest.approx(t_cross, rel=0.01)
    assert t_two == pytest.approx(2 * t_cross, rel=0.01)  # both cross the pcie0 -> rc uplink
    assert busbw(L40S, "ring") == pytest.approx(32 * 0.78, rel=0.05)


def test_rejects_network_schedules():
    s = plan_collective("allreduce", list(range(16)), 1 << 20, H100, algorithm="ring")
    with pytest.raises(UserError, match="single-node"):
        intra_time_ns(s, H100)
