"""The HPCC paper's fat-tree from the shipped scenario, and the ideal FCT by hand."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from heterosim.traffic.build import build_topology, load_traffic
from heterosim.traffic.metrics import IdealFct, ideal_fct_ns
from netbackend.config import NetworkConfig
from netbackend.topo import Link, NetTopology

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios" / "traffic").glob("*.yaml"))


def test_hpcc_paper_fat_tree_shape():
    """320 hosts at 100G; 20 ToR x 16 hosts, 20 aggregation (5 pods x 4), 16 core; 400G, 1 us links."""
    topo = build_topology(load_traffic(ROOT / "scenarios/traffic/hpcc-fb-hadoop-30-incast.yaml"))
    g = topo.graph
    tors = [s for s in topo.switches if "-leaf" in s]
    aggs = [s for s in topo.switches if "-agg" in s]
    cores = [s for s in topo.switches if s.startswith("core")]
    assert (len(topo.hosts), len(tors), len(aggs), len(cores)) == (320, 20, 20, 16)
    assert len(topo.switches) == 56
    pod = lambda s: s.split("-")[0]  # noqa: E731
    for t in tors:  # 16 hosts down at 100G, 4 aggregation switches of its own pod up at 400G
        nbrs = list(g.neighbors(t))
        hosts = [n for n in nbrs if topo.is_host(n)]
        ups = [n for n in nbrs if n in aggs]
        assert len(hosts) == 16 and len(ups) == 4 and len(nbrs) == 20
        assert {pod(a) for a in ups} == {pod(t)}
        assert sum(g.edges[t, h]["rate_gbps"] for h in hosts) == sum(g.edges[t, a]["rate_gbps"] for a in ups)
    for a in aggs:  # 4 ToRs down, 4 cores up: non-blocking
        nbrs = list(g.neighbors(a))
        assert Counter("core" if n in cores else "tor" for n in nbrs) == {"core": 4, "tor": 4}
    for c in cores:  # one aggregation switch in each of the 5 pods
        nbrs = list(g.neighbors(c))
        assert len(nbrs) == 5 and len({pod(a) for a in nbrs}) == 5
    assert {(link.rate_gbps, link.delay_ns) for link in topo.links if not topo.is_host(link.a)
            and not topo.is_host(link.b)} == {(400.0, 1000)}
    assert {(link.rate_gbps, link.delay_ns) for link in topo.links if topo.is_host(link.a)
            or topo.is_host(link.b)} == {(100.0, 1000)}
    # hosts in different pods are 6 links apart: 12 us base RTT, as in the paper
    assert nx.shortest_path_length(g, "h0", "h319") == 6


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_traffic_scenarios_validate(path):
    sc = load_traffic(path)
    topo = build_topology(sc, str(path))
    assert len(topo.hosts) == sum(g.count for g in sc.hosts)
    assert sc.network.backend == "ns3"


def test_ideal_fct_by_hand():
    # host -100G- leaf -400G- spine -400G- leaf -100G- host, 1 us each, 1000 B MTU, 48 B headers/packet,
    # 500 ns switch latency. 2500 B = 3 packets (1000, 1000, 500): wire 2644 B = 21152 bits at 100G
    # = 211.52 ns; last packet 548 B = 4384 bits stored and forwarded on the 3 later hops:
    # 10.96 + 10.96 + 43.84 ns; propagation 4 x 1000; 3 switches x 500.
    hops = [(100.0, 1000), (400.0, 1000), (400.0, 1000), (100.0, 1000)]
    assert ideal_fct_ns(2500, hops, 1000, 3 * 48, 500) == pytest.approx(4000 + 1500 + 65.76 + 211.52)
    # one hop, one packet, no switch: propagation + serialisation
    assert ideal_fct_ns(100, [(25.0, 300)], 1000, 48, 500) == pytest.approx(300 + 148 * 8 / 25)


def test_ideal_fct_on_a_topology_uses_the_backends_headers_and_path():
    topo = NetTopology(hosts=["a", "b"], switches=["s"],
                       links=[Link("a", "s", 100.0, 1000), Link("s", "b", 50.0, 2000)])
    cfg = NetworkConfig(mtu_bytes=1024, header_bytes=78, per_hop_latency_ns=300)
    # 1 MB = 977 packets (976 full + 576 B): 1,076,206 wire bytes at the 50G bottleneck = 172,192.96 ns;
    # last packet 654 B at 50G on hop 2 = 104.64 ns; propagation 3000; one switch: 300 (flow backend only)
    flow = IdealFct(topo, cfg, "flow")
    assert flow(1_000_000, "a", "b") == pytest.approx(3000 + 300 + 104.64 + 172_192.96)
    ns3 = IdealFct(topo, cfg, "ns3", switch_latency=False)
    assert ns3(1_000_000, "a", "b") == pytest.approx(3000 + 104.64 + 172_192.96)
