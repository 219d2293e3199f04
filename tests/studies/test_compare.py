"""CC comparison study: metrics, outputs, errors (flow backend) and a packet-level run (ns-3)."""
from __future__ import annotations

import csv
import json

import pytest
import typer
from typer.testing import CliRunner

from heterosim.studies.cli import compare_command
from heterosim.studies.compare import (IdealFct, _parse_ccs, _probe, compare, over_draws, overlapping,
                                      slowdown_metrics, wire_bytes)
from netbackend.base import NetworkBackend
from netbackend.config import NetworkConfig
from hscommon.errors import UserError
from netbackend.registry import register_backend
from netbackend.topo import Link, NetTopology


def _chain(rates, delay_ns=1000):
    names = ["a"] + [f"s{i}" for i in range(len(rates) - 1)] + ["b"]
    return NetTopology(hosts=["a", "b"], switches=names[1:-1],
                       links=[Link(x, y, r, delay_ns) for x, y, r in zip(names, names[1:], rates)])


def _packet_train_ns(size, cfg, rates, delay_ns):
    """Reference: per-packet store-and-forward over the hops (independent of IdealFct's closed form)."""
    hdr = max(cfg.header_bytes, 40)
    full, rest = divmod(size, cfg.mtu_bytes)
    pkts = [cfg.mtu_bytes + hdr] * full + ([rest + hdr] if rest else [])
    prev = [0.0] * len(rates)
    for p in pkts:
        t = 0.0
        for h, r in enumerate(rates):
            t = max(t, prev[h]) + p * 8 / r
            prev[h] = t
            t += delay_ns
    return t


@pytest.mark.parametrize("size", [1, 4096, 4097, 100_000, 2_516_583])
@pytest.mark.parametrize("rates", [[400.0, 400.0], [100.0, 400.0, 400.0, 100.0]])
def test_ideal_fct_matches_packet_train(size, rates):
    cfg = NetworkConfig(backend="ns3")
    ideal = IdealFct(_chain(rates), cfg, "ns3")
    # both backends add the switch pipeline latency once per switch (same 78 B headers here)
    switches = (len(rates) - 1) * cfg.per_hop_latency_ns
    assert ideal(size, "a", "b") == pytest.approx(_packet_train_ns(size, cfg, rates, 1000) + switches, rel=1e-9)
    assert wire_bytes(size, cfg, "flow") == wire_bytes(size, cfg, "ns3")
    flow = IdealFct(_chain(rates), cfg, "flow")
    assert flow(size, "a", "b") == pytest.approx(ideal(size, "a", "b"))


def test_slowdown_bins():
    pairs = [(1000, 1.0), (2000, 3.0), (2_000_000, 1.5), (2_000_000, 2.5), (50 << 20, 10.0)]
    m = slowdown_metrics(pairs)
    assert m["slowdown_p50_<64KiB"] == pytest.approx(2.0)
    assert m["count_1-16MiB"] == 2 and m["slowdown_p50_1-16MiB"] == pytest.approx(2.0)
    assert m["slowdown_p99_>=16MiB"] == pytest.approx(10.0)
    assert m["slowdown_p50_64KiB-1MiB"] is None
    assert m["slowdown_p50"] == pytest.approx(2.5)


def test_unknown_cc_is_one_line_error():
    with pytest.raises(UserError, match=r"^cc = 'cubic': unknown congestion control"):
        _parse_ccs("dcqcn,cubic")
    with pytest.raises(UserError, match="listed twice"):
        _parse_ccs(["none", "none"])
    assert _parse_ccs(" dcqcn, none ") == ["dcqcn", "none"]


def test_compare_flow_backend_writes_table_and_plots(tiny_yaml, tmp_path):
    out = tmp_path / "cmp"
    rows = compare(tiny_yaml, "dcqcn,none", out=out, backend="flow", workers=2)
    assert [r["cc"] for r in rows] == ["dcqcn", "none"]
    for r in rows:
        assert r["iteration_time_s"] > 0 and r["net_messages"] > 0
        assert r["slowdown_p50"] >= 0.99  # nothing beats the message alone on its path
        assert r["ecn_marks"] is None  # the flow backend does not measure it
    table = list(csv.DictReader(open(out / "compare.csv")))
    assert [t["cc"] for t in table] == ["dcqcn", "none"]
    assert float(table[0]["iteration_time_s"]) == pytest.approx(rows[0]["iteration_time_s"])
    assert "| iteration_time_s |" in (out / "compare.md").read_text()
    assert (out / "compare_bars.png").stat().st_size > 0
    assert (out / "fct_slowdown_cdf.png").stat().st_size > 0


def test_compare_draws_run_each_setting_again(tiny_yaml, tmp_path):
    """--draws 2: each setting twice (network.rng_run 1 and 2), every run in compare.csv, the mean and range in
    compare.md; the flow backend draws nothing at random, so its two runs agree and the page says so."""
    out = tmp_path / "cmp"
    rows = compare(tiny_yaml, "dcqcn,none", out=out, backend="flow", workers=2, draws=2)
    assert [(r["cc"], r["rng_run"]) for r in rows] == [("dcqcn", 1), ("dcqcn", 2), ("none", 1), ("none", 2)]
    assert rows[0]["iteration_time_s"] == rows[1]["iteration_time_s"]
    table = list(csv.DictReader(open(out / "compare.csv")))
    assert [(t["cc"], t["rng_run"]) for t in table] == [("dcqcn", "1"), ("dcqcn", "2"), ("none", "1"), ("none", "2")]
    md = (out / "compare.md").read_text()
    assert "mean [min, max]" in md and "draws nothing at random" in md
    assert "| metric | dcqcn | none |" in md
    assert (out / "compare_bars.png").stat().st_size > 0
    with pytest.raises(UserError, match=r"^draws = 0: must be a whole number >= 1"):
        compare(tiny_yaml, "none", out=tmp_path / "x", backend="flow", draws=0)
    assert not (tmp_path / "x").exists()


def test_over_draws_and_overlapping_ranges():
    rows = [{"cc": "a", "rng_run": 1, "ecn_marks": 10, "iteration_time_s": 1.0, "drops": None},
            {"cc": "a", "rng_run": 2, "ecn_marks": 30, "iteration_time_s": 1.2, "drops": 0},
            {"cc": "b", "rng_run": 1, "ecn_marks": 25, "iteration_time_s": 2.0, "drops": 0},
            {"cc": "b", "rng_run": 2, "ecn_marks": 45, "iteration_time_s": 2.0, "drops": 0}]
    s = over_draws(rows)
    assert s["a"]["ecn_marks"] == (20, 10, 30) and s["b"]["ecn_marks"] == (35, 25, 45)
    assert s["a"]["iteration_time_s"] == pytest.approx((1.1, 1.0, 1.2))
    assert "drops" not in s["a"] and s["b"]["drops"] == (0, 0, 0)  # (a run without the figure: no mean)
    # marks: [10, 30] and [25, 45] overlap; iteration times [1.0, 1.2] and [2.0, 2.0] do not
    assert overlapping(s) == {"ecn_marks": [("a", "b")]}


def test_cli_compare(tiny_yaml, tmp_path):
    app = typer.Typer()
    app.command()(compare_command)
    app.command("other")(lambda: None)  # two commands, so typer keeps the sub-command name
    runner = CliRunner()
    res = runner.invoke(app, ["compare-command", str(tiny_yaml), "--cc", "dcqcn,bbr", "--backend", "flow"])
    assert res.exit_code == 2
    assert "cc = 'bbr': unknown congestion control" in res.output
    res = runner.invoke(app, ["compare-command", str(tiny_yaml), "--cc", "none", "--backend", "flow",
                              "--out", str(tmp_path / "o"), "--set", "training.global_batch_size=16"])
    assert res.exit_code == 0, res.output
    assert "iteration time" in res.output
    assert json.loads((tmp_path / "o" / "compare.json").read_text())[0]["cc"] == "none"
    res = runner.invoke(app, ["compare-command", str(tiny_yaml), "--cc", "none", "--backend", "flow",
                              "--out", str(tmp_path / "d"), "--draws", "0"])
    assert res.exit_code == 2 and "--draws = 0: must be >= 1" in res.output
    assert not (tmp_path / "d").exists()
    res = runner.invoke(app, ["compare-command", str(tiny_yaml), "--cc", "dcqcn,none", "--backend", "flow",
                              "--out", str(tmp_path / "d2"), "--draws", "2"])
    assert res.exit_code == 0, res.output
    assert "over 2 draws" in res.output
    assert len(json.loads((tmp_path / "d2" / "compare.json").read_text())) == 4


@register_backend("test-dcqcn-only")
class _DcqcnOnly(NetworkBackend):
    """Rejects every CC but DCQCN at construction, as a backend without an implementation does."""

    def __init__(self, topology, config=None, seed=0):
        super().__init__(topology, config, seed)
        if self.config.cc != "dcqcn":
            raise UserError("not implemented here", field="network.cc", value=self.config.cc)

    now_ns = 0

    def send(self, msg):
        raise NotImplementedError

    def advance(self, until_ns=None):
        return []

    def pending(self):
        return 0


def test_probe_reports_settings_a_backend_cannot_build():
    res = _probe(("test-dcqcn-only", NetworkConfig(), ["dcqcn", "none"]))
    assert res["dcqcn"] is None
    assert res["none"] == "network.cc = 'none': not implemented here"


@pytest.mark.ns3
def test_compare_ns3_dcqcn_vs_pfc_only(tiny_yaml, tmp_path):
    pytest.importorskip("cppyy")
    out = tmp_path / "ns3"
    rows = {r["cc"]: r for r in compare(tiny_yaml, ["dcqcn", "none"], out=out, backend="ns3", workers=2)}
    assert rows["dcqcn"]["cnps_sent"] > 0
    assert rows["none"]["cnps_sent"] == 0
    for r in rows.values():
        assert r["max_queue_bytes"] > 0 and r["drops"] == 0
    full = json.loads((out / "compare.json").read_text())
    for r in full:
        assert r["_slowdown_cdf"][0] >= 0.99  # the ideal FCT is a lower bound at packet level too
    assert (out / "queue_over_time.png").stat().st_size > 0


@pytest.mark.ns3
def test_compare_ns3_draws_move_the_marks(tiny_yaml, tmp_path):
    """Each draw reaches the switches' RED draws (network.rng_run): DCQCN's marks differ between the two runs."""
    pytest.importorskip("cppyy")
    rows = compare(tiny_yaml, ["dcqcn"], out=tmp_path / "d", backend="ns3", workers=2, draws=2)
    assert [r["rng_run"] for r in rows] == [1, 2]
    assert rows[0]["ecn_marks"] > 0 and rows[1]["ecn_marks"] > 0
    assert rows[0]["ecn_marks"] != rows[1]["ecn_marks"]


def test_cli_compare_measurements_flag(tiny_yaml, tmp_path):
    # a user table where every GEMM takes 1 ms (two rows, so the predictor has a shape to interpolate):
    # --measurements must make the compared runs use it (far slower than the analytical model), and a
    # missing folder is a one-line error naming the flag
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "gemm.csv").write_text("dtype,pass,m,n,k,ms\nbf16,fwd,1024,1024,1024,1.0\nbf16,fwd,4096,4096,4096,1.0\n")
    app = typer.Typer()
    app.command()(compare_command)
    app.command("other")(lambda: None)
    runner = CliRunner()
    times = {}
    for spec in ("none", str(tables)):
        out = tmp_path / f"o-{len(times)}"
        res = runner.invoke(app, ["compare-command", str(tiny_yaml), "--cc", "none", "--backend", "flow",
                                  "--out", str(out), "--measurements", spec])
        assert res.exit_code == 0, res.output
        times[spec] = json.loads((out / "compare.json").read_text())[0]["iteration_time_s"]
    # 4 layers / 2 stages x 8 micro-batches x (4 fwd + 8 bwd GEMMs) >= 96 ms of GEMMs per stage at 1 ms each
    assert times[str(tables)] > 0.096 > 10 * times["none"]
    res = runner.invoke(app, ["compare-command", str(tiny_yaml), "--cc", "none", "--backend", "flow",
                              "--measurements", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "--measurements = " in res.output and "Traceback" not in res.output
