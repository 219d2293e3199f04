"""Background traffic: CDF sampling, Poisson load, and the WithBackground wrapper."""
from __future__ import annotations

import statistics

import pytest

from netbackend.background import (BACKGROUND_ID_OFFSET, BUILTIN_CDFS, BackgroundConfig, BackgroundTraffic,
                                   FlowSizeCdf, WithBackground, load_cdf, with_background)
from netbackend.base import Message
from netbackend.config import NetworkConfig
from hscommon.errors import UserError
from netbackend.flow import FlowBackend
from netbackend.topo import Link, NetTopology


def star(n: int, rate_gbps: float = 100.0) -> NetTopology:
    hosts = [f"h{i}" for i in range(n)]
    return NetTopology(hosts=hosts, switches=["s0"], links=[Link(h, "s0", rate_gbps, 1000) for h in hosts])


def test_builtin_cdfs_parse_and_interpolate():
    ws = load_cdf("websearch")
    assert ws.quantile(0.15) == pytest.approx(10_000)
    assert ws.quantile(0.175) == pytest.approx(15_000)  # halfway between (10000, 15%) and (20000, 20%)
    assert ws.quantile(1.0) == pytest.approx(30_000_000)
    fb = load_cdf("fb-hadoop")
    assert fb.quantile(0.5) == pytest.approx(700)
    assert set(BUILTIN_CDFS) == {"websearch", "fb-hadoop"}


def test_mean_of_piecewise_linear_cdf():
    assert FlowSizeCdf([(0, 0), (100, 100)]).mean_bytes == pytest.approx(50)
    # half the mass at exactly 10 (vertical segment), half uniform on [10, 30]
    assert FlowSizeCdf([(10, 50), (30, 100)]).mean_bytes == pytest.approx(0.5 * 10 + 0.5 * 20)


def test_bad_cdf_files_are_one_line_user_errors(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("# c\n0 0\n100 fifty\n")
    with pytest.raises(UserError, match=r"bad.txt:3.*size_bytes cdf_percent"):
        load_cdf(bad)
    bad.write_text("0 0\n100 90\n")
    with pytest.raises(UserError, match="last percentile must be 100"):
        load_cdf(bad)
    with pytest.raises(UserError, match="unknown flow-size CDF"):
        load_cdf("no-such-distribution")


def test_poisson_arrivals_give_the_offered_load():
    hosts = [f"h{i}" for i in range(8)]
    window = 20_000_000  # 20 ms
    tr = BackgroundTraffic("fb-hadoop", 0.3, hosts, 100.0, seed=3, start_ns=1000, end_ns=1000 + window)
    msgs = list(tr)
    assert msgs == list(tr)  # restartable and deterministic
    assert [m.start_ns for m in msgs] == sorted(m.start_ns for m in msgs)
    assert all(1000 <= m.start_ns <= 1000 + window for m in msgs)
    assert all(m.src != m.dst and m.src in hosts and m.dst in hosts for m in msgs)
    assert [m.id for m in msgs] == list(range(BACKGROUND_ID_OFFSET, BACKGROUND_ID_OFFSET + len(msgs)))
    # arrivals: count matches rate * window (Poisson sd ~ sqrt(n))
    expected_n = window / tr.mean_interarrival_ns
    assert abs(len(msgs) - expected_n) < 5 * expected_n ** 0.5
    # inter-arrival of one host is exponential: coefficient of variation ~ 1
    t0 = [m.start_ns for m in msgs if m.src == "h0"]
    gaps = [b - a for a, b in zip(t0, t0[1:])]
    assert 0.85 < statistics.pstdev(gaps) / statistics.mean(gaps) < 1.15
    # sizes follow the CDF: median ~ 700 B, and fraction under 100 B ~ 1%
    sizes = sorted(m.size_bytes for m in msgs)
    assert 600 <= sizes[len(sizes) // 2] <= 800
    # offered payload load per host (heavy tail: loose bound)
    offered = sum(sizes) * 8 / window / (len(hosts) * 100.0)
    assert 0.2 < offered < 0.4
    other = BackgroundTraffic("fb-hadoop", 0.3, hosts, 100.0, seed=4, end_ns=window)
    assert [m.size_bytes for m in other][:50] != [m.size_bytes for m in msgs][:50]


def test_heterogeneous_host_rates_scale_arrivals():
    tr = BackgroundTraffic("websearch", 0.5, ["a", "b"], {"a": 400.0, "b": 100.0}, seed=1, end_ns=50_000_000)
    n = {"a": 0, "b": 0}
    for m in tr:
        n[m.src] += 1
    assert 3.0 < n["a"] / n["b"] < 5.5


def test_config_validation():
    with pytest.raises(ValueError):
        BackgroundConfig(load=0.0)
    with pytest.raises(ValueError):
        BackgroundConfig(load=0.3, bogus=1)
    with pytest.raises(ValueError):
        BackgroundConfig(load=0.3, start_ns=10, end_ns=5)
    topo = star(3)
    with pytest.raises(UserError, match="not a host"):
        BackgroundTraffic.from_config(BackgroundConfig(load=0.2, hosts=["h0", "zz"]), topo)
    assert with_background("inner", None) == "inner"  # no config: the backend itself


def test_wrapper_hides_background_and_slows_shared_flows():
    """A 10 MB h0->h1 flow alone, then sharing the star with 80% websearch background load."""
    cfg = NetworkConfig(backend="flow")
    topo = star(6)

    def run(bg: BackgroundTraffic | None):
        inner = FlowBackend(topo, cfg)
        b = WithBackground(inner, bg)
        b.send(Message(1, "h0", "h1", 10_000_000, 2_000_000))  # after the background has built up
        assert b.pending() == 1
        comps = b.advance()
        assert [c.id for c in comps] == [1]
        assert b.pending() == 0
        assert b.advance() == []  # nothing of ours in flight: no time passes
        b.advance(b.now_ns + 2_000_000)  # background keeps flowing when asked to move time
        return comps[0].finish_ns - 2_000_000, b.stats()

    alone, st0 = run(None)
    bg = BackgroundTraffic("websearch", 0.8, topo.hosts, 100.0, seed=0, end_ns=5_000_000)
    shared, st = run(bg)
    assert shared > alone * 1.2
    info = st.extra["background"]
    assert info["flows_completed"] > 10
    assert set(st.fct_ns) == {1}
    assert st.messages == 1 and st.bytes_delivered == 10_000_000
    assert st0.extra["background"]["flows_started"] == 0
    for size, s, f, src, dst in info["flows"]:
        assert f > s and size > 0 and src != dst


def test_wrapper_rejects_ids_in_background_space():
    b = WithBackground(FlowBackend(star(2), NetworkConfig()), None)
    with pytest.raises(UserError, match="reserved for background"):
        b.send(Message(BACKGROUND_ID_OFFSET + 5, "h0", "h1", 100, 0))


def test_wrapper_advance_until_stops_at_until():
    bg = BackgroundTraffic("fb-hadoop", 0.5, ["h0", "h1", "h2"], 100.0, seed=0)
    b = WithBackground(FlowBackend(star(3), NetworkConfig()), bg, lookahead_ns=10_000)
    assert b.advance(1_000_000) == []
    assert b.now_ns == 1_000_000
    assert b.stats().extra["background"]["flows_completed"] > 0
    b.send(Message(7, "h0", "h2", 1000, 1_000_000))
    (c,) = b.advance(None)
    assert c.id == 7 and c.finish_ns > 1_000_000


@pytest.mark.ns3
def test_wrapper_on_ns3():
    pytest.importorskip("cppyy")
    from netbackend.ns3 import Ns3Backend

    topo = star(4)
    bg = BackgroundTraffic("websearch", 0.5, topo.hosts, 100.0, seed=2, end_ns=300_000)
    with WithBackground(Ns3Backend(topo, NetworkConfig(backend="ns3")), bg) as b:
        b.send(Message(1, "h0", "h1", 1_000_000, 0))
        (c,) = b.advance()
        assert c.id == 1
        b.advance(2_000_000)
        st = b.stats()
    assert st.extra["background"]["flows_completed"] >= 1
    assert set(st.fct_ns) == {1}
