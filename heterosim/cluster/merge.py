"""Several jobs as one workload: each job's IR, its ranks renamed to its placed GPUs, its iterations
unrolled, all in one IR the coordinator runs on the cluster's one fabric.

* Job ``j``'s rank ``i`` becomes global rank ``placement[i]``; its groups (tp, dp, pp, ...) are renamed
  the same way, so the comm planner plans every collective on the GPUs and NICs the job really has.
* Iterations repeat back to back: iteration ``k+1`` of a job starts when its iteration ``k`` has ended
  on all its GPUs (a zero-byte ``barrier`` over the job's ranks, group ``job``: the optimizer step's
  global gradient-norm all-reduce and the loss reduction make a training step end together on every
  rank). Each job runs its own count; the run ends when every job has done its count.
* A job's first iteration starts at its ``start_ns`` (``Coordinator(release_ns=...)``).
* Compute ops are timed with the job's own compute model and precision (:class:`JobCompute`).

GPUs no job uses run an empty program.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from heterosim.comm.schedule import FlowSchedule
from heterosim.errors import UserError
from heterosim.workload.ir import IR, Op, Program

BARRIER = "barrier"
"""The zero-byte collective that ends a job's iteration on all its ranks (planned with no transfers)."""

JOB_GROUP = "job"


@dataclass
class JobRun:
    """One job, prepared: its training scenario, compiled IR and where it runs."""

    index: int
    name: str
    scenario: Any
    ir: IR
    compute: Any
    ranks: list[int]
    """Global GPU rank of each of the job's ranks."""
    iterations: int
    start_ns: int
    programs: list[int] = field(default_factory=list)
    """Merged-IR program id of each of the job's programs."""
    iter_stride: list[int] = field(default_factory=list)
    """Per job program: ops of one unrolled iteration (the program's ops + its barrier)."""


def _unroll(ops: list[Op], iterations: int) -> tuple[list[Op], int]:
    """The program repeated ``iterations`` times, each repetition after a barrier on the previous one."""
    n = len(ops)
    if iterations == 1:
        return list(ops), n
    stride = n + 1
    last_of_stream: dict[str, int] = {}
    first_of_stream: dict[str, int] = {}
    for op in ops:
        last_of_stream[op.stream] = op.id
        first_of_stream.setdefault(op.stream, op.id)
    firsts = set(first_of_stream.values())
    out: list[Op] = []
    for k in range(iterations):
        base = k * stride
        for op in ops:
            deps = tuple(base + d for d in op.deps)
            if k and op.id in firsts:
                deps = deps + (base - 1,)  # the previous iteration's barrier
            out.append(dataclasses.replace(op, id=base + op.id, deps=deps,
                                           tag=f"{op.tag}#{k}" if k and op.tag else op.tag))
        if k < iterations - 1:
            out.append(Op(id=base + n, kind="comm", name=f"end of iteration {k}", phase="other",
                          deps=tuple(sorted(base + i for i in last_of_stream.values())), stream="job",
                          collective=BARRIER, group=JOB_GROUP, size_bytes=0, tag=f"iteration-end#{k}"))
    return out, stride


def merge(jobs: list[JobRun], world_size: int) -> IR:
    """One IR over the cluster's ``world_size`` GPUs holding every job, iterations unrolled."""
    programs: list[Program] = []
    rank_program = [-1] * world_size
    groups: dict[str, list[tuple[int, ...]]] = {}
    for job in jobs:
        job.programs, job.iter_stride = [], []
        for p in job.ir.programs:
            ops, stride = _unroll(p.ops, job.iterations)
            job.programs.append(len(programs))
            job.iter_stride.append(stride)
            programs.append(Program(id=len(programs), ops=ops, stage=p.stage, label=f"{job.name}: {p.label}"))
        m = job.ranks
        for local, pid in enumerate(job.ir.rank_program):
            rank_program[m[local]] = job.programs[pid]
        for dim, gs in job.ir.groups.items():
            groups.setdefault(dim, []).extend(tuple(m[r] for r in g) for g in gs)
        groups.setdefault(JOB_GROUP, []).append(tuple(m))
    if any(p < 0 for p in rank_program):  # GPUs no job uses
        idle = len(programs)
        programs.append(Program(id=idle, ops=[], label="no job"))
        rank_program = [idle if p < 0 else p for p in rank_program]
    return IR(world_size=world_size, programs=programs, rank_program=rank_program, groups=groups,
              meta={"jobs": [j.name for j in jobs]})


def plan_with_barrier(plan):
    """The comm planner, plus the barrier: no transfers (it completes when its last member posts it)."""

    def planned(collective, ranks, size, system, **kw):
        if collective == BARRIER:
            return FlowSchedule(op=BARRIER, algorithm="none", protocol="none", ranks=tuple(ranks), size_bytes=0)
        return plan(collective, ranks, size, system, **kw)

    return planned


class JobCompute:
    """Times each compute op with its job's compute model and precision (jobs may differ in both)."""

    def __init__(self, jobs: list[JobRun], merged: IR):
        self._of: dict[int, tuple[Any, str]] = {}
        for job in jobs:
            entry = (job.compute, job.scenario.training.precision)
            for pid in job.programs:
                for op in merged.programs[pid].ops:
                    if op.kind == "compute":
                        self._of[id(op)] = entry
        self._merged = merged  # keeps the ops (and their ids) alive

    def op_time_ns(self, op, device, precision):
        compute, prec = self._of[id(op)]
        return compute.op_time_ns(op, device, prec)


def check_tp_in_nodes(job: JobRun, system, file: str | None) -> None:
    """A TP group must sit inside one node (its collectives run over NVLink): say which job and where."""
    gpus = system.gpus
    for g in job.ir.groups.get("tp", []):
        nodes = {gpus[job.ranks[r]].node for r in g}
        if len(nodes) > 1:
            names = [gpus[job.ranks[r]].name for r in g]
            raise UserError(f"job {job.name!r}: its placement splits a tensor-parallel group across nodes "
                            f"({names[0]} ... {names[-1]} on {sorted(nodes)}); TP must stay inside a node",
                            file=file, field=f"jobs[{job.index}].placement", value=len(g))
