"""netplots: figures and per-port table from synthetic NetStats (ns-3-like and flow-like)."""
from __future__ import annotations

import csv

import pytest

from heterosim.results.netplots import paused_ns_per_node, plot_network, port_rows, sample_step, with_empty_samples
from netbackend.base import NetStats


def _ns3_like() -> NetStats:
    ports = ["leaf0->spine0", "leaf0->h1", "spine0->leaf1", "h0->leaf0"]
    samples = [(t * 10_000, p, (t * 37 + i * 1000) % 50_000) for t in range(50) for i, p in enumerate(ports[:3])]
    rates = [(t * 10_000, "h0", qp, 400.0 / (1 + qp + t % 3)) for t in range(20) for qp in (1, 2)]
    return NetStats(
        messages=3, bytes_delivered=3_000_000,
        fct_ns={1: (0, 100_000), 2: (0, 50_000), 3: (10_000, 30_000)},
        link_bytes={("leaf0", "spine0"): 1000, ("h0", "leaf0"): 5000, ("spine0", "leaf1"): 7},
        extra={
            "pfc_pause_frames": {"leaf0->h1": 3, "spine0->leaf1": 1},
            "pfc_pause_frames_received": {"h0->leaf0": 2},
            "pfc_paused_ns": {"leaf0->h1": 4_000, "leaf0->spine0": 1_000, "spine0->leaf1": 2_500},
            "ecn_marks_per_port": {"leaf0->spine0": 11},
            "drops_per_port": {},
            "mean_queue_bytes": {"leaf0->spine0": 1234.5, "leaf0->h1": 10.0},
            "max_queue_bytes": {"leaf0->spine0": 40_000},
            "queue_samples": samples, "hot_ports": ports[:3], "rate_samples_gbps": rates,
        })


def test_ns3_like_stats_write_every_file(tmp_path):
    written = {p.name for p in plot_network(tmp_path, _ns3_like())}
    assert written == {"queue_depth.png", "flow_rates.png", "pfc_pause.png", "network_stats.csv"}
    for name in written:
        assert (tmp_path / name).stat().st_size > 0
    rows = list(csv.DictReader(open(tmp_path / "network_stats.csv")))
    by_port = {r["port"]: r for r in rows}
    assert set(by_port) == {"leaf0->spine0", "leaf0->h1", "spine0->leaf1", "h0->leaf0"}
    assert by_port["leaf0->spine0"]["ecn_marks"] == "11"
    assert by_port["leaf0->spine0"]["tx_bytes"] == "1000"
    assert by_port["leaf0->h1"]["pfc_pause_frames_sent"] == "3"
    assert by_port["h0->leaf0"]["pfc_pause_frames_received"] == "2"
    assert by_port["leaf0->h1"]["node"] == "leaf0"
    assert by_port["h0->leaf0"]["drops"] == "0"  # measured (empty dict): zero, not blank


def test_pfc_pause_aggregates_ports_per_node():
    assert paused_ns_per_node(_ns3_like().extra) == {"leaf0": 5_000, "spine0": 2_500}


def test_flow_like_stats_only_table_and_fct_rates(tmp_path):
    stats = NetStats(messages=2, bytes_delivered=3000, fct_ns={1: (0, 1000), 2: (500, 2500)},
                     link_bytes={("h0", "leaf0"): 3100}, extra={"max_link_utilization": 0.5})
    # without message sizes there is no rate to draw
    assert {p.name for p in plot_network(tmp_path, stats)} == {"network_stats.csv"}
    (row,) = csv.DictReader(open(tmp_path / "network_stats.csv"))
    assert row["tx_bytes"] == "3100" and row["ecn_marks"] == "" and row["pfc_paused_ns"] == ""
    written = {p.name for p in plot_network(tmp_path, stats, message_bytes={1: 1000, 2: 2000})}
    assert written == {"network_stats.csv", "flow_rates.png"}


def test_empty_and_malformed_stats_write_nothing(tmp_path):
    assert plot_network(tmp_path, NetStats()) == []
    bad = NetStats(extra={"queue_samples": [(1, 2)], "pfc_paused_ns": "n/a", "rate_samples_gbps": None})
    assert plot_network(tmp_path, bad) == []
    assert port_rows(bad, bad.extra) == []
    assert list(tmp_path.iterdir()) == []


def test_queue_samples_drop_to_empty_between_bursts():
    """Backends keep a queue's samples while it is non-empty (and the first empty one); a plot must show it
    empty across the gap, not a line ramping from one burst's end to the next burst's start (the CC
    comparison's queue plot drew such ramps, 15 ms long on quickstart)."""
    xs = [1.0, 1.01, 1.02, 5.0, 5.01]  # ms, 10 us apart within a burst
    ys = [300.0, 200.0, 0.0, 400.0, 100.0]
    step = sample_step([xs])
    assert step == pytest.approx(0.01)
    gx, gy = with_empty_samples(xs, ys, step)
    assert gx == pytest.approx([1.0, 1.01, 1.02, 1.03, 4.99, 5.0, 5.01])
    assert gy == [300.0, 200.0, 0.0, 0.0, 0.0, 400.0, 100.0]
