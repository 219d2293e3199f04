"""What `heterosim run CLUSTER.yaml` writes: a stamped results folder with per-job summaries, the fabric
report, a trace with a process per job, the iteration-time plot."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from heterosim.cli import app
from heterosim.results.writer import STAMP

from .helpers import cluster, write


def test_cli_writes_per_job_results(tmp_path):
    data = cluster([{"name": "left", "placement": {"policy": "spread", "num_gpus": 16}, "iterations": 2},
                    {"name": "right", "placement": {"policy": "spread", "num_gpus": 16}}], oversubscription=2.0)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(write(tmp_path, data)), "--out", str(out), "--isolation-baseline"])
    assert res.exit_code == 0, res.output
    assert "left" in res.output and "slowdown" in res.output
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [STAMP, "summary.json", "fabric.json", "network.json", "trace.json", "iterations.png"])
    s = json.loads((out / "summary.json").read_text())
    assert s["kind"] == "cluster" and [j["name"] for j in s["jobs"]] == ["left", "right"]
    left = s["jobs"][0]
    assert len(left["iteration_time_s"]) == 2 and len(left["alone"]["iteration_time_s"]) == 2
    assert left["slowdown"] == sum(left["iteration_time_s"]) / sum(left["alone"]["iteration_time_s"])
    for it in left["iterations"]:
        b = it["breakdown"]
        total = b["compute"] + b["exposed_comm_total"] + b["bubble"] + b["idle"]
        assert abs(total - 1.0) < 1e-9  # fractions of the iteration add up
    fab = json.loads((out / "fabric.json").read_text())
    shared = [l for l in fab["links"] if l["shared_by"] == ["left", "right"]]
    assert len(shared) == fab["shared_links"] == s["fabric"]["shared_links"] > 0
    for link in fab["links"]:  # a link carries at most its line rate over the run
        assert sum(link["utilization"].values()) <= 1.0 + 1e-9
    trace = json.loads((out / "trace.json").read_text())
    procs = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert {"job left (16 GPUs)", "job right (16 GPUs)"} <= procs
    iters = [e for e in trace["traceEvents"] if e.get("cat") == "iteration" and e["pid"] == 1]
    assert len(iters) == 2
    assert (out / "iterations.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_api_run_cluster_matches_cli_dispatch(tmp_path):
    from heterosim import api

    path = write(tmp_path, cluster([{"name": "a", "placement": {"nodes": ["h100-0", "h100-1"]}},
                                    {"name": "b", "placement": {"nodes": ["h100-2", "h100-3"]}}]))
    assert api.is_cluster_file(path) and not api.is_cluster_file(tmp_path / "missing.yaml")
    res = api.run_cluster(path, isolation_baseline=True)
    assert res.summary["jobs"][0]["placement"][0] == "h100-0/gpu0"
    # the baseline runs (one job each) leave the shared run's bookkeeping as it was
    for job in res.jobs_run:
        assert all(res.merged_ir.programs[p].label.startswith(f"{job.name}:") for p in job.programs)


def test_validate_checks_a_cluster_without_simulating(tmp_path):
    path = write(tmp_path, cluster([{"name": "a", "placement": {"policy": "spread", "num_gpus": 16}}]))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 0, res.output
    assert "a: 16 GPUs on h100-0, h100-2" in res.output  # one node per leaf (two nodes per leaf here)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.yaml"]


def test_tables_when_asked(tmp_path):
    import csv

    data = cluster([{"name": "a", "placement": {"nodes": ["h100-2", "h100-3"]}}],
                   output={"tables": "all", "table_format": "csv", "trace": False, "plots": False})
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(write(tmp_path, data)), "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert {"ops.csv", "messages.csv", "summary.json"} <= {p.name for p in out.iterdir()}
    with open(out / "messages.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {int(r["src_rank"]) for r in rows if int(r["src_rank"]) >= 0} <= set(range(16, 32))  # nodes 2, 3
