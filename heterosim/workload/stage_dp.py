"""A different data-parallel degree per pipeline stage (``parallelism.stage_dp``): who runs which micro-batch,
in which order, and where its activations go.

What heterogeneous-training systems do. Metis (Um et al., USENIX ATC '24, "Metis: Fast Automatic Distributed
Training on Heterogeneous GPUs") places each pipeline stage on its own device group and prefers data
parallelism inside a stage, so stages of one pipeline run at different DP widths; HexiScale (Yan et al.,
arXiv 2409.01143, first titled FlashFlex) partitions data, pipeline and tensor parallelism asymmetrically
over heterogeneous GPUs; AMP and HARP plan the same class of heterogeneous pipelines. The papers as read
here (their abstracts) do not spell out how samples move between stages of different width.

What HeteroSim assumes. The global batch is m = global_batch_size / micro_batch_size micro-batches of
``micro_batch_size`` samples each, and a micro-batch is never split: micro-batch k runs on replica
``k mod d_s`` of stage s (d_s = stage_dp[s]), so each of a stage's replicas runs m / d_s micro-batches, and
the pipeline send between stages s and s+1 re-shards by routing: micro-batch k's activation (and, backward,
its gradient) goes from replica ``k mod d_s`` to replica ``k mod d_{s+1}``, one whole message of the usual
pipeline size (b*s*h elements, /tp with sequence parallelism). Each stage reduces its gradients over its own
d_s replicas (its DP groups); the optimizer step follows as in a uniform plan.

Schedule (1F1B). Each replica runs 1F1B over its own micro-batches in increasing global order with a local
warm-up of ``W_s / d_s`` forwards, where W_s, the stage's warm-up counted in global micro-batches, is built from
the last stage back: ``W_{p-1} = 0`` and ``W_s = d_s * ceil((W_{s+1} + 1) / d_s)``, the smallest multiple of d_s
above the next stage's. Why this is deadlock-free: since d_s divides W_s, replica r's order is exactly the
subsequence (micro-batches k = r mod d_s) of one stage-wide 1F1B over all m micro-batches with warm-up W_s (in a
1F1B order with warm-up W, F(k) precedes B(j) iff k <= j + W; for k = r + a d_s, j = r + b d_s that is
a <= b + W_s / d_s), and stage-wide 1F1B orders whose warm-ups fall from stage to stage, as plain 1F1B's
p - s - 1 do, do not deadlock. With equal degrees the rule gives every replica the usual warm-up p - s - 1.
Measured in the replay check (heterosim/workload/verify.py) on 205 random shapes of 2-8 stages with degrees
1-4: no deadlock. Two other rules deadlock there: every replica warming up p - s - 1 of its own micro-batches
(stage_dp [1, 2, 1, 1], m = 8: stage 1's replica 0 runs F4 before B0 while stage 0 runs B0 before F4), and
warm-ups counted from the first stage, ``W_0 = d_0 (p - 1)``, ``W_s = min(W_{s-1} - 1, d_s (p - s - 1))``
rounded down per replica (10 of the 205 shapes, e.g. [4, 4, 4, 4, 1, 1, 1, 1] at m = 64: a stage far ahead of
the next one queues sends behind receives on its in-order pipeline stream).
GPipe: each replica runs all its forwards, then all its backwards.
"""
from __future__ import annotations

from heterosim.workload.schedules import Step, one_f_one_b


def stage_warmups(stage_dp: list[int]) -> list[int]:
    """W_s of every stage (global micro-batches, a multiple of d_s; see the module docstring)."""
    out = [0] * len(stage_dp)
    for s in range(len(stage_dp) - 2, -1, -1):
        d = stage_dp[s]
        out[s] = d * -(-(out[s + 1] + 1) // d)
    return out


def replica_microbatches(stage_dp: list[int], m: int, stage: int, replica: int) -> list[int]:
    """The global micro-batches replica ``replica`` of ``stage`` runs, in order."""
    return list(range(replica, m, stage_dp[stage]))


def replica_steps(schedule: str, stage_dp: list[int], m: int, stage: int, replica: int = 0) -> list[Step]:
    """(phase, global micro-batch, chunk 0) steps of one replica (module docstring)."""
    mine = replica_microbatches(stage_dp, m, stage, replica)
    if schedule == "gpipe":
        return [("fwd", k, 0) for k in mine] + [("bwd", k, 0) for k in mine]
    warm = stage_warmups(stage_dp)[stage] // stage_dp[stage]
    return [(ph, mine[a], c) for ph, a, c in one_f_one_b(warm + 1, len(mine), 0)]


class ReplicaRoute:
    """One replica's steps and the ``peer_offset`` of each of its pipeline messages in its ``pp`` group
    (positions as :meth:`heterosim.workload.groups.StageDPLayout.position` numbers them)."""

    __slots__ = ("stage_dp", "stage", "replica", "steps", "_pos")

    def __init__(self, schedule: str, stage_dp: list[int], m: int, stage: int, replica: int) -> None:
        self.stage_dp, self.stage, self.replica = list(stage_dp), stage, replica
        self.steps = replica_steps(schedule, stage_dp, m, stage, replica)
        self._pos = [sum(stage_dp[:s]) for s in range(len(stage_dp))]

    def offset(self, mb: int, to_stage: int) -> int:
        """Offset from this replica to the replica of ``to_stage`` that runs micro-batch ``mb``."""
        return (self._pos[to_stage] + mb % self.stage_dp[to_stage]) - (self._pos[self.stage] + self.replica)
