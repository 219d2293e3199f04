"""The closed-form model of the accelerated backend (``accel.py``): a source-bounded partition's flows
(:class:`Flow`), the DCQCN rate of a QP whose path builds no queue (:class:`Trajectory`), the NIC's round
robin over its QPs (:func:`water_fill`) and the partition itself (:class:`Group`).  Pure data and
arithmetic: no ns-3, no backend state."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from netbackend.base import Message


@dataclass(slots=True)
class Flow:
    """One message in a closed-form partition."""

    msg: Message
    ports: list[int]
    wire_total: float
    wire_left: float
    tail_ns: float
    """Last packet's time from leaving the NIC to being delivered."""
    payload: int = -1
    """Payload bytes it carries in closed form (-1: the whole message)."""
    lead_wire: float = 0.0
    """Wire bytes ns-3 still sends for it first (a migrated message's kept work request)."""

    @property
    def bytes(self) -> int:
        return self.msg.size_bytes if self.payload < 0 else self.payload


@dataclass(slots=True)
class Trajectory:
    """The DCQCN rate of a QP whose path builds no queue: it only rises, on the increase timer.

    With no mark there is no CNP and no cut, so the reaction point's rate changes only at its
    increase-timer events (the byte counter is off: only such QPs get a trajectory).  Each event
    repeats DcqcnRp::Increase then the stage count (dcqcn.cc) with the same double arithmetic,
    and the timer is re-armed one interval later while RC or RT is below line rate
    (RdmaNic::OnIncreaseTimer), so the trajectory is the one ns-3 follows for the idle QP."""

    rate_bps: float
    target_bps: float
    stage: int
    next_ns: float
    """Next increase-timer expiry (-1: none armed)."""
    line_bps: float
    ai_bps: float
    hai_bps: float
    fast_stages: int
    interval_ns: float

    def advance_to(self, t: float) -> None:
        while 0 <= self.next_ns <= t:
            if self.stage >= self.fast_stages:  # stages counted before this event (BC = T)
                self.target_bps += self.hai_bps if self.stage > self.fast_stages else self.ai_bps
            self.target_bps = min(self.target_bps, self.line_bps)
            self.rate_bps = min((self.rate_bps + self.target_bps) / 2.0, self.line_bps)
            self.stage += 1
            if self.rate_bps < self.line_bps or self.target_bps < self.line_bps:
                self.next_ns += self.interval_ns
            else:
                self.next_ns = -1

    @property
    def bytes_per_ns(self) -> float:
        return self.rate_bps / 8e9

    def at_line(self) -> bool:
        return self.next_ns < 0 and self.rate_bps >= self.line_bps


def water_fill(rate: float, keys: list, caps: dict[Any, Trajectory]) -> dict[Any, float]:
    """Round robin among the ready QPs, each paced at most at its DCQCN rate: water-filling of
    the NIC's ``rate`` (a QP below its fair share keeps its rate, the rest share the rest)."""
    left, n = rate, len(keys)
    shares: dict[Any, float] = {}
    for key, tr in sorted(((k, caps[k]) for k in keys if k in caps), key=lambda kv: kv[1].rate_bps):
        if tr.bytes_per_ns * n >= left:
            break
        shares[key] = tr.bytes_per_ns
        left -= tr.bytes_per_ns
        n -= 1
    fair = left / n if n else 0.0
    return {key: shares.get(key, fair) for key in keys}


@dataclass(slots=True)
class Group:
    """A source-bounded partition: the closed-form flows of one NIC, per QP in posting order."""

    src: str
    line_bytes_per_ns: float
    t_last: float
    qps: dict[Any, deque] = field(default_factory=dict)
    version: int = 0
    rate_bytes_per_ns: float = 0.0
    """Data rate left by the ACKs this NIC sends (set by Partitions.rerate)."""
    caps: dict[Any, Trajectory] = field(default_factory=dict)
    """QPs still below line rate after a congestion episode, with their DCQCN trajectory."""
    shares: dict[Any, float] | None = None
    """Per-QP wire rate (bytes/ns) when some QP is capped; None: an equal share each."""

    def active(self) -> int:
        return len(self.qps)  # a QP's deque is removed the moment it empties

    def allocate(self) -> None:
        if not self.caps:  # the common case: every QP at line rate, an equal share each
            self.shares = None
            return
        for key in [k for k, tr in self.caps.items() if k not in self.qps or tr.at_line()]:
            del self.caps[key]
        self.shares = water_fill(self.rate_bytes_per_ns, list(self.qps), self.caps) if self.caps else None

    def rates(self) -> dict[Any, float]:
        """Wire rate (bytes/ns) of each QP's head flow."""
        if self.shares is not None:
            return self.shares
        k = len(self.qps)
        return {key: self.rate_bytes_per_ns / k for key in self.qps}

    def next_cap_change(self) -> float | None:
        if not self.caps:
            return None
        times = [tr.next_ns for tr in self.caps.values() if tr.next_ns >= 0]
        return min(times) if times else None

    def advance_to(self, t: float) -> None:
        k = len(self.qps)
        if k and t > self.t_last:
            dt = t - self.t_last
            if self.shares is None:
                share = dt * self.rate_bytes_per_ns / k
                for q in self.qps.values():
                    q[0].wire_left -= share
            else:
                for key, q in self.qps.items():
                    q[0].wire_left -= dt * self.shares[key]
        if t > self.t_last:
            self.t_last = t

    def next_departure(self) -> float | None:
        k = len(self.qps)
        if not k:
            return None
        if self.shares is None:
            if k == 1:  # most partitions: one QP
                left = next(iter(self.qps.values()))[0].wire_left
            else:
                left = min(q[0].wire_left for q in self.qps.values())
            return self.t_last + max(0.0, left) * k / self.rate_bytes_per_ns
        return self.t_last + min(max(0.0, q[0].wire_left) / self.shares[key] for key, q in self.qps.items())



def components(items: list, ports_of) -> list[list]:
    """Connected sets of ``items`` (two are connected when their ports share one), union-find; each
    set and the sets in the order of ``items``."""
    parent = {id(x): id(x) for x in items}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    at: dict[int, int] = {}
    for x in items:
        for p in ports_of(x):
            j = at.setdefault(p, id(x))
            if j != id(x):
                parent[find(id(x))] = find(j)
    comps: dict[int, list] = {}
    for x in items:
        comps.setdefault(find(id(x)), []).append(x)
    return list(comps.values())

