"""Cluster + fabric config -> :class:`SystemTopology` (GPUs, nodes, NIC fabric, intra-node fabric).

``build_system`` validates what pydantic cannot: node types exist, names are
unique, links join known endpoints, and every NIC can reach every other NIC.
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace
from pathlib import Path

import networkx as nx
from pydantic import TypeAdapter, ValidationError

from hscommon.bounds import CLUSTER_GPUS_MAX
from hscommon.errors import UserError
from netbackend.topo import Link, NetTopology
from topologies._util import read_yaml, user_error_from_validation
from topologies.catalog import node_type
from topologies.config import ClusterConfig, FabricConfig, LeafSpineFabric, SystemConfig
from topologies.fabrics import generate
from topologies.system import GpuInfo, NodeInfo, SystemTopology

C2C_GBPS_PER_DIR = 450.0
"""NVLink-C2C Grace<->Hopper, GB/s per direction (900 GB/s bidirectional; Grace Hopper whitepaper)."""
NVLINK_DELAY_NS = 100
PCIE_DELAY_NS = 200
NVSWITCH_ENDPOINT_FACTOR = 1.0
"""NVLS endpoint link rate = factor x (GPUs x per-GPU NVLink rate): the switch never bottlenecks NVLS;
the per-GPU NVLink ports do (calibrated efficiency lives in heterosim.comm.intranode)."""


def cluster_gpus(cluster: ClusterConfig, file: str | None = None) -> int:
    """GPUs in the cluster, from the node-type catalog alone (nothing built: a cheap check comes first)."""
    specs = [node_type(g.node_type, g.overrides, file, field=f"cluster.groups[{gi}].node_type")
             for gi, g in enumerate(cluster.groups)]
    return check_cluster_size(cluster, specs, file)


def check_cluster_size(cluster: ClusterConfig, specs, file: str | None) -> int:
    total = 0
    for gi, (g, spec) in enumerate(zip(cluster.groups, specs)):
        if spec.intra in ("nvswitch", "c2c") and spec.nvlink_gBps <= 0 and spec.gpus_per_node > 1:
            field = f"cluster.groups[{gi}].overrides.nvlink_gBps" if "nvlink_gBps" in g.overrides \
                else f"cluster.groups[{gi}].node_type"
            raise UserError("an NVSwitch node needs nvlink_gBps > 0 (use intra: pcie for a node without NVLink)",
                            file=file, field=field, value=g.overrides.get("nvlink_gBps", g.node_type))
        total += g.num_nodes * spec.gpus_per_node
    if total > CLUSTER_GPUS_MAX:
        raise UserError(f"{total:,} GPUs; at most {CLUSTER_GPUS_MAX:,} (5x the largest published cluster)",
                        file=file, field="cluster.groups", value=[g.num_nodes for g in cluster.groups])
    return total


def _nic_of(local: int, gpus: int, nics: int) -> int:
    """Rail alignment: GPU j uses NIC j*nics//gpus (GPUs share NICs when there are fewer)."""
    return local * nics // gpus


def build_system(cluster: ClusterConfig | dict, fabric=None, *, file: str | None = None) -> SystemTopology:
    """Build every GPU, NIC, switch and link; raise UserError naming file/field/value on bad input."""
    if isinstance(cluster, dict):
        try:
            cluster = ClusterConfig.model_validate(cluster)
        except ValidationError as exc:
            raise user_error_from_validation(exc, file, prefix="cluster") from None
    if fabric is None:
        fabric = LeafSpineFabric()
    elif isinstance(fabric, dict):
        try:
            fabric = TypeAdapter(FabricConfig).validate_python(fabric)
        except ValidationError as exc:
            raise user_error_from_validation(exc, file, prefix="fabric") from None

    specs = [node_type(g.node_type, g.overrides, file, field=f"cluster.groups[{gi}].node_type")
             for gi, g in enumerate(cluster.groups)]
    check_cluster_size(cluster, specs, file)
    gpus: list[GpuInfo] = []
    nodes: list[NodeInfo] = []
    for gi, group in enumerate(cluster.groups):
        spec = specs[gi]
        for i in range(group.num_nodes):
            name = f"{group.name}-{i}"
            nics = tuple(f"{name}/nic{k}" for k in range(spec.nics_per_node))
            ranks = []
            for j in range(spec.gpus_per_node):
                rank = len(gpus)
                ranks.append(rank)
                gpus.append(GpuInfo(rank=rank, name=f"{name}/gpu{j}", node=name, node_index=len(nodes),
                                    local=j, group=group.name, device=spec.gpu, slowdown=group.slowdown,
                                    nic=nics[_nic_of(j, spec.gpus_per_node, spec.nics_per_node)]))
            nodes.append(NodeInfo(name=name, group=group.name, index=len(nodes), spec=spec,
                                  gpu_ranks=tuple(ranks), nics=nics, group_index=gi, pod=group.pod))

    gpus = _apply_stragglers(cluster, gpus, file)
    switches, links = generate(fabric, nodes, file)
    links = _degrade_links(cluster, links, file)
    links = _with_nic_latency(links, nodes)
    nic_names = [nic for n in nodes for nic in n.nics]
    _check_unique(nic_names + switches, file)
    net = NetTopology(hosts=nic_names, switches=switches, links=links,
                      host_rate_gbps={nic: n.spec.nic_gbps for n in nodes for nic in n.nics})
    _check_connected(net, file)
    if fabric.in_network_reduction == "sharp":  # SHARP aggregation endpoints (topologies/sharp.py)
        net = _with_sharp(net)
    intra = _intra_topology(nodes, gpus)
    graph = _graph(nodes, gpus, net, intra)
    return SystemTopology(gpus=gpus, nodes=nodes, net=net, intra=intra, graph=graph, source=file)


def _with_sharp(net: NetTopology) -> NetTopology:
    from topologies.sharp import aggregation_links

    hosts, links, rates = aggregation_links(net.switches, net.links)
    return NetTopology(hosts=net.hosts + hosts, switches=net.switches, links=net.links + links,
                       host_rate_gbps={**net.host_rate_gbps, **rates})


def _apply_stragglers(cluster: ClusterConfig, gpus: list[GpuInfo], file: str | None) -> list[GpuInfo]:
    index = {g.name: g.rank for g in gpus}
    for i, st in enumerate(cluster.stragglers):
        rank = index.get(st.gpu)
        if rank is None:
            raise UserError("no such GPU in the cluster", file=file, field=f"cluster.stragglers[{i}].gpu",
                            value=st.gpu)
        gpus[rank] = replace(gpus[rank], slowdown=gpus[rank].slowdown * st.slowdown)
    return gpus


def _degrade_links(cluster: ClusterConfig, links: list[Link], file: str | None) -> list[Link]:
    for i, d in enumerate(cluster.degraded_links):
        hit = False
        for k, link in enumerate(links):
            ends = {link.a, link.b}
            if d.a in ends and (d.b is None or d.b in ends):
                links[k] = Link(link.a, link.b, link.rate_gbps * d.factor, link.delay_ns)
                hit = True
        if not hit:
            what = f"{d.a} <-> {d.b}" if d.b else d.a
            raise UserError(f"no fabric link {what}", file=file, field=f"cluster.degraded_links[{i}]", value=what)
    return links


def _with_nic_latency(links: list[Link], nodes: list[NodeInfo]) -> list[Link]:
    """Each NIC's ``nic_latency_ns`` added to its access link's delay, both directions: a packet pays it leaving
    the sender's NIC and entering the receiver's, ACKs and PAUSEs the same (NodeType.nic_latency_ns)."""
    lat = {nic: n.spec.nic_latency_ns for n in nodes if n.spec.nic_latency_ns for nic in n.nics}
    if not lat:
        return links
    return [Link(l.a, l.b, l.rate_gbps, l.delay_ns + lat.get(l.a, 0) + lat.get(l.b, 0))
            if l.a in lat or l.b in lat else l for l in links]


def load_system(path: str | Path) -> SystemTopology:
    """Read a topology file (``cluster:`` + ``fabric:``) and build it."""
    file = str(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError("a topology file must be a mapping with cluster: and fabric:", file=file)
    try:
        cfg = SystemConfig.model_validate(data)
    except ValidationError as exc:
        raise user_error_from_validation(exc, file) from None
    return build_system(cfg.cluster, cfg.fabric, file=file)


def _check_unique(names: list[str], file: str | None) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise UserError("duplicate name in the fabric", file=file, field="fabric", value=n)
        seen.add(n)


def _check_connected(net: NetTopology, file: str | None) -> None:
    if len(net.hosts) < 2:
        return
    adj: dict[str, list[str]] = {}
    for link in net.links:
        adj.setdefault(link.a, []).append(link.b)
        adj.setdefault(link.b, []).append(link.a)
    start = net.hosts[0]
    seen = {start}
    todo = deque([start])
    while todo:
        for nxt in adj.get(todo.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    for h in net.hosts:
        if h not in seen:
            raise UserError(f"NIC {h} cannot reach NIC {start}: the fabric is not connected",
                            file=file, field="fabric", value=h)


def _intra_topology(nodes: list[NodeInfo], gpus: list[GpuInfo]) -> NetTopology:
    hosts: list[str] = []
    switches: list[str] = []
    links: list[Link] = []
    rates: dict[str, float] = {}
    for node in nodes:
        spec = node.spec
        names = [gpus[r].name for r in node.gpu_ranks]
        hosts += names
        if spec.intra == "nvswitch":
            sw, ep = f"{node.name}/nvsw", f"{node.name}/nvswitch"
            switches.append(sw)
            hosts.append(ep)
            rate = spec.nvlink_gBps * 8
            for g in names:
                links.append(Link(g, sw, rate, NVLINK_DELAY_NS))
                rates[g] = rate
            ep_rate = NVSWITCH_ENDPOINT_FACTOR * rate * len(names)
            links.append(Link(ep, sw, ep_rate, 0))
            rates[ep] = ep_rate
        elif spec.intra == "pcie":
            rc = f"{node.name}/rc"
            switches.append(rc)
            up = (spec.pcie_switch_uplink_gBps or spec.pcie_gBps) * 8
            n_sw = -(-len(names) // spec.gpus_per_pcie_switch)
            for k in range(n_sw):
                sw = f"{node.name}/pcie{k}"
                switches.append(sw)
                links.append(Link(sw, rc, up, PCIE_DELAY_NS))
            for j, g in enumerate(names):
                links.append(Link(g, f"{node.name}/pcie{j // spec.gpus_per_pcie_switch}",
                                  spec.pcie_gBps * 8, PCIE_DELAY_NS))
                rates[g] = spec.pcie_gBps * 8
        else:  # c2c: GH200 superchips, GPUs meshed by direct NVLink links
            n = len(names)
            pair = spec.nvlink_gBps * 8 / max(1, n - 1)
            for a in range(n):
                rates[names[a]] = spec.nvlink_gBps * 8 if n > 1 else 0.0
                for b in range(a + 1, n):
                    links.append(Link(names[a], names[b], pair, NVLINK_DELAY_NS))
    return NetTopology(hosts=hosts, switches=switches, links=links, host_rate_gbps=rates)


def _graph(nodes: list[NodeInfo], gpus: list[GpuInfo], net: NetTopology, intra: NetTopology) -> nx.Graph:
    g = nx.Graph()
    for gpu in gpus:
        g.add_node(gpu.name, type="gpu", rank=gpu.rank, node=gpu.node)
    for node in nodes:
        for nic in node.nics:
            g.add_node(nic, type="nic", node=node.name)
    for s in net.switches:
        g.add_node(s, type="switch")
    for s in intra.switches:
        g.add_node(s, type="nvswitch" if s.endswith("/nvsw") else "pcie")
    for h in intra.hosts:
        if h.endswith("/nvswitch"):
            g.add_node(h, type="nvswitch")
    for link in intra.links:
        kind = "pcie" if g.nodes[link.a]["type"] == "pcie" or g.nodes[link.b]["type"] == "pcie" else "nvlink"
        g.add_edge(link.a, link.b, type=kind, rate_gbps=link.rate_gbps, delay_ns=link.delay_ns)
    for link in net.links:
        g.add_edge(link.a, link.b, type="net", rate_gbps=link.rate_gbps, delay_ns=link.delay_ns)
    # GPU <-> NIC attachment (GPUDirect RDMA path)
    for node in nodes:
        spec = node.spec
        pcie_rate = spec.pcie_gBps * 8
        for r in node.gpu_ranks:
            gpu = gpus[r]
            if spec.intra == "pcie":
                sw = f"{node.name}/pcie{gpu.local // spec.gpus_per_pcie_switch}"
                g.add_edge(gpu.nic, sw, type="pcie", rate_gbps=pcie_rate, delay_ns=PCIE_DELAY_NS)
            elif spec.intra == "c2c":
                cpu = f"{node.name}/cpu{gpu.local}"
                g.add_node(cpu, type="cpu")
                g.add_edge(gpu.name, cpu, type="c2c", rate_gbps=C2C_GBPS_PER_DIR * 8, delay_ns=NVLINK_DELAY_NS)
                g.add_edge(cpu, gpu.nic, type="pcie", rate_gbps=pcie_rate, delay_ns=PCIE_DELAY_NS)
            else:
                g.add_edge(gpu.name, gpu.nic, type="pcie", rate_gbps=pcie_rate, delay_ns=PCIE_DELAY_NS)
    return g
