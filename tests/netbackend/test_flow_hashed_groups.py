"""Flow engine: a group whose copies took other ECMP-hashed paths (``send_group(hashed_alike=True)``).

Each copy loads its own hashed links, collisions included; the group has one rate, its slowest copy's
(heterosim ``simulation.hashed_copies``: ``ops`` and ``ops_and_replicas``). Expected values by hand (max-min shares)."""
from __future__ import annotations

import pytest

from conformance import ideal_ns, leaf_spine, run_all
from netbackend import Message
from netbackend.config import NetworkConfig
from netbackend.flow import FlowBackend


def _spine(b: FlowBackend, src: str, dst: str, key: int) -> str:
    return next(n for n in b.router.path(src, dst, key) if n.startswith("spine"))


def _setup():
    """Copies a (h0_0 -> h1_0) and b (h0_1 -> h1_1) hashed onto different spines, and a third flow c
    (h0_2 -> h1_2) hashed onto a's spine: 2 leaves x 4 hosts, 2 spines, 100G everywhere."""
    topo = leaf_spine(leaves=2, spines=2, hosts_per_leaf=4, rate_gbps=100.0, uplink_gbps=100.0)
    cfg = NetworkConfig(ecmp="hash")
    probe = FlowBackend(topo, cfg)
    key = next(k for k in range(64) if _spine(probe, "h0_0", "h1_0", k) != _spine(probe, "h0_1", "h1_1", k))
    ckey = next(k for k in range(64) if _spine(probe, "h0_2", "h1_2", k) == _spine(probe, "h0_0", "h1_0", key))
    return topo, cfg, key, ckey


def test_hashed_copies_are_not_alike_unless_asked():
    topo, cfg, key, _ = _setup()
    b = FlowBackend(topo, cfg)
    assert not b.send_group(Message(1, "h0_0", "h1_0", 1000, 0, key), (("h0_1", "h1_1"),))
    assert b.pending() == 0  # nothing sent: the caller sends the copies one by one


def test_hashed_group_moves_at_its_slowest_copy_and_loads_each_copys_links():
    topo, cfg, key, ckey = _setup()
    size = 1_000_000
    # every copy its own flow: a and c share an uplink (50G each), b is alone (100G)
    full = FlowBackend(topo, cfg)
    full.send(Message(1, "h0_0", "h1_0", size, 0, key))
    full.send(Message(2, "h0_1", "h1_1", size, 0, key))
    full.send(Message(3, "h0_2", "h1_2", size, 0, ckey))
    full.advance(1)
    assert full.rates_gbps() == pytest.approx({1: 50.0, 2: 100.0, 3: 50.0})
    ref = run_all(full)
    # the group: one rate, a's 50G share (its slowest copy); c keeps its 50G (hand calculation)
    g = FlowBackend(topo, cfg)
    assert g.send_group(Message(1, "h0_0", "h1_0", size, 0, key), (("h0_1", "h1_1"),), hashed_alike=True)
    g.send(Message(3, "h0_2", "h1_2", size, 0, ckey))
    g.advance(1)
    assert g.rates_gbps() == pytest.approx({1: 50.0, 3: 50.0})
    got = run_all(g)
    assert got[1] == ref[1] == max(ref[1], ref[2])  # the group ends with its slowest copy
    assert got[3] == ref[3]
    assert ref[2] < ref[1] and got[1] >= ideal_ns(size, 50.0, cfg)
    # every copy's wire bytes are on its own hashed links, as in the full run
    assert g.stats().link_bytes == full.stats().link_bytes
    assert g.stats().bytes_delivered == full.stats().bytes_delivered == 3 * size
