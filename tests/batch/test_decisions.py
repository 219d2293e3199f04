"""Chain decisions taken from the baseline run (compute contention, ``heterosim.batch.decisions``): a variant under
which the coordinator would hold SMs on other local TP collectives is found, and its reported result is the flow
backend's. The expected values come from the flow backend's run of each variant (its iteration time, and the holds
its coordinator took, recorded from ``ContentionTracker.start_local``), never from the batch engine.

The constructed case: on the quickstart (ZeRO all-gathers beside TP-chained layers, sm_share), a GPU of the first
node twice as slow delays its lane's compute against the all-gathers, so that a TP all-gather of the last layers
starts a run of its own (holding SMs) where the baseline chained it; the second node's GPUs do not reorder them.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import yaml

from heterosim import pipeline
from heterosim.batch.variants import Variant

sys.path.insert(0, str(Path(__file__).parent))
from test_batch_engine import flow_backend_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def test_whatif_runs_a_variant_that_flips_a_hold_through_the_flow_backend(tmp_path):
    """``--vary gpu=2``: the flagged variants are exactly those whose flow backend run holds SMs otherwise (some,
    not all: the check can fail both ways); every reported time equals the flow backend's; the CSV and summary say
    which variants ran where and why."""
    from heterosim.whatif import whatif

    out = tmp_path / "wi"
    res = whatif(QUICKSTART, vary=["gpu=2"], out_dir=out, engine="auto", batch=7)
    sc = pipeline.load(QUICKSTART)
    runs = [flow_backend_run(sc, Variant(stragglers=v.stragglers)) for v in res.variants]
    differs = [h != runs[0][1] for _, h in runs]
    assert 0 < sum(differs) < len(differs) - 1, differs
    assert res.ran_on == ["flow backend" if d else "batch" for d in differs]
    assert res.times_ns.tolist() == [t for t, _ in runs]
    rows = list(csv.DictReader(open(out / "variants.csv")))
    assert [r["engine"] for r in rows] == res.ran_on
    assert all(("hold SMs" in r["note"]) == (r["engine"] == "flow backend") for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    rerun = summary["flow_backend_reruns"]
    assert rerun["count"] == sum(differs) and len(rerun["variants"]) == sum(differs)
    assert [x["flow_backend_ns"] for x in rerun["variants"]] == [t for (t, _), d in zip(runs, differs) if d]


def test_sweep_leaves_a_point_that_flips_a_hold_to_the_normal_path(tmp_path):
    """Two straggler points batched together: the one whose run holds SMs otherwise is run normally (named in the
    report), its row the normal path's; the other stays batched."""
    from heterosim.sweep import run_sweep

    flip = [{"gpu": "h100-0/gpu0", "slowdown": 2.0}]
    keep = [{"gpu": "h100-1/gpu0", "slowdown": 2.0}]
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"scenario": str(QUICKSTART), "parameters": {"cluster.stragglers": [flip, keep]}}))
    res = run_sweep(sweep, out=tmp_path / "s", engine="numpy")
    assert res.ok
    ids = [p.id for p in res.points]
    assert len(ids) == 2 and len(res.batch.points) == 1 and list(res.batch.flipped) != res.batch.points
    (flipped_id,) = res.batch.flipped
    assert "hold SMs" in res.batch.flipped[flipped_id] and f"normal path for point {flipped_id}" in res.batch.line(2)
    sc = pipeline.load(QUICKSTART)
    t_flip = flow_backend_run(sc, Variant(stragglers=(("h100-0/gpu0", 2.0),)))[0]
    t_keep = flow_backend_run(sc, Variant(stragglers=(("h100-1/gpu0", 2.0),)))[0]
    with open(res.table) as fh:
        got = {r["id"]: float(r["iteration_time_s"]) for r in csv.DictReader(fh)}
    assert got[flipped_id] == t_flip / 1e9 and got[res.batch.points[0]] == t_keep / 1e9
