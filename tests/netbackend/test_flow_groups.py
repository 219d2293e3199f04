"""Flow engine: a symmetric group of copies sent as one flow (``send_group``) against the
event-by-event reference (every copy its own flow) and hand-computed max-min rates."""
from __future__ import annotations

import math
import random

import pytest

from conformance import dumbbell, ideal_ns, leaf_spine, run_all
from netbackend import Link, Message, NetTopology
from netbackend.config import NetworkConfig
from netbackend.flow import FlowBackend, max_min_rates


def test_reference_max_min_counts_copies():
    # link 0 (10 B/ns) carries 3 copies of flow a and one flow b: 4 equal shares of 2.5;
    # link 1 (100) carries one copy of a and c: c gets the rest, 97.5 (hand calculation)
    r = max_min_rates({0: (0, 0, 0, 1), 1: (0,), 2: (1,)}, [10.0, 100.0])
    assert r == {0: pytest.approx(2.5), 1: pytest.approx(2.5), 2: pytest.approx(97.5)}


def test_group_over_a_shared_core_gets_the_fair_share():
    """4 copies l_i -> r_i over a 100G core with a fifth, ordinary flow: each gets 20G (hand calculation)."""
    cfg = NetworkConfig()
    b = FlowBackend(dumbbell(5, rate_gbps=100.0, core_gbps=100.0), cfg)
    size = 1_000_000
    assert b.send_group(Message(1, "l0", "r0", size, 0), tuple((f"l{i}", f"r{i}") for i in range(1, 4)))
    b.send(Message(2, "l4", "r4", size, 0))
    b.advance(1)
    assert b.rates_gbps() == pytest.approx({1: 20.0, 2: 20.0})
    done = run_all(b)
    assert done[1] == done[2]
    assert b.stats().bytes_delivered == 5 * size
    core = b.stats().link_bytes[("sl", "sr")]
    wire = size + math.ceil(size / cfg.mtu_bytes) * cfg.header_bytes
    assert core == 5 * wire
    # the drain time follows the fair share
    assert done[1] >= ideal_ns(size, 20.0, cfg)


def _fabric(rng: random.Random) -> NetTopology:
    """2 leaves x 4 hosts, 2 spines; uplinks narrower than hosts so spines congest."""
    return leaf_spine(leaves=2, spines=2, hosts_per_leaf=4, rate_gbps=100.0, uplink_gbps=rng.choice([50.0, 100.0]))


@pytest.mark.parametrize("seed", range(6))
def test_symmetric_traffic_as_groups_equals_every_copy_simulated(seed):
    """Random families of symmetric traffic (each the same flow shifted by one host on both leaves),
    rail-pinned paths, congested uplinks: one flow per family gives every copy's completion exactly."""
    rng = random.Random(seed)
    topo = _fabric(rng)
    cfg = NetworkConfig(ecmp="rail")
    fams = []
    for k in range(rng.randrange(2, 6)):
        a, b = rng.randrange(2), rng.randrange(2)
        da = rng.randrange(4) if a != b else rng.randrange(1, 4)
        fams.append((a, b, da, rng.randrange(200_000, 3_000_000), rng.randrange(0, 30_000)))

    def copies(a, b, da):
        return [(f"h{a}_{i}", f"h{b}_{(i + da) % 4}") for i in range(4)]

    full = FlowBackend(topo, cfg)
    for k, (a, b, da, n, t) in enumerate(fams):
        for i, (s, d) in enumerate(copies(a, b, da)):
            full.send(Message(100 * k + i, s, d, n, t))
    ref = run_all(full)
    g = FlowBackend(topo, cfg)
    for k, (a, b, da, n, t) in enumerate(fams):
        cs = copies(a, b, da)
        assert g.send_group(Message(100 * k, *cs[0], n, t), tuple(cs[1:]))
    got = run_all(g)
    for k in range(len(fams)):
        assert {ref[100 * k + i] for i in range(4)} == {got[100 * k]}
    assert g.stats().link_bytes == full.stats().link_bytes


def test_group_without_other_traffic_is_bit_identical():
    topo = leaf_spine(leaves=2, spines=2, hosts_per_leaf=4, rate_gbps=100.0, uplink_gbps=100.0)
    cfg = NetworkConfig(ecmp="rail")
    pairs = [(f"h0_{i}", f"h1_{(i + 1) % 4}") for i in range(4)]
    full = FlowBackend(topo, cfg)
    for k, (s, d) in enumerate(pairs):
        full.send(Message(k + 1, s, d, 3_000_000, 0))
    ref = run_all(full)
    g = FlowBackend(topo, cfg)
    assert g.send_group(Message(1, *pairs[0], 3_000_000, 0), tuple(pairs[1:]))
    assert run_all(g) == {1: ref[1]}
    assert len(set(ref.values())) == 1
    assert g.stats().link_bytes == full.stats().link_bytes


def test_group_with_unlike_paths_is_refused():
    """A copy on a degraded access link (or a capped NIC) is not symmetric: nothing is sent."""
    links = [Link(f"h{i}", "s0", 100.0 if i != 3 else 50.0, 1000) for i in range(4)]
    b = FlowBackend(NetTopology(hosts=[f"h{i}" for i in range(4)], switches=["s0"], links=links))
    assert not b.send_group(Message(1, "h0", "h1", 1000, 0), (("h2", "h3"),))
    assert b.pending() == 0
    assert b.send_group(Message(1, "h0", "h1", 1000, 0), (("h1", "h2"),))
    assert b.pending() == 1
