"""``heterosim sweep`` on the batch engine: the points that differ only in what a variant expresses run as one
batch; their results equal the normal path's run of each point (the expected values come from the normal path,
``--no-batch``), and the sweep says which points ran where."""
from __future__ import annotations

import csv
from pathlib import Path

import yaml
from typer.testing import CliRunner

from heterosim.sweep import run_sweep
from heterosim.sweep.batched import plan, variant_path
from heterosim.sweep.worker import PointTask

ROOT = Path(__file__).resolve().parents[2]
PP_BUBBLE = ROOT / "tests" / "batch" / "pp-bubble.yaml"
SAME = ("iteration_time_s", "mfu", "model_tflops_per_gpu", "tokens_per_s")
"""Columns a batched point reports; they must equal the normal path's exactly."""


def _sweep(tmp_path: Path, parameters: dict) -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"scenario": str(PP_BUBBLE), "parameters": parameters}))
    return p


def _rows(path: Path) -> dict[str, dict]:
    with open(path) as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_batched_points_equal_the_normal_path(tmp_path):
    """Seeds x per-hop latency x straggler lists under compute contention (sm_share): every point batched,
    every reported column equal to the normal path's run of the point."""
    sweep = _sweep(tmp_path, {"seed": [0, 1], "network.per_hop_latency_ns": [0, 3000],
                              "cluster.stragglers": [[], [{"gpu": "h100-2/gpu0", "slowdown": 1.3}]]})
    over = {"simulation.compute_contention": "sm_share"}
    batched = run_sweep(sweep, out=tmp_path / "b", overrides=over, engine="numpy")
    normal = run_sweep(sweep, out=tmp_path / "n", overrides=over, batch=False, jobs=2, timeout_s=300)
    assert batched.ok and normal.ok
    assert sorted(batched.batch.points) == sorted(p.id for p in batched.points) and batched.batch.batches == 1
    a, b = _rows(batched.table), _rows(normal.table)
    assert len({r["iteration_time_s"] for r in b.values()}) >= 6  # (the points differ: the check means something)
    for pid, row in b.items():
        assert {k: a[pid][k] for k in SAME} == {k: row[k] for k in SAME}, pid
    assert "batch engine (numpy): 8 of 8 points in 1 batch" in batched.batch.line(8)


def test_points_are_grouped_by_what_changes_the_program():
    t = lambda i, o: PointTask(f"p{i}", "s.yaml", o, f"/x/{i}")  # noqa: E731
    tasks = [t(0, {"seed": 1, "parallelism.dp": 2}), t(1, {"seed": 2, "parallelism.dp": 2}),
             t(2, {"seed": 1, "parallelism.dp": 4}), t(3, {"seed": 2, "parallelism.dp": 4}),
             t(4, {"seed": 3, "parallelism.dp": 8})]
    groups = plan(tasks, None)
    assert [[x.point_id for x in g.tasks] for g in groups] == [["p0", "p1"], ["p2", "p3"]]  # (p4 alone: normal)
    assert [g.base for g in groups] == [{"parallelism.dp": 2}, {"parallelism.dp": 4}]
    assert plan(tasks, "ns3") == []
    assert variant_path("cluster.groups[1].overrides.nic_gbps") and variant_path("cluster.degraded_links")
    assert not variant_path("cluster.groups[1].num_nodes") and not variant_path("cluster.stragglers[0].slowdown")


def test_a_group_the_engine_refuses_runs_through_the_normal_path(tmp_path):
    """A NIC speed the fabric is sized from changes the program: the group runs normally, the CLI says why."""
    from heterosim.sweep.cli import app

    sweep = _sweep(tmp_path, {"cluster.groups[0].overrides.nic_gbps": [200, 100]})
    r = CliRunner().invoke(app, [str(sweep), "--out", str(tmp_path / "o"), "--engine", "numpy", "--jobs", "2",
                                 "--timeout", "300"])
    assert r.exit_code == 0, r.output
    assert "0 of 2 points" in r.output and "fabric.num_spines" in r.output
