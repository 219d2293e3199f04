"""Small fakes so coordinator semantics can be tested without the real planners."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from heterosim.comm.schedule import Transfer
from netbackend.base import Completion, NetworkBackend


@dataclass
class FakeGpu:
    rank: int
    node: str
    local: int
    device: str = "H100-SXM"
    slowdown: float = 1.0
    group: str = "g"
    name: str = ""
    nic: str = ""
    node_index: int = 0


class FakeSystem:
    """``gpus_per_node`` GPUs per node; NIC of GPU r is 'nic{r}'."""

    def __init__(self, world: int, gpus_per_node: int = 1, slowdown: dict | None = None):
        self.gpus = [FakeGpu(r, f"n{r // gpus_per_node}", r % gpus_per_node, name=f"gpu{r}", nic=f"nic{r}",
                             node_index=r // gpus_per_node,
                             slowdown=(slowdown or {}).get(r, 1.0)) for r in range(world)]
        self.num_gpus = world
        self.net = None
        self.intra = None


@dataclass
class FakeSchedule:
    transfers: list


def fake_plan(op, ranks, size, system, **kw):
    """Every rank sends `size` bytes to the next (one ring step) over the network."""
    if op == "send":
        a, b = ranks
        return FakeSchedule([Transfer(0, a, b, size, "net", f"nic{a}", f"nic{b}")])
    n = len(ranks)
    return FakeSchedule([Transfer(i, r, ranks[(i + 1) % n], size, "net", f"nic{r}", f"nic{ranks[(i + 1) % n]}")
                         for i, r in enumerate(ranks)])


def fake_intra_time(schedule, system):
    return 100


class ConstRateBackend(NetworkBackend):
    """Every message takes size / (1 byte/ns) ns, no sharing: isolates coordinator logic."""

    name = "const"

    def __init__(self):
        self._now = 0
        self._inflight: list[tuple[int, int]] = []

    @property
    def now_ns(self):
        return self._now

    def send(self, msg):
        assert msg.start_ns >= self._now
        self._inflight.append((msg.start_ns + msg.size_bytes, msg.id))

    def pending(self):
        return len(self._inflight)

    def next_event_ns(self):
        return min(t for t, _ in self._inflight) if self._inflight else None

    def advance(self, until_ns=None):
        t = self.next_event_ns()
        if t is None or (until_ns is not None and until_ns < t):
            if until_ns is not None:
                self._now = max(self._now, until_ns)
            return []
        done = sorted(i for tt, i in self._inflight if tt == t)
        self._inflight = [(tt, i) for tt, i in self._inflight if tt != t]
        self._now = t
        return [Completion(i, t) for i in done]


class FlopsAsNs:
    """Compute model whose op time is the op's flops, in ns."""

    def op_time_ns(self, op, device, precision):
        return int(op.flops)


@pytest.fixture
def fakes():
    return {"system": FakeSystem, "plan": fake_plan, "intra_time": fake_intra_time,
            "backend": ConstRateBackend, "compute": FlopsAsNs}
