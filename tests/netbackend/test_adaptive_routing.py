"""``network.ecmp: adaptive``: ideal adaptive routing / per-packet spraying in the flow backend.

Expected values come from a hand calculation (max-min shares of the summed uplinks) and from a fabric
merged by hand (one spine whose links carry the summed rate), never from the adaptive run itself.
"""
from __future__ import annotations

import math

import pytest

from conformance import run_all
from hscommon.errors import NetworkError
from netbackend import Link, Message, NetTopology
from netbackend.config import NetworkConfig
from netbackend.flow import FlowBackend
from netbackend.routing import Router, check_fabric, sprayed

SIZE = 8_000_000


def _leaf_spine(spines: int = 2, uplink_gbps: float = 100.0, hosts_per_leaf: int = 4) -> NetTopology:
    """Two leaves of ``hosts_per_leaf`` 100G hosts, each leaf with one ``uplink_gbps`` link to every spine."""
    hosts = [f"a{i}" for i in range(hosts_per_leaf)] + [f"b{i}" for i in range(hosts_per_leaf)]
    links = [Link(h, "leafA" if h[0] == "a" else "leafB", 100.0, 100) for h in hosts]
    sp = [f"spine{j}" for j in range(spines)]
    links += [Link(leaf, s, uplink_gbps, 200) for leaf in ("leafA", "leafB") for s in sp]
    return NetTopology(hosts=hosts, switches=["leafA", "leafB", *sp], links=links)


def test_spines_with_the_same_neighbours_become_one_switch_of_summed_links():
    t = sprayed(_leaf_spine(spines=4, uplink_gbps=100.0))
    assert t.hosts == [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(4)]
    assert t.switches == ["leafA", "leafB", "spine0[x4]"]
    up = sorted((link.a, link.b, link.rate_gbps, link.delay_ns) for link in t.links if "spine" in link.b)
    assert up == [("leafA", "spine0[x4]", 400.0, 200), ("leafB", "spine0[x4]", 400.0, 200)]


def test_a_fabric_with_nothing_interchangeable_is_returned_as_is():
    t = _leaf_spine(spines=1)
    assert sprayed(t) is t


def test_switches_with_different_links_are_not_merged():
    t = _leaf_spine(spines=2)
    t.links[-1] = Link("leafB", "spine1", 50.0, 200)  # spine1 reaches leafB at half the rate
    assert sorted(sprayed(t).switches) == ["leafA", "leafB", "spine0", "spine1"]


def test_four_flows_share_the_summed_uplinks_max_min():
    """4 flows leaf A -> leaf B over 2 spines of 100G: 200G of uplink, 50G each (hand calculation). With a
    static hash, whichever spine takes more than two flows gives them less than 50G."""
    cfg = NetworkConfig(ecmp="adaptive")
    b = FlowBackend(_leaf_spine(2), cfg)
    for i in range(4):
        b.send(Message(i, f"a{i}", f"b{i}", SIZE, 0, flow_key=i))
    b.advance(1)
    assert b.rates_gbps() == pytest.approx({i: 50.0 for i in range(4)}, rel=1e-12)


def test_completion_times_equal_the_fabric_merged_by_hand():
    # merged by hand: one spine, each leaf's uplink at the 2 x 100G summed rate
    done = {}
    for name, topo, ecmp in (("adaptive", _leaf_spine(2, 100.0), "adaptive"), ("merged", _leaf_spine(1, 200.0), "hash")):
        b = FlowBackend(topo, NetworkConfig(ecmp=ecmp))
        for i in range(4):
            b.send(Message(i, f"a{i}", f"b{(i + 1) % 4}", SIZE * (i + 1), 1000 * i, flow_key=7 * i))
        done[name] = run_all(b)
    assert done["adaptive"] == done["merged"]
    # and by hand: the first flow's drain at 50G while all four share the 200G of uplinks is bounded below by
    # its bytes at 100G (its NIC) and above by its bytes at 50G
    cfg = NetworkConfig()
    wire = SIZE + math.ceil(SIZE / cfg.mtu_bytes) * cfg.header_bytes
    assert wire * 8 / 100.0 < done["adaptive"][0] < wire * 8 / 50.0 + 10_000


def test_the_static_hash_is_never_faster_than_spraying_here():
    """On this symmetric fabric spraying is the best any routing can do: the hashed run of the same flows
    cannot finish earlier (it can tie where the hash happens to balance)."""
    for seed in range(6):
        last = {}
        for ecmp in ("adaptive", "hash"):
            b = FlowBackend(_leaf_spine(2), NetworkConfig(ecmp=ecmp), seed=seed)
            for i in range(4):
                b.send(Message(i, f"a{i}", f"b{i}", SIZE, 0, flow_key=i))
            last[ecmp] = max(run_all(b).values())
        assert last["adaptive"] <= last["hash"]


def test_the_router_routes_on_the_merged_fabric():
    r = Router(_leaf_spine(4), mode="adaptive")
    assert r.path("a0", "b1") == ["a0", "leafA", "spine0[x4]", "leafB", "b1"]
    assert not r.hashed("a0", "b1")  # no choice is left to a hash


def test_the_packet_level_switch_refuses_adaptive_with_one_line():
    with pytest.raises(NetworkError) as e:
        check_fabric(_leaf_spine(2), "adaptive")  # the packet-level modes (the ns-3 switch's)
    msg = str(e.value)
    assert "network.ecmp" in msg and "adaptive" in msg and "flow backend only" in msg and "\n" not in msg
    check_fabric(_leaf_spine(2), "adaptive", ("hash", "rail", "adaptive"))  # the flow backend's


def test_ns3_backend_check_config_refuses_adaptive():
    ns3 = pytest.importorskip("netbackend.ns3")
    with pytest.raises(NetworkError, match="flow backend only"):
        ns3.Ns3Backend.check_config(_leaf_spine(2), NetworkConfig(ecmp="adaptive"))
