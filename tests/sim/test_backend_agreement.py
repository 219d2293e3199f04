"""An uncongested ring all-reduce across 4 nodes: packet-level and flow-level agree."""
from pathlib import Path

import pytest

from heterosim.collective import run_collective
from topologies import build_system, load_system
from topologies.config import ClusterConfig, DeviceGroup, LeafSpineFabric

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.ns3
def test_ring_allreduce_ns3_matches_flow_within_3_percent():
    pytest.importorskip("cppyy")
    # all 32 NICs on one leaf: no ECMP collisions, so the ring is truly uncongested
    system = build_system(ClusterConfig(groups=[DeviceGroup(name="a100", node_type="dgx-a100", num_nodes=4)]),
                          LeafSpineFabric(hosts_per_leaf=32))
    size = 64 << 20
    flow = run_collective(system, "allreduce", size, 32, algorithm="ring", backend="flow")
    ns3 = run_collective(system, "allreduce", size, 32, algorithm="ring", backend="ns3")
    assert ns3.time_ns == pytest.approx(flow.time_ns, rel=0.03)
    # across nodes the collective is bounded by the NICs: 8 x 200 Gb/s per node
    assert flow.busbw_GBps <= 8 * 200 / 8 * 1.0001


def test_single_node_ring_vs_nvls_busbw_near_nccl_tests():
    """8x H100 NVSwitch, 1 GiB: ring ~360-380 GB/s, NVLS ~450-480 GB/s (nccl-tests on DGX H100)."""
    system = load_system(ROOT / "topologies" / "h100-single-node.yaml")
    ring = run_collective(system, "allreduce", 1 << 30, 8, algorithm="ring")
    nvls = run_collective(system, "allreduce", 1 << 30, 8, algorithm="nvls")
    assert 340 <= ring.busbw_GBps <= 390
    assert 430 <= nvls.busbw_GBps <= 490
    assert nvls.busbw_GBps > ring.busbw_GBps * 1.15


@pytest.mark.ns3
def test_rail_pinned_ecmp_means_the_same_paths_in_both_backends():
    """Across spines with ecmp: rail, both backends pin a flow to its NIC's rail: same times."""
    pytest.importorskip("cppyy")
    from netbackend.config import NetworkConfig

    system = build_system(ClusterConfig(groups=[DeviceGroup(name="a100", node_type="dgx-a100", num_nodes=4)]),
                          LeafSpineFabric(hosts_per_leaf=16))
    cfg = NetworkConfig(ecmp="rail")
    flow = run_collective(system, "allreduce", 64 << 20, 32, algorithm="ring", backend="flow", network=cfg)
    ns3 = run_collective(system, "allreduce", 64 << 20, 32, algorithm="ring", backend="ns3", network=cfg)
    assert ns3.time_ns == pytest.approx(flow.time_ns, rel=0.03)
