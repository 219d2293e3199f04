"""A cluster run on the flow backend names the packet-level settings it ignores, as a single job does:
one console line, and ``warnings`` in the cluster summary and in each job's iteration summaries."""
from __future__ import annotations

import json
import sys

import pytest

from heterosim.cli import main

from .helpers import cluster, write


def test_cluster_run_warns_once_about_ignored_settings(tmp_path, capsys, monkeypatch):
    data = cluster([{"name": "a", "placement": {"policy": "packed", "num_gpus": 16}}])
    data["network"].update({"cc": "hpcc", "ecn": {"kmin_kb": 50, "kmax_kb": 400, "pmax": 0.2}})
    path = write(tmp_path, data)
    out = tmp_path / "r"
    monkeypatch.setattr(sys, "argv", ["heterosim", "run", str(path), "--out", str(out), "--quiet"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("warning: flow backend:"), err
    assert "network.cc" in err[0] and "network.ecn" in err[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["warnings"] == [err[0].removeprefix("warning: ")]
