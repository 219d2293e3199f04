"""heterosim traffic end to end (flow backend: fast): output files, bad input -> one line, exit 2, nothing written."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from heterosim.traffic.build import plan
from heterosim.traffic.config import TrafficScenario
from heterosim.traffic.metrics import IdealFct
from heterosim.traffic.run import FCT_COLUMNS, run_traffic

from .conftest import TINY, tiny


def cli(*args):
    return subprocess.run([sys.executable, "-m", "heterosim", "traffic", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def test_outputs_of_one_setting(write_yaml, tmp_path):
    path = write_yaml(tiny(workload={**TINY["workload"], "patterns": [
        {"kind": "permutation", "flow_bytes": 20_000, "start_ns": 100_000}]}))
    out = tmp_path / "res"
    proc = cli(path, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [".heterosim-results", "fct.csv", "queue_cdf.png",
                                                     "slowdown_vs_size.png", "summary.json"]
    rows = list(csv.DictReader(open(out / "fct.csv")))
    assert tuple(rows[0]) == FCT_COLUMNS
    sc = TrafficScenario.model_validate(tiny(workload={**TINY["workload"], "patterns": [
        {"kind": "permutation", "flow_bytes": 20_000, "start_ns": 100_000}]}))
    p = plan(sc)
    assert len(rows) == len(p.flows)  # every flow, finished or not
    ideal = IdealFct(p.topology, sc.network, "flow")
    for r, m in zip(rows, p.flows):
        assert (int(r["id"]), r["src"], r["dst"], int(r["size_bytes"]), int(r["start_ns"])) == (
            m.id, m.src, m.dst, m.size_bytes, m.start_ns)
        assert float(r["ideal_fct_ns"]) == pytest.approx(ideal(m.size_bytes, m.src, m.dst), abs=0.05)
        assert float(r["slowdown"]) == pytest.approx(int(r["fct_ns"]) / float(r["ideal_fct_ns"]), rel=1e-5)
        assert float(r["slowdown"]) >= 1 - 1e-9  # nothing beats its ideal
        assert r["in_stats"] == ("1" if m.start_ns >= 200_000 else "0")  # warm-up excluded
    assert {r["kind"] for r in rows} == {"poisson", "incast", "pattern"}
    s = json.load(open(out / "summary.json"))
    counted = [r for r in rows if r["in_stats"] == "1"]
    assert s["flows"]["finished_in_stats"] == len(counted) and s["flows"]["unfinished_in_stats"] == 0
    assert s["slowdown"]["all"]["count"] == len(counted)
    assert sum(b["count"] for b in s["slowdown"]["by_size"]) == len(counted)
    small = sorted(float(r["slowdown"]) for r in counted if int(r["size_bytes"]) <= 1000)
    assert s["slowdown"]["by_size"][0]["bin"] == "<=1KB" and s["slowdown"]["by_size"][0]["count"] == len(small)
    assert s["slowdown"]["by_size"][0]["max"] == pytest.approx(small[-1], rel=1e-5)
    assert len(s["slowdown"]["by_size_quantile"]) == 20
    assert s["offered_load"]["target_poisson_plus_incast"] == pytest.approx(0.32)
    for key in ("pfc", "queue", "ecn_marks", "cnps_sent", "drops", "utilisation"):
        assert key in s
    assert 0 < s["utilisation"]["host_to_switch"]["mean"] < 1


def test_single_lone_flow_has_slowdown_one(tmp_path):
    """Flow backend: a flow alone on the fabric takes exactly its ideal FCT, up to rounding: the backend
    rounds the drain time and the path latency up to whole ns each (< 2 ns)."""
    sc = TrafficScenario.model_validate(tiny(workload={"incast": [
        {"senders": 1, "bytes_per_sender": s, "times_ns": [i * 300_000], "receiver": "h7"}
        for i, s in enumerate([100, 1500, 64_000, 1_000_000])]}, warmup_ns=0))
    [summary] = run_traffic(sc, tmp_path / "lone")
    rows = list(csv.DictReader(open(tmp_path / "lone" / "fct.csv")))
    assert len(rows) == 4
    for r in rows:
        assert 0 <= int(r["fct_ns"]) - float(r["ideal_fct_ns"]) < 2.0
    assert summary["slowdown"]["all"]["max"] < 1.001


def bad_cdf(tmp_path):
    (tmp_path / "bad.cdf").write_text("100 10\n50 20\n1000 100\n")  # sizes decrease
    return {"workload": {"poisson": {"cdf": "bad.cdf", "load": 0.3}}}


@pytest.mark.parametrize("change,needles", [
    (lambda tp: bad_cdf(tmp_path=tp), ["workload.poisson.cdf", "'bad.cdf'", "non-decreasing"]),
    (lambda tp: {"workload": {"poisson": {"cdf": "nonexistent.txt", "load": 0.3}}},
     ["workload.poisson.cdf", "nonexistent.txt"]),
    (lambda tp: {"workload": {"poisson": {"cdf": "websearch", "load": 0.0}}}, ["workload.poisson.load", "0.0"]),
    (lambda tp: {"workload": {"poisson": {"cdf": "websearch", "load": 1.0}}}, ["workload.poisson.load", "1.0"]),
    (lambda tp: {"workload": {"incast": [{"senders": 8, "bytes_per_sender": 1000, "rate_per_s": 10}]}},
     ["workload.incast[0].senders", "8"]),
    (lambda tp: {"duration_ns": 200_000}, ["duration_ns", "200000", "warmup_ns"]),
    (lambda tp: {"network": {"backend": "flow", "cc": "reno"}}, ["network.cc", "reno"]),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(write_yaml, tmp_path, change, needles):
    path = write_yaml(tiny(**change(tmp_path)))
    out = tmp_path / "res"
    proc = cli(path, "--out", out)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for n in [str(path), *needles]:
        assert n in lines[0], lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith((".yaml", ".cdf"))) == []


def test_unknown_cc_on_the_command_line_leaves_an_existing_out_dir_alone(write_yaml, tmp_path):
    out = tmp_path / "res"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = cli(write_yaml(TINY), "--out", out, "--cc", "dcqcn,cubic")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cc = 'cubic'" in lines[0] and "unknown congestion control" in lines[0]
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
