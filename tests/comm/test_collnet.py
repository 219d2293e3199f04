"""CollNet all-reduce over InfiniBand SHARP: bytes per link and alpha-beta time by hand (issue 38)."""
from __future__ import annotations

import pytest

from heterosim.collective import run_collective
from heterosim.comm import plan_collective
from heterosim.comm.collnet import SHARP_SWITCH
from hscommon.errors import UserError
from netbackend.config import NetworkConfig
from topologies import build_system
from topologies.config import ClusterConfig, DeviceGroup, LeafSpineFabric

MiB = 1 << 20


def _system(nodes: int, gpus: int, nics: int, per_leaf: int, sharp: bool = True, nic_gbps: float = 400):
    cl = ClusterConfig(groups=[DeviceGroup(name="n", node_type="dgx-h100", num_nodes=nodes,
                                           overrides={"gpus_per_node": gpus, "nics_per_node": nics,
                                                      "nic_gbps": nic_gbps})])
    return build_system(cl, LeafSpineFabric(hosts_per_leaf=per_leaf, uplink_gbps=nic_gbps,
                                            in_network_reduction="sharp" if sharp else "none"))


def _net_out_of_node(sched, system, node: int) -> int:
    nics = set(system.nodes[node].nics)
    return sum(t.size_bytes for t in sched.transfers if t.link == "net" and t.src_ep in nics)


def test_bytes_per_link_by_hand():
    """4 nodes x 2 GPUs x 2 NICs, 4 ports per leaf: 2 leaves, one SHARP tree per rail rooted at a spine.
    S bytes: each NIC sends S/2 to its leaf's aggregation endpoint and gets S/2 back; each leaf sends one
    reduced S/2 per rail to the root and gets S/2 back; each GPU sends its peer the peer's half (S/2) and the
    head hands back the result (S/2)."""
    system = _system(4, 2, 2, 4)
    S = 8 * MiB
    s = plan_collective("allreduce", list(range(8)), S, system, algorithm="collnet")
    s.check()
    assert s.algorithm == "collnet"
    per_pair: dict[tuple[str, str], int] = {}
    for t in s.transfers:
        per_pair[(t.src_ep, t.dst_ep)] = per_pair.get((t.src_ep, t.dst_ep), 0) + t.size_bytes
    for node in system.nodes:
        for nic in node.nics:
            leaf = next(iter(system.net.graph.neighbors(nic)))
            assert per_pair[(nic, f"{leaf}/sharp")] == S // 2
            assert per_pair[(f"{leaf}/sharp", nic)] == S // 2
        a, b = node.gpu_ranks
        assert per_pair[(system.gpus[a].name, system.gpus[b].name)] == S  # S/2 up + S/2 down
    up = {k: v for k, v in per_pair.items() if k[0].startswith("leaf") and "spine" in k[1]}
    assert sorted(up.values()) == [S // 2] * 4  # 2 leaves x 2 rails
    roots = {k[1] for k in up}
    assert len(roots) == 2  # the two rails' trees sit on different spines
    # a node puts S on the wire; a ring over its 8 GPUs would put 2(n-1)/n x S = 1.75 S
    assert _net_out_of_node(s, system, 0) == S
    ring = plan_collective("allreduce", list(range(8)), S, system, algorithm="ring", protocol="simple")
    assert _net_out_of_node(ring, system, 0) == pytest.approx(2 * 7 / 8 * S, rel=1e-3)


def test_switch_ends_are_marked():
    system = _system(4, 2, 2, 4)
    s = plan_collective("allreduce", list(range(8)), MiB, system, algorithm="collnet")
    ends = [t for t in s.transfers if SHARP_SWITCH in (t.src, t.dst)]
    assert ends and all(t.link == "net" for t in ends)
    assert all((t.src_ep if t.src == SHARP_SWITCH else t.dst_ep).endswith("/sharp") for t in ends)


def test_alpha_beta_time_on_one_switch():
    """4 nodes x 1 GPU x 1 NIC at 100 Gb/s on one leaf: CollNet moves S up and S down each NIC link, full duplex,
    pipelined in K chunks: T = alpha + S/B + S/(K B); a ring moves 2(n-1)/n S = 1.5 S each way: 1.5 S/B.
    B = 12.5 GB/s x mtu/(mtu + header) (the flow backend's header overhead, NetworkConfig defaults);
    alpha = 31 us (NCCL's CollNet network latency) + 4 link delays of 500 ns (+ chunk fill)."""
    system = _system(4, 1, 1, 4, nic_gbps=100)
    cfg = NetworkConfig()
    B = 100 / 8 * cfg.mtu_bytes / (cfg.mtu_bytes + cfg.header_bytes)  # GB/s = bytes/ns
    S = 64 * MiB
    sched = plan_collective("allreduce", list(range(4)), S, system, algorithm="collnet")
    K = sched.chunks
    t = run_collective(system, "allreduce", S, 4, algorithm="collnet").time_ns
    lo = S / B
    hi = 31_000 + 4 * 500 + S / B * (1 + 1 / K)
    assert lo <= t <= hi * 1.02, (t, lo, hi)
    ring = run_collective(_system(4, 1, 1, 4, sharp=False, nic_gbps=100), "allreduce", S, 4, algorithm="ring").time_ns
    assert ring >= 1.5 * S / B
    assert ring / t == pytest.approx(1.5, rel=0.2)


def test_collnet_needs_a_sharp_fabric():
    system = _system(2, 2, 2, 4, sharp=False)
    with pytest.raises(UserError) as err:
        plan_collective("allreduce", list(range(4)), MiB, system, algorithm="collnet")
    assert err.value.field == "comm.algorithm" and "in_network_reduction" in str(err.value)


def test_collnet_other_ops_fall_back_to_ring():
    system = _system(2, 2, 2, 4)
    assert plan_collective("allgather", list(range(4)), MiB, system, algorithm="collnet").algorithm == "ring"


def test_ns3_refuses_sharp_in_one_line():
    from netbackend.ns3 import Ns3Backend

    system = _system(2, 2, 2, 4)
    with pytest.raises(UserError) as err:
        Ns3Backend.check_config(system.net, NetworkConfig(backend="ns3"))
    assert err.value.field == "fabric.in_network_reduction" and "\n" not in str(err.value)
    Ns3Backend.check_config(_system(2, 2, 2, 4, sharp=False).net, NetworkConfig(backend="ns3"))


def test_a_training_run_on_a_sharp_fabric_plans_each_groups_collnet_itself():
    """DP groups of the same shape on other nodes (PP stages on nodes 0-1 and 2-3) reuse one plan by
    relabelling ranks; a CollNet schedule's switch-side ends cannot be relabelled (they crashed with an
    IndexError), so each group gets its own. Symmetry reduction on and off agree to the ns."""
    from heterosim import api
    from heterosim.config.loader import scenario_from_dict

    def run(symmetry: bool):
        sc = scenario_from_dict({
            "name": "sharp-train", "model": {"zoo": "gpt3-1.7b", "num_layers": 4},
            "parallelism": {"tp": 8, "pp": 2, "zero_stage": 0},
            "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_length": 2048},
            "cluster": {"groups": [{"name": "h100", "node_type": "dgx-h100", "num_nodes": 4}]},
            "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 16, "uplink_gbps": 400, "in_network_reduction": "sharp"},
            "comm": {"algorithm": "collnet"}, "simulation": {"symmetry": symmetry}}, file="sharp-train.yaml")
        return api.simulate(api.prepare(sc), record_messages=False).summary

    on, off = run(True), run(False)
    assert on["iteration_time_s"] == off["iteration_time_s"] > 0
    assert on["breakdown"]["exposed_comm"]["dp"] > 0
