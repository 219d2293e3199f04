"""Fabric generators: cluster nodes + a fabric config -> (switches, links).

One function per fabric ``kind``, registered with :func:`register_fabric`. Each
returns every switch and every link of the NIC fabric, NIC access links included
(NIC rate = the node type's ``nic_gbps``). Placement: nodes are packed in order
into blocks (a leaf group for leaf_spine, a pod for fat_tree, a rail block for
rail_optimized); groups with ``pod: p`` go into block p first.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from hscommon.bounds import SWITCH_RADIX_MAX
from hscommon.errors import UserError
from netbackend.topo import Link
from topologies.system import NodeInfo

FabricFn = Callable[..., tuple[list[str], list[Link]]]
_FABRICS: dict[str, FabricFn] = {}


def register_fabric(kind: str) -> Callable[[FabricFn], FabricFn]:
    """Register ``fn(fabric, nodes, file) -> (switches, links)`` for ``fabric.kind == kind``."""
    def deco(fn: FabricFn) -> FabricFn:
        _FABRICS[kind] = fn
        return fn
    return deco


def fabric_kinds() -> list[str]:
    return sorted(_FABRICS)


def generate(fabric, nodes: Sequence[NodeInfo], file: str | None = None) -> tuple[list[str], list[Link]]:
    fn = _FABRICS.get(fabric.kind)
    if fn is None:
        raise UserError(f"unknown fabric kind; known: {', '.join(fabric_kinds())}",
                        file=file, field="fabric.kind", value=fabric.kind)
    return fn(fabric, list(nodes), file)


def uplinks_needed(ports: int, port_gbps: float, oversubscription: float, uplink_gbps: float,
                   file: str | None = None) -> int:
    """Uplinks a switch needs so downlink:uplink bandwidth <= oversubscription.

    Refuses more than a real switch has ports (the count multiplies into spines and links: a rate typo
    used to build millions of them before anything else was checked).
    """
    n = max(1, math.ceil(ports * port_gbps / (oversubscription * uplink_gbps) - 1e-9))
    if n > SWITCH_RADIX_MAX:
        raise UserError(f"{ports} ports at {port_gbps:g} Gb/s need {n} uplinks per switch at this rate and "
                        f"oversubscription; a switch has at most {SWITCH_RADIX_MAX} ports", file=file,
                        field="fabric.uplink_gbps", value=uplink_gbps)
    return n


def place(nodes: Sequence[NodeInfo], weight: Callable[[NodeInfo], int], capacity: int,
          file: str | None, what: str) -> dict[int, list[NodeInfo]]:
    """Assign nodes to blocks of ``capacity``: hinted groups packed from their block on, the rest from 0."""
    blocks: dict[int, list[NodeInfo]] = {}
    used: dict[int, int] = {}
    for n in nodes:
        if weight(n) > capacity:
            raise UserError(f"node {n.name} needs {weight(n)} ports but a {what} has only {capacity}",
                            file=file, field=f"cluster.groups[{n.group_index}].node_type", value=n.spec.gpu)
    def put(n: NodeInfo, start: int) -> int:
        b = start
        while used.get(b, 0) + weight(n) > capacity:
            b += 1
        blocks.setdefault(b, []).append(n)
        used[b] = used.get(b, 0) + weight(n)
        return b

    cursors: dict[int, int] = {}  # per hinted group: where its next node goes
    for n in (n for n in nodes if n.pod is not None):
        cursors[n.group_index] = put(n, cursors.get(n.group_index, n.pod))
    cursor = 0
    for n in (n for n in nodes if n.pod is None):
        cursor = put(n, cursor)
    return dict(sorted(blocks.items()))


def _attach(nic: str, leaf: str, node: NodeInfo, fabric, switches: list[str], leaf_rate: dict[str, float],
            links: list[Link]) -> None:
    """Wire a NIC to its leaf (created on first use); a leaf's rate is its fastest NIC's."""
    if leaf not in leaf_rate:
        switches.append(leaf)
        leaf_rate[leaf] = 0.0
    leaf_rate[leaf] = max(leaf_rate[leaf], node.spec.nic_gbps)
    links.append(Link(nic, leaf, node.spec.nic_gbps, fabric.link_delay_ns))


def _nic_links(node: NodeInfo, leaf_of: Callable[[int], str], delay_ns: int) -> list[Link]:
    return [Link(nic, leaf_of(k), node.spec.nic_gbps, delay_ns) for k, nic in enumerate(node.nics)]


def _leaves_to_spines(leaves: dict[str, float], ports: int, fabric, spine_prefix: str = "spine",
                      file: str | None = None) -> tuple[list[str], list[Link]]:
    """Every leaf to every spine; ``leaves`` maps leaf name -> its fastest port rate."""
    if len(leaves) < 2:
        return [], []
    ups = {leaf: uplinks_needed(ports, rate, fabric.oversubscription, fabric.uplink_gbps, file)
           for leaf, rate in leaves.items()}
    n_spines = fabric.num_spines or max(ups.values())
    spines = [f"{spine_prefix}{s}" for s in range(n_spines)]
    links = []
    for leaf, u in ups.items():
        parallel = math.ceil(u / n_spines)  # parallel cables to one spine are merged into one link
        for s in spines:
            links.append(Link(leaf, s, parallel * fabric.uplink_gbps, fabric.link_delay_ns))
    return spines, links


@register_fabric("leaf_spine")
def leaf_spine(fabric, nodes: list[NodeInfo], file: str | None = None):
    """NICs -> leaves (hosts_per_leaf ports) -> spines; nodes never straddle a leaf unless larger than one."""
    H = fabric.hosts_per_leaf
    per_block = max(1, max(math.ceil(len(n.nics) / H) for n in nodes))  # leaves per placement block
    blocks = place(nodes, lambda n: len(n.nics), per_block * H, file, "leaf block")
    switches: list[str] = []
    links: list[Link] = []
    leaf_rate: dict[str, float] = {}
    for b, members in blocks.items():
        port = 0
        for node in members:
            # start a node on a fresh leaf when it would otherwise straddle two
            if len(node.nics) <= H and port % H + len(node.nics) > H:
                port += H - port % H
            for nic in node.nics:
                _attach(nic, f"leaf{b * per_block + port // H}", node, fabric, switches, leaf_rate, links)
                port += 1
    spines, up = _leaves_to_spines(leaf_rate, H, fabric, file=file)
    return switches + spines, links + up


@register_fabric("fat_tree")
def fat_tree(fabric, nodes: list[NodeInfo], file: str | None = None):
    """Leaves -> per-pod aggregation -> core; agg a of every pod wires to core group a."""
    H, L = fabric.hosts_per_leaf, fabric.leaves_per_pod
    blocks = place(nodes, lambda n: len(n.nics), H * L, file, "pod")
    switches: list[str] = []
    links: list[Link] = []
    pod_leaves: dict[int, dict[str, float]] = {}
    for p, members in blocks.items():
        port = 0
        leaves = pod_leaves.setdefault(p, {})
        for node in members:
            if len(node.nics) <= H and port % H + len(node.nics) > H:
                port += H - port % H
            for nic in node.nics:
                leaf = f"pod{p}-leaf{port // H}"
                if leaf not in leaves:
                    switches.append(leaf)
                    leaves[leaf] = 0.0
                leaves[leaf] = max(leaves[leaf], node.spec.nic_gbps)
                links.append(Link(nic, leaf, node.spec.nic_gbps, fabric.link_delay_ns))
                port += 1
    all_leaves = [leaf for lv in pod_leaves.values() for leaf in lv]
    if len(all_leaves) < 2:
        return switches, links
    n_agg = max(uplinks_needed(H, r, fabric.oversubscription, fabric.uplink_gbps, file)
                for lv in pod_leaves.values() for r in lv.values())
    core_up = uplinks_needed(L, fabric.uplink_gbps, fabric.core_oversubscription, fabric.uplink_gbps, file)
    multi_pod = len(pod_leaves) > 1
    cores = [f"core{c}" for c in range(n_agg * core_up)] if multi_pod else []
    for p, leaves in pod_leaves.items():
        aggs = [f"pod{p}-agg{a}" for a in range(n_agg)]
        switches += aggs
        for leaf in leaves:
            for agg in aggs:
                links.append(Link(leaf, agg, fabric.uplink_gbps, fabric.link_delay_ns))
        if multi_pod:
            for a, agg in enumerate(aggs):
                for j in range(core_up):
                    links.append(Link(agg, cores[a * core_up + j], fabric.uplink_gbps, fabric.link_delay_ns))
    return switches + cores, links


@register_fabric("rail_optimized")
def rail_optimized(fabric, nodes: list[NodeInfo], file: str | None = None):
    """Per block of nodes_per_block nodes, NIC k of every node -> rail leaf ``block{b}-rail{k}``; leaves -> spines."""
    blocks = place(nodes, lambda n: 1, fabric.nodes_per_block, file, "rail block")
    switches: list[str] = []
    links: list[Link] = []
    leaf_rate: dict[str, float] = {}
    for b, members in blocks.items():
        for node in members:
            for k, nic in enumerate(node.nics):
                _attach(nic, f"block{b}-rail{k}", node, fabric, switches, leaf_rate, links)
    spines, up = _leaves_to_spines(leaf_rate, fabric.nodes_per_block, fabric, file=file)
    return switches + spines, links + up


@register_fabric("links")
def link_list(fabric, nodes: list[NodeInfo], file: str | None = None):
    """Explicit switches and links; every endpoint must be a listed switch or an existing NIC."""
    nic_rate = {nic: n.spec.nic_gbps for n in nodes for nic in n.nics}
    seen: set[str] = set()
    for i, s in enumerate(fabric.switches):
        if s in seen or s in nic_rate:
            raise UserError("duplicate name" + (" (a NIC has this name)" if s in nic_rate else ""),
                            file=file, field=f"fabric.switches[{i}]", value=s)
        seen.add(s)
    links = []
    pairs: set[frozenset[str]] = set()
    for i, spec in enumerate(fabric.links):
        for end, label in ((spec.a, "a"), (spec.b, "b")):
            if end not in seen and end not in nic_rate:
                raise UserError("unknown endpoint: neither a listed switch nor a NIC ({node}/nic{k})",
                                file=file, field=f"fabric.links[{i}].{label}", value=end)
            if end in nic_rate and nic_rate[end] > spec.rate_gbps:
                raise UserError(f"NIC {end} runs at {nic_rate[end]:g} Gb/s, above its access link rate",
                                file=file, field=f"fabric.links[{i}].rate_gbps", value=spec.rate_gbps)
        if spec.a == spec.b:
            raise UserError("a link must join two different endpoints", file=file,
                            field=f"fabric.links[{i}]", value=spec.a)
        key = frozenset((spec.a, spec.b))
        if key in pairs:
            raise UserError("duplicate link (merge parallel links into one with the summed rate)",
                            file=file, field=f"fabric.links[{i}]", value=f"{spec.a} - {spec.b}")
        pairs.add(key)
        links.append(Link(spec.a, spec.b, spec.rate_gbps, spec.delay_ns))
    return list(fabric.switches), links
