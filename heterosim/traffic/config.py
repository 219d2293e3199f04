"""A traffic-study scenario: a fabric, its hosts, network settings and a synthetic workload.

No training job: the workload is flows only (Poisson arrivals from a flow-size
CDF, incasts, all-to-all/permutation patterns), the way congestion-control
papers evaluate a fabric. Times are integer ns; loads are fractions of the
hosts' total line rate in payload bytes (the HPCC paper's "average link load").
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from hscommon.bounds import Bounded
from netbackend.config import NetworkConfig, StrictModel
from topologies.config import FabricConfig


class HostGroup(StrictModel):
    """``count`` identical hosts (one NIC each) named ``{name}{i}``, i counting from 0 in the group."""

    name: str = Field("h", pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    count: int = Field(gt=0)
    rate_gbps: float = Field(gt=0)
    """NIC line rate, Gb/s."""
    pod: int | None = Field(None, ge=0)
    """Fabric placement hint (pod / leaf block), as ``cluster.groups[].pod``; None = packed in order."""


class PoissonWorkload(StrictModel):
    """Every host starts flows as a Poisson process; sizes from a CDF, destinations uniform."""

    cdf: str
    """``websearch``, ``fb-hadoop``, or a ``size_bytes cdf_percent`` file (relative to the scenario file)."""
    load: float = Field(gt=0, lt=1)
    """Offered payload load per host as a fraction of its line rate."""


class IncastWorkload(StrictModel):
    """Incast events: ``senders`` hosts each send ``bytes_per_sender`` to one receiver at the same time.

    Events arrive as a Poisson process, at ``rate_per_s`` or at the rate that makes
    incast payload ``load`` x the hosts' total line rate (HPCC paper: 60->1 of
    500 KB at 2 % load), or at fixed ``times_ns``. Senders (and the receiver,
    unless fixed) are drawn at random per event.
    """

    senders: int = Field(gt=0)
    bytes_per_sender: int = Field(gt=0)
    load: float | None = Field(None, gt=0, lt=1)
    rate_per_s: float | None = Field(None, gt=0)
    """Events per second of simulated time."""
    times_ns: list[int] | None = Field(None, min_length=1)
    """Fixed event times instead of a Poisson process."""
    receiver: str | None = None
    """A fixed receiver host; None = a random host per event."""

    @model_validator(mode="after")
    def _one_rate(self):
        if sum(x is not None for x in (self.load, self.rate_per_s, self.times_ns)) != 1:
            raise ValueError("give exactly one of load, rate_per_s and times_ns")
        if self.times_ns is not None and min(self.times_ns) < 0:
            raise ValueError(f"event times must be >= 0, got {min(self.times_ns)}")
        return self


class PatternWorkload(StrictModel):
    """A synchronised pattern among all hosts, started at ``start_ns`` and optionally repeated."""

    kind: Literal["all_to_all", "permutation"]
    """all_to_all: every host to every other host; permutation: every host to one random other host,
    each host receiving exactly one flow (a new random permutation each round)."""
    flow_bytes: int = Field(gt=0)
    start_ns: int = Field(0, ge=0)
    repeat_every_ns: int | None = Field(None, gt=0)
    """Start a new round this often until the arrival window ends; None = once."""


class TrafficWorkload(StrictModel):
    poisson: PoissonWorkload | None = None
    incast: list[IncastWorkload] = Field(default_factory=list)
    patterns: list[PatternWorkload] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self):
        if self.poisson is None and not self.incast and not self.patterns:
            raise ValueError("give at least one of poisson, incast, patterns")
        return self


class TrafficScenario(StrictModel):
    """``heterosim traffic FILE``: everything one traffic study needs."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    hosts: list[HostGroup] = Field(min_length=1)
    fabric: FabricConfig
    network: NetworkConfig = NetworkConfig(backend="ns3")
    """Every CC/ECN/PFC/buffer knob; ``backend`` defaults to ns3 here (packet level is the point)."""
    workload: TrafficWorkload
    duration_ns: int = Field(gt=0)
    """Flows arrive in [0, duration_ns)."""
    warmup_ns: int = Field(0, ge=0)
    """Flows starting before this are simulated but left out of the statistics."""
    drain_ns: int | None = Field(None, ge=0)
    """Simulate this long after the arrival window, then stop (flows still running are reported as
    unfinished); None = until every flow has finished."""
    seed: Bounded(int, 0, 2**32 - 1) = 0
    """Seed of the arrivals, ECMP hashes and random marks (the training scenario's ``seed`` range)."""

    @model_validator(mode="before")
    @classmethod
    def _ns3_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("network"), dict) and "backend" not in data["network"]:
            data = {**data, "network": {**data["network"], "backend": "ns3"}}
        return data

    @property
    def stop_ns(self) -> int | None:
        return None if self.drain_ns is None else self.duration_ns + self.drain_ns
