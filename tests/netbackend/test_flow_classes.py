"""Flow engine internals: max-min over link classes (links crossed by the same registered paths).

The reference is brute force: which flows cross each link (from their paths) and the max-min rates of
plain progressive filling over every link (``max_min_rates``), recomputed after every rate update.
"""
from __future__ import annotations

import random

import pytest

import netbackend.flow as flow_mod
from conformance import leaf_spine, run_all
from netbackend import Message
from netbackend.config import NetworkConfig
from netbackend.flow import FlowBackend, max_min_rates


def _fabric(rng: random.Random):
    topo = leaf_spine(leaves=3, spines=2, hosts_per_leaf=4, rate_gbps=100.0,
                      uplink_gbps=rng.choice([50.0, 100.0, 200.0]))
    for h in rng.sample(topo.hosts, 3):
        topo.host_rate_gbps[h] = rng.choice([40.0, 80.0])  # NIC caps below the access link: virtual links
    return topo


def _check_classes(b: FlowBackend) -> int:
    """Every link's class holds exactly the live flows crossing it, with their copies; returns #flows."""
    on: dict[int, dict[int, int]] = {}
    e = b._rates
    for f in e._live.values():
        for l, w in zip(f.path.links, f.path.w):
            on.setdefault(l, {})[f.seq] = w
    for l, c in enumerate(e._cls):
        members = {f.seq: w for p, w in c.active.items() for f in p.flows.values()}
        assert members == on.get(l, {}), f"link {l}"
        assert c.nflows == len(members)
        assert c.key[0] == b._cap[l]
    for c in e._classes.values():  # loads are the members' rates times copies
        assert c.load == pytest.approx(sum(f.rate * w for p, w in c.active.items() for f in p.flows.values()),
                                       rel=1e-9, abs=1e-12)
    return len(e._live)


@pytest.mark.parametrize("hashed_alike", [False, True])
@pytest.mark.parametrize("idle_paths", [1, flow_mod._IDLE_PATHS, "rent"])
@pytest.mark.parametrize("seed", range(5))
def test_classes_and_rates_match_brute_force(seed, idle_paths, hashed_alike, monkeypatch):
    """Random singles and symmetric groups (some sharing links): after every update, every link's class
    has exactly the flows on it and the rates are the reference max-min rates (copies counted per link).
    ``idle_paths=1`` drops every flowless path as soon as another registers (the un-registering path).
    ``"rent"``: every path charges rent on every refill and an idle path goes at 0.2 visits a link, so
    idle paths are dropped in the middle of runs, right after a filling. ``hashed_alike``: groups whose
    copies the hash put on other spines ride together too, so a group crosses many classes it has alone
    (of unlike copies and capacities), which the filling prunes to the tightest (FlowBackend._refill)."""
    if idle_paths == "rent":
        monkeypatch.setattr(flow_mod, "_RENT_CLASSES", 0)
        monkeypatch.setattr(flow_mod, "_RENT_SAMPLE", 1)
        monkeypatch.setattr(flow_mod, "_RENT_PER_LINK", 0.2)
    else:
        monkeypatch.setattr(flow_mod, "_IDLE_PATHS", idle_paths)
    rng = random.Random(seed)
    topo = _fabric(rng)
    b = FlowBackend(topo, NetworkConfig(), seed=seed, engine="python")
    e = b._rates
    refill = e._refill
    seen = []

    def checked(seeds, t):
        refill(seeds, t)
        seen.append(_check_classes(b))
        flows = {f.seq: tuple(l for l, w in zip(f.path.links, f.path.w) for _ in range(w)) for f in e._live.values()}
        ref = max_min_rates(flows, b._cap)
        for f in e._live.values():
            assert f.rate == pytest.approx(ref[f.seq], rel=1e-6, abs=1e-9), b._flows[f.seq][0].id

    e._refill = checked
    hosts = topo.hosts
    mid = 0
    for _ in range(60):
        start = rng.choice([0, rng.randint(0, 400_000)])
        size = rng.randint(2_000, 1_500_000)
        s, d = rng.sample(hosts, 2)
        mid += 1
        if rng.random() < 0.4:
            # a group: the same transfer shifted by one host inside both leaves (copies may share a leaf)
            k = rng.randint(1, 3)
            si, di = hosts.index(s), hosts.index(d)
            imgs = tuple((hosts[(si // 4) * 4 + (si + j) % 4], hosts[(di // 4) * 4 + (di + j) % 4])
                         for j in range(1, k + 1))
            if not b.send_group(Message(mid, s, d, size, start, flow_key=mid), imgs, hashed_alike=hashed_alike):
                b.send(Message(mid, s, d, size, start, flow_key=mid))
        else:
            b.send(Message(mid, s, d, size, start, flow_key=mid))
    dropped = []
    reclass = e._reclass

    def counted(p, add):
        if not add:
            dropped.append(p)
        reclass(p, add)

    e._reclass = counted
    done = run_all(b)
    assert len(done) == mid
    assert len(seen) > 30 and max(seen) >= 8
    if idle_paths == "rent":
        assert len(dropped) >= 5
    assert not e._live and all(c.nflows == 0 and c.load == 0.0 for c in e._classes.values())


def _rail_group(size_bytes: int):
    """A backend with one group flow of 8 copies h0_i -> h1_i (leaf 0 -> leaf 1, rails pinned), started."""
    topo = leaf_spine(leaves=2, spines=2, hosts_per_leaf=8, rate_gbps=100.0, uplink_gbps=400.0)
    b = FlowBackend(topo, NetworkConfig(ecmp="rail"), engine="python")
    imgs = tuple((f"h0_{i}", f"h1_{i}") for i in range(1, 8))
    assert b.send_group(Message(1, "h0_0", "h1_0", size_bytes, 0), imgs)
    b.advance(1)
    (f,) = b._rates._live.values()
    return b, f


def test_a_group_over_many_links_is_a_few_constraints():
    """8 copies leaf0 -> leaf1 over rail-pinned paths: 8 uplinks, 8 downlinks, leaf-spine links with the
    copies that share them. Alone, its links of one capacity and one copy count are one class each, so
    it is as many constraints as distinct (capacity, copies) pairs on its path (counted here by hand
    from the links), not one per link; a second flow on one host uplink splits off just that link."""
    b, f = _rail_group(10_000_000)
    pairs = {(b._cap[l], w) for l, w in zip(f.path.links, f.path.w)}
    assert len(f.path.links) >= 18
    assert len(f.path.classes) == len(pairs) <= 4
    assert f.rate * 8 == pytest.approx(100.0)  # each copy at its host link's rate
    b.send(Message(2, "h0_3", "h0_5", 10_000_000, 2))  # shares h0_3's uplink only
    b.advance(3)
    assert len(f.path.classes) == len(pairs) + 1
    assert b.rates_gbps() == pytest.approx({1: 50.0, 2: 50.0})
    _check_classes(b)
    run_all(b)


def test_an_idle_path_pays_rent_for_the_classes_it_splits(monkeypatch):
    """A long group (8 copies, rail-pinned, leaf 0 -> leaf 1) and a short flow h0_3 -> h0_5 that shares
    one link with it (h0_3's uplink). Once the short flow drains, its path stays registered, idle, and
    keeps that link in a class of its own: every refill of the group visits it. Each refill (charging
    on every one here) adds 1 / (idle paths in the class) = 1 to the idle path's rent; at 1.4 visits a
    link its 2 links make 2.8, so it is dropped at the third refill, not before, and h0_3's uplink
    merges back into the class of the group's other host links."""
    monkeypatch.setattr(flow_mod, "_RENT_CLASSES", 0)
    monkeypatch.setattr(flow_mod, "_RENT_SAMPLE", 1)
    b, g = _rail_group(100_000_000)
    alone = len(g.path.classes)
    b.send(Message(2, "h0_3", "h0_5", 10_000, 2))
    b.advance(3)
    e = b._rates
    (q,) = [f.path for f in e._live.values() if b._flows[f.seq][0].id == 2]
    assert len(q.links) == 2 and len(g.path.classes) == alone + 1
    refills = []
    refill = e._refill

    def counted(seeds, t):
        refill(seeds, t)
        if g.seq in e._live and g.fm == e._pass:  # the group was filled in this call's last pass
            refills.append((q.registered, q.rent))

    e._refill = counted
    while any(b._flows[f.seq][0].id == 2 for f in e._live.values()):
        b.advance()
    assert refills == [(True, 1.0)]  # its drain gave the group its share back
    # a flow into h1_6 (the group's copy 6 arrives there) pulls the group into two more fillings, at its
    # start and its drain; its own path splits no class of q's link
    b.send(Message(3, "h1_2", "h1_6", 10_000, b.now_ns + 10))
    while b.pending() > 1:
        b.advance()
    assert refills == [(True, 1.0), (True, 2.0), (False, 3.0)]
    # h0_3's uplink is back in the class of the group's other links; the new idle path splits h1_6's
    # downlink now, with the one refill since its drain as its rent
    (r,) = e._idle
    assert r.rent == 1.0 and len(g.path.classes) == alone + 1
    assert b.rates_gbps() == pytest.approx({1: 100.0})
