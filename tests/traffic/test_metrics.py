"""Summary figures from backend statistics, checked by hand on a 2-host fabric."""
from __future__ import annotations

import pytest

from heterosim.traffic.metrics import fabric_summary, in_bin, quantile_bins, slowdown_summary, SIZE_BINS
from netbackend.topo import Link, NetTopology

TOPO = NetTopology(hosts=["a", "b"], switches=["s"], links=[Link("a", "s", 100.0, 1000), Link("s", "b", 100.0, 1000)])


def test_pfc_fraction_queue_percentiles_and_utilisation_by_hand():
    sim_ns = 1_000_000
    extra = {
        "pfc_paused_ns": {"s->b": 250_000, "a->s": 50_000},
        "pfc_pause_frames_total": 7,
        "queue_samples": [(t, "s->b", q) for t, q in [(0, 999_999), (100_000, 0), (200_000, 1000), (300_000, 2000),
                                                       (400_000, 3000), (500_000, 4000)]],
        "hot_ports": ["s->b"],
        "max_queue_bytes": {"s->b": 5000, "a->s": 10},
        "mean_queue_bytes": {"s->b": 400.0},
        "ecn_marks": 3, "cnps_sent": 2, "drops": 0,
    }
    # a->s carried 6.25 MB in 1 ms at 100G = 50 %; s->b 12.5 MB = 100 %; the reverse directions nothing
    link_bytes = {("a", "s"): 6_250_000, ("s", "b"): 12_500_000}
    s = fabric_summary(extra, link_bytes, TOPO, sim_ns, warmup_ns=50_000)
    # 4 directed ports; paused 300 us in all over 4 x 1 ms
    assert s["pfc"]["paused_fraction_overall"] == pytest.approx(300_000 / 4_000_000)
    assert s["pfc"]["paused_fraction_max_port"] == pytest.approx(0.25)
    assert s["pfc"]["paused_fraction_per_port"] == pytest.approx({"s->b": 0.25, "a->s": 0.05})
    assert s["pfc"]["pause_frames"] == 7
    # the sample at t=0 is in the warm-up; the rest: 0, 1000, 2000, 3000, 4000 -> median 2000
    assert s["queue"]["samples"] == 5
    assert s["queue"]["sampled_p50_bytes"] == 2000
    assert s["queue"]["sampled_max_bytes"] == 4000
    assert s["queue"]["sampled_p95_bytes"] == pytest.approx(3800)  # linear between 3000 and 4000
    assert s["queue"]["max_bytes"] == 5000
    assert s["queue"]["mean_bytes_all_ports"] == pytest.approx(100.0)
    u = s["utilisation"]
    assert u["host_to_switch"] == {"mean": pytest.approx(0.25), "max": pytest.approx(0.5)}  # a->s, b->s
    assert u["switch_to_host"] == {"mean": pytest.approx(0.5), "max": pytest.approx(1.0)}  # s->a, s->b
    assert u["switch_to_switch"] is None
    assert (s["ecn_marks"], s["cnps_sent"], s["drops"]) == (3, 2, 0)


def test_no_queue_or_pfc_figures_from_a_backend_without_them():
    s = fabric_summary({}, {}, TOPO, 1000, 0)
    assert s["pfc"]["paused_fraction_overall"] is None and s["queue"]["max_bytes"] is None
    assert s["ecn_marks"] is None


def test_size_bins_cover_every_size_once():
    for size in (1, 999, 1000, 1001, 10_000, 10_001, 100_000, 999_999, 1_000_000, 10**9):
        hits = [name for name, lo, hi in SIZE_BINS if in_bin(size, lo, hi, name)]
        assert len(hits) == 1, (size, hits)
    assert [n for n, lo, hi in SIZE_BINS if in_bin(1000, lo, hi, n)] == ["<=1KB"]
    assert [n for n, lo, hi in SIZE_BINS if in_bin(1_000_000, lo, hi, n)] == [">=1MB"]


def test_slowdown_percentiles_per_bin_and_quantile_bins():
    rows = [(500, float(k)) for k in range(1, 101)] + [(2_000_000, 10.0)] * 4
    s = slowdown_summary(rows)
    small = s["by_size"][0]
    assert small["count"] == 100 and small["p50"] == pytest.approx(50.5) and small["p99"] == pytest.approx(99.01)
    assert s["by_size"][-1]["count"] == 4 and s["by_size"][-1]["p95"] == 10.0
    assert s["all"]["count"] == 104
    q = quantile_bins([(n, 1.0) for n in range(1, 101)], bins=20)
    assert len(q) == 20 and all(b["count"] == 5 for b in q)
    assert (q[0]["size_lo_bytes"], q[0]["size_hi_bytes"], q[-1]["size_hi_bytes"]) == (1, 5, 100)
