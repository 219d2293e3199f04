"""Flow-level backend: the conformance suite plus exact max-min and routing checks."""
from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from conformance import BackendConformance, dumbbell, ideal_ns, leaf_spine, run_all, star
from netbackend import Link, Message, NetTopology, create_backend
from netbackend.config import NetworkConfig
from hscommon.errors import NetworkError
from netbackend.flow import FlowBackend, max_min_rates
from netbackend.routing import Router


class TestFlowConformance(BackendConformance):
    backend_name = "flow"


def _chain_topology() -> NetTopology:
    """s0 --10G-- s1 --4G-- s2, hosts at 100G: the textbook max-min example."""
    hosts = ["hA", "hB", "hB2", "hC", "hA2", "hC2"]
    at = {"hA": "s0", "hB": "s0", "hB2": "s1", "hC": "s1", "hA2": "s2", "hC2": "s2"}
    links = [Link(h, at[h], 100.0, 100) for h in hosts]
    links += [Link("s0", "s1", 10.0, 100), Link("s1", "s2", 4.0, 100)]
    return NetTopology(hosts=hosts, switches=["s0", "s1", "s2"], links=links)


def test_textbook_max_min_rates():
    b = FlowBackend(_chain_topology())
    b.send(Message(1, "hA", "hA2", 10_000_000, 0))  # L1 + L2
    b.send(Message(2, "hB", "hB2", 10_000_000, 0))  # L1
    b.send(Message(3, "hC", "hC2", 10_000_000, 0))  # L2
    b.advance(1)
    r = b.rates_gbps()
    assert r[1] == pytest.approx(2.0, rel=1e-12)
    assert r[3] == pytest.approx(2.0, rel=1e-12)
    assert r[2] == pytest.approx(8.0, rel=1e-12)


def test_rates_recomputed_on_departure():
    cfg = NetworkConfig()
    b = FlowBackend(star(3), cfg)
    small, big = 1_000_000, 3_000_000
    b.send(Message(1, "h0", "h2", small, 0))
    b.send(Message(2, "h1", "h2", big, 0))
    b.advance(1)
    assert b.rates_gbps() == pytest.approx({1: 50.0, 2: 50.0})
    done = run_all(b)
    lat = 2 * 1000 + cfg.per_hop_latency_ns  # propagation + one switch (+ store-and-forward below)
    sf = lambda size: math.ceil((size - (math.ceil(size / cfg.mtu_bytes) - 1) * cfg.mtu_bytes
                                 + cfg.header_bytes) * 8 / 100.0)
    t_small = ideal_ns(small, 50.0, cfg)
    t_big = ideal_ns(small, 100.0, cfg) + ideal_ns(big, 100.0, cfg)  # the link is busy until both are out
    assert done[1] == math.ceil(t_small) + lat + sf(small)
    assert abs(done[2] - (math.ceil(t_big) + lat + sf(big))) <= 1


def _random_fabric(rng: random.Random) -> NetTopology:
    """3 leaves x 2 spines x 3 hosts with mixed link rates, NIC caps and a parallel uplink."""
    hosts, links = [], []
    for j in range(3):
        for i in range(3):
            h = f"h{j}{i}"
            hosts.append(h)
            links.append(Link(h, f"leaf{j}", rng.choice([25.0, 50.0, 100.0]), 100))
        for k in range(2):
            links.append(Link(f"leaf{j}", f"spine{k}", rng.choice([10.0, 40.0, 100.0]), 100))
    if rng.random() < 0.5:
        links.append(Link("leaf0", "spine0", 10.0, 100))
    rates = {h: rng.choice([10.0, 40.0, 200.0]) for h in hosts}
    return NetTopology(hosts=hosts, switches=["leaf0", "leaf1", "leaf2", "spine0", "spine1"], links=links,
                       host_rate_gbps=rates)


@pytest.mark.parametrize("seed", range(10))
def test_incremental_matches_reference_max_min(seed):
    """Random fabric and traffic: after every incremental update, rates equal a full recomputation."""
    rng = random.Random(seed)
    topo = _random_fabric(rng)
    b = FlowBackend(topo, seed=seed, engine="python")
    assert b._nic_tx or b._nic_rx, "some NIC caps must bind"
    checks = []
    refill = b._rates._refill

    def checked_refill(seeds, t):
        refill(seeds, t)
        active = {b._flows[f.seq][0].id: f.links for f in b._rates._live.values()}
        ref = max_min_rates(active, b._cap)
        got = b.rates_gbps()
        for mid, rate in ref.items():
            assert got[mid] == pytest.approx(rate * 8, rel=1e-6, abs=1e-9), mid
        checks.append(len(active))

    b._rates._refill = checked_refill
    for mid in range(120):
        s, d = rng.sample(topo.hosts, 2)
        start = rng.randint(0, 2_000_000) if seed % 2 else rng.choice([0, rng.randint(0, 1_000_000)])
        b.send(Message(mid, s, d, rng.randint(1_000, 2_000_000), start, flow_key=mid))
    done = run_all(b)
    assert len(done) == 120
    assert len(checks) > 50 and max(checks) > 20


def test_nic_rate_caps_a_host():
    cfg = NetworkConfig()
    topo = star(3)
    topo.host_rate_gbps["h0"] = 40.0
    b = FlowBackend(topo, cfg)
    b.send(Message(1, "h0", "h1", 2_000_000, 0))
    b.send(Message(2, "h0", "h2", 2_000_000, 0))
    b.advance(1)
    assert b.rates_gbps() == pytest.approx({1: 20.0, 2: 20.0})
    done = run_all(b)
    assert max(done.values()) == pytest.approx(ideal_ns(4_000_000, 40.0, cfg), rel=0.01)


def test_goodput_accounts_headers():
    cfg = NetworkConfig(mtu_bytes=1024, header_bytes=100)
    b = FlowBackend(star(2), cfg)
    size = 1024 * 10_000
    b.send(Message(1, "h0", "h1", size, 0))
    (c,) = b.advance()
    # wire time + 2 x 1 us propagation + one switch + store-and-forward of one 1124 B packet
    assert c.finish_ns == math.ceil(size * 1124 / 1024 * 8 / 100) + 2000 + cfg.per_hop_latency_ns + 90


def test_local_message_completes_at_start():
    b2 = FlowBackend(star(2))
    b2.send(Message(1, "h0", "h0", 1000, 500))
    (c,) = b2.advance()
    assert (c.id, c.finish_ns, b2.now_ns) == (1, 500, 500)


def test_duplicate_inflight_id_rejected():
    b = FlowBackend(star(3))
    b.send(Message(1, "h0", "h1", 1000, 0))
    with pytest.raises(NetworkError) as ei:
        b.send(Message(1, "h0", "h2", 1000, 0))
    assert ei.value.field == "message.id"


def test_link_bytes_and_utilization():
    cfg = NetworkConfig()
    b = FlowBackend(dumbbell(1), cfg)
    b.send(Message(1, "l0", "r0", 4096 * 100, 0))
    run_all(b)
    st = b.stats()
    wire = 4096 * 100 + 100 * cfg.header_bytes
    assert st.link_bytes == {("l0", "sl"): wire, ("sl", "sr"): wire, ("sr", "r0"): wire}
    assert 0.5 < st.extra["max_link_utilization"] <= 1.0


def test_unreachable_host():
    topo = NetTopology(hosts=["a", "b"], switches=["s0", "s1"], links=[Link("a", "s0", 100, 0), Link("b", "s1", 100, 0)])
    b = FlowBackend(topo)
    with pytest.raises(NetworkError):
        b.send(Message(1, "a", "b", 1000, 0))


# ---------------------------------------------------------------- routing
def _spine_of(path: list[str]) -> str:
    return next(n for n in path if n.startswith("spine"))


def test_ecmp_spreads_flows_across_spines_deterministically():
    topo = leaf_spine(2, 4, 1)
    r = Router(topo, seed=0)
    use = Counter(_spine_of(r.path("h0_0", "h1_0", key)) for key in range(256))
    assert set(use) == {f"spine{k}" for k in range(4)}
    assert min(use.values()) >= 40  # 64 expected per spine
    again = [r.path("h0_0", "h1_0", k) for k in range(64)]
    assert again == [Router(topo, seed=0).path("h0_0", "h1_0", k) for k in range(64)]
    other = [Router(topo, seed=1).path("h0_0", "h1_0", k) for k in range(64)]
    assert other != again


def test_paths_are_shortest_and_links_consistent():
    topo = leaf_spine(3, 3, 2)
    r = Router(topo, seed=4)
    for s in topo.hosts:
        for d in topo.hosts:
            if s == d:
                continue
            p = r.path(s, d, 7)
            ecs = r.equal_cost_paths(s, d)
            assert p in ecs and all(len(q) == len(p) for q in ecs)
            links = r.links_of(p, 7)
            assert [r.link_name(l) for l in links] == list(zip(p, p[1:]))


def test_parallel_links_are_used():
    links = [Link("a", "s0", 100, 0), Link("b", "s1", 100, 0)] + [Link("s0", "s1", 25, 0) for _ in range(4)]
    topo = NetTopology(hosts=["a", "b"], switches=["s0", "s1"], links=links)
    r = Router(topo)
    used = {r.route("a", "b", k)[1][1] for k in range(64)}
    assert len(used) == 4


def test_rail_mode_pins_rails_to_spines():
    topo = leaf_spine(2, 4, 4, host_name="node{leaf}/nic{i}")
    r = Router(topo, mode="rail")
    for k in range(4):
        spines = {_spine_of(r.path(f"node0/nic{k}", f"node1/nic{j}", key)) for j in range(4) for key in range(16)}
        assert spines == {f"spine{k}"}
    b = create_backend("flow", topo, NetworkConfig(ecmp="rail"))
    b.send(Message(1, "node0/nic2", "node1/nic0", 1000, 0))
    assert len(b.advance()) == 1


def test_bad_ecmp_mode():
    with pytest.raises(NetworkError):
        Router(star(2), mode="random")


def test_scale_smoke():
    """A 128-host leaf-spine with 3000 overlapping flows runs and keeps the refill sets small."""
    topo = leaf_spine(8, 4, 16, uplink_gbps=400.0)
    rng = random.Random(0)
    b = FlowBackend(topo)
    t = 0
    for mid in range(3000):
        t += rng.randint(0, 2_000)
        s, d = rng.sample(topo.hosts, 2)
        b.send(Message(mid, s, d, rng.randint(1_000, 1_000_000), t, flow_key=mid))
    done = run_all(b)
    assert len(done) == 3000
    c = b.counters
    assert c.refilled_flows / max(c.refills, 1) < 200


def test_backends_on_one_topology_share_its_router_and_time_alike():
    topo = leaf_spine(leaves=2, spines=2, hosts_per_leaf=2)
    a = FlowBackend(topo, NetworkConfig(ecmp="hash"), seed=3)
    b = FlowBackend(topo, NetworkConfig(ecmp="hash"), seed=3)
    assert a.router is b.router
    assert FlowBackend(topo, NetworkConfig(ecmp="hash"), seed=4).router is not a.router
    assert FlowBackend(topo, NetworkConfig(ecmp="rail"), seed=3).router is not a.router
    # the shared router's paths are a fresh one's, and a second run on it times the same
    fresh = Router(topo, mode="hash", seed=3)
    hosts = topo.hosts
    for k in range(8):
        assert a.router.route(hosts[0], hosts[-1], k) == fresh.route(hosts[0], hosts[-1], k)
    done = []
    for backend in (a, b):
        for i in range(6):
            backend.send(Message(i + 1, hosts[i % 2], hosts[2 + i % 2], 1_000_000, 0, flow_key=i))
        done.append(run_all(backend))
    assert done[0] == done[1]


def test_rail_pinned_paths_ignore_the_flow_key():
    topo = leaf_spine(leaves=2, spines=4, hosts_per_leaf=2)
    r = Router(topo, mode="rail")
    h = Router(topo, mode="hash")
    src, dst = topo.hosts[0], topo.hosts[-1]
    assert len({tuple(r.route(src, dst, k)[1]) for k in range(16)}) == 1
    assert len({tuple(h.route(src, dst, k)[1]) for k in range(16)}) > 1  # (the hash does use it)
