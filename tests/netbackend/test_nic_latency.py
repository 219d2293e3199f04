"""Issue 40: ``NodeType.nic_latency_ns`` is modelled, the same way in both backends.

Model (topologies/build.py): a NIC's latency is paid once on the way out (host memory to wire) and once
on the way in (wire to host memory). A message crosses the sender's NIC and the receiver's NIC once
each, so by hand its completion moves by exactly ``lat(src NIC) + lat(dst NIC)``: 2 x L between two
nodes of one type, L_a + L_b between two types. Everything else about the path is unchanged, so the
difference of two runs that differ only in the latency is that sum, to the nanosecond.
"""
from __future__ import annotations

import pytest

from netbackend import Message, create_backend
from netbackend.config import NetworkConfig
from topologies import build_system


def _system(lat_a: int, lat_b: int):
    cluster = {"groups": [
        {"name": "a", "node_type": "dgx-h100", "num_nodes": 1, "overrides": {"nic_latency_ns": lat_a}},
        {"name": "b", "node_type": "dgx-h100", "num_nodes": 1, "overrides": {"nic_latency_ns": lat_b}}]}
    return build_system(cluster, {"kind": "leaf_spine", "hosts_per_leaf": 8})  # a and b on different leaves


def _finish_ns(backend: str, lat_a: int, lat_b: int, size: int) -> int:
    net = _system(lat_a, lat_b).net
    with create_backend(backend, net, NetworkConfig(backend=backend), 0) as b:
        b.send(Message(1, "a-0/nic0", "b-0/nic3", size, 0, flow_key=7))
        done = []
        while not done:
            done = b.advance()
        return done[0].finish_ns


BACKENDS = ["flow", pytest.param("ns3", marks=pytest.mark.ns3)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", [1, 3 * 4096 + 5])  # one packet; several (the latency is paid once, pipelined)
def test_message_time_grows_by_both_nics_latency(backend, size):
    if backend == "ns3":
        pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel")
    base = _finish_ns(backend, 0, 0, size)
    assert _finish_ns(backend, 700, 700, size) - base == 2 * 700
    assert _finish_ns(backend, 300, 1100, size) - base == 300 + 1100


def test_latency_is_on_the_nic_access_links_only():
    sys0, sys1 = _system(0, 0), _system(250, 600)
    delay0 = {(l.a, l.b): l.delay_ns for l in sys0.net.links}
    for link in sys1.net.links:
        extra = link.delay_ns - delay0[(link.a, link.b)]
        ends = {link.a[:2], link.b[:2]}
        assert extra == (250 if "a-" in ends else 600 if "b-" in ends else 0), link


def test_catalog_nics_add_nothing_beyond_nccls_network_latency():
    """Default 0 (NodeType.nic_latency_ns): the comm planner's NCCL per-step net latency already holds the NIC's."""
    system = build_system({"groups": [{"name": "a", "node_type": "dgx-h100", "num_nodes": 2}]},
                          {"kind": "leaf_spine", "hosts_per_leaf": 8, "link_delay_ns": 500})
    assert {l.delay_ns for l in system.net.links} == {500}
