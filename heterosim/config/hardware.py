"""Which compute-time source the simulator uses per device."""
from __future__ import annotations

from pydantic import field_validator

from heterosim.config.base import Strict


class HardwareConfig(Strict):
    measurements: str = "builtin"
    """Kernel-time source: ``builtin`` (the measured tables shipped for devices that have one, today
    H100-SXM; the analytical model elsewhere), ``none`` (analytical model everywhere) or a folder of
    measured tables (gemm.csv, attention.csv, elementwise.csv; columns in
    heterosim/hardware/measured/h100-sxm/README.md), relative to the scenario file."""
    measured_device: str = "H100-SXM"
    """The catalog device a measurement folder was taken on (its tables apply to that device only)."""

    @field_validator("measurements")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("measurements must be builtin, none or a folder path")
        return v
