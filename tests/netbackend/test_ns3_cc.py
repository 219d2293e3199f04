"""Congestion-control algorithms of the ns-3 backend beyond DCQCN: HPCC (INT,
window + pacing) and TIMELY (RTT gradient from NIC timestamps).

Scenarios follow shared/network-reference.md: 4 -> 1 incast at 100 Gb/s over
1 us links, PFC on (lossless), 4 KB MTU.
"""
from __future__ import annotations

import subprocess

import pytest
from pydantic import ValidationError

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from netbackend import Link, Message, NetTopology  # noqa: E402
from netbackend.config import HpccConfig, NetworkConfig, TimelyConfig  # noqa: E402
from netbackend.errors import UserError  # noqa: E402
from netbackend.ns3 import Ns3Backend, unit_test_command  # noqa: E402
from netbackend.ns3 import scenarios as sc  # noqa: E402

pytestmark = pytest.mark.ns3

# HPCC paper (Li et al. 2019, §3.3): W_AI = W_init (1 - eta) / N for N expected
# concurrent flows per link.  As a rate: line rate x (1 - eta) / N, i.e.
# 1.25 Gb/s for N = 4 at 100 Gb/s.  The simulator's default (40 Mb/s at 100G,
# N ~ 125) converges to fairness too slowly for a 4-flow test: measured Jain
# 0.42 after 3 ms (see the report); the paper's rule for N = 4 is used here.
HPCC_W_AI_N4_MBPS = 100_000 * (1 - 0.95) / 4


def test_cxx_cc_unit_tests_pass():
    res = subprocess.run(unit_test_command(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("PASS HPCC utilization estimate and window update",
                 "PASS TIMELY gradient, Tlow and Thigh, hyper-active increase"):
        assert name in res.stdout, res.stdout


def _check_incast(r, n=4):
    assert r["drops"] == 0
    assert len(r["fct_ns"]) == n
    assert r["utilization"] >= 0.90, r["utilization"]
    assert r["jain"] >= 0.95, r["per_flow_gbps"]


def test_hpcc_incast_lossless_fair_full_and_short_queue():
    cfg = NetworkConfig(backend="ns3", cc="hpcc", hpcc=HpccConfig(w_ai_mbps=HPCC_W_AI_N4_MBPS))
    r = sc.incast(4, size_bytes=20_000_000, cfg=cfg, window_ns=100_000)
    _check_incast(r)
    # Targets eta = 95% of the line: the standing queue stays near empty.
    assert r["utilization"] <= 0.99
    assert r["steady_queue_mean_bytes"] < 50_000
    assert r["ecn_marks"] == 0 and r["cnps"] == 0  # HPCC uses INT, not ECN


def test_timely_incast_lossless_fair_full():
    r = sc.incast(4, size_bytes=20_000_000, cfg=NetworkConfig(backend="ns3", cc="timely"),
                  window_ns=100_000)
    _check_incast(r)
    assert r["ecn_marks"] == 0 and r["cnps"] == 0


def test_hpcc_queue_much_smaller_than_dcqcn():
    # DCQCN (defaults) needs long flows to reach steady state (see test_ns3_backend).
    size = 200_000_000
    dcqcn = sc.incast(4, size_bytes=size, cfg=NetworkConfig(backend="ns3"), window_ns=200_000)
    hpcc = sc.incast(4, size_bytes=size, cfg=NetworkConfig(backend="ns3", cc="hpcc"), window_ns=200_000)
    assert dcqcn["drops"] == hpcc["drops"] == 0
    assert hpcc["utilization"] >= 0.90
    assert hpcc["steady_queue_mean_bytes"] < 0.2 * dcqcn["steady_queue_mean_bytes"], (hpcc, dcqcn)
    assert hpcc["mean_queue_bytes"] < 0.2 * dcqcn["mean_queue_bytes"]
    assert hpcc["max_queue_bytes"] < dcqcn["max_queue_bytes"]


def test_timely_lower_t_low_means_shorter_queue():
    def queue(t_low_ns):
        cfg = NetworkConfig(backend="ns3", cc="timely", timely=TimelyConfig(t_low_ns=t_low_ns))
        return sc.incast(4, size_bytes=20_000_000, cfg=cfg)["steady_queue_mean_bytes"]

    low, high = queue(25_000), queue(100_000)
    assert high > 1.5 * low, (low, high)


def test_hpcc_int_bytes_are_on_the_wire_and_single_flow_runs_at_eta():
    topo = NetTopology(hosts=["h0", "h1"], switches=["s0"],
                       links=[Link("h0", "s0", 100, 1000), Link("s0", "h1", 100, 1000)])
    cfg = NetworkConfig(backend="ns3", cc="hpcc")
    n_pkts = 2_000
    size = n_pkts * cfg.mtu_bytes
    with Ns3Backend(topo, cfg) as b:
        b.send(Message(1, "h0", "h1", size, 0))
        (c,) = b.advance()
        st = b.stats()
    data_wire = cfg.mtu_bytes + cfg.header_bytes + cfg.hpcc.int_bytes
    assert st.link_bytes[("h0", "s0")] == n_pkts * data_wire
    assert st.link_bytes[("h1", "s0")] == n_pkts * (64 + cfg.hpcc.int_bytes)  # one ACK per packet
    analytic = sc.store_and_forward_ns([data_wire] * n_pkts, [100.0, 100.0], [1000, 1000])
    # Alone on the path the link's txRate/B is 1 >= eta, so HPCC settles at eta
    # of the line rate (it leaves 5% headroom by design): FCT = analytic / eta.
    assert abs(c.finish_ns - analytic / cfg.hpcc.eta) <= 0.01 * analytic, (c.finish_ns, analytic)


def test_cc_values_map_and_validate():
    topo = sc.star_topology(1)
    with Ns3Backend(topo, NetworkConfig(backend="ns3", cc="timely")) as b:
        b.send(Message(1, "s0", "r0", 100_000, 0))
        assert len(b.advance()) == 1
    with pytest.raises(ValidationError):  # not offered: no DCTCP in the ns-3 module
        NetworkConfig(backend="ns3", cc="dctcp")
    with pytest.raises(ValidationError):
        TimelyConfig(t_low_ns=600_000, t_high_ns=500_000)
    with pytest.raises(ValidationError):
        HpccConfig(eta=1.5)
