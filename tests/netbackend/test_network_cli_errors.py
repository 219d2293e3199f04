"""Bad network settings through the real CLI: one line naming file, field and value; exit 2; no output."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"


@pytest.mark.parametrize("sets, needles", [
    (["network.cc=dcqcn_vendor"], ["quickstart.yaml", "network.cc", "dcqcn_vendor"]),
    (["network.pfc.threshold=static", "network.pfc.static_threshold_kb=2"],
     ["quickstart.yaml", "network.pfc", "resume_offset_kb"]),
    (["network.transport.qps_per_connection=0"], ["network.transport.qps_per_connection", "0"]),
    (["network.transport.qp_mode=per_pair"], ["network.transport.qp_mode", "per_pair"]),
    (["network.acceleration.theta=0"], ["network.acceleration.theta", "0"]),
    (["network.cc=swift", "network.swift.max_mdf=1.5"], ["quickstart.yaml", "network.swift.max_mdf", "1.5"]),
    (["network.cc=swift", "network.swift.fs_min_cwnd_packets=500"],
     ["quickstart.yaml", "network.swift", "fs_min_cwnd_packets"]),
])
def test_bad_network_setting_is_one_line(tmp_path, sets, needles):
    out = tmp_path / "out"
    args = [sys.executable, "-m", "heterosim", "run", str(QUICKSTART), "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert not out.exists()
