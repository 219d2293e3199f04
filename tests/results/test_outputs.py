"""A full run through the library API: every promised output, consistent with each other."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from heterosim import api

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("qs") / "run"
    res = api.run(ROOT / "scenarios" / "quickstart.yaml", out_dir=out,
                  overrides=["training.global_batch_size=16", "output.tables=all", "output.table_format=csv"])
    return res, out


def test_summary_has_the_promised_numbers(result):
    res, out = result
    s = json.loads((out / "summary.json").read_text())
    for key in ("iteration_time_s", "model_tflops_per_gpu", "mfu", "tokens_per_s", "breakdown", "per_rank"):
        assert key in s
    b = s["breakdown"]
    total = b["compute"] + b["exposed_comm_total"] + b["bubble"] + b["idle"]
    assert total == pytest.approx(1.0, abs=1e-9)
    assert 0 < s["mfu"] < 1
    assert s["tokens_per_s"] == pytest.approx(16 * 2048 / s["iteration_time_s"])
    # model TFLOP/s per GPU, Megatron's definition (Narayanan et al. 2021, eq. 3 without recomputation):
    # F = 72 B s l h^2 (1 + s / 6h + V / 12 l h), here GPT-3 1.7B (l 24, h 2304, V 51200), B 16, s 2048
    B, seq, l, h, V = 16, 2048, 24, 2304, 51200
    flops = 72 * B * seq * l * h**2 * (1 + seq / (6 * h) + V / (12 * l * h))
    assert s["model_tflops_per_gpu"] == pytest.approx(flops / s["iteration_time_s"] / 16 / 1e12, rel=1e-9)
    assert len(s["per_rank"]) == 16
    for r in s["per_rank"]:
        parts = r["compute"] + r["bubble"] + r["idle"] + sum(r[k] for k in r if k.startswith("exposed_"))
        assert parts == pytest.approx(s["iteration_time_s"], rel=1e-9)


def test_trace_is_chrome_trace_with_a_process_per_rank(result):
    res, out = result
    t = json.loads((out / "trace.json").read_text())
    events = t["traceEvents"]
    pids = {e["pid"] for e in events if e["ph"] == "X"}
    assert pids == set(range(16))
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
    begins = sum(1 for e in events if e["ph"] == "b")
    assert begins == sum(1 for e in events if e["ph"] == "e") > 0


def test_big_traces_fall_back_to_a_process_per_tp_group(result, tmp_path):
    from heterosim.results.trace import write_trace

    res, _ = result
    lane_ops = len(res.sim.programs[res.sim.lanes[0].program].ops)
    write_trace(tmp_path / "t.json", res.sim, res.prepared.ir, max_events=len(res.sim.lanes) * lane_ops * 1.2)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events if e["ph"] == "X"} == {lane.ranks[0] for lane in res.sim.lanes}
    names = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
    assert any("(TP group)" in n for n in names)
    # a tiny budget samples by the rule written in the metadata: every stage, a few replicas, the slowest path
    write_trace(tmp_path / "t.json", res.sim, res.prepared.ir, max_events=10)
    trace = json.loads((tmp_path / "t.json").read_text())
    events = trace["traceEvents"]
    meta = trace["metadata"]
    assert "slowest" in meta["sampling"]["rule"]
    stages = {res.prepared.ir.program_of(pid).stage for pid in {e["pid"] for e in events if e["ph"] == "X"}}
    assert stages == {0, 1}
    shown = {e["pid"] for e in events if e["ph"] == "X"}
    dp = res.prepared.ir.groups["dp"]
    want = set(meta["sampling"]["replicas"])
    assert want >= {0, len(dp[0]) - 1}
    assert meta["lanes_shown"] == len(shown)
    # exactly the TP groups of the named replicas, plus the first TP group of every program
    expect = {l.ranks[0] for l in res.sim.lanes if dp[res.prepared.ir.group_id(l.ranks[0], "dp")].index(l.ranks[0])
              in want}
    first = {}
    for l in res.sim.lanes:
        first.setdefault(l.program, l.ranks[0])
    assert shown == expect | set(first.values())


def test_tables_list_every_op_and_message(result):
    res, out = result
    with open(out / "ops.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == sum(len(res.sim.programs[l.program].ops) for l in res.sim.lanes)
    assert all(int(r["end_ns"]) >= int(r["start_ns"]) >= 0 for r in rows)
    with open(out / "messages.csv") as fh:
        msgs = list(csv.DictReader(fh))
    assert len(msgs) == len(res.sim.messages) > 0
    assert {m["link"] for m in msgs} >= {"net"}
    for name in ("timeline.png", "breakdown.png"):
        assert (out / name).stat().st_size > 1000


def test_default_run_writes_no_per_op_or_per_message_table(tmp_path):
    res = api.run(ROOT / "scenarios" / "quickstart.yaml", out_dir=tmp_path / "o",
                  overrides=["training.global_batch_size=16", "output.plots=false", "output.trace=false"])
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [".heterosim-results", "network.json", "summary.json"]
    assert res.sim.messages == []  # nothing asked for them, so none were kept


def test_parquet_without_pyarrow_is_a_one_line_error_before_simulating(tmp_path, monkeypatch):
    import builtins

    from heterosim.errors import UserError

    real = builtins.__import__

    def no_pyarrow(name, *a, **k):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(UserError, match=r"quickstart.yaml: output.table_format = 'parquet': Parquet tables need pyarrow"):
        api.run(ROOT / "scenarios" / "quickstart.yaml", out_dir=tmp_path / "o",
                overrides=["output.tables=ops", "output.table_format=parquet"])
    assert not (tmp_path / "o").exists()


def test_failed_write_leaves_nothing(result, tmp_path, monkeypatch):
    res, _ = result
    from heterosim.results import plots

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(plots, "plot_breakdown", boom)
    with pytest.raises(RuntimeError):
        api.write_results(res, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
