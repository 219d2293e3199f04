"""Python side of the fluid DCQCN collision model (model/fluid-net.h, which says what it models).

:func:`episode_class` loads ``ns3::FluidNet`` from the module's library (the same build the
ns-3 backend uses; its header holds standard-library types only, like the binding facade), and
:func:`dcqcn_params` fills ``ns3::DcqcnParams`` with the values RdmaNic::Setup would use for a NIC
of a given line rate, so a fluid episode and packet level run the same reaction point.
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_cls = None


def episode_class():
    """``ns3::FluidNet``, building and loading the module on first use."""
    global _cls
    with _lock:
        if _cls is None:
            from netbackend.ns3.build import ensure_built
            from netbackend.ns3.driver import _quiet_stderr, sim_class

            sim_class()  # loads the library and adds its include path
            with _quiet_stderr():
                import cppyy

                cppyy.include(str(ensure_built().include_dir / "ns3" / "fluid-net.h"))
            _cls = cppyy.gbl.ns3.FluidNet
        return _cls


def dcqcn_params(resolved: dict, line_bps: float):
    """``ns3::DcqcnParams`` from :func:`netbackend.config.resolved_dcqcn` for a NIC at ``line_bps``,
    and the receiver's CNP interval (0: CE echoed on the next ACK).  R_AI / R_HAI left None scale
    with the line rate as RdmaNic::Setup does (5 and 50 Mb/s per 25 Gb/s)."""
    import cppyy

    episode_class()
    p = cppyy.gbl.ns3.DcqcnParams()
    p.g = resolved["g"]
    p.alphaIntervalNs = max(1, resolved["alpha_update_interval_ns"])
    p.rateDecreaseIntervalNs = resolved["rate_decrease_interval_ns"]
    p.rateIncreaseIntervalNs = max(1, resolved["rate_increase_interval_ns"])
    p.byteCounterBytes = resolved["byte_counter_bytes"]
    p.fastRecoveryStages = resolved["fast_recovery_stages"]
    p.rateAiBps = resolved["rate_ai_mbps"] * 1e6 if resolved["rate_ai_mbps"] else line_bps * 5.0 / 25000.0
    p.rateHaiBps = resolved["rate_hai_mbps"] * 1e6 if resolved["rate_hai_mbps"] else line_bps * 50.0 / 25000.0
    p.minRateBps = resolved["min_rate_mbps"] * 1e6
    p.lineRateBps = line_bps
    p.vendor = resolved["reaction"] == "vendor"
    p.clampTargetRate = resolved["clamp_target_rate"]
    cnp = resolved["cnp_interval_ns"] if resolved["cnp_mode"] == "interval" else 0
    return p, cnp
