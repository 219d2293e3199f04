"""The ECMP contract that both backends implement (netbackend/routing.py docstring).

Known answers for the hash come from MurmurHash3_x86_32's published test
vectors: for an empty key the hash is fmix32(seed), and MurmurHash3_x86_32("",
seed=1) = 0x514E28B7, ("", seed=0xFFFFFFFF) = 0x81F16F39 (SMHasher's reference
implementation).  The ns-3 side is checked in test_ns3_switch.py.
"""
from __future__ import annotations

from netbackend import Link, NetTopology
from netbackend.routing import Router, ecmp_index, fmix32


def test_fmix32_matches_murmurhash3_test_vectors():
    assert fmix32(0) == 0
    assert fmix32(1) == 0x514E28B7
    assert fmix32(0xFFFFFFFF) == 0x81F16F39


def test_ecmp_index_is_fmix_of_hash_xor_salt_mod_n():
    assert ecmp_index(1, 0, 7) == 0x514E28B7 % 7
    assert ecmp_index(0xFFFFFFFE, 1, 5) == 0x81F16F39 % 5


def two_spines(order: list[str]) -> NetTopology:
    hosts = ["a", "b", "c", "d"]
    links = [Link("a", "l0", 100, 1000), Link("b", "l0", 100, 1000),
             Link("c", "l1", 100, 1000), Link("d", "l1", 100, 1000)]
    links += [Link(l, s, 100, 1000) for l in ("l0", "l1") for s in ("s0", "s1", "s2", "s3")]
    return NetTopology(hosts=[h for h in order], switches=["l0", "l1", "s0", "s1", "s2", "s3"], links=links)


def test_flow_hash32_is_32_bit_deterministic_and_order_free():
    r1 = Router(two_spines(["a", "b", "c", "d"]))
    r2 = Router(two_spines(["d", "c", "b", "a"]), seed=5)
    for key in (0, 1, 2**63 + 7):
        h = r1.flow_hash32("a", "c", key)
        assert 0 <= h < 2**32
        assert h == r2.flow_hash32("a", "c", key)  # names, not positions; seed only in the salts
    assert r1.flow_hash32("a", "c", 1) != r1.flow_hash32("a", "c", 2)
    assert r1.flow_hash32("a", "c", 1) != r1.flow_hash32("c", "a", 1)
    assert r1.switch_salt32("l0") != Router(two_spines(["a", "b", "c", "d"]), seed=1).switch_salt32("l0")


def test_router_picks_by_the_contract_and_spreads():
    topo = two_spines(["a", "b", "c", "d"])
    r = Router(topo, seed=3)
    # options at l0 towards c: links l0->s0..s3, in spine node order (all single links)
    lid = {(l.a, l.b): 2 * i for i, l in enumerate(topo.links)}
    options = [lid[("l0", s)] for s in ("s0", "s1", "s2", "s3")]
    hits = [0] * 4
    for key in range(4000):
        _, links = r.route("a", "c", key)
        want = ecmp_index(r.flow_hash32("a", "c", key), r.switch_salt32("l0"), 4)
        assert links[1] == options[want]
        hits[want] += 1
    assert min(hits) > 850  # 1000 expected per spine


def test_rail_mode_pins_nic_k_to_option_k_mod_n():
    hosts = [f"n{i}/nic{k}" for i in range(2) for k in range(4)]
    links = [Link(h, f"l{h[1]}", 100, 1000) for h in hosts]
    links += [Link(l, s, 100, 1000) for l in ("l0", "l1") for s in ("s0", "s1", "s2", "s3")]
    topo = NetTopology(hosts=hosts, switches=["l0", "l1", "s0", "s1", "s2", "s3"], links=links)
    r = Router(topo, mode="rail")
    for k in range(4):
        for key in range(8):
            assert r.path(f"n0/nic{k}", f"n1/nic{k}", key)[2] == f"s{k}"
