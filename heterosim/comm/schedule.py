"""The per-rank flow schedule: the contract between the comm planner and the coordinator.

A collective on a group of GPUs becomes a :class:`FlowSchedule`: a list of
point-to-point :class:`Transfer` objects with dependencies (a DAG). The
coordinator runs it as follows:

* a transfer may start once every transfer in ``deps`` has *completed* (its last
  byte arrived) and, after that, ``latency_ns`` more has passed (protocol /
  kernel latency: NCCL's per-step hardware latency, plus its base latency on
  transfers without deps). A transfer with no deps starts when the collective
  starts (when every member rank has reached it);
* ``link == "net"``: ``src_ep``/``dst_ep`` are NIC names (hosts of
  ``system.net``), or for CollNet a switch's SHARP aggregation endpoint ``{switch}/sharp`` (also a host
  of ``system.net``; the matching ``src``/``dst`` rank is ``collnet.SHARP_SWITCH``); send it to the network backend as a Message with
  ``flow_key`` for ECMP entropy (one value per NCCL channel);
* ``link in ("nvlink", "pcie", "c2c", "nvls")``: ``src_ep``/``dst_ep`` are hosts of
  ``system.intra`` (GPU names ``{node}/gpu{j}``; for ``nvls`` one end is the
  NVSwitch endpoint ``{node}/nvswitch`` and the matching ``src``/``dst`` rank is
  :data:`NVSWITCH` = -1); time it with the intra-node flow model or
  :mod:`heterosim.comm.intranode`. ``nvlink``: through an NVSwitch; ``pcie``:
  through PCIe switches / root complex; ``c2c``: direct NVLink inside a
  Grace-Hopper node;
* ``size_bytes`` is what crosses the wire: payload times the protocol's
  inflation (LL carries 4 B of flags per 4 B of data; LL128 8 B per 120 B), so
  it may differ from the textbook payload by that factor (``FlowSchedule.inflation``);
  it may be 0 for tiny buffers split over many ranks (latency only);
* the collective is complete on a rank when every transfer it sends or receives
  is complete; the whole schedule is complete when all transfers are;
* ``deps`` only name transfers with smaller ids, so list order is a valid
  topological order; ``step`` and ``channel`` are for traces and tie-breaking.
"""
from __future__ import annotations

from dataclasses import dataclass, field

NVSWITCH = -1
"""``Transfer.src``/``dst`` of the NVSwitch endpoint in NVLS transfers (the node is in ``src_ep``/``dst_ep``)."""

LINK_KINDS = ("nvlink", "pcie", "c2c", "net", "nvls")


@dataclass(slots=True)
class Transfer:
    id: int
    """Index in ``FlowSchedule.transfers``."""
    src: int
    """Global GPU rank sending (NVSWITCH for the switch side of an NVLS transfer)."""
    dst: int
    size_bytes: int
    """Bytes on the wire (payload x protocol inflation)."""
    link: str
    """nvlink | pcie | c2c | net | nvls."""
    src_ep: str
    """Endpoint: GPU name / ``{node}/nvswitch`` in system.intra, or NIC name in system.net for ``net``."""
    dst_ep: str
    deps: tuple[int, ...] = ()
    """Transfer ids (in this schedule) that must complete first."""
    channel: int = 0
    step: int = 0
    latency_ns: int = 0
    """Fixed extra delay after the deps complete (protocol / kernel latency)."""
    flow_key: int = 0
    """ECMP entropy for net transfers (the NCCL channel: one QP per channel)."""
    connection: int = -1
    """Net transfers: the NCCL connection carrying it (one per channel, peer and algorithm
    family: ring, tree, NVLS and point-to-point connections are separate); the backend keeps its
    queue pairs and their congestion state across operations.  -1: none."""
    step_bytes: int = 0
    """Net transfers: NCCL's step size: the sender posts at most this many bytes per work request
    (NCCL_BUFFSIZE / NCCL_STEPS = 512 KiB for collectives, NCCL_P2P_NET_CHUNKSIZE = 128 KiB for
    send/recv: NCCL environment-variable docs).  0: one work request."""


@dataclass
class FlowSchedule:
    op: str
    algorithm: str
    """The algorithm actually used (``auto`` resolved; unsupported combinations fall back to ring)."""
    protocol: str
    ranks: tuple[int, ...]
    size_bytes: int
    """nccl-tests semantics (allreduce: buffer; allgather: output; reducescatter: input;
    alltoall: bytes each rank sends in total incl. its own share; send: the message)."""
    transfers: list[Transfer] = field(default_factory=list)
    channels: int = 1
    chunks: int = 1
    """Pipeline chunks (loops) per channel."""
    step_group: int = 1
    """Consecutive ring steps merged into one transfer (to bound the transfer count)."""
    inflation: float = 1.0
    root: int | None = None
    tuned: str | None = None
    """``algorithm/protocol`` NCCL's tuning model picked when ``auto`` resolved across nodes (its names:
    ring, tree, collnet_direct, collnet_chain, nvls, nvls_tree, pat; heterosim/comm/tuning.py); None otherwise."""

    def bytes_sent(self, rank: int) -> int:
        return sum(t.size_bytes for t in self.transfers if t.src == rank)

    def bytes_received(self, rank: int) -> int:
        return sum(t.size_bytes for t in self.transfers if t.dst == rank)

    def per_rank(self) -> dict[int, list[Transfer]]:
        """Sender -> its transfers in schedule (topological) order; NVSWITCH = -1 for switch sends."""
        out: dict[int, list[Transfer]] = {}
        for t in self.transfers:
            out.setdefault(t.src, []).append(t)
        return out

    def roots(self) -> list[Transfer]:
        """Transfers with no dependencies (they start with the collective)."""
        return [t for t in self.transfers if not t.deps]

    @property
    def total_bytes(self) -> int:
        return sum(t.size_bytes for t in self.transfers)

    def links(self) -> set[str]:
        return {t.link for t in self.transfers}

    def check(self) -> None:
        """Assert the structural invariants (ids in order, deps point backwards)."""
        for i, t in enumerate(self.transfers):
            if t.id != i:
                raise AssertionError(f"transfer {i} has id {t.id}")
            for d in t.deps:
                if not 0 <= d < i:
                    raise AssertionError(f"transfer {i} depends on {d}, not an earlier transfer")
            if t.link not in LINK_KINDS:
                raise AssertionError(f"transfer {i} has link {t.link!r}")
            if t.size_bytes < 0:
                raise AssertionError(f"transfer {i} has negative size")
