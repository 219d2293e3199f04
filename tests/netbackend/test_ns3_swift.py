"""Swift (Kumar et al., SIGCOMM 2020) as ``cc: swift``: a congestion control added as one
RdmaCongestionOps class plus its config section (docs/congestion-control.md).

Its window arithmetic is checked in C++ against hand calculations (suite heterosim-rdma-cc); its
reaction in an incast in test_ns3_cc.py (queue at the hand-computed target, Jain, no PFC) and here
(the target's hop term moves the queue by what the formula says).
"""
from __future__ import annotations

import subprocess

import pytest
from pydantic import ValidationError

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from netbackend.config import NetworkConfig, SwiftConfig  # noqa: E402
from netbackend.ns3 import unit_test_command  # noqa: E402
from netbackend.ns3 import scenarios as sc  # noqa: E402

pytestmark = pytest.mark.ns3


def test_cxx_cc_suite_passes():
    cmd = [c if not c.startswith("--suite=") else "--suite=heterosim-rdma-cc" for c in unit_test_command()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("PASS every cc name maps to its RdmaCongestionOps TypeId",
                 "PASS Swift target delay: hop and flow scaling by hand",
                 "PASS Swift window: AI, MD once per RTT bounded by max_mdf, pacing below one packet",
                 "PASS Swift in the NIC: base RTT, hop count and flow term of the target by hand"):
        assert name in res.stdout, res.stdout


def test_hop_scaling_moves_the_queue_by_its_share_of_the_target():
    """Four senders, one switch: raising h by 4 us raises Swift's target by 4 us (one hop), i.e. the
    bottleneck queue by 4 us x 100 Gb/s = 50,000 B; the flow-scaling term moves with the window, which
    grows by 50,000 B / 4 flows / 4,174 B = 3 packets, so it drops by under 200 ns (2,500 B) here: the
    mean queue must rise by 50,000 B less at most that, within one packet of sampling either way."""
    def q(h_ns):
        cfg = NetworkConfig(backend="ns3", cc="swift", swift=SwiftConfig(hop_scale_ns=h_ns))
        r = sc.incast(4, size_bytes=20_000_000, cfg=cfg)
        assert r["drops"] == 0 and r["pfc_pause_frames_total"] == 0
        return r["steady_queue_mean_bytes"]

    rise = q(5_000) - q(1_000)
    assert 50_000 - 2_500 - 4_174 <= rise <= 50_000 + 4_174, rise


@pytest.mark.parametrize("field, value", [("max_mdf", 1.0), ("beta", 0.0), ("ai_packets", 0.0),
                                          ("min_cwnd_packets", 0.0), ("fs_min_cwnd_packets", 100.0)])
def test_bad_swift_values_are_refused(field, value):
    with pytest.raises(ValidationError) as e:
        NetworkConfig(backend="ns3", cc="swift", swift={field: value})
    assert field in str(e.value)
