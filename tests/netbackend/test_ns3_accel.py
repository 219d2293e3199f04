"""network.acceleration auto (netbackend/ns3/accel.py) against plain packet level.

Expected values come from the packet-level run of the same case (``mode: off``, the reference)
and, for a lone flow, from the store-and-forward train formula of scenarios.py (an independent
per-packet recurrence).  Targets (issue 12): FCT p50/p99 within 5 %, completion of the whole set
within 1 %.
"""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

import test_ns3_conformance as ns3conf  # noqa: E402
from conformance import BackendConformance, leaf_spine, run_all, star  # noqa: E402

from netbackend import Message  # noqa: E402
from netbackend.config import NetworkConfig  # noqa: E402
from hscommon.errors import UserError  # noqa: E402
from netbackend.ns3 import create_ns3_backend  # noqa: E402
from netbackend.ns3.accel import AcceleratedNs3Backend  # noqa: E402
from netbackend.ns3.scenarios import store_and_forward_ns  # noqa: E402

pytestmark = pytest.mark.ns3
AUTO = {"mode": "auto"}


def cfg(mode: str = "auto", cc: str = "dcqcn", rng_run: int = 1, **acc) -> NetworkConfig:
    return NetworkConfig(backend="ns3", cc=cc, rng_run=rng_run, acceleration={"mode": mode, **acc})


def run(topo, msgs, mode: str, cc: str = "dcqcn", seed: int = 0, rng_run: int = 1, **acc):
    with create_ns3_backend(topo, cfg(mode, cc, rng_run, **acc), seed) as b:
        for m in msgs:
            b.send(m)
        done = run_all(b)
        st = b.stats()
    return done, st


def pct(vals, q):
    s = sorted(vals)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


class TestAccelConformance(BackendConformance):
    backend_name = "ns3"

    def config(self) -> NetworkConfig:
        return NetworkConfig(backend="ns3", cc="none", acceleration=AUTO)


class TestAccelDcqcnConformance(ns3conf.TestNs3DcqcnConformance):
    def config(self) -> NetworkConfig:
        return NetworkConfig(backend="ns3", cc="dcqcn", acceleration=AUTO)


def test_auto_builds_the_wrapper_and_off_does_not():
    with create_ns3_backend(star(2), cfg("auto")) as b:
        assert isinstance(b, AcceleratedNs3Backend)
    with create_ns3_backend(star(2), cfg("off")) as b:
        assert not isinstance(b, AcceleratedNs3Backend)


@pytest.mark.parametrize("size,step", [(5_000_000, 0), (5_000_001, 524_288), (3_000, 0), (1_048_576, 524_288)])
def test_lone_flow_equals_packet_level(size, step):
    topo = leaf_spine(2, 2, 2)  # h0_0 -> leaf0 -> spine -> leaf1 -> h1_1: four store-and-forward hops
    m = Message(1, "h0_0", "h1_1", size, 1000, connection=0, step_bytes=step)
    off, _ = run(topo, [m], "off")
    auto, st = run(topo, [m], "auto")
    c = cfg()
    wire = c.mtu_bytes + c.header_bytes
    pkts = []  # packets never span work requests (rdma-nic.h)
    for off_b in range(0, size, step or size):
        chunk = min(step or size, size - off_b)
        full, rest = divmod(chunk, c.mtu_bytes)
        pkts += [wire] * full + ([rest + c.header_bytes] if rest else [])
    lat = c.per_hop_latency_ns  # each of the three switches adds its pipeline latency
    analytic = 1000 + store_and_forward_ns(pkts, [100.0] * 4, [1000, 1000 + lat, 1000 + lat, 1000 + lat])
    assert abs(auto[1] - analytic) <= 2
    assert abs(auto[1] - off[1]) <= 2
    acc = st.extra["acceleration"]
    assert acc["bytes_closed_form"] == size and acc["bytes_packet_level"] == 0
    assert st.extra["packet_hops"] == 0
    assert st.link_bytes[("h0_0", "leaf0")] == sum(pkts)


def test_two_connections_of_one_nic_share_it_round_robin():
    topo = leaf_spine(2, 2, 2)
    msgs = [Message(1, "h0_0", "h1_1", 5_000_000, 0, connection=0), Message(2, "h0_0", "h1_0", 3_000_000, 100_000,
                                                                              connection=1)]
    off, _ = run(topo, msgs, "off")
    auto, st = run(topo, msgs, "auto")
    assert st.extra["acceleration"]["messages_closed_form"] == 2
    for k in off:
        assert abs(auto[k] - off[k]) / off[k] <= 0.001


def test_flow_joining_hands_back_and_stays_within_target():
    topo = leaf_spine(2, 2, 2)
    msgs = [Message(1, "h0_0", "h1_1", 5_000_000, 0), Message(2, "h0_1", "h1_1", 3_000_000, 100_000)]
    off, _ = run(topo, msgs, "off")
    auto, st = run(topo, msgs, "auto")
    acc = st.extra["acceleration"]
    assert acc["handbacks"] == 1 and acc["flows_handed_back"] == 1
    assert 0 < acc["bytes_closed_form"] < 5_000_000
    assert acc["bytes_closed_form"] + acc["bytes_packet_level"] == 8_000_000
    for k, m in zip((1, 2), msgs):
        assert abs(auto[k] - off[k]) / (off[k] - m.start_ns) <= 0.05
    assert st.extra["cnps_sent"] > 0  # the shared port congested at packet level


def test_incast_never_qualifies_and_says_so():
    msgs = [Message(i, f"h{i}", "h0", 1_000_000, 0) for i in range(1, 4)]
    auto, st = run(star(4), msgs, "auto")
    off, _ = run(star(4), msgs, "off")
    acc = st.extra["acceleration"]
    # the first flow starts alone and is handed back before the others reach its port
    assert acc["fallback_packet_level"] or acc["bytes_closed_form"] <= 2 * (1 + 4096)
    assert auto == off or max(abs(auto[k] - off[k]) / off[k] for k in off) <= 0.01


def test_fallback_flag_when_nothing_qualifies():
    topo = leaf_spine(2, 2, 2)
    slow = cfg().model_copy(update={"transport": cfg().transport.model_copy(update={"max_outstanding_steps": 1})})
    with create_ns3_backend(topo, slow) as b:  # one 4 KiB step in flight cannot cover the BDP: no closed form
        b.send(Message(1, "h0_0", "h1_1", 1_000_000, 0, connection=0, step_bytes=4096))
        run_all(b)
        acc = b.stats().extra["acceleration"]
    assert acc["fallback_packet_level"] and "packet level" in acc["note"]
    assert acc["not_qualified"] == {"step credits would throttle": 1}


def _random_case(seed: int):
    rng = random.Random(seed)
    # one spine: a single shortest path per pair, so the partitions do not depend on the ns-3
    # switches' ECMP choice agreeing with netbackend.routing.Router's
    topo = leaf_spine(rng.choice([2, 3]), 1, rng.choice([2, 3]))
    hosts = topo.hosts
    msgs = []
    for i in range(rng.randint(6, 10)):
        src, dst = rng.sample(hosts, 2)
        msgs.append(Message(i, src, dst, rng.choice([200_000, 1_000_000, 3_000_000]), rng.randrange(0, 400_000),
                            flow_key=rng.randrange(4), connection=rng.randrange(-1, 2), step_bytes=524_288))
    return topo, msgs


@pytest.mark.parametrize("seed", [1, 2, 3, 5, 8])
def test_random_fabrics_fct_within_target(seed):
    """Without congestion control the packet-level answer is a deterministic function of the
    flow set, so on/off must agree message set by message set.  (With DCQCN the per-message
    FCT of contending flows depends on which packets the switches' random ECN draws mark: plain
    packet level alone moves a message's FCT by 2.5x and the set's completion by 4 % between
    seeds, so a fixed-seed per-message comparison measures that noise, not the acceleration;
    benchmarks/bench_ns3_accel.py compares distributions.)"""
    topo, msgs = _random_case(seed)
    off, _ = run(topo, msgs, "off", cc="none")
    auto, st = run(topo, msgs, "auto", cc="none")
    assert st.extra["acceleration"]["bytes_closed_form"] > 0
    start = {m.id: m.start_ns for m in msgs}
    fo = [off[k] - start[k] for k in off]
    fa = [auto[k] - start[k] for k in off]
    for q in (0.5, 0.99):
        assert abs(pct(fa, q) - pct(fo, q)) / pct(fo, q) <= 0.05
    assert abs(max(auto.values()) - max(off.values())) / max(off.values()) <= 0.01


def test_deterministic():
    topo, msgs = _random_case(7)
    a, sa = run(topo, msgs, "auto", seed=3)
    b, sb = run(topo, msgs, "auto", seed=3)
    assert a == b
    assert sa.link_bytes == sb.link_bytes
    assert sa.extra["acceleration"]["bytes_closed_form"] == sb.extra["acceleration"]["bytes_closed_form"]


@pytest.mark.parametrize("acc", [{"mode": "off"}, AUTO, {**AUTO, "collisions": "fluid"}, {**AUTO, "memoize": True},
                                 {**AUTO, "fast_forward": True}],
                         ids=["off", "auto", "fluid", "memoize", "fast_forward"])
def test_link_bytes_hold_every_byte_sent(acc):
    """network.json's per-link bytes, however the bytes were carried: a host's link to its leaf carries at least the
    wire bytes of every message it sends, the link from its leaf at least those it receives (ACKs and CNPs come on
    top at packet level), and every data byte that entered a switch left it (the last ACKs may still be on their
    way: less than a data packet).  Fast-forwarded bytes and the fluid model's on a NIC's own link were once on
    no link (a host's uplink read 8.4 of 22.7 MB), and a handed-back message dropped its started packet's rest."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_ns3_accel import traffic_messages, traffic_topology

    topo = traffic_topology()
    msgs = traffic_messages(topo, 1)
    c = NetworkConfig(backend="ns3", cc="dcqcn", ecmp="hash", acceleration=acc)
    with create_ns3_backend(topo, c, 1) as b:
        for m in msgs:
            b.send(m)
        run_all(b)
        st = b.stats()
    if acc != {"mode": "off"}:
        a = st.extra["acceleration"]
        assert a["bytes_closed_form"] + a["bytes_fluid"] + a["bytes_fast_forwarded"] + a["bytes_replayed"] > 0
    assert_links_hold(topo, msgs, st, c)


def assert_links_hold(topo, msgs, st, c: NetworkConfig) -> None:
    """Every host's links hold the wire bytes it sends and receives; every switch passes on what it takes in."""
    from collections import Counter

    from netbackend.ns3.scenarios import wire_bytes

    sent, received = Counter(), Counter()
    for m in msgs:
        w = sum(wire_bytes(m.size_bytes, c))
        sent[m.src] += w
        received[m.dst] += w
    lb = st.link_bytes
    for (a, z), v in lb.items():
        if a in sent:
            assert v >= sent[a] - 1, (a, z, v, sent[a])
        if z in received:
            assert v >= received[z] - 1, (a, z, v, received[z])
    for s in topo.switches:
        into = sum(v for (a, z), v in lb.items() if z == s)
        out = sum(v for (a, z), v in lb.items() if a == s)
        assert abs(into - out) < c.mtu_bytes, (s, into, out)


def test_unsupported_cc_is_one_field_error():
    with pytest.raises(UserError) as err:
        create_ns3_backend(star(2), cfg("auto", cc="hpcc"))
    assert err.value.field == "network.cc" and err.value.value == "hpcc"


@pytest.mark.parametrize("sets,needles", [
    (["network.acceleration.theta=0"], ["network.acceleration.theta", "0"]),
    (["network.acceleration.window_packets=0"], ["network.acceleration.window_packets", "0"]),
    (["network.cc=hpcc", "network.acceleration.mode=auto"], ["network.cc", "hpcc"]),
    (["network.acceleration.memoize=sometimes"], ["network.acceleration.memoize", "sometimes"]),
])
def test_cli_bad_acceleration_is_one_line(tmp_path, sets, needles):
    out = tmp_path / "res"
    args = [sys.executable, "-m", "heterosim", "run", "scenarios/quickstart.yaml", "--backend", "ns3", "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=root, timeout=300)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "quickstart.yaml" in lines[0]
    for n in needles:
        assert n in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("ecmp", [
    "rail",
    "hash",
])
def test_partitions_see_the_paths_ns3_takes(ecmp):
    """The partitions are only right if the ports a flow uses are the ones ns-3 forwards it on."""
    from netbackend.routing import Router

    topo = leaf_spine(2, 4, 2)
    c = NetworkConfig(backend="ns3", cc="none", ecmp=ecmp)
    router = Router(topo, mode=ecmp, seed=0)
    for key in range(6):
        with create_ns3_backend(topo, c, 0) as b:
            b.send(Message(1, "h0_0", "h1_1", 100_000, 0, flow_key=key))
            run_all(b)
            used = {link for link, n in b.stats().link_bytes.items() if n > 50_000}
        path = router.path("h0_0", "h1_1", key)
        assert used == set(zip(path, path[1:]))


def test_packet_level_after_a_long_closed_form_stretch_is_no_stall():
    """ns-3 idles while flows are computed in closed form; its clock must follow, or its
    watchdog reads the gap before the next packet-level flow as no progress."""
    c = cfg()
    with create_ns3_backend(leaf_spine(2, 2, 2), c) as b:
        b.send(Message(1, "h0_0", "h1_1", 1_000_000, 0))
        run_all(b)
        t = 2 * c.stall_limit_ns
        b.send(Message(2, "h0_0", "h1_1", 1_000_000, t))
        b.send(Message(3, "h0_1", "h1_1", 1_000_000, t))  # same last port: packet level
        done = run_all(b)
        acc = b.stats().extra["acceleration"]
    assert set(done) == {2, 3} and acc["messages_packet_level"] == 2


def test_connection_slowed_by_an_incast_recovers_in_closed_form():
    """After an incast cut its rate, a lone message on the same connection follows DCQCN's
    increase-timer trajectory (read from ns-3, replayed in closed form) as packet level does."""
    msgs = [Message(1, "h1", "h0", 1_000_000, 0, connection=0), Message(2, "h2", "h0", 1_000_000, 0, connection=0),
            Message(3, "h1", "h0", 20_000_000, 700_000, connection=0)]
    off, st_off = run(star(4), msgs, "off")
    auto, st = run(star(4), msgs, "auto")
    acc = st.extra["acceleration"]
    assert st_off.extra["cnps_sent"] > 0
    assert acc["messages_rate_limited"] == 1, acc
    alone_line_ns = 20_000_000 * 8 / 100 * (1 + cfg().header_bytes / cfg().mtu_bytes)
    assert off[3] - 700_000 > 1.05 * alone_line_ns  # the cut really slowed the packet-level run
    assert abs(auto[3] - off[3]) / (off[3] - 700_000) <= 0.001


def test_partitions_of_two_nics_share_a_port_that_fits_both():
    """Two NICs, each splitting its line rate over two QPs, meet on the switch port to h0 at
    exactly its rate: no queue builds, so every flow keeps its NIC share, as packet level says."""
    msgs = [Message(1, "h1", "h0", 4_000_000, 0, connection=0), Message(2, "h1", "h3", 4_000_000, 0, connection=1),
            Message(3, "h2", "h0", 4_000_000, 0, connection=0), Message(4, "h2", "h3", 4_000_000, 0, connection=1)]
    off, st_off = run(star(4), msgs, "off")
    auto, st = run(star(4), msgs, "auto", share_ports=True)
    acc = st.extra["acceleration"]
    assert st_off.extra["ecn_marks"] == 0
    _, st_default = run(star(4), msgs, "auto")  # off by default (config.py says why)
    assert st_default.extra["acceleration"]["bytes_packet_level"] > 0
    assert acc["messages_closed_form"] == 4 and acc["bytes_packet_level"] == 0, acc
    # round robin of two QPs per NIC taken as a fluid half each: the flows of one NIC end within
    # a couple of packets of each other at packet level, together in the fluid share
    packet_ns = (cfg().mtu_bytes + cfg().header_bytes) * 8 / 100
    for k in off:
        assert abs(auto[k] - off[k]) <= 3 * packet_ns, (off, auto)


def test_a_partition_whose_rate_rises_past_a_shared_port_goes_back_to_packet_level():
    """When h1's short flow ends, its other QP doubles its rate on the port it shares with h2:
    the port no longer fits both, so both partitions are handed back to packet level.  From there
    both modes run the same 2-to-1 DCQCN incast at packet level, whose FCTs move with the RED draws
    (packet level alone, draws 1-6: message 2 in 1.25-1.57 ms), so each mode's mean over six draws
    (network.rng_run) is compared, per message."""
    msgs = [Message(1, "h1", "h3", 1_000_000, 0, connection=1), Message(2, "h1", "h0", 8_000_000, 0, connection=0),
            Message(3, "h2", "h0", 8_000_000, 0, connection=0), Message(4, "h2", "h3", 8_000_000, 0, connection=1)]

    def mean_fct(mode: str, **acc) -> dict[int, float]:
        tot = dict.fromkeys((m.id for m in msgs), 0.0)
        for k in range(1, 7):
            done, st = run(star(4), msgs, mode, rng_run=k, **acc)
            if mode == "auto":
                a = st.extra["acceleration"]
                assert a["handbacks_over_capacity"] >= 1 and a["bytes_packet_level"] > 0, a
            for m in msgs:
                tot[m.id] += (done[m.id] - m.start_ns) / 6
        return tot

    off, auto = mean_fct("off"), mean_fct("auto", share_ports=True)
    for m in msgs:
        assert abs(auto[m.id] - off[m.id]) / off[m.id] <= 0.05, (off, auto)


def test_packet_level_tails_migrate_to_closed_form_once_their_ports_are_free():
    """h1 and h2 meet on the port to h0 (packet level, DCQCN cuts); when h2's message ends, the
    unsent steps of h1's queued messages leave ns-3 and finish in closed form at h1's DCQCN rate."""
    msgs = [Message(1, "h2", "h0", 2_000_000, 0, connection=0, step_bytes=524_288)]
    msgs += [Message(10 + i, "h1", "h0", 4_000_000, 0, connection=0, step_bytes=524_288) for i in range(6)]
    off, st_off = run(star(4), msgs, "off")
    auto, st = run(star(4), msgs, "auto")
    acc = st.extra["acceleration"]
    assert st_off.extra["cnps_sent"] > 0
    assert acc["migrations"] >= 1 and acc["bytes_migrated"] >= 4 * 4_000_000, acc
    assert acc["bytes_packet_level"] + acc["bytes_closed_form"] == sum(m.size_bytes for m in msgs)
    assert st.extra["packet_hops"] < 0.6 * st_off.extra["packet_hops"]
    _, st_kept = run(star(4), msgs, "auto", migrate=False)
    assert st_kept.extra["acceleration"]["migrations"] == 0
    for k, m in zip(sorted(off), sorted(msgs, key=lambda m: m.id)):
        assert abs(auto[k] - off[k]) / (off[k] - m.start_ns) <= 0.05, (k, off, auto)
    assert abs(max(auto.values()) - max(off.values())) / max(off.values()) <= 0.01


# ------------------------------------------------------------------ steady-state fast-forward
FF = {"fast_forward": True, "theta": 0.02, "window_packets": 512}
INCAST_FF = [Message(1, "h0", "h3", 50_000_000, 0, connection=0, step_bytes=524_288),
             Message(2, "h1", "h3", 50_000_000, 0, connection=0, step_bytes=524_288),
             Message(3, "h2", "h3", 12_500_000, 3_000_000, connection=0, step_bytes=524_288)]


def test_fast_forward_skips_packets_and_delivers_every_byte():
    """A 2-to-1 incast settles; message 3 joins during the fast-forward (an interrupt) and the
    survivors go back to ns-3.  Every byte is accounted once (packet level + fast-forwarded +
    closed form = the messages' sizes) and fewer packets are simulated than at packet level."""
    off, st_off = run(star(4), INCAST_FF, "off")
    got, st = run(star(4), INCAST_FF, "auto", **FF)
    a = st.extra["acceleration"]
    assert set(got) == set(off)
    assert a["fast_forwards"] >= 2 and a["bytes_fast_forwarded"] > 0
    assert a["bytes_packet_level"] + a["bytes_fast_forwarded"] + a["bytes_closed_form"] == sum(
        m.size_bytes for m in INCAST_FF)
    assert st.extra["packet_hops"] < st_off.extra["packet_hops"] / 2
    assert a["extrapolated_counters"]["ecn_marks"] >= 0 and "how" in a["extrapolated_counters"]
    # no accuracy claim here (opt-in until it meets issue 12's targets;
    # docs/packet-level-acceleration.md has the figures),
    # but physics holds: h3's port cannot deliver the incast faster than its line rate
    from conformance import RATE_GBPS
    assert max(got.values()) >= sum(m.size_bytes for m in INCAST_FF) * 8 / RATE_GBPS


def test_fast_forward_is_deterministic():
    a, _ = run(star(4), INCAST_FF, "auto", **FF)
    b, _ = run(star(4), INCAST_FF, "auto", **FF)
    assert a == b


def test_fast_forward_never_starts_on_short_windows_of_unsteady_flows():
    """Messages too short for four windows at their rate are never fast-forwarded."""
    msgs = [Message(i, f"h{i}", "h3", 200_000, 0, connection=0) for i in range(3)]
    _, st = run(star(4), msgs, "auto", **FF)
    assert st.extra["acceleration"]["fast_forwards"] == 0


# ------------------------------------------------------------------ memoization
GAP_NS = 100_000_000
"""Between rounds: DCQCN's alpha decays by (1 - 1/256) per 1 us period without a CNP (the dcqcn
preset), so 100 ms leave (255/256)^100000 of it, far below SETTLED_ALPHA: the QPs are settled."""


def incast_rounds(rounds: int = 6, extra: list[Message] | None = None) -> list[Message]:
    """The same 2-to-1 incast every GAP_NS (as a pipeline send repeats every micro-batch)."""
    msgs = []
    for r in range(rounds):
        msgs += [Message(2 * r + 1, "h0", "h3", 4_000_000, r * GAP_NS, connection=0, step_bytes=524_288),
                 Message(2 * r + 2, "h1", "h3", 4_000_000, r * GAP_NS, connection=0, step_bytes=524_288)]
    return msgs + (extra or [])


def test_packet_level_messages_added_ahead_of_their_start_are_not_a_stall():
    """A message added for 100 ms later is not in flight meanwhile (the watchdog once said
    "no progress" at 50 ms)."""
    msgs = [Message(1, "h0", "h3", 1_000_000, 0), Message(2, "h1", "h3", 1_000_000, GAP_NS)]
    done, _ = run(star(4), msgs, "off")
    assert done[2] >= GAP_NS + 1_000_000 * 8 / 100


def test_memo_replays_a_repeating_incast_within_target():
    """Round 1 starts on fresh QPs (alpha = 1 at the first CNP), round 2 on settled ones: two
    recordings; rounds 3-6 repeat round 2's key and are replayed.  Against packet level, which
    itself varies from round to round (random ECN marking), every FCT is within issue 12's 5 % (a
    replayed one of packet level's mean for its sender),
    each replayed round within packet level's own spread, ECN marks within 10 %; fewer than half the
    packets are simulated."""
    msgs = incast_rounds()
    off, st_off = run(star(4), msgs, "off")
    _, st_auto = run(star(4), msgs, "auto")
    got, st = run(star(4), msgs, "auto", memoize=True)
    a = st.extra["acceleration"]
    assert (a["memo_recorded"], a["memo_hits"], a["messages_replayed"]) == (2, 4, 8)
    assert a["bytes_packet_level"] + a["bytes_closed_form"] + a["bytes_replayed"] == sum(m.size_bytes for m in msgs)
    assert a["replay_state_mismatch"] == 0 and a["memo_interrupts"] == 0
    assert_links_hold(star(4), msgs, st, cfg("auto"))  # (the replayed rounds' bytes too)
    # Rounds 1-2 run at packet level in both: each FCT within 5 %.  A replayed message (rounds 3-6)
    # repeats one realization of random marking, so it is held to packet level's expected FCT for
    # its sender, the mean over the settled rounds 2-6, not to one other draw (the rounds' own FCTs
    # spread by 6 %: 891-938 us for h1 with the pacing fix).
    fct = {m.id: off[m.id] - m.start_ns for m in msgs}
    expected = {s: sum(fct[m.id] for m in msgs if m.src == s and m.start_ns >= GAP_NS) / 5 for s in ("h0", "h1")}
    for m in msgs:
        ref = fct[m.id] if m.start_ns < 2 * GAP_NS else expected[m.src]
        assert abs(got[m.id] - m.start_ns - ref) <= 0.05 * ref, m.id
    # Each replayed round is off by no more than packet level's own rounds differ among themselves
    # (the rounds' total: test_memo_round_total_is_one_draw below).
    ends = round_ends(off, got)
    spread = max(ends["off"][1:]) - min(ends["off"][1:])
    assert all(abs(m - o) <= spread for m, o in zip(ends["memo"][2:], ends["off"][2:]))
    assert abs(st.extra["ecn_marks"] - st_off.extra["ecn_marks"]) <= 0.10 * st_off.extra["ecn_marks"]
    assert a["replayed_counters"]["ecn_marks"] > 0
    assert st.extra["packet_hops"] < st_auto.extra["packet_hops"] / 2


def round_ends(off: dict, got: dict) -> dict[str, list[int]]:
    """Each round's last completion after its start, packet level ('off') and with memo."""
    return {name: [max(d[2 * r + 1], d[2 * r + 2]) - r * GAP_NS for r in range(6)] for name, d in
            (("off", off), ("memo", got))}


def test_memo_round_total_is_one_draw():
    """Rounds run one after another like the steps of an iteration: their total within 1 %.

    The memo replays one packet-level draw of random marking, so the total is as near as its
    recorded round is to packet level's mean round: 0.5 % above here (+0.4 % in all).  Before
    pacing followed DCQCN's rate changes (rdma-nic.cc, Repace) round 2 was 2 % above and the
    total 1.7 % over; averaging several recordings is not built."""
    msgs = incast_rounds()
    off, _ = run(star(4), msgs, "off")
    got, _ = run(star(4), msgs, "auto", memoize=True)
    ends = round_ends(off, got)
    assert abs(sum(ends["memo"]) - sum(ends["off"])) <= 0.01 * sum(ends["off"])


def test_memo_replay_interrupted_goes_back_to_packet_level():
    """A third sender joins round 4 (a replay) 300 us in, which its script does not have: the
    replayed messages post what they had not delivered by then to ns-3, the entry is dropped,
    round 5 records afresh and round 6 replays it.  Every byte arrives once, and no message of
    round 4 ends before h3's port could carry the round at line rate."""
    late = Message(100, "h2", "h3", 2_000_000, 3 * GAP_NS + 300_000, connection=0, step_bytes=524_288)
    msgs = incast_rounds(extra=[late])
    got, st = run(star(4), msgs, "auto", memoize=True)
    a = st.extra["acceleration"]
    assert (a["memo_interrupts"], a["memo_recorded"], a["memo_hits"]) == (1, 3, 3)
    assert set(got) == {m.id for m in msgs}
    assert a["bytes_packet_level"] + a["bytes_closed_form"] + a["bytes_replayed"] == sum(m.size_bytes for m in msgs)
    from conformance import RATE_GBPS
    assert max(got[7], got[8], got[100]) - 3 * GAP_NS >= (2 * 4_000_000 + 2_000_000) * 8 / RATE_GBPS


def test_memo_episode_follows_its_script():
    """A flow through h3's port 100 us into round 2 joins that recording (its script).  Round 3
    starts alike but the flow does not come: one ns after its scripted start the replay goes back
    to ns-3, with the bytes and DCQCN state the recording had there; round 4 records again, rounds
    5-6 replay.  Judged as issue 12 judges (FCT p50 / p99 within 5 %, the rounds' total within
    1 %): per message, packet level's own rounds split the port unevenly at random (853 / 908 us
    in round 3, ECN marking is random), so a single message is no measure."""
    touch = Message(100, "h2", "h3", 500_000, GAP_NS + 100_000, connection=0)
    msgs = incast_rounds(extra=[touch])
    off, _ = run(star(4), msgs, "off")
    got, st = run(star(4), msgs, "auto", memoize=True)
    a = st.extra["acceleration"]
    assert (a["memo_recorded"], a["memo_hits"], a["memo_interrupts"]) == (3, 3, 1)
    assert a["memo_states_restored"] == 2
    assert a["bytes_packet_level"] + a["bytes_closed_form"] + a["bytes_replayed"] == sum(m.size_bytes for m in msgs)
    fo = [off[m.id] - m.start_ns for m in msgs]
    fg = [got[m.id] - m.start_ns for m in msgs]
    for q in (0.5, 0.99):
        assert abs(pct(fg, q) - pct(fo, q)) <= 0.05 * pct(fo, q), q
    ends = {name: [max(d[2 * r + 1], d[2 * r + 2]) - r * GAP_NS for r in range(6)] for name, d in
            (("off", off), ("memo", got))}
    assert abs(sum(ends["memo"]) - sum(ends["off"])) <= 0.01 * sum(ends["off"])


def test_connection_cc_state_saved_and_restored_with_its_timers():
    """RdmaNic::SaveConnectionCc / RestoreConnectionCc: mid-incast, connection h0->h3's DCQCN state
    copied onto h1->h3 reads back the same through ConnectionDcqcnState (RC, RT, stage, CNP seen,
    alpha, and the increase timer's expiry: the timers are re-armed, not just the numbers)."""
    msgs = [Message(1, "h0", "h3", 4_000_000, 0, connection=0, step_bytes=524_288),
            Message(2, "h1", "h3", 4_000_000, 0, connection=0, step_bytes=524_288)]
    with create_ns3_backend(star(4), cfg("off"), 0) as b:
        for m in msgs:
            b.send(m)
        b.advance(300_000)
        saved = b.save_connection_cc("h0", "h3", 0)  # (the public interface the accelerator uses)
        assert len(saved) == 16 and saved[9] == 1.0, "h0's QP has had CNPs 300 us into the incast"
        assert b.restore_connection_cc("h1", "h3", 0, saved)
        a = b.connection_dcqcn_state("h0", "h3", 0, True)
        c = b.connection_dcqcn_state("h1", "h3", 0, True)
        assert a and a == c
        assert not b.restore_connection_cc("h2", "h3", 0, saved), "no such connection"
        run_all(b)


def test_memo_is_deterministic():
    a, sa = run(star(4), incast_rounds(), "auto", memoize=True)
    b, sb = run(star(4), incast_rounds(), "auto", memoize=True)
    assert a == b and sa.extra["ecn_marks"] == sb.extra["ecn_marks"]
