"""Packet level: two CC settings side by side on a tiny fabric (each in its own process)."""
from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from heterosim.traffic.run import run_traffic  # noqa: E402

from .conftest import tiny  # noqa: E402

pytestmark = [pytest.mark.ns3, pytest.mark.slow]  # three spawned processes load ns-3: ~30 s on 2 cores

LONE = [(0, 500), (20_000, 100_000), (60_000, 1_000_000)]
"""(start_ns, bytes): flows alone on the fabric, before the incast starts at 200 us."""


def test_two_cc_settings_side_by_side(write_yaml, tmp_path):
    lone = [{"senders": 1, "bytes_per_sender": b, "times_ns": [t], "receiver": "h7"} for t, b in LONE]
    incast = {"senders": 6, "bytes_per_sender": 300_000, "times_ns": [200_000], "receiver": "h0"}
    path = write_yaml(tiny(network={"backend": "ns3", "mtu_bytes": 1024},
                           workload={"incast": lone + [incast]}, duration_ns=300_000, warmup_ns=0))
    out = tmp_path / "cmp"
    summaries = run_traffic(path, out, ccs="dcqcn,none", jobs=2)
    assert [s["cc"] for s in summaries] == ["dcqcn", "none"]
    names = sorted(p.name for p in out.iterdir())
    assert names == [".heterosim-results", "comparison.csv", "comparison.json", "comparison.md", "dcqcn", "none", "queue_cdf.png",
                     "slowdown_vs_size.png"]
    table = list(csv.DictReader(open(out / "comparison.csv")))
    assert [r["cc"] for r in table] == ["dcqcn", "none"]
    md = (out / "comparison.md").read_text()
    assert "| slowdown_p95_<=1KB |" in md and "| pfc_paused_fraction |" in md
    for cc, s in zip(("dcqcn", "none"), summaries):
        assert json.load(open(out / cc / "summary.json")) == json.loads(json.dumps(s))
        rows = list(csv.DictReader(open(out / cc / "fct.csv")))
        assert len(rows) == 3 + 6 and all(r["fct_ns"] for r in rows)
        # a flow alone on the fabric finishes in its ideal time, whatever the CC (1 % for packet effects)
        for r in rows[:3]:
            assert 0.99 <= float(r["slowdown"]) <= 1.01, (cc, r)
        # 6 x 300 KB into one 100G port: the incast takes at least 6x one flow's ideal
        assert min(float(r["slowdown"]) for r in rows[3:]) > 1.5
        assert s["drops"] == 0
        assert s["queue"]["max_bytes"] > 400_000  # the incast queue passes Kmin at 100G (400 KB)
    dcqcn, none = summaries
    assert dcqcn["ecn_marks"] > 0 and dcqcn["cnps_sent"] > 0
    assert none["cnps_sent"] == 0


def test_fluid_collisions_say_where_pfc_could_have_paused(write_yaml, tmp_path):
    """The fluid collision model has no PFC. On an incast whose ingress queues pass a static 20 KB PAUSE
    threshold, packet level pauses; the fluid run must not hand back its "0 paused" silently: the
    summary lists the switches where a PAUSE could have fired and the console warns (issue 12: a run
    never silently returns a wrong answer)."""
    from .test_cli_outputs import cli

    incast = {"senders": 6, "bytes_per_sender": 1_000_000, "times_ns": [0], "receiver": "h0"}
    net = {"backend": "ns3", "mtu_bytes": 1024, "pfc": {"threshold": "static", "static_threshold_kb": 20}}
    runs = {}
    for collisions in ("packet", "fluid"):
        path = write_yaml(tiny(network={**net, "acceleration": {"mode": "auto", "collisions": collisions}},
                               workload={"incast": [incast]}, duration_ns=10_000, warmup_ns=0), f"{collisions}.yaml")
        out = tmp_path / collisions
        proc = cli(path, "--out", out)
        assert proc.returncode == 0, proc.stderr
        runs[collisions] = (proc, json.load(open(out / "summary.json")))
    proc, s = runs["packet"]
    assert s["pfc"]["pause_frames"] > 0  # the PAUSE does fire at packet level
    assert not (s["simulation"]["acceleration"].get("fluid_pfc") or {}).get("possible_at")
    assert "does not simulate PFC" not in proc.stderr
    proc, s = runs["fluid"]
    acc = s["simulation"]["acceleration"]
    assert acc["bytes_fluid"] > 0 and s["pfc"]["pause_frames"] == 0
    assert [p["switch"] for p in acc["fluid_pfc"]["possible_at"]], acc["fluid_pfc"]
    assert "does not simulate PFC" in proc.stderr and "PFC could have paused (fluid)" in proc.stdout
