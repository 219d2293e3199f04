"""The intra-node fabric as the flow-level model sees it.

Multi-node schedules (hierarchical, tree) move some chunks over NVLink/PCIe
while others cross the network; those chunks run as flows on ``system.intra``
with link rates scaled by what NCCL achieves on each link kind
(``heterosim.comm.intranode.LINK_EFFICIENCY``), so that they agree with the
closed-form single-node model.
"""
from __future__ import annotations

from heterosim.comm.intranode import LINK_EFFICIENCY
from netbackend.topo import Link, NetTopology


def _kind(link: Link) -> str:
    ends = (link.a, link.b)
    if any(e.endswith("/nvswitch") for e in ends):
        return "nvls"
    if any(e.endswith("/nvsw") for e in ends):
        return "nvlink"
    if any("/pcie" in e or e.endswith("/rc") for e in ends):
        return "pcie"
    return "c2c"


def effective_intra(intra: NetTopology) -> NetTopology:
    links = [Link(l.a, l.b, l.rate_gbps * LINK_EFFICIENCY.get(_kind(l), 1.0), l.delay_ns) for l in intra.links]
    return NetTopology(hosts=list(intra.hosts), switches=list(intra.switches), links=links)
