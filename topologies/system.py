"""What a built system is: GPUs, nodes, the NIC fabric and the intra-node fabric.

Names follow ``topologies.config``: node ``{group}-{i}``, GPU ``{node}/gpu{j}``,
NIC ``{node}/nic{k}``. Intra-node names: ``{node}/nvsw`` (NVSwitch crossbar),
``{node}/nvswitch`` (the NVSwitch as a transfer endpoint, for NVLS reductions),
``{node}/pcie{k}`` (PCIe switches), ``{node}/rc`` (CPU root complex),
``{node}/cpu{j}`` (Grace CPUs of a GH200 node; only in ``graph``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from netbackend.topo import NetTopology
from topologies.config import NodeType


@dataclass(frozen=True, slots=True)
class GpuInfo:
    rank: int
    """Global rank: groups in file order, nodes in order, GPUs in order."""
    name: str
    """``{node}/gpu{local}``."""
    node: str
    node_index: int
    """Index of the node in ``SystemTopology.nodes``."""
    local: int
    """GPU index inside its node."""
    group: str
    device: str
    """Device catalog key (``NodeType.gpu``)."""
    slowdown: float
    nic: str
    """The NIC this GPU's inter-node traffic uses (rail-aligned: local j -> NIC j*nics//gpus)."""


@dataclass(slots=True)
class NodeInfo:
    name: str
    group: str
    index: int
    """Global node index."""
    spec: NodeType
    """The group's node type after overrides."""
    gpu_ranks: tuple[int, ...]
    nics: tuple[str, ...]
    group_index: int = 0
    """Position of the group in the cluster file (for error messages)."""
    pod: int | None = None
    """Placement hint copied from the group."""


@dataclass
class SystemTopology:
    gpus: list[GpuInfo]
    nodes: list[NodeInfo]
    net: NetTopology
    """Hosts = every NIC; switches and links from the fabric generator."""
    intra: NetTopology
    """Hosts = GPUs (+ ``{node}/nvswitch`` NVLS endpoints); NVSwitch/PCIe/direct links, all nodes."""
    graph: nx.Graph
    """Everything, typed: node attr ``type`` in gpu|nic|switch|nvswitch|pcie|cpu; edge attr ``type``
    in nvlink|pcie|c2c|net, with ``rate_gbps`` and ``delay_ns``."""
    source: str | None = None
    _node_by_name: dict[str, NodeInfo] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._node_by_name = {n.name: n for n in self.nodes}

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def node_of(self, rank: int) -> NodeInfo:
        return self.nodes[self.gpus[rank].node_index]

    def same_node(self, a: int, b: int) -> bool:
        return self.gpus[a].node_index == self.gpus[b].node_index

    def ranks_in_node(self, node: str | int) -> tuple[int, ...]:
        info = self.nodes[node] if isinstance(node, int) else self._node_by_name[node]
        return info.gpu_ranks

    def node(self, name: str) -> NodeInfo:
        return self._node_by_name[name]

    @cached_property
    def nic_rate_gbps(self) -> dict[str, float]:
        return {nic: n.spec.nic_gbps for n in self.nodes for nic in n.nics}

    def summary(self) -> str:
        groups: dict[str, int] = {}
        for n in self.nodes:
            groups[n.group] = groups.get(n.group, 0) + 1
        parts = ", ".join(f"{g}: {c} nodes" for g, c in groups.items())
        return (f"{self.num_gpus} GPUs on {len(self.nodes)} nodes ({parts}); fabric: "
                f"{len(self.net.hosts)} NICs, {len(self.net.switches)} switches, {len(self.net.links)} links")
