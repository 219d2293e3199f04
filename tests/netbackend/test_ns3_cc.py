"""Every congestion-control preset of the ns-3 backend against the behaviour its source describes.

Scenarios follow shared/network-reference.md: N -> 1 incast at 100 Gb/s over 1 us links on one
switch, PFC on (lossless), 4 KB MTU.  Steady state is the last 30% of the time before the first
flow finishes.  Targets come from the network-trust issue: no drops with PFC, Jain >= 0.99 in
steady state, the queue held where the CC puts it, a lone flow at line rate, and every main
parameter moving the result in the direction its definition says.
"""
from __future__ import annotations

import math
import subprocess
from typing import get_args

import pytest
from pydantic import ValidationError

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from netbackend import Link, Message, NetTopology  # noqa: E402
from netbackend.config import (CcKind, DcqcnConfig, HpccConfig, NetworkConfig, PfcConfig, SwiftConfig,  # noqa: E402
                               TimelyConfig, ecn_defaults, resolved_dcqcn)
from netbackend.ns3 import Ns3Backend, unit_test_command  # noqa: E402
from netbackend.ns3 import scenarios as sc  # noqa: E402

pytestmark = pytest.mark.ns3

CCS = get_args(CcKind)
RATE_BPS_PER_NS = 100 / 8  # bytes per ns at 100 Gb/s


def test_cxx_cc_unit_tests_pass():
    res = subprocess.run(unit_test_command(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("PASS HPCC utilization estimate and window update",
                 "PASS TIMELY gradient, Tlow and Thigh, hyper-active increase",
                 "PASS DCQCN vendor reaction point step by step",
                 "PASS DCQCN paper reaction point step by step",
                 "PASS DCTCP alpha, cut once per window, additive increase",
                 "PASS go-back-N with a dropped packet and a dropped retransmission",
                 "PASS RdmaNetDevice DataRate reads back"):
        assert name in res.stdout, res.stdout


# ------------------------------------------------------------------ a lone flow
@pytest.mark.parametrize("cc", CCS)
def test_lone_flow_runs_at_line_rate(cc):
    """Alone on an idle path no CC may slow a flow; HPCC by design paces at eta of the line."""
    cfg = NetworkConfig(backend="ns3", cc=cc)
    r = sc.single_flow(size_bytes=10_000_000, cfg=cfg)
    assert r["drops"] == 0
    if cc == "hpcc":
        assert abs(r["fct_ns"] - r["analytic_fct_ns"] / cfg.hpcc.eta) <= 0.01 * r["analytic_fct_ns"]
    else:
        assert r["fct_ns"] == pytest.approx(r["analytic_fct_ns"], abs=2), r


@pytest.mark.parametrize("cc,window", [("dctcp", False), ("dcqcn", True), ("timely", True)])
def test_windowed_cc_runs_a_lone_flow_at_line_rate_on_a_long_path(cc, window):
    """A window of one BDP of the fabric's own base RTT keeps a lone flow at line rate however long
    the path.  With 10 us links the RTT is ~41 us; the 10 us placeholder the NICs used outside HPCC
    held the flow to ~1/4 of the line (FCT 3.9x the store-and-forward value)."""
    r = sc.single_flow(size_bytes=10_000_000, delay_ns=10_000, cfg=NetworkConfig(backend="ns3", cc=cc,
                                                                                   cc_window=window))
    assert r["fct_ns"] == pytest.approx(r["analytic_fct_ns"], abs=2), r


# ------------------------------------------------------------------ incast
# Measured deviations from the Jain >= 0.99 target, kept visible (strict: a fix turns them red).
# HPCC: measured 2026-11-28 with maxStage 0 (the preset, the authors' simulator) and with the paper's
# printed maxStage 5 (test_hpcc_paper_max_stage_fairness below); neither reaches 0.99 at 4 or 8 flows.
# dcqcn_cx: ConnectX's byte counter (rpg_byte_reset 32,767 B: an increase event every 32 KB sent) keeps
# raising the flows that send most; with byte_counter_bytes=0 it is 1.0000 / 0.9939 / 0.9986 / 0.9978.
_UNFAIR = {
    ("hpcc", 4): "HPCC, paper's W_AI = 80 B, maxStage 0: Jain 0.564 (unequal windows persist; MIMD + small W_AI); "
                 "maxStage 5: 0.891",
    ("hpcc", 8): "HPCC, paper's W_AI = 80 B, maxStage 0: Jain 0.972; maxStage 5: 0.897",
    ("dcqcn_cx", 2): "ConnectX byte counter (32,767 B): Jain 0.9876",
    ("dcqcn_cx", 4): "ConnectX byte counter (32,767 B): Jain 0.9633",
    ("dcqcn_cx", 8): "ConnectX byte counter (32,767 B): Jain 0.9899",
    ("dcqcn_cx", 16): "ConnectX byte counter (32,767 B): Jain 0.8761",
}


def _incast_cases():
    for cc in CCS:
        for n in (2, 4, 8, 16):
            marks = [pytest.mark.xfail(strict=True, reason=_UNFAIR[(cc, n)])] if (cc, n) in _UNFAIR else []
            yield pytest.param(cc, n, marks=marks, id=f"{cc}-{n}")


@pytest.fixture(scope="module")
def incast_results():
    return {}


def _incast(cache, cc, n):
    if (cc, n) not in cache:
        size = 40_000_000 if n < 16 else 60_000_000  # long enough to reach steady state
        cache[(cc, n)] = sc.incast(n, size_bytes=size, cfg=NetworkConfig(backend="ns3", cc=cc))
    return cache[(cc, n)]


def _pauses_only_at_start_up(r, n) -> bool:
    """N senders starting together at line rate may fill the buffer to the PFC threshold before
    the first congestion signal returns; a CC that holds the queue pauses nothing after that,
    so pauses stay a sliver (< 1%) of the senders' time."""
    return r["pfc_paused_ns_total"] < 0.01 * n * r["first_finish_ns"]


def _window_bound_queue(n: int) -> float:
    """The most a DCTCP incast can queue before any mark: each sender has at most one BDP of the
    fabric's base RTT unacknowledged, plus the packet that crosses it (the NIC sends while below the
    window), and one BDP of all of it is on the wire, so the queue holds (N-1) W + N packets.

    Base RTT of sc.star_topology by hand (RdmaNetworkHelper::MaxBaseRtts): two 1 us links each way,
    the switch's 500 ns pipeline on the link it transmits, a 4,174 B data packet serialized per hop
    going and a 64 B ACK per hop returning, at 100 Gb/s."""
    cfg = NetworkConfig()
    pkt = cfg.mtu_bytes + cfg.header_bytes
    ser = lambda b: b * 8 / 100  # ns at 100 Gb/s
    rtt_ns = (1000 + ser(pkt)) + (1000 + cfg.per_hop_latency_ns + ser(pkt)) + \
             (1000 + ser(64)) + (1000 + cfg.per_hop_latency_ns + ser(64))
    w = 100e9 / 8 * rtt_ns * 1e-9
    return (n - 1) * w + n * pkt


def _star_base_rtt_ns() -> float:
    """Unloaded RTT of sc.star_topology by hand (as in _window_bound_queue), rounded up to the ns as the
    helper hands it to the NIC (RdmaNetworkHelper::MaxBaseRtts, then std::ceil)."""
    cfg = NetworkConfig()
    pkt = cfg.mtu_bytes + cfg.header_bytes
    ser = lambda b: b * 8 / 100  # ns at 100 Gb/s
    return math.ceil((1000 + ser(pkt)) + (1000 + cfg.per_hop_latency_ns + ser(pkt)) +
                     (1000 + ser(64)) + (1000 + cfg.per_hop_latency_ns + ser(64)))


def swift_queue_band(n: int) -> tuple[float, float]:
    """(low, high) bytes for the mean bottleneck queue of an N-sender Swift incast on sc.star_topology.

    Swift's target (Kumar et al. 2020, section 3.5) with the defaults of SwiftConfig: base_target = the
    unloaded RTT, so the queueing part is hops x h + max(0, min(alpha / sqrt(cwnd) + beta, fs_range)),
    one switch, alpha = fs_range / (1/sqrt(fs_min) - 1/sqrt(fs_max)), beta = -alpha / sqrt(fs_max).
    The window depends on the queue: the N flows share (base RTT + q) of line rate, so
    cwnd = C (base + q) / (8 x wire bytes x N) packets; the fixed point q* = h + fs(cwnd(q*)) is found by
    iteration.  Below q* the flows only grow, so the mean sits at or above it (less one packet of
    sampling); above it they cut at most once per RTT, and in the RTT before the first cut lands the N
    flows add ai packets each (Algorithm 1's additive increase, one per RTT): the mean stays within one
    RTT's additive increase, N x ai packets, above q*."""
    cfg, sw = NetworkConfig(), SwiftConfig()
    wire = cfg.mtu_bytes + cfg.header_bytes
    base = _star_base_rtt_ns()
    alpha = sw.fs_range_ns / (1 / math.sqrt(sw.fs_min_cwnd_packets) - 1 / math.sqrt(sw.fs_max_cwnd_packets))
    beta = -alpha / math.sqrt(sw.fs_max_cwnd_packets)
    q = float(sw.hop_scale_ns)
    for _ in range(200):
        cwnd = 100e9 * (base + q) * 1e-9 / 8 / wire / n
        q = sw.hop_scale_ns + max(0.0, min(alpha / math.sqrt(cwnd) + beta, sw.fs_range_ns))
    q_bytes = q * RATE_BPS_PER_NS
    return q_bytes - wire, q_bytes + n * sw.ai_packets * wire


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_incast_lossless_and_queue_where_the_cc_puts_it(cc, n, incast_results):
    r = _incast(incast_results, cc, n)
    assert r["drops"] == 0 and len(r["fct_ns"]) == n
    q = r["steady_queue_mean_bytes"]
    if cc in ("dcqcn", "dcqcn_cx"):  # RED band Kmin..Kmax (400 KB .. 1.6 MB at 100G)
        kmin, kmax, _ = ecn_defaults(100, cc)
        assert 0.5 * kmin * 1e3 <= q <= kmax * 1e3, q
        assert r["cnps"] > 0 and _pauses_only_at_start_up(r, n)
    elif cc == "dcqcn_paper":  # paper's band 5 .. 200 KB
        assert q <= 200e3, q
        assert r["cnps"] > 0 and _pauses_only_at_start_up(r, n)
    elif cc == "dctcp":  # one threshold K = 30 KB x rate/10G = 300 KB
        k, _, _ = ecn_defaults(100, cc)
        w_max = _window_bound_queue(n)
        if w_max < k * 1e3:  # the windows (one BDP each) hold the queue under K: nothing is marked
            assert r["ecn_marks"] == 0 and r["steady_queue_max_bytes"] == pytest.approx(w_max, rel=0.01), (
                r["steady_queue_max_bytes"], w_max)
        else:
            assert 0.5 * k * 1e3 <= q <= 1.2 * k * 1e3, q
        assert _pauses_only_at_start_up(r, n)
    elif cc == "hpcc":  # eta < 1 leaves headroom: near-empty queue, no ECN
        assert q < 50e3 and r["ecn_marks"] == 0, q
    elif cc == "timely":  # RTT-driven: queue around Tlow's worth, never Thigh's
        tm = TimelyConfig()
        assert q <= tm.t_low_ns * RATE_BPS_PER_NS, q
        assert r["steady_queue_max_bytes"] <= tm.t_high_ns * RATE_BPS_PER_NS
    elif cc == "swift":  # delay-based: the queue sits at Swift's target, above it by at most one RTT of AI
        lo, hi = swift_queue_band(n)
        assert lo <= q <= hi, (lo, q, hi)
        assert r["pfc_pause_frames_total"] == 0 and r["ecn_marks"] == 0  # no PFC needed, no marks used
        assert r["utilization"] >= 0.99, r["utilization"]
    else:  # none: PFC alone holds the incast; the queue fills to the pause threshold
        assert r["pfc_paused_ns_total"] > 0 and q > 1e6


@pytest.mark.parametrize("cc, n", list(_incast_cases()))
def test_incast_fair_in_steady_state(cc, n, incast_results):
    r = _incast(incast_results, cc, n)
    assert r["jain"] >= 0.99, r["per_flow_gbps"]


@pytest.mark.parametrize("n", [
    pytest.param(4, marks=pytest.mark.xfail(strict=True, reason="maxStage 5: Jain 0.891 (maxStage 0: 0.564)")),
    pytest.param(8, marks=pytest.mark.xfail(strict=True, reason="maxStage 5: Jain 0.897 (maxStage 0: 0.972)")),
])
def test_hpcc_paper_max_stage_fairness(n):
    """HPCC with the paper's printed maxStage = 5 (Li et al., SIGCOMM 2019, Algorithm 1: incStage < maxStage
    adds W_AI without the multiplicative step; shared/network-reference.md records the authors' note that
    the simulations ran 0).  Same incast, same Jain >= 0.99 target as the preset; it does not reach it."""
    r = sc.incast(n, size_bytes=40_000_000, cfg=NetworkConfig(backend="ns3", cc="hpcc", hpcc=HpccConfig(max_stage=5)))
    assert r["drops"] == 0 and r["steady_queue_mean_bytes"] < 50e3 and r["ecn_marks"] == 0
    assert r["jain"] >= 0.99, r["per_flow_gbps"]


# ------------------------------------------------------------------ parameter directions
def test_dcqcn_larger_rate_ai_holds_a_longer_queue():
    """The paper's preset, where additive increase acts (55 us timer, F = 5, byte counter).  In the
    vendor preset an increase needs 300 us without a cut and every cut restarts fast recovery, so
    R_AI barely acts there: its 20 vs 2,000 Mb/s queue ratio over RED draws 1-4 was 1.22 / 1.03 /
    0.88 / 0.86 (a coin flip this test used to read one draw of); the paper's gives 31-44x."""
    def q(rai):
        cfg = NetworkConfig(backend="ns3", cc="dcqcn_paper", dcqcn=DcqcnConfig(rate_ai_mbps=rai))
        return sc.incast(4, size_bytes=20_000_000, cfg=cfg)["steady_queue_mean_bytes"]

    low, high = q(20), q(2000)
    assert high > 1.2 * low, (low, high)


def test_hpcc_larger_w_ai_holds_a_longer_queue():
    def q(w_ai):
        cfg = NetworkConfig(backend="ns3", cc="hpcc", hpcc=HpccConfig(w_ai_bytes=w_ai))
        return sc.incast(8, size_bytes=20_000_000, cfg=cfg)["steady_queue_mean_bytes"]

    low, high = q(80), q(2000)
    assert high > 1.5 * low, (low, high)


@pytest.mark.parametrize("eta", [0.9, 0.95])
def test_hpcc_eta_sets_a_lone_flows_rate(eta):
    cfg = NetworkConfig(backend="ns3", cc="hpcc", hpcc=HpccConfig(eta=eta))
    r = sc.single_flow(size_bytes=10_000_000, cfg=cfg)
    assert abs(r["fct_ns"] - r["analytic_fct_ns"] / eta) <= 0.01 * r["analytic_fct_ns"]


def test_hpcc_int_bytes_are_on_the_wire():
    topo = NetTopology(hosts=["h0", "h1"], switches=["s0"],
                       links=[Link("h0", "s0", 100, 1000), Link("s0", "h1", 100, 1000)])
    cfg = NetworkConfig(backend="ns3", cc="hpcc")
    n_pkts = 2_000
    with Ns3Backend(topo, cfg) as b:
        b.send(Message(1, "h0", "h1", n_pkts * cfg.mtu_bytes, 0))
        b.advance()
        st = b.stats()
    data_wire = cfg.mtu_bytes + cfg.header_bytes + cfg.hpcc.int_bytes
    assert st.link_bytes[("h0", "s0")] == n_pkts * data_wire
    assert st.link_bytes[("h1", "s0")] == n_pkts * (64 + cfg.hpcc.int_bytes)  # one ACK per packet


def test_timely_lower_t_low_means_shorter_queue():
    def queue(t_low_ns):
        cfg = NetworkConfig(backend="ns3", cc="timely", timely=TimelyConfig(t_low_ns=t_low_ns))
        return sc.incast(4, size_bytes=20_000_000, cfg=cfg)["steady_queue_mean_bytes"]

    low, high = queue(25_000), queue(100_000)
    assert high > 1.5 * low, (low, high)


def test_window_variant_caps_inflight_at_one_bdp():
    """DCQCN+window: a 16 -> 1 incast's start-up burst is bounded by 16 BDPs of the fabric."""
    plain = sc.incast(16, size_bytes=5_000_000, cfg=NetworkConfig(backend="ns3"))
    capped = sc.incast(16, size_bytes=5_000_000, cfg=NetworkConfig(backend="ns3", cc_window=True))
    assert capped["max_queue_bytes"] < 0.5 * plain["max_queue_bytes"], (capped["max_queue_bytes"],
                                                                         plain["max_queue_bytes"])


# ------------------------------------------------------------------ presets and validation
def test_presets_are_one_column_each_and_overridable():
    vendor = resolved_dcqcn(NetworkConfig(cc="dcqcn"))
    paper = resolved_dcqcn(NetworkConfig(cc="dcqcn_paper"))
    # network-reference.md: vendor 1/4/300 us, ECN echoed on ACKs; paper 55/-/55 us, 50 us CNPs, 10 MB, F = 5
    assert (vendor["alpha_update_interval_ns"], vendor["rate_decrease_interval_ns"],
            vendor["rate_increase_interval_ns"], vendor["cnp_mode"]) == (1_000, 4_000, 300_000, "ack_piggyback")
    assert (paper["alpha_update_interval_ns"], paper["rate_increase_interval_ns"], paper["cnp_interval_ns"],
            paper["byte_counter_bytes"], paper["fast_recovery_stages"]) == (55_000, 55_000, 50_000,
                                                                          10_000_000, 5)
    over = resolved_dcqcn(NetworkConfig(cc="dcqcn_paper", dcqcn=DcqcnConfig(g=1 / 16)))
    assert over["g"] == 1 / 16 and over["byte_counter_bytes"] == 10_000_000
    assert ecn_defaults(100, "dcqcn") == (400, 1600, 0.2)
    assert ecn_defaults(400, "dcqcn") == (1600, 6400, 0.2)
    assert ecn_defaults(100, "dctcp") == (300, 300, 1.0)


def test_bad_cc_settings_are_rejected():
    with pytest.raises(ValidationError):
        NetworkConfig(cc="dcqcn_vendor")
    with pytest.raises(ValidationError):
        TimelyConfig(t_low_ns=600_000, t_high_ns=500_000)
    with pytest.raises(ValidationError):
        HpccConfig(eta=1.5)
    with pytest.raises(ValidationError, match="resume_offset_kb"):
        PfcConfig(threshold="static", static_threshold_kb=2, resume_offset_kb=3)
