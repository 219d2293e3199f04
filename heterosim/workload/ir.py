"""The workload IR: one training iteration as per-rank dependency graphs.

Version 1 layout (``IR.to_json``):

* ``programs``: op lists. Ranks that do the same work (same pipeline stage,
  same micro-batch count) share one program, so GPT-3 175B on 1024 GPUs holds
  16 programs, not 1024. ``rank_program[r]`` names rank r's program.
* an :class:`Op` is compute (``op_class``, ``flops``, ``bytes``) or communication
  (``collective``, ``group`` dimension, ``size_bytes``, ``tag``). ``deps`` are op
  ids in the same program. Ops of one ``stream`` run in program order (a CUDA /
  NCCL stream); deps add the cross-stream waits.
* communication groups are named by dimension (``tp``, ``dp``, ``pp``, ``ep``,
  ``cp``, ``dp_cp``...); :meth:`IR.group_of` resolves them for a rank. All members
  of one group instance execute an op with the same ``tag``; that is how the
  coordinator matches them. Pipeline send/recv give ``peer_offset`` (+1 = next
  stage, -1 = previous) instead of a group.
* ``size_bytes`` follows nccl-tests: all-reduce/broadcast/reduce = buffer size;
  all-gather = output size; reduce-scatter = input size; all-to-all = bytes each
  rank sends in total; send/recv = the message. An all-to-all with ``peer_bytes`` is an all-to-allv:
  per-pair sizes, one row per rank.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterator

IR_VERSION = "1.0"

COLLECTIVES = ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "reduce", "send", "recv")
PHASES = ("fwd", "bwd", "opt", "other")


@dataclass(slots=True)
class Op:
    id: int
    kind: str
    """``compute`` or ``comm``."""
    name: str
    phase: str = "fwd"
    deps: tuple[int, ...] = ()
    stream: str = "compute"
    """compute | tp | cp | ep | pp_send | pp_recv | dp (comm ops get their own stream)."""
    microbatch: int = -1
    layer: int = -1
    """Global layer index, -1 for embedding/head/optimizer."""
    chunk: int = 0
    """Model chunk (virtual pipeline stage) on this rank."""
    # compute
    op_class: str = ""
    """gemm | attention | elementwise | embedding | optimizer | layer (fused block)."""
    flops: float = 0.0
    bytes: float = 0.0
    """Bytes moved to/from HBM (roofline memory side)."""
    gemm_mnk: tuple[int, int, int] | None = None
    """Shape of the dominant GEMM, when op_class is gemm (efficiency depends on it)."""
    kernels: tuple[tuple, ...] = ()
    """For fused ops (op_class ``layer``): the kernels it stands for, each
    ``(op_class, flops, bytes, gemm_mnk_or_None)``; the compute model times each
    kernel and sums. ``flops``/``bytes`` are then the kernel totals."""
    # comm
    collective: str = ""
    group: str = ""
    """Group dimension name, resolved per rank by IR.group_of."""
    size_bytes: int = 0
    peer_offset: int = 0
    tag: str = ""
    comm_kind: str = ""
    """Which parallelism the traffic belongs to (tp, cp, pp, dp, ep) for breakdowns."""
    duration_ns: int = -1
    """A compute op's recorded time (an imported trace, heterosim/chakra): used as is, on any device;
    -1 = timed by the compute model."""
    peer_bytes: tuple[int, ...] | None = None
    """An all-to-allv's per-pair sizes (uneven MoE routing): bytes this rank sends to each member of its
    ``group``, in the group's order, its own entry being the share it keeps (no byte moves). The coordinator
    hands the group's rows, each from its rank's own op, to ``heterosim.comm.alltoallv.plan_alltoallv``;
    ``size_bytes`` is then the all-to-allv's largest receiver (what its busiest rank receives). None: a plain
    collective of ``size_bytes``."""

    @property
    def is_comm(self) -> bool:
        return self.kind == "comm"


_OP_DEFAULTS = {f.name: f.default for f in fields(Op)}


@dataclass
class Program:
    id: int
    ops: list[Op]
    stage: int = 0
    """Pipeline stage (rank's position in its pp group)."""
    label: str = ""


@dataclass
class IR:
    world_size: int
    programs: list[Program]
    rank_program: list[int]
    groups: dict[str, list[tuple[int, ...]]]
    """Dimension -> list of disjoint rank groups covering the world."""
    meta: dict[str, Any] = field(default_factory=dict)
    """model_flops (per iteration, as Megatron counts them), tokens, microbatches,
    memory per rank, schedule, etc."""
    version: str = IR_VERSION
    _group_index: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.reindex_groups()

    def reindex_groups(self) -> None:
        self._group_index = {}
        for dim, groups in self.groups.items():
            idx = [-1] * self.world_size
            for gi, g in enumerate(groups):
                for r in g:
                    idx[r] = gi
            self._group_index[dim] = idx

    def program_of(self, rank: int) -> Program:
        return self.programs[self.rank_program[rank]]

    def ops_of(self, rank: int) -> list[Op]:
        return self.program_of(rank).ops

    def group_of(self, rank: int, dim: str) -> tuple[int, ...]:
        """The ranks of ``dim`` group that contains ``rank``."""
        gi = self._group_index[dim][rank]
        return self.groups[dim][gi]

    def group_id(self, rank: int, dim: str) -> int:
        return self._group_index[dim][rank]

    def peer_of(self, rank: int, offset: int) -> int:
        """Pipeline neighbour ``offset`` stages away (wraps, as interleaving needs)."""
        g = self.group_of(rank, "pp")
        i = g.index(rank)
        return g[(i + offset) % len(g)]

    def iter_rank_ops(self) -> Iterator[tuple[int, Op]]:
        for r in range(self.world_size):
            for op in self.ops_of(r):
                yield r, op

    def total_flops(self) -> float:
        """Sum of compute FLOPs executed by all ranks (includes recomputation)."""
        per_prog = [sum(op.flops for op in p.ops) for p in self.programs]
        return sum(per_prog[p] for p in self.rank_program)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "world_size": self.world_size,
            "rank_program": self.rank_program,
            "groups": {k: [list(g) for g in v] for k, v in self.groups.items()},
            "meta": self.meta,
            "programs": [
                {"id": p.id, "stage": p.stage, "label": p.label,
                 "ops": [{k: v for k, v in asdict(op).items() if k in ("id", "deps") or v != _OP_DEFAULTS[k]}
                         for op in p.ops]}
                for p in self.programs
            ],
        }

    def to_json(self, path) -> None:
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "IR":
        if data.get("version") != IR_VERSION:
            raise ValueError(f"IR version {data.get('version')!r} not supported (expected {IR_VERSION})")
        programs = []
        for p in data["programs"]:
            ops = []
            for o in p["ops"]:
                o = dict(o)
                o["deps"] = tuple(o.get("deps", ()))
                if o.get("gemm_mnk"):
                    o["gemm_mnk"] = tuple(o["gemm_mnk"])
                if o.get("peer_bytes") is not None:
                    o["peer_bytes"] = tuple(o["peer_bytes"])
                if o.get("kernels"):
                    o["kernels"] = tuple((k[0], k[1], k[2], tuple(k[3]) if k[3] else None) for k in o["kernels"])
                ops.append(Op(**o))
            programs.append(Program(id=p["id"], ops=ops, stage=p.get("stage", 0), label=p.get("label", "")))
        return cls(world_size=data["world_size"], programs=programs, rank_program=list(data["rank_program"]),
                   groups={k: [tuple(g) for g in v] for k, v in data["groups"].items()}, meta=data.get("meta", {}))
