"""The fabric as a network backend sees it: hosts (NICs), switches and links.

Built by ``topologies`` from a cluster + fabric description; GPUs and intra-node
links are not part of it (they stay analytical in the coordinator).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx


@dataclass(frozen=True, slots=True)
class Link:
    """A full-duplex link; both directions have the same rate and delay."""

    a: str
    b: str
    rate_gbps: float
    """Line rate per direction, Gb/s."""
    delay_ns: int
    """One-way propagation delay, ns."""


@dataclass
class NetTopology:
    hosts: list[str]
    """NIC endpoint names; messages go from one host to another."""
    switches: list[str]
    links: list[Link]
    host_rate_gbps: dict[str, float] = field(default_factory=dict)
    """NIC line rate per host (defaults to the rate of its access link)."""

    def __post_init__(self) -> None:
        if not self.host_rate_gbps:
            for link in self.links:
                for end in (link.a, link.b):
                    if end in self._host_set and end not in self.host_rate_gbps:
                        self.host_rate_gbps[end] = link.rate_gbps

    @cached_property
    def _host_set(self) -> frozenset[str]:
        return frozenset(self.hosts)

    def is_host(self, name: str) -> bool:
        return name in self._host_set

    @cached_property
    def graph(self) -> nx.Graph:
        g = nx.Graph()
        for h in self.hosts:
            g.add_node(h, kind="host")
        for s in self.switches:
            g.add_node(s, kind="switch")
        for link in self.links:
            g.add_edge(link.a, link.b, rate_gbps=link.rate_gbps, delay_ns=link.delay_ns)
        return g

    def shortest_paths(self, src: str, dst: str) -> list[list[str]]:
        """All equal-cost (hop count) paths; ECMP picks among them."""
        return [list(p) for p in nx.all_shortest_paths(self.graph, src, dst)]
