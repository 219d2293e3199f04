"""Physical bounds on config values: a rate, size or count that no real system has is an error.

One typo (``nic_gbps: 1e30``, ``uplink_gbps: 1e-9``, ``.inf``, ``true`` where a number belongs) used to
be accepted and then sized switches from the rate ratio or simulated forever. Each bounded field says
its allowed range in the error, before anything is built from it. The ranges are deliberately wide
(roughly 10x beyond the largest published hardware, cited where each constant is defined) so that they
refuse typos, never plausible what-if studies.

It lives in the lowest layer, next to :class:`StrictModel`, so every layer's config can use it.
"""
from __future__ import annotations

import math
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, model_validator

from hscommon.strict import StrictModel


class _BoolGiven:
    """Stands in for a ``true``/``false`` given where a number belongs, so pydantic reports that field."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "true" if self.value else "false"


class _NumberGiven:
    """Stands in for a number given where true/false belongs (``sequence_parallel: 1``)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def _bool_only(annotation: Any) -> bool:
    return _kinds(annotation) == {bool}


def _numeric_only(annotation: Any) -> bool:
    """True when the annotation takes numbers but not booleans (int, float, Literal[0, 1], Optional[...])."""
    kinds = _kinds(annotation)
    return bool(kinds) and bool(kinds & {int, float}) and bool not in kinds and kinds <= {int, float}


def _kinds(annotation: Any) -> set:
    seen: list[Any] = []

    def walk(a: Any) -> None:
        origin = typing.get_origin(a)
        if origin is Annotated:
            walk(typing.get_args(a)[0])
        elif origin in (Union, types.UnionType):
            for x in typing.get_args(a):
                walk(x)
        elif origin is Literal:
            seen.extend(type(x) for x in typing.get_args(a))
        else:
            seen.append(a)

    walk(annotation)
    return {t for t in seen if t is not type(None)}


class BoundedModel(StrictModel):
    """StrictModel that also refuses ``.inf``/``.nan``, booleans in numeric fields and numbers in boolean ones."""

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = None
        for name, info in cls.model_fields.items():
            key = info.alias or name
            value = data.get(key)
            if isinstance(value, bool) and _numeric_only(info.annotation):
                out = dict(data) if out is None else out
                out[key] = _BoolGiven(value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and _bool_only(info.annotation):
                out = dict(data) if out is None else out
                out[key] = _NumberGiven(value)
        return data if out is None else out


def _not_bool(value: Any) -> Any:
    if isinstance(value, (bool, _BoolGiven)):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    return value


def _fmt(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) and abs(x) >= 10_000 else f"{x:g}"


def _range_check(lo: float | None, hi: float | None, unit: str, lo_open: bool) -> Any:
    text = (f"{'>' if lo_open else ''}{_fmt(lo)}" if lo is not None else "") + \
        (f" to {_fmt(hi)}" if hi is not None else "") + (f" {unit}" if unit else "")
    if lo is not None and hi is None:
        text = f"{'>' if lo_open else '>='} {_fmt(lo)}" + (f" {unit}" if unit else "")

    def check(value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a finite number (allowed: {text})")
        bad = (lo is not None and (value <= lo if lo_open else value < lo)) or (hi is not None and value > hi)
        if bad:
            raise ValueError(f"out of range (allowed: {text})")
        return value

    return check


def Bounded(kind: type, lo: float | None, hi: float | None, *, unit: str = "", lo_open: bool = False) -> Any:
    """``kind`` (int or float) within [lo, hi] (``lo_open``: (lo, hi]); the error says the range."""
    schema: dict[str, Any] = {}
    if lo is not None:
        schema["exclusiveMinimum" if lo_open else "minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    check = _range_check(lo, hi, unit, lo_open)

    def before(value: Any) -> Any:
        value = _not_bool(value)
        if isinstance(value, float):  # 1e30 for an int field: say the range, not "exceeded maximum size"
            check(value)
        return value

    return Annotated[kind, BeforeValidator(before), AfterValidator(check),
                     Field(json_schema_extra=schema, **({"allow_inf_nan": False} if kind is float else {}))]


# --- the ranges, each with where its upper end comes from ---

NIC_GBPS_MAX = 3200.0
"""Ethernet/InfiniBand port rate, Gb/s: 1.6 Tb/s ports are the fastest standardised (IEEE 802.3dj);
2x headroom for what-if studies."""
NIC_GBPS_MIN = 1.0
"""1 Gb/s Ethernet (IEEE 802.3ab) is the slowest NIC anyone trains over."""
LinkGbps = Bounded(float, NIC_GBPS_MIN, NIC_GBPS_MAX, unit="Gb/s")

NVLINK_GBYTES_MAX = 3600.0
"""Per-GPU NVLink, GB/s per direction: NVLink 5 (Blackwell) is 900 GB/s per direction (1.8 TB/s total,
NVIDIA B200 datasheet); 4x headroom."""
PCIE_GBYTES_MAX = 512.0
"""PCIe per direction, GB/s: Gen6 x16 is ~128 GB/s (PCI-SIG PCIe 6.0 spec), Gen7 ~256; 2x headroom."""
PCIE_GBYTES_MIN = 0.25
"""PCIe Gen1 x1 (0.25 GB/s per direction)."""

DELAY_NS_MAX = 10_000_000
"""Link propagation delay: 10 ms is 2,000 km of fiber (5 ns/m), beyond any training fabric."""
LATENCY_NS_MAX = 1_000_000
"""Per-message NIC/host latency: 1 ms is 1000x an RDMA NIC's (~1 us)."""

PFC_PAUSE_QUANTA_MAX = 65535
"""IEEE 802.1Qbb (priority-based flow control; IEEE 802.1Q clause 36, frame format IEEE 802.3 Annex 31D):
each priority's pause time is a 16-bit count of pause quanta, one quantum being 512 bit times."""
PFC_PAUSE_NS_MAX = PFC_PAUSE_QUANTA_MAX * 512 * 1000 // int(NIC_GBPS_MIN * 1000)
"""Longest pause one PFC frame can ask for, ns: 65535 quanta x 512 bit times at the slowest supported port
(:data:`NIC_GBPS_MIN`, 1 Gb/s = 1 bit per ns) = 33,553,920 ns. Faster ports pause for less. (The ns-3
switch carries it in a 32-bit field: unbounded, 10^13 ns wrapped to 1.3 s.)"""

IB_ACK_TIMEOUT_UNIT_NS = 4096
"""InfiniBand Local ACK Timeout (IBTA InfiniBand Architecture Specification vol. 1, 9.7.6.1.3, the QP's
5-bit ``timeout`` attribute; RoCE NICs use the same field, NCCL sets it with NCCL_IB_TIMEOUT): the
transport timer is 4.096 us x 2^timeout, timeout 1 to 31 (0 = no timeout)."""
RETRANSMIT_TIMEOUT_NS_MIN = IB_ACK_TIMEOUT_UNIT_NS * 2 ** 1
"""Shortest retransmit timeout a NIC can be given: 4.096 us x 2^1 = 8,192 ns."""
RETRANSMIT_TIMEOUT_NS_MAX = IB_ACK_TIMEOUT_UNIT_NS * 2 ** 31
"""Longest: 4.096 us x 2^31 = 8,796,093,022,208 ns (2.4 hours)."""

SWITCH_RADIX_MAX = 512
"""Ports of one switch: Broadcom Tomahawk 5 (51.2 Tb/s) has 512 x 100G, the highest radix shipping."""
GPUS_PER_NODE_MAX = 576
"""GPUs in one NVLink domain: NVIDIA GB200 NVL576 is the largest announced."""
NICS_PER_NODE_MAX = 576
"""NICs per NVLink domain (a "node"): DGX servers have 8-10; a GB200 NVL72 rack has one ConnectX-7 per GPU (72),
so a 576-GPU domain may have 576."""
CLUSTER_GPUS_MAX = 1_048_576
"""GPUs in one cluster: the largest published are ~100k-200k (xAI Colossus, 2024); 2^20 is 5x beyond."""
OVERSUBSCRIPTION_MAX = 64.0
"""Downlink:uplink ratio; 64:1 is far past what any training fabric uses (1:1 to 3:1 typical)."""
SLOWDOWN_MAX = 1000.0
"""Compute time multiplier; a GPU 1000x slower than its peers is a failure, not a straggler."""
DEGRADED_FACTOR_MIN = 0.001
"""A link at 0.1% of its rate (e.g. 400G down to 400M) is the worst degradation worth simulating."""
