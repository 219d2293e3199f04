"""``network.rng_run``: another draw of the run's random marks, with the ECMP hash kept (the scenario seed's)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from conformance import run_all  # noqa: E402

from netbackend.config import NetworkConfig  # noqa: E402
from netbackend.ns3 import create_ns3_backend  # noqa: E402

pytestmark = pytest.mark.ns3

MTU = 4096
"""A message that took another path would move at least its bytes (here >= 256 KB) between links; the
control packets that follow the marks (CNPs, 64 B each) move less than a packet."""


def _run(mode: str, seed: int, rng_run: int, **acc):
    """The traffic benchmark's rings and incast on a hashed leaf-spine (bench_ns3_accel.traffic_*)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_ns3_accel import traffic_messages, traffic_topology

    topo = traffic_topology()
    cfg = NetworkConfig(backend="ns3", cc="dcqcn", ecmp="hash", rng_run=rng_run, acceleration={"mode": mode, **acc})
    with create_ns3_backend(topo, cfg, seed) as b:
        for m in traffic_messages(topo, 1):
            b.send(m)
        done = run_all(b)
        return done, b.stats()


def _moved_links(a, b) -> list:
    return [k for k in set(a.link_bytes) | set(b.link_bytes)
            if abs(a.link_bytes.get(k, 0) - b.link_bytes.get(k, 0)) >= MTU]


@pytest.mark.parametrize("mode,acc", [("off", {}), ("auto", {"collisions": "fluid"})])
def test_rng_run_moves_the_marks_not_the_paths(mode, acc):
    """Packet level (RED's draws in the switches) and the fluid model (its sampled CNPs) both draw again;
    every message keeps its path, while another scenario seed re-hashes some."""
    _, base = _run(mode, 1, 1, **acc)
    _, again = _run(mode, 1, 1, **acc)
    _, other_run = _run(mode, 1, 2, **acc)
    _, other_seed = _run(mode, 2, 1, **acc)
    assert again.extra["ecn_marks"] == base.extra["ecn_marks"] and again.link_bytes == base.link_bytes
    assert other_run.extra["ecn_marks"] != base.extra["ecn_marks"]
    assert other_run.extra["ecn_marks"] > 0
    assert _moved_links(base, other_run) == []
    assert _moved_links(base, other_seed) != []


def test_rng_run_below_one_is_a_field_error():
    with pytest.raises(ValueError, match="rng_run"):
        NetworkConfig(backend="ns3", rng_run=0)


def test_rng_run_in_a_scenario_file_is_one_line(tmp_path):
    import subprocess

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "res"
    res = subprocess.run([sys.executable, "-m", "heterosim", "run", "scenarios/quickstart.yaml", "--out", str(out),
                          "--set", "network.rng_run=-3"], cwd=root, capture_output=True, text=True)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "network.rng_run" in res.stderr and "-3" in res.stderr
    assert not out.exists()

