"""The one interface every network backend implements.

The coordinator drives a backend with two calls: :meth:`NetworkBackend.send`
(start a message at a time >= now) and :meth:`NetworkBackend.advance` (move time
forward to the next completion or a limit, and collect what completed). This is
batch-friendly: a packet-level backend runs in C++ until something completes and
returns to Python once per completion time, never per packet.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from netbackend.config import NetworkConfig
from netbackend.topo import NetTopology


class Message(NamedTuple):
    """One message to carry. Immutable; a named tuple rather than a frozen dataclass because a
    1,024-GPU run builds millions of them (measured: 2.6 us per frozen-dataclass construction with 8
    fields, 0.3 us as a named tuple; a third of the flow backend's per-message cost)."""

    id: int
    """Caller-chosen unique id; echoed in the completion."""
    src: str
    """Source host (NIC) name."""
    dst: str
    """Destination host (NIC) name."""
    size_bytes: int
    """Payload bytes (headers are the backend's business)."""
    start_ns: int
    """When the sender posts it; must be >= the backend's current time."""
    flow_key: int = 0
    """Extra entropy for ECMP hashing (e.g. NCCL channel); same key, same path."""
    connection: int = -1
    """Transport connection (e.g. NCCL's per-channel connection to a peer): messages with the same
    (src, dst, connection) share long-lived queue pairs and are carried in posting order.
    -1: a connection of its own (one-off flows such as background traffic)."""
    step_bytes: int = 0
    """The sender posts the message in work requests (NCCL steps) of at most this size; 0 = one."""


class Completion(NamedTuple):
    """A message ``id`` delivered at ``finish_ns`` (a named tuple, as :class:`Message`)."""

    id: int
    finish_ns: int
    """When the last byte was delivered at the receiver."""


@dataclass
class NetStats:
    """Network statistics a backend can report after (or during) a run."""

    messages: int = 0
    bytes_delivered: int = 0
    fct_ns: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Message id -> (start_ns, finish_ns)."""
    link_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    """Directed link (a, b) -> bytes carried."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Backend-specific statistics (PFC pauses, ECN marks, CNPs, queue samples...)."""


class NetworkBackend(ABC):
    """A simulated fabric. One instance simulates one run."""

    name: ClassVar[str]

    def __init__(self, topology: NetTopology, config: NetworkConfig | None = None, seed: int = 0):
        self.topology = topology
        self.config = config or NetworkConfig()
        self.seed = seed

    @property
    @abstractmethod
    def now_ns(self) -> int:
        """Current simulated time."""

    @abstractmethod
    def send(self, msg: Message) -> None:
        """Start a message at ``msg.start_ns`` (>= now_ns)."""

    @abstractmethod
    def advance(self, until_ns: int | None = None) -> list[Completion]:
        """Run to the earlier of ``until_ns`` and the next completion time.

        Returns every completion at that time (possibly none, if ``until_ns`` came
        first); ``now_ns`` is then that time. With ``until_ns=None`` and nothing in
        flight, returns ``[]`` without moving time.
        """

    @abstractmethod
    def pending(self) -> int:
        """Messages sent and not yet completed."""

    @classmethod
    def check_config(cls, topology: NetTopology, config: NetworkConfig) -> None:
        """Every check the constructor makes on its inputs, without building anything: raises the same
        one-line :class:`UserError` a run would. ``heterosim validate`` runs it, so validate says what run
        will say. A backend that checks anything at construction checks it here and calls this from
        ``__init__``; the default accepts everything."""

    def next_event_ns(self) -> int | None:
        """A lower bound on the next completion if nothing new were sent (None: idle).

        No message completes before it, so a caller merging several backends can
        advance the others up to it safely. Optional: the coordinator needs it
        only from the (flow-level) backend it uses for intra-node transfers.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot bound its next completion")

    def stats(self) -> NetStats:
        return NetStats()

    def close(self) -> None:
        """Release resources (ns-3: destroy the simulator)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
