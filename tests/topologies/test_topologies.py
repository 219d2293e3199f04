"""Topology library: catalog, generators, validation, example files."""
from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hscommon.errors import UserError
from topologies import build_system, load_system, node_type, node_types
from topologies.config import (ClusterConfig, DeviceGroup, FatTreeFabric, LeafSpineFabric, LinkListFabric,
                               LinkSpec, RailOptimizedFabric)

TOPO_DIR = Path(__file__).resolve().parents[2] / "topologies"
EXAMPLES = sorted(p for p in TOPO_DIR.glob("*.yaml") if p.name != "node_types.yaml")


def cluster(*groups) -> ClusterConfig:
    return ClusterConfig(groups=[DeviceGroup(name=n, node_type=t, num_nodes=k, **kw) for n, t, k, kw in groups])


def connected(net) -> bool:
    return nx.is_connected(net.graph)


# ----------------------------------------------------------------------------- catalog

def test_catalog_entries_valid_and_sourced():
    types = node_types()
    for name in ("dgx-a100", "dgx-h100", "hgx-h200", "hgx-b200", "hgx-a100-40", "pcie-l40s", "pcie-a10", "gh200"):
        assert name in types
        assert types[name].source
    assert types["dgx-h100"].nvlink_gBps == 450 and types["dgx-h100"].nvls
    assert types["dgx-a100"].nvlink_gBps == 300 and not types["dgx-a100"].nvls
    assert types["hgx-b200"].nvlink_gBps == 900
    assert types["pcie-l40s"].intra == "pcie" and types["pcie-l40s"].nvlink_gBps == 0


def test_node_type_overrides_and_errors():
    nt = node_type("dgx-h100", {"nic_gbps": 200, "nics_per_node": 4})
    assert nt.nic_gbps == 200 and nt.nics_per_node == 4 and nt.gpu == "H100-SXM"
    with pytest.raises(UserError, match="unknown node type; known: .*dgx-h100"):
        node_type("dgx-z900", {}, file="x.yaml")
    with pytest.raises(UserError, match="not a node-type field"):
        node_type("dgx-h100", {"nic_speed": 1})
    with pytest.raises(UserError) as err:
        node_type("dgx-h100", {"nic_gbps": -5}, file="c.yaml", field="cluster.groups[0].node_type")
    assert "c.yaml: cluster.groups[0].overrides.nic_gbps = -5" in str(err.value)


# ----------------------------------------------------------------------------- naming and ranks

def test_names_ranks_and_rail_nics():
    s = build_system(cluster(("h", "dgx-h100", 2, {}), ("l", "pcie-l40s", 1, {})), LeafSpineFabric())
    assert s.num_gpus == 24
    assert [g.rank for g in s.gpus] == list(range(24))
    g = s.gpus[9]
    assert (g.name, g.node, g.local, g.group, g.device, g.nic) == ("h-1/gpu1", "h-1", 1, "h", "H100-SXM", "h-1/nic1")
    # L40S: 8 GPUs share 4 NICs, two per NIC
    assert [s.gpus[r].nic for r in s.ranks_in_node("l-0")] == [f"l-0/nic{j // 2}" for j in range(8)]
    assert s.same_node(0, 7) and not s.same_node(7, 8)
    assert s.node_of(17).name == "l-0"
    assert s.net.host_rate_gbps["l-0/nic0"] == 200 and s.net.host_rate_gbps["h-0/nic0"] == 400


def test_intra_topology_per_node_kind():
    s = build_system(cluster(("h", "dgx-h100", 1, {}), ("l", "pcie-l40s", 1, {}), ("g", "gh200", 1, {})),
                     LeafSpineFabric())
    intra = s.intra
    assert "h-0/nvswitch" in intra.hosts and "h-0/nvsw" in intra.switches
    nv = [lk for lk in intra.links if lk.a.startswith("h-0/gpu")]
    assert len(nv) == 8 and all(lk.rate_gbps == 450 * 8 and lk.b == "h-0/nvsw" for lk in nv)
    assert {f"l-0/pcie{k}" for k in range(4)} <= set(intra.switches) and "l-0/rc" in intra.switches
    assert sum(1 for lk in intra.links if lk.b == "l-0/rc") == 4
    gh = [lk for lk in intra.links if lk.a.startswith("g-0/")]
    assert len(gh) == 6 and all(lk.rate_gbps == 150 * 8 for lk in gh)  # 4 GPUs fully meshed
    types = nx.get_node_attributes(s.graph, "type")
    assert types["h-0/gpu0"] == "gpu" and types["h-0/nic0"] == "nic" and types["leaf0"] == "switch"
    assert types["h-0/nvsw"] == "nvswitch" and types["l-0/pcie0"] == "pcie"
    kinds = {d["type"] for _, _, d in s.graph.edges(data=True)}
    assert kinds == {"nvlink", "pcie", "c2c", "net"}
    assert nx.is_connected(s.graph)


# ----------------------------------------------------------------------------- generators

def test_leaf_spine_counts_and_oversubscription():
    c = cluster(("h", "dgx-h100", 4, {}))
    s = build_system(c, LeafSpineFabric(hosts_per_leaf=16, uplink_gbps=400))
    leaves = [x for x in s.net.switches if x.startswith("leaf")]
    spines = [x for x in s.net.switches if x.startswith("spine")]
    assert (len(leaves), len(spines)) == (2, 16)
    assert len(s.net.links) == 32 + 2 * 16
    s2 = build_system(c, LeafSpineFabric(hosts_per_leaf=16, uplink_gbps=400, oversubscription=2))
    up = [lk for lk in s2.net.links if lk.b.startswith("spine")]
    assert len({lk.b for lk in up}) == 8
    for leaf in ("leaf0", "leaf1"):
        down = sum(lk.rate_gbps for lk in s2.net.links if lk.b == leaf)
        upl = sum(lk.rate_gbps for lk in up if lk.a == leaf)
        assert down / upl == pytest.approx(2.0)
    # fewer spines than uplinks: parallel cables merged into one faster link
    s3 = build_system(c, LeafSpineFabric(hosts_per_leaf=16, uplink_gbps=400, num_spines=4))
    assert {lk.rate_gbps for lk in s3.net.links if lk.b.startswith("spine")} == {1600}
    assert all(connected(x.net) for x in (s, s2, s3))


def test_fat_tree_counts():
    s = build_system(cluster(("a", "dgx-a100", 8, {})),
                     FatTreeFabric(hosts_per_leaf=16, leaves_per_pod=2, uplink_gbps=400, core_oversubscription=2))
    sw = s.net.switches
    assert sum("leaf" in x for x in sw) == 4          # 64 NICs / 16
    aggs = [x for x in sw if "agg" in x]
    assert len(aggs) == 2 * 8                          # 16x200G down / 400G up = 8 aggs per pod
    cores = [x for x in sw if x.startswith("core")]
    assert len(cores) == 8 * 1                         # 2 leaves x 400G / (2 x 400G) = 1 core uplink per agg
    assert all(sum(1 for lk in s.net.links if lk.a == a and lk.b.startswith("core")) == 1 for a in aggs)
    assert connected(s.net)


def test_rail_optimized_wiring():
    s = load_system(TOPO_DIR / "rail-h100-32node.yaml")
    rails = [x for x in s.net.switches if "rail" in x]
    assert len(rails) == 2 * 8
    for lk in s.net.links:
        if "/nic" in lk.a:
            node, nic = lk.a.split("/")
            block = int(node.split("-")[1]) // 16
            assert lk.b == f"block{block}-rail{nic[3:]}"
    assert sum(x.startswith("spine") for x in s.net.switches) == 16
    assert connected(s.net)


def test_pod_hints_place_groups():
    s = load_system(TOPO_DIR / "mixed-h100-a100-l40s.yaml")
    leaf_of = {lk.a.split("/")[0]: lk.b for lk in s.net.links if "/nic" in lk.a}
    assert {leaf_of[f"h100-{i}"] for i in range(4)} == {"leaf0", "leaf1"}
    assert {leaf_of[f"a100-{i}"] for i in range(4)} == {"leaf2", "leaf3"}
    assert {leaf_of[f"l40s-{i}"] for i in range(4)} == {"leaf4"}


@settings(max_examples=25, deadline=None)
@given(nodes=st.integers(1, 12), hpl=st.sampled_from([4, 8, 12, 16, 32]), over=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
       kind=st.sampled_from(["leaf_spine", "fat_tree", "rail_optimized"]),
       mix=st.booleans())
def test_generators_connected_and_oversubscribed(nodes, hpl, over, kind, mix):
    groups = [("h", "dgx-h100", nodes, {})] + ([("l", "pcie-l40s", 2, {})] if mix else [])
    fabric = {"leaf_spine": LeafSpineFabric(hosts_per_leaf=hpl, oversubscription=over),
              "fat_tree": FatTreeFabric(hosts_per_leaf=hpl, leaves_per_pod=2, oversubscription=over),
              "rail_optimized": RailOptimizedFabric(nodes_per_block=max(1, hpl // 4), oversubscription=over)}[kind]
    s = build_system(cluster(*groups), fabric)
    assert connected(s.net)
    names = s.net.hosts + s.net.switches
    assert len(names) == len(set(names))
    assert sum(1 for lk in s.net.links if "/nic" in lk.a) == len(s.net.hosts)
    if kind != "fat_tree":  # leaf design ports x max rate / uplink capacity <= oversubscription
        ports = hpl if kind == "leaf_spine" else fabric.nodes_per_block
        for leaf in {lk.b for lk in s.net.links if "/nic" in lk.a}:
            up = sum(lk.rate_gbps for lk in s.net.links if lk.a == leaf)
            if up:
                rate = max(lk.rate_gbps for lk in s.net.links if lk.b == leaf and "/nic" in lk.a)
                assert ports * rate / up <= over + 1e-9


# ----------------------------------------------------------------------------- validation errors

def _links_fabric(**kw):
    nics = [f"a-{i}/nic{k}" for i in range(2) for k in range(8)]
    links = [LinkSpec(a=n, b="sw0", rate_gbps=400) for n in nics]
    data = {"switches": ["sw0"], "links": links}
    data.update(kw)
    return LinkListFabric(**data)


def test_links_fabric_ok_and_errors():
    c = cluster(("a", "dgx-h100", 2, {}))
    s = build_system(c, _links_fabric())
    assert s.net.switches == ["sw0"] and connected(s.net)
    bad = _links_fabric()
    bad.links[3] = LinkSpec(a="a-0/nic3", b="sw0", rate_gbps=200)
    with pytest.raises(UserError, match=r"f\.yaml: fabric\.links\[3\]\.rate_gbps = 200.0: NIC a-0/nic3 runs at 400"):
        build_system(c, bad, file="f.yaml")
    bad = _links_fabric()
    bad.links[0] = LinkSpec(a="a-0/nic0", b="sw9", rate_gbps=400)
    with pytest.raises(UserError, match=r"fabric\.links\[0\]\.b = 'sw9': unknown endpoint"):
        build_system(c, bad)
    with pytest.raises(UserError, match=r"fabric\.switches\[1\] = 'sw0': duplicate name"):
        build_system(c, _links_fabric(switches=["sw0", "sw0"]))
    with pytest.raises(UserError, match="a NIC has this name"):
        build_system(c, _links_fabric(switches=["sw0", "a-0/nic0"]))
    cut = _links_fabric()
    cut.links = [lk for lk in cut.links if lk.a != "a-1/nic5"]
    with pytest.raises(UserError, match=r"fabric = 'a-1/nic5': NIC a-1/nic5 cannot reach"):
        build_system(c, cut)


def test_unknown_node_type_and_file_errors(tmp_path):
    with pytest.raises(UserError, match=r"t\.yaml: cluster\.groups\[1\]\.node_type = 'h100x'"):
        build_system(cluster(("a", "dgx-h100", 1, {}), ("b", "h100x", 1, {})), LeafSpineFabric(), file="t.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster:\n  groups:\n    - name: a\n      node_type: dgx-h100\n      num_nodes: 0\n")
    with pytest.raises(UserError) as err:
        load_system(bad)
    assert str(err.value).startswith(f"{bad}: cluster.groups[0].num_nodes = 0:")
    bad.write_text("cluster:\n  groups:\n    - name: a\n      node_type: dgx-h100\n      num_nodes: 1\n"
                   "fabric:\n  kind: leaf_spine\n  leafs: 3\n")
    with pytest.raises(UserError, match=r"fabric\.leafs = 3: unknown field"):
        load_system(bad)
    with pytest.raises(UserError, match="cannot read file"):
        load_system(tmp_path / "missing.yaml")


def test_group_does_not_fit_node_larger_than_pod():
    with pytest.raises(UserError, match="needs 8 ports"):
        build_system(cluster(("a", "dgx-h100", 1, {})), FatTreeFabric(hosts_per_leaf=2, leaves_per_pod=2))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_files_build(path):
    s = load_system(path)
    assert s.num_gpus > 0 and connected(s.net)
    assert all(g.nic in s.net.hosts for g in s.gpus)
    assert set(s.intra.hosts) >= {g.name for g in s.gpus}


def test_example_sizes():
    assert load_system(TOPO_DIR / "dgx-h100-16node-leafspine.yaml").num_gpus == 128
    assert load_system(TOPO_DIR / "h100-single-node.yaml").num_gpus == 8
    s = load_system(TOPO_DIR / "dgx-h100-16node-leafspine.yaml")
    assert math.isclose(sum(lk.rate_gbps for lk in s.net.links if lk.a == "leaf0"), 32 * 400)


def test_catalog_gpus_exist_in_device_catalog():
    from heterosim.hardware import device_names

    known = set(device_names())
    assert {nt.gpu for nt in node_types().values()} <= known
