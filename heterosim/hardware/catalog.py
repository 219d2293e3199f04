"""The accelerator catalog: datasheet numbers as data (``devices.yaml``), one frozen Device per GPU.

Kept as data so a new GPU is a YAML entry, and every number carries its source.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path


from hscommon.errors import UserError
from topologies._util import read_yaml

DEVICES_FILE = Path(__file__).parent / "devices.yaml"
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")

# When a precision has no hardware support, what the framework would really run instead.
_FALLBACK = {
    "fp8": ("bf16", "fp16", "fp32"),
    "bf16": ("fp16", "fp32"),   # V100: no bf16 tensor cores; fp16 is what a user would train with
    "fp16": ("bf16", "fp32"),
    "tf32": ("fp32",),
    "fp32": (),
}


@dataclass(frozen=True)
class Device:
    """One accelerator model (not one physical GPU): peak rates and memory."""

    name: str
    peak_tflops: dict[str, float]
    """Dense peak TFLOP/s per precision; 0 or absent = unsupported."""
    hbm_bytes: int
    hbm_GBps: float
    nvlink_GBps: float
    """Scale-up bandwidth per GPU per direction (0 = none)."""
    pcie_GBps: float
    """Host link bandwidth per direction."""
    launch_overhead_ns: int
    """Gap added per kernel (launch latency + ramp-down)."""
    source: str
    family: str = ""
    """Architecture family: key of the efficiency curves."""
    sm_count: int = 0
    """SMs / CUs: how many GEMM output tiles it takes to fill the GPU."""
    l2_bytes: int = 0
    """Last-level on-chip cache (L2) capacity; 0 = unknown (memory-bound kernels then always stream from HBM)."""
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A dict field makes the generated hash fail; hash the content once (the compute model keys on it).
        object.__setattr__(self, "_hash", hash((self.name, tuple(sorted(self.peak_tflops.items())), self.hbm_bytes,
                                                self.hbm_GBps, self.nvlink_GBps, self.pcie_GBps,
                                                self.launch_overhead_ns, self.family, self.sm_count, self.l2_bytes)))

    def __hash__(self) -> int:
        return self._hash

    def supports(self, precision: str) -> bool:
        return self.peak_tflops.get(precision, 0.0) > 0

    def effective_precision(self, precision: str) -> str:
        """The precision that really runs (fp8 on an A100 runs as bf16)."""
        if precision not in _FALLBACK:
            raise UserError(f"unknown precision (known: {', '.join(PRECISIONS)})", field="precision", value=precision)
        if self.supports(precision):
            return precision
        for alt in _FALLBACK[precision]:
            if self.supports(alt):
                return alt
        raise UserError(f"device {self.name} has no peak rate for {precision} or its fallbacks",
                        field="precision", value=precision)

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s at ``precision`` (falls back when unsupported, e.g. fp8 -> bf16)."""
        return self.peak_tflops[self.effective_precision(precision)] * 1e12

    @property
    def hbm_Bps(self) -> float:
        return self.hbm_GBps * 1e9


_REQUIRED = ("peak_tflops", "hbm_bytes", "hbm_GBps", "nvlink_GBps", "pcie_GBps", "launch_overhead_ns", "source")


def _parse(name: str, raw: dict, file: str) -> Device:
    if not isinstance(raw, dict):
        raise UserError("device entry must be a mapping", file=file, field=name, value=raw)
    for key in _REQUIRED:
        if key not in raw:
            raise UserError("missing field", file=file, field=f"{name}.{key}")
    unknown = set(raw) - set(_REQUIRED) - {"family", "sm_count", "l2_bytes"}
    if unknown:
        raise UserError("unknown field", file=file, field=f"{name}.{sorted(unknown)[0]}")
    peaks = {}
    for prec, val in (raw["peak_tflops"] or {}).items():
        if prec not in PRECISIONS:
            raise UserError(f"unknown precision (known: {', '.join(PRECISIONS)})", file=file,
                            field=f"{name}.peak_tflops", value=prec)
        if not isinstance(val, (int, float)) or val < 0:
            raise UserError("must be a number >= 0", file=file, field=f"{name}.peak_tflops.{prec}", value=val)
        peaks[prec] = float(val)
    if not any(peaks.values()):
        raise UserError("no precision has a peak rate", file=file, field=f"{name}.peak_tflops")
    for key in ("hbm_bytes", "hbm_GBps", "pcie_GBps"):
        if not isinstance(raw[key], (int, float)) or raw[key] <= 0:
            raise UserError("must be a number > 0", file=file, field=f"{name}.{key}", value=raw[key])
    l2 = raw.get("l2_bytes", 0)
    if not isinstance(l2, int) or isinstance(l2, bool) or l2 < 0:
        raise UserError("must be an integer >= 0", file=file, field=f"{name}.l2_bytes", value=l2)
    return Device(name=name, peak_tflops=peaks, hbm_bytes=int(raw["hbm_bytes"]), hbm_GBps=float(raw["hbm_GBps"]),
                  nvlink_GBps=float(raw["nvlink_GBps"]), pcie_GBps=float(raw["pcie_GBps"]),
                  launch_overhead_ns=int(raw["launch_overhead_ns"]), source=str(raw["source"]),
                  family=str(raw.get("family", "")), sm_count=int(raw.get("sm_count", 0)), l2_bytes=l2)


def load_devices(path: str | Path = DEVICES_FILE) -> dict[str, Device]:
    """Parse a device catalog YAML (the built-in one by default)."""
    path = Path(path)
    data = read_yaml(path) or {}
    return {name: _parse(name, raw, str(path)) for name, raw in data.items()}


@lru_cache(maxsize=None)
def _catalog() -> dict[str, Device]:
    return load_devices(DEVICES_FILE)


def device_names() -> list[str]:
    return list(_catalog())


def get_device(name: str) -> Device:
    """Catalog lookup; an unknown name is a user error that lists the known ones."""
    cat = _catalog()
    if name not in cat:
        raise UserError(f"unknown GPU (known: {', '.join(cat)})", field="gpu", value=name)
    return cat[name]
