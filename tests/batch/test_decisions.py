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


def test_replay_walks_the_runs_as_the_coordinator_starts_them():
    """A hand-made lane: compute op 0, then TP collectives 1, 2, 3 chained after it; the link 1 -> 2 waits on op 9
    (another stream's) from the run started at 0 (check 0). Taken: one run 0-3, nothing held alone. Not taken: the
    run stops after 1; 2 starts a run, and 3 (a TP collective after a TP collective, no compute in the run) one of
    its own: 2 and 3 hold. A tie: undecided (check 0 named)."""
    from heterosim.sim.program import replay_holds

    lane = {"local": [0, 1, 2, 3], "comp": [True, False, False, False],
            "links": {0: (1, (), -1), 1: (2, (9,), -1), 2: (3, (), -1)}, "check_of": {(0, 2): 0},
            "can_hold": {1, 2, 3}}
    assert replay_holds(lane, lambda c: True) == (set(), -1)
    assert replay_holds(lane, lambda c: False) == ({2, 3}, -1)
    assert replay_holds(lane, lambda c: None) == (None, 0)
    del lane["check_of"][(0, 2)]  # (a link met without a check: undecided, never guessed)
    assert replay_holds(lane, lambda c: True) == (None, -2)


def test_a_lane_too_long_to_search_flags_every_variant(monkeypatch):
    """Where the search back along the chain links stops short (``MAX_BACK``), the lane's links are not all checks:
    every variant is flagged (run normally) rather than trusted."""
    import heterosim.sim.program as program
    from heterosim.batch import engine, variants
    from heterosim.batch.decisions import flipped

    monkeypatch.setattr(program, "MAX_BACK", 1)
    sc = pipeline.load(Path(__file__).parent / "incast.yaml", ["simulation.compute_contention=sm_share"])
    prep = pipeline.prepare(sc)
    prog = program.export_program(prep)
    res = engine.run_numpy(prog, variants.params(prog, [Variant()], prep.system, sc))
    (why,) = flipped(prog, res)
    assert why is not None and "not all checked" in why
