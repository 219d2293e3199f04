"""In-network reduction endpoints (InfiniBand SHARP) of a fabric with ``in_network_reduction: sharp``.

A SHARP switch reduces the streams its children send it and forwards one reduced stream (Graham et al.,
"Scalable Hierarchical Aggregation and Reduction Protocol (SHARP) Streaming-Aggregation Hardware Design and
Evaluation", ISC 2020: MPI_Allreduce reaches ~95% of the network's point-to-point bandwidth, i.e. a reduction
tree runs at port rate).  The flow model gives every switch ``s`` an aggregation endpoint ``s/sharp``: a host
joined to ``s`` by one link whose rate is the sum of ``s``'s port rates (the aggregation unit is assumed to
keep up with every port at once, so it never slows a stream below the ports it crosses; each reduced stream
is then bounded by the one port it leaves on: the assumption docs/in-network-reduction.md states) and whose
delay is 0 (the reduction is inside the switch; its latency is in NCCL's CollNet network latency, charged
by the comm planner).  The comm planner's ``collnet`` schedules send to and from these endpoints.
"""
from __future__ import annotations

from netbackend.topo import Link

SHARP_SUFFIX = "/sharp"
"""Name suffix of a switch's aggregation endpoint (``{switch}/sharp``)."""


def aggregation_endpoint(switch: str) -> str:
    return switch + SHARP_SUFFIX


def aggregation_links(switches: list[str], links: list[Link]) -> tuple[list[str], list[Link], dict[str, float]]:
    """(endpoint names, their links, their rates in Gb/s) for every switch of the fabric."""
    capacity: dict[str, float] = {s: 0.0 for s in switches}
    for link in links:
        for end in (link.a, link.b):
            if end in capacity:
                capacity[end] += link.rate_gbps
    hosts, out, rates = [], [], {}
    for s in switches:
        if capacity[s] <= 0:
            continue
        h = aggregation_endpoint(s)
        hosts.append(h)
        out.append(Link(s, h, capacity[s], 0))
        rates[h] = capacity[s]
    return hosts, out, rates
