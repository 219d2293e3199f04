"""DCQCN as ConnectX NICs default it (issue 41, "Presets named for what they are").

Three settings the HPCC simulator's Mellanox model (the ``dcqcn`` preset) leaves out are options of every
DCQCN preset: the minimum decrease factor (NVIDIA ``rpg_min_dec_fac``), CNP pacing at the notification point
(``min_time_between_cnps``: the receiver's CNP packets at most once per QP per interval) and the rate-increase
byte counter (``rpg_byte_reset``).  ``dcqcn_cx`` sets them at ConnectX defaults; ``dcqcn`` and ``dcqcn_paper``
keep their sources' values (no floor, ACK-piggybacked / 50 us CNPs, byte counter off / 10 MB).

The arithmetic is checked in C++ by hand (suite heterosim-rdma-cc): a cut floored by the factor, and a burst of
100 CE-marked packets inside one pacing interval answered by one CNP and one cut.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from netbackend.config import DCQCN_PRESETS, DcqcnConfig, NetworkConfig, resolved_dcqcn  # noqa: E402
from netbackend.ns3 import unit_test_command  # noqa: E402
from netbackend.ns3 import scenarios as sc  # noqa: E402

pytestmark = pytest.mark.ns3
_ROOT = Path(__file__).resolve().parents[2]


def test_cxx_min_decrease_factor_and_cnp_pacing_by_hand():
    cmd = [c if not c.startswith("--suite=") else "--suite=heterosim-rdma-cc" for c in unit_test_command()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("PASS DCQCN minimum decrease factor floors one cut",
                 "PASS CNP pacing: a CE burst within one interval yields one CNP and one cut"):
        assert name in res.stdout, res.stdout


def test_cx_preset_is_the_vendor_column_plus_the_three_connectx_settings():
    vendor, cx = resolved_dcqcn(NetworkConfig(cc="dcqcn")), resolved_dcqcn(NetworkConfig(cc="dcqcn_cx"))
    # NVIDIA: rpg_min_dec_fac 50 (%), min_time_between_cnps 4 (us), rpg_byte_reset 32767 (bytes); CNPs are
    # separate packets (the notification point's interval mode)
    assert (cx["min_decrease_factor"], cx["cnp_mode"], cx["cnp_interval_ns"], cx["byte_counter_bytes"]) == (
        0.5, "interval", 4_000, 32_767)
    changed = {k for k in vendor if vendor[k] != cx[k]}
    assert changed == {"min_decrease_factor", "cnp_mode", "cnp_interval_ns", "byte_counter_bytes"}, changed
    assert DCQCN_PRESETS["dcqcn"]["min_decrease_factor"] == DCQCN_PRESETS["dcqcn_paper"]["min_decrease_factor"] == 0
    over = resolved_dcqcn(NetworkConfig(cc="dcqcn_cx", dcqcn=DcqcnConfig(byte_counter_bytes=0)))
    assert over["byte_counter_bytes"] == 0 and over["min_decrease_factor"] == 0.5


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_bad_min_decrease_factor_is_rejected(value):
    with pytest.raises(ValidationError):
        DcqcnConfig(min_decrease_factor=value)


def test_bad_min_decrease_factor_is_a_one_line_cli_error(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "heterosim", "traffic", str(_ROOT / "scenarios/traffic/dcqcn-incast.yaml"),
                          "--cc", "dcqcn_cx", "--set", "network.dcqcn.min_decrease_factor=1.5", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, cwd=_ROOT)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "network.dcqcn.min_decrease_factor" in lines[0] and "1.5" in lines[0], res.stderr
    assert "Traceback" not in res.stderr and not out.exists()


def _incast4(cc, **dcqcn):
    return sc.incast(4, size_bytes=40_000_000, cfg=NetworkConfig(backend="ns3", cc=cc, dcqcn=DcqcnConfig(**dcqcn)))


def test_min_decrease_factor_binds_only_above_one_half():
    """A cut multiplies the rate by 1 - alpha/2 with alpha <= 1, so by at least 0.5: a floor of 0.5 (ConnectX's
    default) never binds and the run is the same to the nanosecond; a floor of 0.9 makes every cut smaller, so
    the senders need more of them (more CNPs) to hold the same incast."""
    base = _incast4("dcqcn")
    half = _incast4("dcqcn", min_decrease_factor=0.5)
    assert half["fct_ns"] == base["fct_ns"] and half["cnps"] == base["cnps"]
    tight = _incast4("dcqcn", min_decrease_factor=0.9)
    assert tight["fct_ns"] != base["fct_ns"] and tight["cnps"] > base["cnps"], (tight["cnps"], base["cnps"])


def test_cnp_pacing_bounds_the_cnps_per_qp():
    """Paced at 4 us per QP, N senders get at most N x (their time / 4 us + 1) CNPs, and marks arriving within an
    interval of the last CNP get none (fewer CNPs than marks); unpaced (the ``dcqcn`` preset's ACK flag) every
    marked packet is answered."""
    paced = _incast4("dcqcn_cx")
    last = max(paced["fct_ns"].values())
    assert 0 < paced["cnps"] <= 4 * (last // 4_000 + 1)
    assert paced["cnps"] < paced["ecn_marks"], (paced["cnps"], paced["ecn_marks"])
    flagged = _incast4("dcqcn_cx", cnp_mode="ack_piggyback", cnp_interval_ns=0)
    assert flagged["cnps"] == flagged["ecn_marks"]
