"""Validation of the ns-3 packet-level RoCE backend against analytical values
and the reference behaviour in shared/network-reference.md.

All scenarios run in this process one after another (each closes its
simulation, i.e. Simulator::Destroy); one test checks run_isolated.
"""
from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from netbackend import Link, Message, NetTopology  # noqa: E402
from netbackend.config import BufferConfig, DcqcnConfig, EcnConfig, NetworkConfig, PfcConfig  # noqa: E402
from hscommon.errors import NetworkError, UserError  # noqa: E402
from netbackend.ns3 import Ns3Backend, example_command, run_isolated, unit_test_command  # noqa: E402
from netbackend.ns3 import scenarios as sc  # noqa: E402

pytestmark = pytest.mark.ns3

KMAX_100G_BYTES = 1_600_000  # SimAI.conf at 100 Gb/s (network-reference.md)


def test_cxx_unit_tests_pass():
    """ns-3 TestSuite 'heterosim-rdma': DCQCN arithmetic, RED probability, MMU, ECMP."""
    res = subprocess.run(unit_test_command(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PASS heterosim-rdma" in res.stdout
    assert "FAIL" not in res.stdout


def _run_incast_example(*args: str) -> tuple[dict[int, dict], dict[str, dict], dict, float]:
    """Run examples/heterosim-rdma-incast.cc; (flows by id, ports by name, totals, bound_ns)."""
    res = subprocess.run(example_command("heterosim-rdma-incast", *args), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    flows, ports, total, bound = {}, {}, {}, None
    for line in res.stdout.splitlines():
        w = line.split()
        if w and w[0] == "flow":
            flows[int(w[1])] = dict(zip(w[2::2], w[3::2]))
        elif w and w[0] == "port":
            ports[w[1]] = {k: int(v) for k, v in zip(w[2::2], w[3::2])}
        elif w and w[0] == "total":
            total = {k: int(v) for k, v in zip(w[1::2], w[2::2])}
        elif w and w[0] == "bound_ns":
            bound = float(w[1])
    return flows, ports, total, bound


def test_incast_example_program_matches_hand_calculation():
    """The module's standalone example (ns3::CommandLine, RdmaNetworkHelper, no Python in the loop).

    2 -> 1 incast of 64 KiB each at 100 Gb/s, 1 us links, 500 ns switch latency, 4096 B MTU +
    78 B headers: 16 packets of 4174 B per flow.  Both senders start at line rate, so the port to
    r0 receives twice what it sends: it is busy from the first packet's arrival (one packet time +
    1 us) until all 32 packets are out (32 x 333.92 ns = the bound: the bytes over the bottleneck
    rate), and the last bit lands 1 us + 500 ns later.  Its queue peaks at about half the bytes,
    16 packets = 66,784 B, far below DCQCN's Kmin at 100 G (400 KB) and the dynamic PFC threshold
    (~4 MB): no mark, no CNP, no pause.  A second run sets Attributes on the command line (a 20 KB
    static PFC threshold, the paper's DCQCN) and must PAUSE the senders without a drop; per-flow
    and per-port counts agree."""
    flows, ports, total, bound = _run_incast_example("--senders=2", "--bytes=65536", "--cc=dcqcn")
    pkt = 4096 + 78
    pkt_ns = pkt * 8 / 100.0
    assert bound == pytest.approx(2 * 16 * pkt_ns, abs=0.01)
    assert sorted(flows) == [0, 1] and all(f["bytes"] == "65536" for f in flows.values())
    fct = [int(f["fct_ns"]) for f in flows.values()]
    expected_last = pkt_ns + 1000 + bound + 1000 + 500
    assert max(fct) >= bound
    assert abs(max(fct) - expected_last) <= 2, (fct, expected_last)  # the device rounds to whole ns
    alone = sc.store_and_forward_ns([pkt] * 16, [100.0, 100.0], [1000, 1500])
    assert min(fct) >= alone
    assert abs(ports["sw0->r0"]["max_queue_bytes"] - 16 * pkt) <= pkt
    assert ports["sw0->r0"]["tx_bytes"] == 32 * pkt
    assert total["delivered_bytes"] == 2 * 65536
    assert total["ecn_marks"] == total["cnps_sent"] == total["pfc_pause_frames"] == total["drops"] == 0
    assert all(f["ce_marks"] == f["pfc_pause_frames"] == "0" for f in flows.values())

    flows, ports, total, bound = _run_incast_example(
        "--senders=4", "--bytes=500000", "--cc=dcqcn_paper",
        "--ns3::RdmaSwitchNode::PfcDynamic=false", "--ns3::RdmaSwitchNode::PfcStaticThreshold=20000")
    assert sorted(flows) == [0, 1, 2, 3]
    assert max(int(f["fct_ns"]) for f in flows.values()) >= bound
    assert total["drops"] == 0 and total["delivered_bytes"] == 4 * 500_000
    pauses = [int(f["pfc_pause_frames"]) for f in flows.values()]
    assert all(p > 0 for p in pauses) and sum(pauses) == total["pfc_pause_frames"]
    assert all(int(f["pfc_paused_ns"]) > 0 for f in flows.values())
    ce = sum(int(f["ce_marks"]) for f in flows.values())
    assert ce == ports["sw0->r0"]["ecn_marks"] == total["ecn_marks"] == total["ce_received"]


def test_data_priority_past_the_switch_classes_is_refused():
    """A NIC sending on priority 3 into 2-class switches: the switch would pause its top class,
    which the NIC never hears of (2,678 drops on a lossless fabric before the check).  The helper
    refuses it in one line naming both Attributes."""
    res = subprocess.run(example_command("heterosim-rdma-incast", "--senders=2", "--bytes=65536",
                                         "--ns3::RdmaNic::DataPriority=3"),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "RdmaNic::DataPriority 3 needs RdmaSwitchNode::NumPriorities above it (it is 2)" in res.stderr + res.stdout


def test_single_flow_goodput_and_fct_match_analysis():
    r = sc.single_flow(size_bytes=10_000_000)
    assert r["drops"] == 0
    assert abs(r["fct_ns"] - r["analytic_fct_ns"]) <= 0.01 * r["analytic_fct_ns"]
    assert abs(r["goodput_gbps"] - r["expected_goodput_gbps"]) <= 0.01 * r["expected_goodput_gbps"]
    # A partial last packet and a different MTU: still the store-and-forward value.
    cfg = NetworkConfig(backend="ns3", mtu_bytes=1024)
    r = sc.single_flow(size_bytes=3_333_333, rate_gbps=25.0, delay_ns=500, cfg=cfg)
    assert abs(r["fct_ns"] - r["analytic_fct_ns"]) <= 0.01 * r["analytic_fct_ns"]


@pytest.mark.parametrize("rate_b_gbps", [50.0, 200.0])
def test_qps_sharing_a_nic_keep_their_paced_rates(rate_b_gbps):
    """Two QPs of one 200 G NIC, DCQCN rates fixed at 55 G and ``rate_b_gbps`` (ECN off, so no cut):
    the slower-paced or busier neighbour must not drag the 55 G QP down.  Pacing that restarted
    from the send time whenever the NIC was busy with the other QP's packet locked it behind its
    neighbour (measured before the fix: 49.03 G against 49.06 G, and 49.03 G beside a line-rate
    QP).  Expected: the set rate on the wire, times payload / (payload + header) for goodput."""
    cfg = NetworkConfig(backend="ns3", cc="dcqcn", ecn=EcnConfig(enabled=False))
    topo = NetTopology(hosts=["s0", "r0", "r1"], switches=["l1"],
                       links=[Link("s0", "l1", 200, 1000), Link("r0", "l1", 200, 1000),
                              Link("r1", "l1", 200, 1000)])
    rate_a, size = 55e9, 20_000_000
    with Ns3Backend(topo, cfg, 0) as b:
        b.send(Message(0, "s0", "r0", 4096, 0, connection=0))
        b.send(Message(1, "s0", "r1", 4096, 0, connection=0))
        while b.pending():
            b.advance()
        sim, hi = b._sim, b._host_index
        for dst, rate in (("r0", rate_a), ("r1", rate_b_gbps * 1e9)):
            state = [float(v) for v in sim.SaveConnectionCc(hi["s0"], hi[dst], 0)]
            state[0] = state[1] = rate  # RC, RT (DcqcnRp::Save layout)
            state[14] = -1.0  # no increase timer armed: the rate stays put
            assert sim.RestoreConnectionCc(hi["s0"], hi[dst], 0, state)
        t0 = b.now_ns + 1000
        b.send(Message(2, "s0", "r0", size, t0, connection=0))
        b.send(Message(3, "s0", "r1", 4 * size, t0, connection=0))
        fin = {}
        while b.pending():
            fin.update((c.id, c.finish_ns) for c in b.advance())
    payload = cfg.mtu_bytes / (cfg.mtu_bytes + cfg.header_bytes)
    goodput = size * 8 / (fin[2] - t0)
    assert goodput == pytest.approx(rate_a * payload / 1e9, rel=0.005)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_incast_dcqcn_converges_fair_and_lossless(n):
    # DCQCN with the HPCC preset recovers every 300 us: convergence takes tens
    # of ms, so flows carry 800 MB in total and steady state is the last 30%
    # before the first finish.
    r = sc.incast(n, size_bytes=800_000_000 // n, window_ns=200_000)
    assert r["drops"] == 0
    assert len(r["fct_ns"]) == n
    assert r["jain"] >= 0.99, r["per_flow_gbps"]
    assert r["utilization"] >= 0.90
    assert r["cnps"] > 0 and r["ecn_marks"] > 0
    # The standing queue sits around the marking band (Kmin 400 KB, Kmax 1.6 MB at 100G).
    assert 0 < r["steady_queue_mean_bytes"] <= KMAX_100G_BYTES
    assert r["steady_queue_max_bytes"] <= 1.5 * KMAX_100G_BYTES


def test_pfc_pauses_propagate_upstream_without_cc():
    r = sc.incast(8, size_bytes=5_000_000, cfg=NetworkConfig(backend="ns3", cc="none"), two_tier=True)
    assert r["drops"] == 0
    assert len(r["fct_ns"]) == 8
    frames = r["pfc_pause_frames"]
    assert frames.get("leaf0->spine0", 0) > 0, frames  # congested leaf pauses the spine
    assert frames.get("spine0->leaf1", 0) > 0, frames  # ... and the spine pauses the senders' leaf
    assert r["pfc_paused_ns"].get("spine0->leaf0", 0) > 0


def test_dcqcn_cuts_pfc_paused_time():
    off = sc.incast(8, size_bytes=5_000_000, cfg=NetworkConfig(backend="ns3", cc="none"), two_tier=True)
    on = sc.incast(8, size_bytes=5_000_000, cfg=NetworkConfig(backend="ns3"), two_tier=True)
    assert off["pfc_paused_ns_total"] > 0
    assert on["pfc_paused_ns_total"] < 0.5 * off["pfc_paused_ns_total"]
    assert on["drops"] == off["drops"] == 0


def test_raising_kmax_raises_mean_queue():
    def mean_q(kmax_kb):
        cfg = NetworkConfig(backend="ns3", ecn=EcnConfig(kmin_kb=400, kmax_kb=kmax_kb, pmax=0.2))
        return sc.incast(8, size_bytes=20_000_000, cfg=cfg)["mean_queue_bytes"]

    low, high = mean_q(800), mean_q(3200)
    assert high > 1.2 * low, (low, high)


def test_smaller_g_slows_convergence():
    def conv(g):
        cfg = NetworkConfig(backend="ns3", dcqcn=DcqcnConfig(g=g))
        r = sc.incast(4, size_bytes=100_000_000, cfg=cfg, window_ns=100_000)
        return sc.convergence_time_ns(r["aggregate_gbps"], 90.0, r["first_finish_ns"] - 100_000)

    slow, fast = conv(1 / 256), conv(1 / 16)
    assert slow > fast + 1_000_000, (slow, fast)


def test_same_seed_same_fcts():
    topo = sc.two_tier_topology(6)
    msgs = [Message(i, f"s{i}", "r0", 2_000_000 + 1000 * i, 3000 * i, flow_key=i) for i in range(6)]
    cfg = NetworkConfig(backend="ns3")
    a = sc.run_fcts(topo, msgs, cfg, seed=5)
    b = sc.run_fcts(topo, msgs, cfg, seed=5)
    assert a == b and len(a) == 6


def test_lossy_fabric_recovers_with_go_back_n():
    cfg = NetworkConfig(backend="ns3", cc="none", pfc=PfcConfig(enabled=False),
                        buffer=BufferConfig(shared_buffer_mb=0.3))
    topo = sc.star_topology(4)
    with Ns3Backend(topo, cfg) as b:
        for i in range(4):
            b.send(Message(i, f"s{i}", "r0", 2_000_000, 0))
        done = {}
        while b.pending():
            done.update((c.id, c.finish_ns) for c in b.advance())
        st = b.stats()
    assert len(done) == 4
    assert st.extra["drops"] > 0
    assert st.extra["counters"]["retransmitted_packets"] > 0
    assert st.bytes_delivered == 8_000_000


def test_stats_are_plain_numbers_and_consistent():
    topo = sc.star_topology(4)
    with Ns3Backend(topo, NetworkConfig(backend="ns3")) as b:
        for i in range(4):
            b.send(Message(i, f"s{i}", "r0", 10_000_000, 0))
        while b.pending():
            b.advance()
        st = b.stats()
    e = st.extra
    assert st.messages == 4 and st.bytes_delivered == 40_000_000
    wire = sum(sc.wire_bytes(10_000_000, NetworkConfig()))
    assert st.link_bytes[("sw0", "r0")] == 4 * wire
    assert st.link_bytes[("s0", "sw0")] == wire
    assert e["drops"] == 0 and e["ecn_marks"] > 0 and e["cnps_sent"] == e["cnps_received"] > 0
    assert e["hot_ports"][0] == "sw0->r0"
    assert all(isinstance(t, int) and isinstance(q, int) for t, _, q in e["queue_samples"])
    assert e["python_overhead_fraction"] < 0.10


def test_one_simulation_per_process():
    topo = sc.star_topology(1)
    with Ns3Backend(topo, NetworkConfig(backend="ns3")):
        with pytest.raises(NetworkError):
            Ns3Backend(topo, NetworkConfig(backend="ns3"))
    with Ns3Backend(topo, NetworkConfig(backend="ns3")) as b:  # free again after close()
        assert b.now_ns == 0


def test_run_isolated_matches_in_process():
    here = sc.single_flow(size_bytes=1_000_000)
    there = run_isolated(sc.single_flow, size_bytes=1_000_000)
    assert here == there


def _unbuilt_facade_calls() -> list[str]:
    """What the facade's fabric calls raise on a simulation with no Build (child process)."""
    from netbackend.ns3 import driver

    sim = driver.sim_class()()
    raised = []
    for call in (lambda: sim.CounterValues(), lambda: sim.Run(-1), lambda: sim.PortNames(),
                 lambda: sim.AddMessage(1, 0, 1, 100, 0, 0, -1, 0)):
        try:
            call()
            raised.append("")
        except Exception as exc:  # cppyy raises the C++ std::logic_error as a Python exception
            raised.append(str(exc))
    return raised


def test_facade_before_build_raises_instead_of_crashing():
    # (was a segmentation fault: the helper pointer is null until Build)
    assert all("call Build first" in r for r in run_isolated(_unbuilt_facade_calls))


def test_bad_topology_is_a_user_error():
    bad = NetTopology(hosts=["a", "b"], switches=["s"], links=[Link("a", "s", 100, 1000), Link("a", "b", 100, 1000)])
    with pytest.raises(NetworkError, match="several links"):
        Ns3Backend(bad, NetworkConfig(backend="ns3"))


def test_missing_compiler_is_one_line_user_error(monkeypatch):
    from netbackend.ns3 import build

    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(UserError) as ei:
        build.ensure_built()
    assert "\n" not in str(ei.value) and "g++" in str(ei.value)
