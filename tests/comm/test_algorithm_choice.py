"""``comm.algorithm: auto`` across nodes picks what NCCL's tuning model picks.

Expected picks are derived here by hand from NCCL's published formulas and constants (NCCL 2.30.7
src/graph/tuning.cc: baseLat/hwLat l. 149-176, per-channel caps l. 177-212, busBw refinements l. 326-383,
latencies l. 385-436, time l. 630-654; topology-search speeds src/graph/search.cc l. 1057-1058), writing out
each candidate's time, not by calling heterosim/comm/tuning.py.  Cluster: DGX H100 nodes (8 GPUs, NVSwitch
with NVLS, 8 x 400 Gb/s NICs = 50 GB/s each); NCCL's search puts one ring/tree channel per NIC at 48 GB/s
(the largest Hopper inter speed <= 50) and does not double channels (Hopper, bw < 50, > 4 channels); NVLS has 16
channels at 24 GB/s intra (largest Hopper intra speed <= 450/16) and 24 GB/s inter (<= 8 x 50 / 16).
"""
from __future__ import annotations

import pytest

from heterosim.comm import plan_collective
from heterosim.comm.planner import nccl_choice
from topologies import build_system
from topologies.config import ClusterConfig, DeviceGroup, LeafSpineFabric

CL = ClusterConfig(groups=[DeviceGroup(name="h", node_type="dgx-h100", num_nodes=4)])
PLAIN = build_system(CL, LeafSpineFabric(hosts_per_leaf=32))
SHARP = build_system(CL, LeafSpineFabric(hosts_per_leaf=32, in_network_reduction="sharp"))
ALL = list(range(32))
RAIL = [0, 8, 16, 24]  # one GPU per node


def _t(lat_us: float, algbw_GBps: float, size: int) -> float:
    return lat_us + size / (1000 * algbw_GBps)


def hand_allreduce_32(size: int, sharp: bool) -> dict[str, float]:
    """Candidate times (us) for allreduce on 4 nodes x 8 GPUs."""
    n, nsteps = 32, 62
    ring_bus = 8 * 48  # 8 channels x 48 GB/s
    c = {}
    # Tree: busBw min(x.92, 8 x perChMaxTreeBw[Hopper][N4]=36.0) = 288; LL: min(/3.8, llMax[x86][N4]=20.4);
    # algbw = busBw x .5; latency base + 2((ppn-1) intraLat + log2(4) interLat); tree correction by size
    log_size = (size >> 6).bit_length() - 1
    corr = {"ll": [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0],
            "ll128": [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0],
            "simple": [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9]}
    cf = {p: (v[log_size] if 0 <= log_size < 23 else 1.0) for p, v in corr.items()}
    tree = min(ring_bus * .92, 8 * 36.0)
    c["tree/ll"] = _t(6.8 + 2 * (7 * .6 + 2 * 5.0), min(tree / 3.8, 20.4) * .5 * cf["ll"], size)
    c["tree/ll128"] = _t(14.0 + 2 * (7 * 1.25 + 2 * 8.5), min(tree * 120 / 128, 8 * 29.0) * .5 * cf["ll128"], size)
    c["tree/simple"] = _t(8.4 + 2 * (7 * 4.0 + 2 * 14.0), tree * .5 * cf["simple"], size)
    # Ring: 6 inter-node steps, 56 intra steps at max(hwLat NVLink, net overhead 1 us (x3 Simple))
    plateau = 1.4 if size // (8 * n) >= 64 else 1.0
    c["ring/ll"] = _t(6.6 + 56 * 1.0 + 6 * 2.7, min(20.4, ring_bus * .5) * n / nsteps, size)
    c["ring/ll128"] = _t(14.0 + 56 * 1.9 + 6 * 4.0, min(ring_bus * .92, 8 * 36.7) * n / nsteps, size)
    c["ring/simple"] = _t((8.4 + 56 * 3.4 + 6 * 14.0) * plateau, ring_bus * n / nsteps, size)
    # NVLSTree: min(24 x .85 x 15/16 x 2 = 38.25, inter 24, cap 45.5) x 16 channels; latency 25 + 2 log2(4) 20.9
    c["nvls_tree/simple"] = _t(25 + 2 * 2 * 20.9, 16 * min(38.25, 24, 45.5) * n / nsteps, size)
    if sharp:
        # NVLS across nodes (NVLS + CollNet): min(38.25, 24) x 16; latency intra 25 + inter 18
        c["nvls/simple"] = _t(25 + 18, 16 * min(38.25, 24) * n / nsteps, size)
        # CollNet Direct: 8 heads x 48, GPU/NIC factor 1, x.85 (Hopper), x.5; 2(3.7 + 7 x .4) + 31
        c["collnet_direct/simple"] = _t(2 * (3.7 + 7 * .4) + 31, 8 * 48 * .85 * .5, size)
        # CollNet Chain: 8 x 48 x .5; 2 x 7 x 2.8 + 30
        c["collnet_chain/simple"] = _t(2 * 7 * 2.8 + 30, 8 * 48 * .5, size)
    return c


def hand_allgather_rail(size: int) -> dict[str, float]:
    """Candidate times (us) for allgather on 4 nodes x 1 GPU (one NIC each): PAT is eligible."""
    n, nsteps = 4, 3
    return {  # one channel at 48 GB/s; with one GPU per node every network latency is the tree's
        "pat/simple": _t(8.0 + 2 * 14.0 / 3.5 + n * 2.8, 48 * .75, size),
        "ring/ll": _t(6.6 + 3 * 5.0, min(20.4, 48 * .5) * n / nsteps, size),
        "ring/ll128": _t(14.0 + 3 * 8.5, min(48 * .92, 36.7) * n / nsteps, size),
        "ring/simple": _t(8.4 + 3 * 14.0, 48 * n / nsteps, size),
    }


CASES = [(1 << 10, False), (1 << 20, False), (64 << 20, False), (1 << 30, False),
         (1 << 10, True), (1 << 20, True), (64 << 20, True), (1 << 30, True)]


@pytest.mark.parametrize("size,sharp", CASES)
def test_allreduce_pick_matches_nccls_model(size, sharp):
    cands = hand_allreduce_32(size, sharp)
    want = min(cands, key=cands.get)
    algo, proto, t = nccl_choice("allreduce", ALL, size, SHARP if sharp else PLAIN)
    assert f"{algo}/{proto}" == want, cands
    assert t == pytest.approx(cands[want], rel=1e-6)


def test_expected_picks_by_hand():
    """The hand model's own picks, spelled out (they are what NCCL does on DGX H100: tree for small,
    NVLSTree for large, NVLS+SHARP for large when CollNet is on)."""
    picks = {(s, sh): min(c := hand_allreduce_32(s, sh), key=c.get) for s, sh in CASES}
    assert picks[(1 << 10, False)] == "tree/ll"
    assert picks[(1 << 30, False)] == "nvls_tree/simple"
    assert picks[(1 << 30, True)] == "nvls/simple"


@pytest.mark.parametrize("size,want", [(1 << 10, None), (1 << 20, "pat/simple"), (1 << 30, "ring/simple")])
def test_pat_at_one_gpu_per_node(size, want):
    cands = hand_allgather_rail(size)
    best = min(cands, key=cands.get)
    if want is not None:
        assert best == want
    algo, proto, _ = nccl_choice("allgather", RAIL, size, PLAIN)
    assert f"{algo}/{proto}" == best, cands


def test_no_pat_with_several_gpus_per_node():
    algo, _, _ = nccl_choice("allgather", ALL, 1 << 20, PLAIN)
    assert algo != "pat"


def test_auto_schedule_follows_the_pick():
    s = plan_collective("allreduce", ALL, 1 << 30, SHARP)
    assert (s.algorithm, s.tuned) == ("collnet", "nvls/simple")
    s = plan_collective("allreduce", ALL, 1 << 30, PLAIN)
    assert (s.algorithm, s.tuned) == ("hierarchical", "nvls_tree/simple")
    s = plan_collective("allreduce", ALL, 1 << 10, PLAIN)
    assert (s.algorithm, s.protocol, s.tuned) == ("tree", "ll", "tree/ll")
    s = plan_collective("allgather", RAIL, 1 << 20, PLAIN)
    assert (s.algorithm, s.tuned) == ("ring", "pat/simple")  # PAT's bytes as a ring (labelled)
