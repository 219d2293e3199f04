"""Comm planner: byte conservation, DAG shape, endpoints, tuner, errors."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from heterosim.comm import NVSWITCH, plan_collective, ring_order
from heterosim.comm.planner import MAX_TRANSFERS
from hscommon.errors import UserError
from topologies import build_system
from topologies.config import ClusterConfig, DeviceGroup, LeafSpineFabric

H100x4 = build_system(ClusterConfig(groups=[DeviceGroup(name="h", node_type="dgx-h100", num_nodes=4)]),
                      LeafSpineFabric())
MIXED = build_system(ClusterConfig(groups=[DeviceGroup(name="h", node_type="dgx-h100", num_nodes=2),
                                           DeviceGroup(name="l", node_type="pcie-l40s", num_nodes=1),
                                           DeviceGroup(name="a", node_type="dgx-a100", num_nodes=1)]),
                     LeafSpineFabric())
SYSTEMS = {"h100x4": H100x4, "mixed": MIXED}


def check_structure(sched, system):
    sched.check()  # ids in order, deps strictly backwards (so the DAG is acyclic)
    intra_hosts, net_hosts = set(system.intra.hosts), set(system.net.hosts)
    for t in sched.transfers:
        if t.link == "net":
            assert not system.same_node(t.src, t.dst)
            assert t.src_ep == system.gpus[t.src].nic and t.dst_ep == system.gpus[t.dst].nic
            assert t.src_ep in net_hosts and t.dst_ep in net_hosts
        elif t.link == "nvls":
            assert (t.src == NVSWITCH) != (t.dst == NVSWITCH)
            assert t.src_ep in intra_hosts and t.dst_ep in intra_hosts
            assert "/nvswitch" in (t.src_ep + t.dst_ep)
        else:
            assert system.same_node(t.src, t.dst)
            assert (t.src_ep, t.dst_ep) == (system.gpus[t.src].name, system.gpus[t.dst].name)
            expect = {"nvswitch": "nvlink", "pcie": "pcie", "c2c": "c2c"}[system.node_of(t.src).spec.intra]
            assert t.link == expect
        assert t.src in sched.ranks or t.src == NVSWITCH
        assert t.dst in sched.ranks or t.dst == NVSWITCH
    assert len(sched.roots()) >= 1


def near(value, expect, tol):
    return abs(value - expect) <= tol + 1e-9


GROUP_KINDS = ["node", "rail", "nodes", "random"]


def make_group(system, kind, n, data):
    if kind == "node":
        return list(system.ranks_in_node(0))[:max(2, min(n, 8))]
    if kind == "rail":
        j = data.draw(st.integers(0, 7))
        return [node.gpu_ranks[j] for node in system.nodes]
    if kind == "nodes":
        k = data.draw(st.integers(2, len(system.nodes)))
        return [r for node in system.nodes[:k] for r in node.gpu_ranks]
    return sorted(data.draw(st.sets(st.integers(0, system.num_gpus - 1), min_size=2, max_size=max(2, n))))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), sysname=st.sampled_from(sorted(SYSTEMS)), kind=st.sampled_from(GROUP_KINDS),
       n=st.integers(2, 16), size=st.integers(1, 1 << 26), channels=st.sampled_from([None, 1, 2, 3, 8]),
       op=st.sampled_from(["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall"]),
       algorithm=st.sampled_from(["auto", "ring", "tree", "hierarchical", "nvls"]))
def test_byte_conservation(data, sysname, kind, n, size, channels, op, algorithm):
    system = SYSTEMS[sysname]
    ranks = make_group(system, kind, n, data)
    nodes = {system.node_of(r).name for r in ranks}
    if algorithm == "nvls" and not all(system.node(x).spec.nvls for x in nodes):
        with pytest.raises(UserError, match="algorithm nvls needs an NVSwitch with NVLS"):
            plan_collective(op, ranks, size, system, algorithm=algorithm, protocol="simple", channels=channels)
        return
    root = data.draw(st.sampled_from(ranks)) if op in ("broadcast", "reduce") else None
    s = plan_collective(op, ranks, size, system, algorithm=algorithm, protocol="simple", channels=channels,
                        root=root)
    event(f"{op}/{s.algorithm}")
    verify(s, system, ranks, size, root)


def verify(s, system, ranks, size, root=None):
    """The textbook byte counts for each collective and algorithm (protocol simple)."""
    op = s.op
    check_structure(s, system)
    if op != "alltoall":
        assert len(s.transfers) <= MAX_TRANSFERS
    n = len(ranks)
    S = size
    sent = {r: s.bytes_sent(r) for r in ranks}
    recv = {r: s.bytes_received(r) for r in ranks}
    ntr = {r: sum(1 for t in s.transfers if r in (t.src, t.dst)) for r in ranks}
    tol = {r: 2 * ntr[r] * s.step_group + 2 for r in ranks}  # integer splitting: < 1 byte per segment
    algo = s.algorithm
    if op == "allreduce" and algo == "ring":
        assert s.total_bytes == 2 * (n - 1) * S
        for r in ranks:
            assert near(sent[r], 2 * (n - 1) / n * S, tol[r]) and near(recv[r], 2 * (n - 1) / n * S, tol[r])
    elif op in ("allgather", "reducescatter") and algo == "ring":
        assert s.total_bytes == (n - 1) * S
        for r in ranks:
            assert near(sent[r], (n - 1) / n * S, tol[r]) and near(recv[r], (n - 1) / n * S, tol[r])
    elif op == "allreduce" and algo == "tree":
        # every tree edge carries each channel's share once up and once down
        assert s.total_bytes == 2 * (n - 1) * S
        assert sum(recv.values()) == 2 * (n - 1) * S
        if s.channels >= 2:
            assert all(recv[r] >= S // s.channels - 1 for r in ranks)
    elif op == "allreduce" and algo in ("hierarchical", "nvls"):
        layout = {}
        for r in ranks:
            layout.setdefault(system.node_of(r).name, []).append(r)
        N, m = len(layout), n // len(layout)
        inter = 2 * (N - 1) / (N * m) * S
        intra = (S + S / m) if algo == "nvls" else 2 * (m - 1) / m * S
        for r in ranks:
            assert near(sent[r], intra + inter, tol[r]) and near(recv[r], intra + inter, tol[r])
        net = sum(t.size_bytes for t in s.transfers if t.link == "net")
        assert net == (2 * (N - 1) * S if N > 1 else 0)  # each slice's ring moves 2(N-1)/N of it, N rings' worth
    elif op == "allgather" and algo == "nvls":
        for r in ranks:
            assert near(sent[r], S / n, tol[r]) and near(recv[r], S, tol[r])
    elif op == "reducescatter" and algo == "nvls":
        for r in ranks:
            assert near(sent[r], S, tol[r]) and near(recv[r], S / n, tol[r])
    elif op == "broadcast":
        assert s.total_bytes == (n - 1) * S and sent[root] == S and recv[root] == 0
        assert all(recv[r] == S for r in ranks if r != root)
    elif op == "reduce":
        assert s.total_bytes == (n - 1) * S and recv[root] == S and sent[root] == 0
        assert all(sent[r] == S for r in ranks if r != root)
    elif op == "alltoall":
        assert algo == "direct"
        for i, r in enumerate(ranks):
            assert near(sent[r], (n - 1) / n * S, 2) and near(recv[r], (n - 1) / n * S, 2)
    else:
        pytest.fail(f"unexpected combination {op}/{algo}")


@given(size=st.integers(0, 1 << 30), channels=st.sampled_from([None, 1, 4]))
@settings(max_examples=30, deadline=None)
def test_send(size, channels):
    s = plan_collective("send", [3, 12], size, H100x4, channels=channels, protocol="simple")
    assert s.bytes_sent(3) == size and s.bytes_received(12) == size
    assert all(t.link == "net" and t.src_ep == "h-0/nic3" and t.dst_ep == "h-1/nic4" for t in s.transfers)
    assert len({t.flow_key for t in s.transfers}) == len(s.transfers)


def test_protocol_inflation():
    S = 1 << 20
    base = plan_collective("allreduce", list(range(8)), S, H100x4, algorithm="ring", protocol="simple")
    ll = plan_collective("allreduce", list(range(8)), S, H100x4, algorithm="ring", protocol="ll")
    ll128 = plan_collective("allreduce", list(range(8)), S, H100x4, algorithm="ring", protocol="ll128")
    assert abs(ll.total_bytes - 2 * base.total_bytes) <= len(ll.transfers)
    assert abs(ll128.total_bytes - base.total_bytes * 128 / 120) <= len(ll128.transfers)
    lat = {p.protocol: sum(t.latency_ns for t in p.transfers) for p in (base, ll, ll128)}
    assert lat["ll"] < lat["ll128"] < lat["simple"]


def test_ring_is_rail_aligned():
    ranks = list(range(32))
    for c in range(8):
        order = ring_order(ranks, H100x4, c)
        assert sorted(order) == ranks
        hops = [(a, order[(i + 1) % 32]) for i, a in enumerate(order)]
        inter = [(a, b) for a, b in hops if not H100x4.same_node(a, b)]
        assert len(inter) == 4
        assert all(H100x4.gpus[a].local == H100x4.gpus[b].local for a, b in inter)
        # every node visited contiguously
        assert [H100x4.gpus[r].node_index for r in order] == sorted(H100x4.gpus[r].node_index for r in order)
    # channels spread the inter-node hops over all rails
    rails = {H100x4.gpus[a].local for c in range(8) for a, b in
             zip(ring_order(ranks, H100x4, c), ring_order(ranks, H100x4, c)[1:]) if not H100x4.same_node(a, b)}
    assert rails == set(range(8))
    s = plan_collective("allreduce", ranks, 1 << 28, H100x4, algorithm="ring", channels=8)
    nics = {t.src_ep for t in s.transfers if t.link == "net"}
    assert len(nics) == 32  # all 8 NICs of all 4 nodes carry traffic


def test_dependencies_order_ring_steps():
    s = plan_collective("allreduce", list(range(4)), 4 << 20, H100x4, algorithm="ring", protocol="simple",
                        channels=1)
    by_id = {t.id: t for t in s.transfers}
    for t in s.transfers:
        for d in t.deps:
            dep = by_id[d]
            assert dep.dst == t.src or dep.src == t.src  # waits for data arriving at, or its own earlier send
    # each rank's sends on a channel form a chain
    for r, ts in s.per_rank().items():
        for a, b in zip(ts, ts[1:]):
            assert a.id in b.deps


def test_auto_choices():
    node = list(range(8))
    assert plan_collective("allreduce", node, 1 << 30, H100x4).algorithm == "nvls"
    s = plan_collective("allreduce", node, 4 << 10, H100x4)
    assert (s.algorithm, s.protocol) == ("ring", "ll")
    a100 = [r for r in range(MIXED.num_gpus) if MIXED.gpus[r].group == "a"]
    assert plan_collective("allreduce", a100, 1 << 30, MIXED).algorithm == "ring"
    assert plan_collective("allreduce", list(range(32)), 1 << 20, H100x4).algorithm == "tree"
    assert plan_collective("allreduce", list(range(32)), 1 << 30, H100x4).algorithm == "hierarchical"
    rail = [0, 8, 16, 24]
    assert plan_collective("allreduce", rail, 1 << 30, H100x4).algorithm == "ring"
    assert plan_collective("allgather", list(range(32)), 1 << 30, H100x4).algorithm == "ring"
    assert plan_collective("alltoall", node, 1 << 20, H100x4).algorithm == "direct"
    l40s = [r for r in range(MIXED.num_gpus) if MIXED.gpus[r].group == "l"]
    assert plan_collective("allreduce", l40s, 1 << 20, MIXED).protocol == "simple"  # no LL128 on PCIe
    assert plan_collective("allreduce", node, 1 << 20, H100x4, algorithm="ring").protocol == "ll128"
    # tree only does allreduce: other ops fall back to ring
    assert plan_collective("allgather", node, 1 << 20, H100x4, algorithm="tree").algorithm == "ring"


def test_transfer_budget():
    s = plan_collective("allreduce", list(range(32)), 1 << 34, H100x4, algorithm="ring", channels=8)
    assert len(s.transfers) <= MAX_TRANSFERS and s.channels == 8
    s = plan_collective("allreduce", list(range(32)), 1 << 30, H100x4, algorithm="ring", max_transfers=500)
    assert len(s.transfers) <= 500 and s.total_bytes == 2 * 31 * (1 << 30) and s.step_group > 1
    verify(s, H100x4, list(range(32)), 1 << 30)
    s = plan_collective("allreduce", list(range(32)), (1 << 30) + 3, H100x4, algorithm="hierarchical",
                        protocol="simple", max_transfers=300)
    assert len(s.transfers) <= 300
    verify(s, H100x4, list(range(32)), (1 << 30) + 3)


def test_errors():
    l40s = [r for r in range(MIXED.num_gpus) if MIXED.gpus[r].group == "l"]
    with pytest.raises(UserError, match="algorithm nvls needs an NVSwitch with NVLS; node l-0 is pcie"):
        plan_collective("allreduce", l40s, 1 << 20, MIXED, algorithm="nvls")
    a100 = [r for r in range(MIXED.num_gpus) if MIXED.gpus[r].group == "a"]
    with pytest.raises(UserError, match="node a-0 is nvswitch without NVLS"):
        plan_collective("allreduce", a100, 1 << 20, MIXED, algorithm="nvls")
    with pytest.raises(UserError, match="group rank 40 is not a GPU of the topology"):
        plan_collective("allreduce", [0, 1, 40], 1 << 20, H100x4)
    with pytest.raises(UserError, match="twice"):
        plan_collective("allreduce", [0, 1, 1], 1 << 20, H100x4)
    with pytest.raises(UserError, match="root is not in the group"):
        plan_collective("broadcast", [0, 1], 10, H100x4, root=5)
    with pytest.raises(UserError, match="unknown collective"):
        plan_collective("allscatter", [0, 1], 10, H100x4)
    with pytest.raises(UserError, match="unknown algorithm"):
        plan_collective("allreduce", [0, 1], 10, H100x4, algorithm="butterfly")
    with pytest.raises(UserError, match="send needs"):
        plan_collective("send", [0, 1, 2], 10, H100x4)


def test_trivial_groups():
    assert plan_collective("allreduce", [5], 1 << 20, H100x4).transfers == []
    assert plan_collective("allreduce", [0, 1], 0, H100x4).transfers == []


OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall")
ALGOS = ("ring", "tree", "hierarchical", "nvls", "direct")
GROUPS = {"node": list(range(8)), "half-node": [1, 3, 4, 6], "two-nodes": list(range(16)),
          "all": list(range(32)), "rail": [2, 10, 18, 26], "two-per-node": [0, 1, 8, 9, 16, 17]}


def documented_algorithm(op: str, requested: str, ranks: list[int]) -> str:
    """What runs, from the module docstring (NCCL's support matrix), not from ``_supported``: tree and
    hierarchical are allreduce-only (hierarchical across >1 node with equal ranks per node), nvls is
    allreduce with >1 rank per node or single-node allgather/reducescatter, alltoall is direct, and
    everything else falls back to ring."""
    per_node: dict[int, int] = {}
    for r in ranks:
        per_node[r // 8] = per_node.get(r // 8, 0) + 1  # H100x4: 8 GPUs per node, ranks in node order
    nodes, counts = len(per_node), set(per_node.values())
    if op == "alltoall":
        return "direct"
    if requested == "tree" and op == "allreduce":
        return "tree"
    if requested == "hierarchical" and op == "allreduce" and nodes > 1 and len(counts) == 1:
        return "hierarchical"
    if requested == "nvls":
        if op == "allreduce" and len(counts) == 1 and min(counts) > 1:
            return "nvls"
        if op in ("allgather", "reducescatter") and nodes == 1:
            return "nvls"
    return "ring"


ALL = [(op, algo, g) for op in OPS for algo in ALGOS for g in sorted(GROUPS)]
#: One item per distinct behaviour: the requests that run as asked. Requests that fall back are checked,
#: all of them, by test_fallbacks_are_the_documented_ones (a fallback is not a separate schedule to verify).
NATIVE = [(op, algo, g) for op, algo, g in ALL if documented_algorithm(op, algo, GROUPS[g]) == algo]


@pytest.mark.parametrize("op,algorithm,group", NATIVE)
def test_every_combination(op, algorithm, group):
    ranks = GROUPS[group]
    for size, channels in ((1000, 1), (3 << 20, None), ((1 << 28) + 7, 3)):
        s = plan_collective(op, ranks, size, H100x4, algorithm=algorithm, protocol="simple", channels=channels,
                            root=ranks[-1] if op in ("broadcast", "reduce") else None)
        assert s.algorithm == algorithm
        verify(s, H100x4, ranks, size, s.root)


def test_fallbacks_are_the_documented_ones():
    fallbacks = [(op, algo, g) for op, algo, g in ALL if (op, algo, g) not in NATIVE]
    assert len(fallbacks) + len(NATIVE) == len(ALL) and fallbacks
    for op, algo, g in fallbacks:
        ranks = GROUPS[g]
        root = ranks[-1] if op in ("broadcast", "reduce") else None
        s = plan_collective(op, ranks, 3 << 20, H100x4, algorithm=algo, protocol="simple", root=root)
        expect = documented_algorithm(op, algo, ranks)
        assert s.algorithm == expect, (op, algo, g, s.algorithm)
        native = plan_collective(op, ranks, 3 << 20, H100x4, algorithm=expect, protocol="simple", root=root)
        assert len(s.transfers) == len(native.transfers), (op, algo, g)  # the fallback is exactly that schedule
