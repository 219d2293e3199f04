"""Backend-agnostic conformance suite: what every network backend must do.

Reuse it by subclassing with a backend name (and optionally a config)::

    from conformance import BackendConformance

    class TestNs3Conformance(BackendConformance):
        backend_name = "ns3"

Tolerances are loose enough for a packet-level backend with real congestion
control (DCQCN): 2% on an idle path, 5% on sharing; topologies have <= 8 hosts.
"""
from __future__ import annotations

import random

import pytest

from netbackend import Link, Message, NetTopology, create_backend
from netbackend.config import NetworkConfig
from hscommon.errors import NetworkError, UserError

RATE_GBPS = 100.0
DELAY_NS = 1000


# ---------------------------------------------------------------- topology builders
def star(n: int = 4, rate_gbps: float = RATE_GBPS, delay_ns: int = DELAY_NS) -> NetTopology:
    """``n`` hosts h0.. on one switch s0."""
    hosts = [f"h{i}" for i in range(n)]
    return NetTopology(hosts=hosts, switches=["s0"], links=[Link(h, "s0", rate_gbps, delay_ns) for h in hosts])


def dumbbell(n_per_side: int = 2, rate_gbps: float = RATE_GBPS, core_gbps: float = RATE_GBPS,
             delay_ns: int = DELAY_NS) -> NetTopology:
    """Hosts l0.. on switch sl, r0.. on switch sr, one sl-sr link of ``core_gbps``."""
    left = [f"l{i}" for i in range(n_per_side)]
    right = [f"r{i}" for i in range(n_per_side)]
    links = [Link(h, "sl", rate_gbps, delay_ns) for h in left] + [Link(h, "sr", rate_gbps, delay_ns) for h in right]
    links.append(Link("sl", "sr", core_gbps, delay_ns))
    return NetTopology(hosts=left + right, switches=["sl", "sr"], links=links)


def leaf_spine(leaves: int = 2, spines: int = 2, hosts_per_leaf: int = 2, rate_gbps: float = RATE_GBPS,
               uplink_gbps: float = RATE_GBPS, delay_ns: int = DELAY_NS,
               host_name: str = "h{leaf}_{i}") -> NetTopology:
    """Two-tier Clos: hosts -> leaf{j} -> every spine{k}."""
    hosts, links = [], []
    for j in range(leaves):
        for i in range(hosts_per_leaf):
            h = host_name.format(leaf=j, i=i)
            hosts.append(h)
            links.append(Link(h, f"leaf{j}", rate_gbps, delay_ns))
        for k in range(spines):
            links.append(Link(f"leaf{j}", f"spine{k}", uplink_gbps, delay_ns))
    switches = [f"leaf{j}" for j in range(leaves)] + [f"spine{k}" for k in range(spines)]
    return NetTopology(hosts=hosts, switches=switches, links=links)


def ideal_ns(size_bytes: int, rate_gbps: float, cfg: NetworkConfig) -> float:
    """Serialisation time of a message's wire bytes (payload + per-packet headers) at ``rate_gbps``."""
    packets = -(-size_bytes // cfg.mtu_bytes)
    return (size_bytes + packets * cfg.header_bytes) * 8 / rate_gbps


def run_all(backend, until_ns: int | None = None) -> dict[int, int]:
    """Advance until nothing is pending; message id -> finish ns. Checks completion invariants."""
    out: dict[int, int] = {}
    while backend.pending():
        before = backend.now_ns
        done = backend.advance(until_ns)
        assert backend.now_ns >= before
        if not done:
            assert until_ns is not None, "advance(None) returned nothing with messages pending"
            break
        for c in done:
            assert c.finish_ns == backend.now_ns, "completions must be reported at their finish time"
            assert c.id not in out, f"message {c.id} completed twice"
            out[c.id] = c.finish_ns
    return out


class BackendConformance:
    """Subclass with ``backend_name = "..."``; override :meth:`config` to tune the backend."""

    backend_name: str = ""

    def config(self) -> NetworkConfig:
        return NetworkConfig(backend=self.backend_name)

    def make(self, topo: NetTopology, seed: int = 0):
        return create_backend(self.backend_name, topo, self.config(), seed)

    # ---------------------------------------------------------------- validate = build
    def test_check_config_refuses_what_the_constructor_refuses(self):
        """``check_config`` (what ``heterosim validate`` runs) accepts what builds, and raises the very error
        the constructor raises on a fabric the backend cannot build (a link to a node that does not exist)."""
        from netbackend.registry import backend_class

        cls = backend_class(self.backend_name)
        cls.check_config(star(2), self.config())  # a buildable fabric passes
        bad = NetTopology(hosts=["h0", "h1"], switches=["s0"],
                          links=[Link("h0", "s0", RATE_GBPS, DELAY_NS), Link("h1", "nowhere", RATE_GBPS, DELAY_NS)])
        try:
            self.make(bad).close()
        except UserError as err:
            built = str(err)
        else:
            built = None
        if built is None:  # the backend accepts it: check_config must too
            cls.check_config(bad, self.config())
        else:
            with pytest.raises(UserError) as exc:
                cls.check_config(bad, self.config())
            assert str(exc.value) == built

    # ---------------------------------------------------------------- single flows
    def test_single_flow_idle_path(self):
        cfg = self.config()
        size = 8_000_000
        with self.make(star(2)) as b:
            b.send(Message(7, "h0", "h1", size, 0))
            done = run_all(b)
        ideal = ideal_ns(size, RATE_GBPS, cfg)
        assert set(done) == {7}
        # Within 2% of wire-time, never faster than the wire (+ at least propagation).
        assert done[7] >= ideal + 2 * DELAY_NS - 1
        assert done[7] <= ideal * 1.02 + 50_000

    def test_single_flow_slower_link_is_bottleneck(self):
        cfg = self.config()
        size = 4_000_000
        with self.make(dumbbell(1, core_gbps=25.0)) as b:
            b.send(Message(1, "l0", "r0", size, 0))
            done = run_all(b)
        ideal = ideal_ns(size, 25.0, cfg)
        assert ideal <= done[1] <= ideal * 1.02 + 50_000

    def test_small_message_latency_is_bounded(self):
        with self.make(star(2)) as b:
            b.send(Message(1, "h0", "h1", 1000, 0))
            done = run_all(b)
        # 2 links of 1 us propagation; anything sane is within a few tens of us.
        assert 2 * DELAY_NS <= done[1] <= 50_000

    # ---------------------------------------------------------------- sharing
    def test_two_flows_share_bottleneck(self):
        cfg = self.config()
        size = 4_000_000
        with self.make(star(3)) as b:
            b.send(Message(1, "h0", "h2", size, 0))
            b.send(Message(2, "h1", "h2", size, 0))
            done = run_all(b)
        both = ideal_ns(2 * size, RATE_GBPS, cfg)
        last = max(done.values())
        assert both <= last <= both * 1.05 + 50_000
        assert abs(done[1] - done[2]) <= 0.05 * last + 10_000, "fair sharing: finish together"

    def test_disjoint_paths_do_not_interfere(self):
        cfg = self.config()
        size = 4_000_000
        with self.make(star(4)) as b:
            b.send(Message(1, "h0", "h1", size, 0))
            b.send(Message(2, "h2", "h3", size, 0))
            done = run_all(b)
        one = ideal_ns(size, RATE_GBPS, cfg)
        for mid in (1, 2):
            assert one <= done[mid] <= one * 1.02 + 50_000

    def test_shared_core_link_dumbbell(self):
        cfg = self.config()
        size = 2_000_000
        with self.make(dumbbell(2)) as b:
            b.send(Message(1, "l0", "r0", size, 0))
            b.send(Message(2, "l1", "r1", size, 0))
            done = run_all(b)
        both = ideal_ns(2 * size, RATE_GBPS, cfg)
        assert both <= max(done.values()) <= both * 1.05 + 50_000

    def test_cross_leaf_all_to_all_completes(self):
        cfg = self.config()
        topo = leaf_spine(2, 2, 2)
        size = 500_000
        with self.make(topo) as b:
            mid = 0
            for s in topo.hosts:
                for d in topo.hosts:
                    if s != d:
                        b.send(Message(mid, s, d, size, 0, flow_key=mid))
                        mid += 1
            done = run_all(b)
        assert len(done) == mid
        # Each NIC sends 3 messages: the last one can not finish before 3x its wire time.
        assert max(done.values()) >= 3 * ideal_ns(size, RATE_GBPS, cfg)

    # ---------------------------------------------------------------- bookkeeping
    def test_completion_order_and_ids(self):
        with self.make(star(6)) as b:
            sizes = {11: 3_000_000, 12: 1_000_000, 13: 2_000_000}
            for (mid, size), (s, d) in zip(sizes.items(), [("h0", "h1"), ("h2", "h3"), ("h4", "h5")]):
                b.send(Message(mid, s, d, size, 0))
            assert b.pending() == 3
            order = []
            while b.pending():
                order.extend(c.id for c in b.advance())
        assert order == [12, 13, 11]

    def test_advance_with_nothing_pending(self):
        with self.make(star(2)) as b:
            assert b.now_ns == 0
            assert b.advance() == []
            assert b.now_ns == 0
            assert b.advance(12_345) == []
            assert b.now_ns == 12_345
            assert b.pending() == 0

    def test_advance_until_stops_before_completion(self):
        with self.make(star(2)) as b:
            b.send(Message(1, "h0", "h1", 4_000_000, 0))
            assert b.advance(100_000) == []
            assert b.now_ns == 100_000
            assert b.pending() == 1
            done = run_all(b)
        assert done[1] > 100_000

    def test_message_started_in_future(self):
        cfg = self.config()
        size = 2_000_000
        t0 = 1_000_000
        with self.make(star(2)) as b:
            b.send(Message(5, "h0", "h1", size, t0))
            assert b.advance(t0 // 2) == []
            assert b.pending() == 1
            done = run_all(b)
        ideal = ideal_ns(size, RATE_GBPS, cfg)
        assert t0 + ideal <= done[5] <= t0 + ideal * 1.02 + 50_000

    def test_send_after_completion_at_now(self):
        with self.make(star(3)) as b:
            b.send(Message(1, "h0", "h1", 1_000_000, 0))
            (c,) = b.advance()
            b.send(Message(2, "h1", "h2", 1_000_000, b.now_ns))
            (c2,) = b.advance()
        assert c2.id == 2 and c2.finish_ns > c.finish_ns

    def test_deterministic(self):
        topo = leaf_spine(2, 2, 2)

        def once():
            rng = random.Random(3)
            with self.make(topo, seed=11) as b:
                for mid in range(40):
                    s, d = rng.sample(topo.hosts, 2)
                    b.send(Message(mid, s, d, rng.randint(1_000, 300_000), rng.randint(0, 50_000), flow_key=mid))
                return run_all(b)

        assert once() == once()

    def test_many_small_messages_complete(self):
        topo = star(8)
        rng = random.Random(1)
        with self.make(topo) as b:
            starts = {}
            for mid in range(200):
                s, d = rng.sample(topo.hosts, 2)
                starts[mid] = rng.randint(0, 200_000)
                b.send(Message(mid, s, d, rng.randint(64, 8192), starts[mid]))
            done = run_all(b)
            st = b.stats()
        assert set(done) == set(range(200))
        assert all(done[m] >= starts[m] + 2 * DELAY_NS for m in done)
        assert st.messages in (0, 200)  # a backend may not report stats, but if it does, all of them

    def test_stats_if_reported(self):
        with self.make(star(2)) as b:
            b.send(Message(1, "h0", "h1", 100_000, 0))
            done = run_all(b)
            st = b.stats()
        if st.messages:
            assert st.bytes_delivered == 100_000
            assert st.fct_ns[1] == (0, done[1])

    def test_link_bytes_if_reported(self):
        """Per-link bytes, where a backend reports them: a host's uplink carries at least the payload it sends
        (headers and control packets come on top), its downlink at least what it receives, and a switch passes
        on every data byte it takes in (control packets may still be on their way at the end: less than a
        packet)."""
        cfg = self.config()
        topo = leaf_spine(2, 2, 2)
        size = 300_000
        sent, received = {h: 0 for h in topo.hosts}, {h: 0 for h in topo.hosts}
        with self.make(topo) as b:
            mid = 0
            for s in topo.hosts:
                for d in topo.hosts:
                    if s != d:
                        b.send(Message(mid, s, d, size, 1_000 * mid, flow_key=mid))
                        sent[s] += size
                        received[d] += size
                        mid += 1
            run_all(b)
            lb = b.stats().link_bytes
        if not lb:
            return
        for (a, z), v in lb.items():
            if a in sent:
                assert v >= sent[a], (a, z, v, sent[a])
            if z in received:
                assert v >= received[z], (a, z, v, received[z])
        for sw in topo.switches:
            into = sum(v for (a, z), v in lb.items() if z == sw)
            out = sum(v for (a, z), v in lb.items() if a == sw)
            assert abs(into - out) < cfg.mtu_bytes, (sw, into, out)

    # ---------------------------------------------------------------- bad input
    @pytest.mark.parametrize("field", ["src", "dst"])
    def test_unknown_host(self, field):
        with self.make(star(2)) as b:
            kw = {"src": "h0", "dst": "h1", field: "nope"}
            with pytest.raises(NetworkError) as ei:
                b.send(Message(1, kw["src"], kw["dst"], 1000, 0))
        assert ei.value.field == f"message.{field}"
        assert ei.value.value == "nope"
        assert "nope" in str(ei.value)

    @pytest.mark.parametrize("size", [0, -5])
    def test_bad_size(self, size):
        with self.make(star(2)) as b:
            with pytest.raises(UserError):
                b.send(Message(1, "h0", "h1", size, 0))

    def test_start_in_past(self):
        with self.make(star(2)) as b:
            b.advance(1000)
            with pytest.raises(UserError):
                b.send(Message(1, "h0", "h1", 1000, 10))
