"""Issue 40: the flow backend says which packet-level settings it ignores, once per run.

The flow backend is max-min fair sharing with fixed latencies (netbackend/flow.py docstring): no
packets, ACKs, queues, marks or pauses, so congestion control, ECN, PFC, switch buffers, transport
timers and packet-level acceleration have nothing to act on. A scenario that sets any of them to a
value other than its default and runs on the flow backend gets one warning line naming them all.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from heterosim import api
from heterosim.config.loader import load_scenario
from netbackend.config import NetworkConfig
from netbackend.flow import FLOW_SETTINGS, PACKET_LEVEL_SETTINGS, FlowBackend
from tiny_scenario import TINY_YAML, write

SETS = ["network.cc=hpcc", "network.ecn.kmin_kb=100", "network.acceleration.mode=auto"]
EXPECTED = ("flow backend: network.cc, network.ecn.kmin_kb, network.acceleration.mode are packet-level settings "
            "and are ignored (use --backend ns3)")


def test_defaults_warn_nothing():
    assert FlowBackend.config_warnings(NetworkConfig()) == []


def test_a_default_value_written_out_warns_nothing():
    assert FlowBackend.config_warnings(NetworkConfig(cc="dcqcn", pfc={"enabled": True})) == []


def test_one_line_names_every_changed_field_in_declaration_order():
    cfg = NetworkConfig(acceleration={"mode": "auto"}, ecn={"kmin_kb": 100}, cc="hpcc")
    assert FlowBackend.config_warnings(cfg) == [EXPECTED]


def test_one_field_reads_as_one():
    assert FlowBackend.config_warnings(NetworkConfig(pfc={"pause_quanta_ns": 5000})) == [
        "flow backend: network.pfc.pause_quanta_ns is a packet-level setting and is ignored (use --backend ns3)"]


def test_settings_the_flow_backend_reads_warn_nothing():
    cfg = NetworkConfig(mtu_bytes=1024, header_bytes=60, ecmp="rail", per_hop_latency_ns=300, wall_limit_s=10)
    assert FlowBackend.config_warnings(cfg) == []


def test_every_network_field_is_classified():
    """A new NetworkConfig field must say whether the flow backend reads it (or it would be ignored silently)."""
    fields = set(NetworkConfig.model_fields)
    assert not FLOW_SETTINGS & PACKET_LEVEL_SETTINGS
    assert fields == FLOW_SETTINGS | PACKET_LEVEL_SETTINGS


def test_summary_records_the_warning_and_ns3_gets_none(tmp_path):
    path = write(tmp_path, TINY_YAML)
    sc = load_scenario(path, SETS)
    res = api.simulate(api.prepare(sc), record_messages=False)
    assert res.summary["warnings"] == [EXPECTED]
    plain = api.simulate(api.prepare(load_scenario(path)), record_messages=False)
    assert plain.summary["warnings"] == []
    assert api.config_warnings(sc, backend="ns3") == []
    assert api.config_warnings(sc) == [EXPECTED]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "heterosim", *args], capture_output=True, text=True, timeout=300)


def test_cli_run_and_validate_print_it_once(tmp_path):
    path = write(tmp_path, TINY_YAML)
    sets = [a for s in SETS for a in ("--set", s)]
    out = tmp_path / "out"
    run = _cli("run", str(path), "--out", str(out), "--quiet", *sets)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert [l for l in run.stderr.splitlines() if "warning" in l] == [f"warning: {EXPECTED}"]
    assert json.loads((out / "summary.json").read_text())["warnings"] == [EXPECTED]
    val = _cli("validate", str(path), *sets)
    assert val.returncode == 0, val.stderr
    assert [l for l in val.stderr.splitlines() if "warning" in l] == [f"warning: {EXPECTED}"]
    quiet = _cli("validate", str(path))
    assert "warning" not in quiet.stderr
