"""One rule for what a packet of the packet-level model carries on the wire: used by the C++ NIC
(HeaderBytes, clamped the same way), the switch headroom, the canned scenarios' closed forms, the
fluid model and the accelerator, so no two of them disagree on a packet's size (issue 41: C++
clamped to 48 B, Python assumed 40 B, the accelerator read the raw value)."""
from __future__ import annotations

MIN_HEADER_BYTES = 48
"""The model's per-packet header (rdma-header.h ``RdmaHeader::Fields``, packed: 4 B of kind, flags,
class and flags2, 5 x 4 B of hosts, QP, flow hash and length, 3 x 8 B of sequence, message id and
timestamp): a packet can carry no fewer bytes of header, so ``network.header_bytes`` below it acts as it."""


def header_bytes(cfg) -> int:
    """Per-packet header bytes a data packet carries: ``network.header_bytes``, at least the model's own."""
    return max(int(cfg.header_bytes), MIN_HEADER_BYTES)


def data_wire_bytes(cfg) -> int:
    """Wire bytes of a full data packet (one ``mtu_bytes`` payload and its header; HPCC's INT not included)."""
    return int(cfg.mtu_bytes) + header_bytes(cfg)
