"""Run one collective alone, nccl-tests style: time, algbw, busbw.

The collective goes through the same coordinator as a training run (a one-op
IR), so single-node groups use the analytic NVLink/PCIe model and multi-node
groups the communication planner's flow schedule over the chosen backend.
"""
from __future__ import annotations

from dataclasses import dataclass

from heterosim.errors import ConfigError
from heterosim.workload.ir import IR, Op, Program

# nccl-tests busbw factors (doc/PERFORMANCE.md of NVIDIA/nccl-tests)
_BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
OPS = tuple(_BUS_FACTOR)


@dataclass
class CollectiveResult:
    op: str
    size_bytes: int
    gpus: int
    algorithm: str
    backend: str
    time_ns: int

    @property
    def algbw_GBps(self) -> float:
        return self.size_bytes / self.time_ns if self.time_ns else 0.0

    @property
    def busbw_GBps(self) -> float:
        return self.algbw_GBps * _BUS_FACTOR[self.op](self.gpus)

    def as_dict(self) -> dict:
        return {"op": self.op, "size_bytes": self.size_bytes, "gpus": self.gpus, "algorithm": self.algorithm,
                "backend": self.backend, "time_us": self.time_ns / 1e3, "algbw_GBps": self.algbw_GBps,
                "busbw_GBps": self.busbw_GBps}


def collective_ir(op: str, ranks: list[int], size_bytes: int, world: int) -> IR:
    comm = Op(id=0, kind="comm", name=op, phase="other", stream="coll", collective=op, group="coll",
              size_bytes=size_bytes, tag=f"{op}:0", comm_kind="dp")
    rest = [r for r in range(world) if r not in set(ranks)]
    groups = {"tp": [(r,) for r in range(world)], "coll": [tuple(ranks)] + [(r,) for r in rest]}
    programs = [Program(0, [comm], label="collective"), Program(1, [], label="idle")]
    rank_program = [0 if r in set(ranks) else 1 for r in range(world)]
    return IR(world_size=world, programs=programs, rank_program=rank_program, groups=groups)


def run_collective(system, op: str, size_bytes: int, gpus: int, *, algorithm: str = "auto", backend: str = "flow",
                   network=None, seed: int = 0, protocol: str = "auto", channels: int | None = None) -> CollectiveResult:
    from heterosim.sim.coordinator import Coordinator
    from heterosim.sim.intra import effective_intra
    from netbackend.config import NetworkConfig
    from netbackend.registry import create_backend

    if op not in _BUS_FACTOR:
        raise ConfigError(f"unknown collective (choose from {', '.join(OPS)})", field="--op", value=op)
    if not 1 <= gpus <= system.num_gpus:
        raise ConfigError(f"the topology has {system.num_gpus} GPUs", field="--gpus", value=gpus)
    if size_bytes <= 0:
        raise ConfigError("size must be positive", field="--size", value=size_bytes)
    from heterosim.comm.planner import ALGORITHMS, PROTOCOLS
    from netbackend.registry import available_backends, backend_class

    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm (choose from {', '.join(ALGORITHMS)})", field="--algo", value=algorithm)
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol (choose from {', '.join(PROTOCOLS)})", field="protocol", value=protocol)
    if backend not in available_backends():
        raise ConfigError(f"unknown network backend (choose from {', '.join(available_backends())})",
                          field="--backend", value=backend)
    backend_class(backend)
    ranks = list(range(gpus))
    ir = collective_ir(op, ranks, size_bytes, system.num_gpus)
    net_cfg = (network or NetworkConfig()).model_copy(update={"backend": backend})
    intra_cfg = net_cfg.model_copy(update={"header_bytes": 0, "per_hop_latency_ns": 0, "backend": "flow"})
    net = create_backend(backend, system.net, net_cfg, seed)
    intra = create_backend("flow", effective_intra(system.intra), intra_cfg, seed)
    try:
        coord = Coordinator(ir, system, compute_model=None, net=net, intra=intra, record_messages=False,
                            comm_options={"algorithm": algorithm, "protocol": protocol, "channels": channels})
        sim = coord.run(wall_limit_s=net_cfg.wall_limit_s)
    finally:
        net.close()
        intra.close()
    return CollectiveResult(op, size_bytes, gpus, algorithm, backend, sim.iteration_time_ns)


MAX_COLLECTIVE_BYTES = 1 << 40
"""1 TiB: 10x the largest gradient all-reduce of a published run (GPT-3 175B's fp32 gradients, 700 GB)."""


def parse_size(text: str, field: str = "--size") -> int:
    """'1GiB', '64M', '4096' -> bytes (K/M/G are powers of 1024, as nccl-tests), 1 B to 1 TiB."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        value = float(t) * mult
    except ValueError:
        raise ConfigError("not a size (e.g. 1GiB, 64M, 4096)", field=field, value=text) from None
    if not 1 <= value <= MAX_COLLECTIVE_BYTES:
        raise ConfigError("out of range (allowed: 1 B to 1 TiB)", field=field, value=text)
    return int(value)


def size_sweep(min_bytes: int = 1 << 10, max_bytes: int = 8 << 30) -> list[int]:
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out
