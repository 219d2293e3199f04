"""Bad cluster scenarios: one line naming the file, the job and the field, exit 2, nothing written."""
from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from heterosim.cli import app

from .helpers import cluster, write

NODES_AB = [{"name": "a", "placement": {"nodes": ["h100-0", "h100-1"]}},
            {"name": "b", "placement": {"nodes": ["h100-2", "h100-3"]}}]


def _gpus(node: int, lo: int, hi: int) -> list[str]:
    return [f"h100-{node}/gpu{j}" for j in range(lo, hi)]


CASES = {
    # overlapping placements: b's nodes include a's h100-1
    "overlap": ({"placement": {"nodes": ["h100-1", "h100-2"]}}, ["jobs[1].placement", "'b'", "h100-1/gpu0", "overlap"]),
    # the same GPU in two explicit lists
    "overlap-gpus": ({"placement": {"gpus": _gpus(1, 7, 8) + _gpus(2, 0, 7)}}, ["jobs[1].placement", "overlap"]),
    # a policy that cannot find enough free nodes: a holds 2 of the 4 nodes
    "no-room": ({"placement": {"policy": "packed", "num_gpus": 24}}, ["jobs[1].placement.num_gpus", "24", "'b'",
                                                                       "does not fit"]),
    # the plan (TP 8) does not divide the placement's 12 GPUs
    "plan-vs-placement": ({"placement": {"gpus": _gpus(2, 0, 8) + _gpus(3, 0, 4)}},
                          ["jobs[1].placement", "'b'", "does not fit its placement"]),
    # an explicit list whose first TP group (ranks 0-7) spans two nodes
    "tp-across-nodes": ({"placement": {"gpus": _gpus(2, 4, 8) + _gpus(3, 0, 8) + _gpus(2, 0, 4)}},
                        ["jobs[1].placement", "'b'", "tensor-parallel", "h100-2", "h100-3"]),
    "rail-misfit": ({"placement": {"policy": "rail_aligned", "num_gpus": 12, "gpus_per_node": 8}},
                    ["jobs[1].placement.num_gpus", "multiple"]),
    "unknown-gpu": ({"placement": {"gpus": ["h100-9/gpu0"]}}, ["jobs[1].placement.gpus[0]", "h100-9/gpu0"]),
    "unknown-group": ({"placement": {"policy": "spread", "num_gpus": 8, "group": "a100"}},
                      ["jobs[1].placement.group", "a100"]),
    "two-ways": ({"placement": {"policy": "spread", "num_gpus": 8, "nodes": ["h100-2"]}}, ["jobs[1].placement"]),
    "policy-without-count": ({"placement": {"policy": "random"}}, ["jobs[1].placement", "num_gpus"]),
    "bad-policy": ({"placement": {"policy": "round_robin", "num_gpus": 8}}, ["jobs[1].placement.policy"]),
    "job-field": ({"colour": "red"}, ["jobs[1].colour", "unknown field"]),
    "job-plan": ({"parallelism": {"tp": 8, "pp": 1, "dp": 4}}, ["jobs[1].parallelism.dp", "'b'"]),
    "negative-start": ({"start_ns": -1}, ["jobs[1].start_ns", "-1"]),
    "duplicate-name": ({"name": "a"}, ["jobs[1].name", "'a'", "unique"]),
    "missing-scenario": ({"scenario": "nope.yaml"}, ["jobs[1].scenario", "nope.yaml"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_cluster_scenario(tmp_path, case):
    change, needles = CASES[case]
    jobs = [dict(NODES_AB[0]), {**NODES_AB[1], **change}]
    path = write(tmp_path, cluster(jobs))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "-q"])
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.strip().splitlines() if l.strip()]
    assert len(lines) == 1, res.output
    assert lines[0].startswith(f"error: {path}: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.yaml"]  # nothing else touched


def test_real_process_exit_code_and_no_traceback(tmp_path):
    jobs = [dict(NODES_AB[0]), {**NODES_AB[1], "placement": {"nodes": ["h100-1", "h100-2"]}}]
    path = write(tmp_path, cluster(jobs))
    proc = subprocess.run([sys.executable, "-m", "heterosim", "run", str(path), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "jobs[1].placement" in proc.stderr


def test_isolation_baseline_is_for_cluster_files_only(tmp_path):
    from pathlib import Path

    qs = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
    res = CliRunner().invoke(app, ["run", str(qs), "--isolation-baseline", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--isolation-baseline" in res.output
