"""Flow generation: Poisson arrivals at the configured load, incasts, patterns (expected values by hand)."""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from heterosim.errors import UserError
from heterosim.traffic.build import plan, resolve_cdf
from heterosim.traffic.config import TrafficScenario

from .conftest import tiny

DATA = Path(__file__).resolve().parents[2] / "netbackend" / "data"


def cdf_mean_by_hand(path: Path) -> float:
    """Mean of a piecewise-linear CDF: sum over segments of probability x segment midpoint."""
    pts = [tuple(map(float, line.split())) for line in path.read_text().splitlines()
           if line.strip() and not line.startswith("#")]
    return sum((p1 - p0) / 100 * (s0 + s1) / 2 for (s0, p0), (s1, p1) in zip(pts, pts[1:]))


def test_poisson_offered_load_and_arrival_rate_match_the_target():
    # 16 hosts x 100 Gb/s at 50 % load for 1 s of arrivals: ~58,000 WebSearch flows.
    hosts, rate_gbps, load, T = 16, 100.0, 0.5, 1_000_000_000
    sc = TrafficScenario.model_validate(tiny(
        hosts=[{"count": hosts, "rate_gbps": rate_gbps}],
        fabric={"kind": "leaf_spine", "hosts_per_leaf": 16},
        workload={"poisson": {"cdf": "websearch", "load": load}}, duration_ns=T, warmup_ns=0))
    p = plan(sc)
    mean = cdf_mean_by_hand(DATA / "websearch.txt")
    assert mean == 1_711_250.0  # WebSearch CDF file, segment midpoints
    expected_flows = hosts * load * rate_gbps / 8 * T / mean  # bytes/ns offered / mean bytes
    n = len(p.flows)
    assert abs(n - expected_flows) < 4 * math.sqrt(expected_flows)  # Poisson count: 4 sigma
    offered = sum(m.size_bytes for m in p.flows) / (hosts * rate_gbps / 8 * T)
    # CV of WebSearch sizes is 2.3, so the mean of ~58k sizes is within 1 % (1 sigma) of the CDF mean
    assert abs(offered - load) / load < 0.03
    # every host sends its share, never to itself, and arrivals stay in the window
    per_src = Counter(m.src for m in p.flows)
    assert all(abs(c - n / hosts) < 5 * math.sqrt(n / hosts) for c in per_src.values())
    assert all(m.src != m.dst for m in p.flows)
    assert 0 <= p.flows[0].start_ns and p.flows[-1].start_ns < T
    assert [m.id for m in p.flows] == list(range(1, n + 1))
    assert all(a.start_ns <= b.start_ns for a, b in zip(p.flows, p.flows[1:]))


def test_incast_event_rate_from_load_by_hand():
    # 16 hosts x 100G = 200 GB/s; 5 % of it = 10 GB/s; one event = 4 x 100 KB = 400 KB -> 25,000 events/s.
    sc = TrafficScenario.model_validate(tiny(
        hosts=[{"count": 16, "rate_gbps": 100}], fabric={"kind": "leaf_spine", "hosts_per_leaf": 16},
        workload={"incast": [{"senders": 4, "bytes_per_sender": 100_000, "load": 0.05}]},
        duration_ns=100_000_000, warmup_ns=0))
    p = plan(sc)
    events = defaultdict(list)
    for m in p.flows:
        events[m.start_ns].append(m)
    expected = 25_000 * 0.1
    assert abs(len(events) - expected) < 4 * math.sqrt(expected)
    for flows in events.values():
        assert len(flows) == 4
        assert len({m.dst for m in flows}) == 1
        assert len({m.src for m in flows}) == 4 and flows[0].dst not in {m.src for m in flows}
        assert all(m.size_bytes == 100_000 for m in flows)
    assert set(p.kinds.values()) == {"incast"}


def test_incast_at_fixed_times_with_a_fixed_receiver():
    sc = TrafficScenario.model_validate(tiny(workload={"incast": [
        {"senders": 7, "bytes_per_sender": 1000, "times_ns": [500, 100], "receiver": "h5"}]}))
    p = plan(sc)
    assert [m.start_ns for m in p.flows] == [100] * 7 + [500] * 7
    assert {m.dst for m in p.flows} == {"h5"}
    assert sorted(m.src for m in p.flows[:7]) == ["h0", "h1", "h2", "h3", "h4", "h6", "h7"]


def test_permutation_and_all_to_all_patterns():
    sc = TrafficScenario.model_validate(tiny(workload={"patterns": [
        {"kind": "permutation", "flow_bytes": 5000, "start_ns": 0, "repeat_every_ns": 300_000},
        {"kind": "all_to_all", "flow_bytes": 777, "start_ns": 50_000}]}, duration_ns=1_000_000))
    p = plan(sc)
    perm = [m for m in p.flows if m.size_bytes == 5000]
    rounds = defaultdict(list)
    for m in perm:
        rounds[m.start_ns].append(m)
    assert sorted(rounds) == [0, 300_000, 600_000, 900_000]
    for flows in rounds.values():  # every host sends one flow and receives one, never to itself
        assert sorted(m.src for m in flows) == [f"h{i}" for i in range(8)]
        assert sorted(m.dst for m in flows) == [f"h{i}" for i in range(8)]
        assert all(m.src != m.dst for m in flows)
    a2a = [m for m in p.flows if m.size_bytes == 777]
    assert len(a2a) == 8 * 7 and len({(m.src, m.dst) for m in a2a}) == 56
    assert all(m.start_ns == 50_000 for m in a2a)


def test_same_seed_same_flows_other_seed_other_flows():
    a = plan(TrafficScenario.model_validate(tiny())).flows
    b = plan(TrafficScenario.model_validate(tiny())).flows
    c = plan(TrafficScenario.model_validate(tiny(seed=4))).flows
    assert a == b
    assert a != c


@pytest.mark.parametrize("text,needle", [
    ("100 10\n50 20\n1000 100\n", "non-decreasing"),
    ("100 10\n1000 90\n", "last percentile must be 100"),
    ("0 0\n0 100\n", "largest flow size must be > 0"),
    ("100 10\n1000\n", "expected 'size_bytes cdf_percent'"),
    ("# only a comment\n", "at least two points"),
    ("100 0.5\n1000 1.0\n", "last percentile must be 100"),  # fractions, not percent
])
def test_a_cdf_file_that_is_not_a_cdf_names_scenario_field_and_value(tmp_path, text, needle):
    (tmp_path / "x.cdf").write_text(text)
    scen = str(tmp_path / "s.yaml")
    with pytest.raises(UserError) as info:
        resolve_cdf("x.cdf", scen)
    line = str(info.value)
    assert line.startswith(f"{scen}: workload.poisson.cdf = 'x.cdf': ") and needle in line, line


def test_a_cdf_file_is_found_next_to_the_scenario(tmp_path):
    (tmp_path / "mine.cdf").write_text("1000 0\n3000 100\n")
    cdf = resolve_cdf("mine.cdf", str(tmp_path / "s.yaml"))
    assert cdf.mean_bytes == 2000.0  # uniform between 1000 and 3000


def test_background_traffic_belongs_in_the_workload():
    sc = TrafficScenario.model_validate(tiny(network={"backend": "flow", "background": {"load": 0.1}}))
    with pytest.raises(UserError, match="network.background"):
        plan(sc)
