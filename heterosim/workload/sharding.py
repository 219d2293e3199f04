"""ZeRO-2 / ZeRO-3 (FSDP) sharding: where the states live, and the ops ZeRO-3 issues around each unit.

:func:`sharding_of` resolves ``parallelism.zero_stage`` 2/3, ``shard_size`` (HSDP),
``reshard_after_forward`` and ``fp8_param_allgather`` against a plan once (one-line PlanErrors), for the
compiler and the memory model. :class:`FsdpEmitter` emits ZeRO-3's collectives into a program
(see docs/fsdp.md):

* **units** are FSDP's wrapping units as torchtitan applies ``fully_shard``: the input embedding, every
  transformer layer, the final norm + output layer (``head``); a pipeline stage owns its units;
* before a unit runs (forward, and backward unless it is still gathered) its parameter shards are
  all-gathered on the (shard) data-parallel group; expert parameters of MoE layers on ``edp``;
* **prefetch** (FSDP2's implicit forward prefetch and explicit backward prefetch of one unit, DeepSpeed
  ZeRO-3's prefetch bucket): the all-gather of the *next* unit is issued when the current unit starts,
  so it runs on the data-parallel stream beside the current unit's compute; at most two units are
  gathered at once;
* after a unit's backward its gradients are reduce-scattered (FSDP ``post_backward``, every micro-batch:
  FSDP2 and DeepSpeed reduce each micro-batch's gradients unless told not to); with HSDP the resulting
  shard is then all-reduced over the replicate group on its own stream (FSDP2's all-reduce stream);
* all of a rank's data-parallel collectives run on one ``dp`` stream in issue order, because PyTorch's
  ProcessGroupNCCL runs one process group's collectives on one NCCL stream;
* **reshard**: a unit's parameters are freed after its forward (``reshard_after_forward``) and after its
  backward, except when the very next unit to run is the same one (the last unit of the forward pass
  followed by its own backward: FSDP2 leaves the root's parameters gathered, torchtitan the last
  block's, DeepSpeed keeps parameters within ``stage3_max_reuse_distance``).
"""
from __future__ import annotations

from dataclasses import dataclass

from heterosim.errors import PlanError


@dataclass(frozen=True, slots=True)
class Sharding:
    """ZeRO-2/3 sharding of one plan."""

    stage: int
    dense_group: str
    """Group the dense states are sharded over: ``dp``, ``dp_cp`` (context parallelism) or ``shard`` (HSDP)."""
    dense_n: int
    """Ranks sharing the dense states (N_d of the ZeRO paper)."""
    expert_n: int
    """Ranks sharing the expert states (the ``edp`` group: dp*cp/ep)."""
    replicate_n: int
    """HSDP copies of the sharded states (1 = plain FSDP / ZeRO)."""
    reshard_after_forward: bool
    fp8_allgather: bool

    @property
    def hybrid(self) -> bool:
        return self.replicate_n > 1


def sharding_of(scenario, plan) -> Sharding | None:
    """The plan's ZeRO-2/3 sharding (None for zero_stage 0/1); PlanError for a plan it cannot run."""
    if plan.zero_stage < 2:
        return None
    par, tr = scenario.parallelism, scenario.training
    dense_dim = "dp_cp" if plan.cp > 1 else "dp"
    s = par.shard_size
    replicate = 1
    if s is not None:
        if s > plan.dp or plan.dp % s:
            raise PlanError(f"must divide dp ({plan.dp}): hybrid sharding cuts each data-parallel group into "
                            f"groups of shard_size ranks", field="parallelism.shard_size", value=s)
        if plan.ep > 1 and s < plan.dp:
            raise PlanError("hybrid sharding of expert parameters (ep > 1) is not modelled; leave shard_size unset "
                            "or equal to dp", field="parallelism.shard_size", value=s)
        replicate = plan.dp // s
    if par.fp8_param_allgather and tr.precision != "fp8":
        raise PlanError(f"needs training.precision fp8 (torchtitan's float8 all-gather casts Float8Linear "
                        f"weights), precision is {tr.precision}", field="parallelism.fp8_param_allgather",
                        value=True)
    if len(set(plan.microbatches)) > 1:
        raise PlanError(f"zero_stage {plan.zero_stage} reduces gradients every micro-batch, so every "
                        f"data-parallel replica must run the same number of micro-batches",
                        field="training.microbatch_split", value=list(plan.microbatches))
    if replicate > 1:
        return Sharding(plan.zero_stage, "shard", s * plan.cp, plan.edp, replicate,
                        par.reshard_after_forward, par.fp8_param_allgather)
    return Sharding(plan.zero_stage, dense_dim, plan.dp * plan.cp, plan.edp, 1,
                    par.reshard_after_forward, par.fp8_param_allgather)


def allgather_bytes_per_param(sh: Sharding, key, precision: str) -> int:
    """Bytes per parameter a ZeRO-3 all-gather moves for unit ``key``: the working precision (2; 4 in fp32),
    1 for a transformer layer with ``fp8_param_allgather`` (its norm weights, under 0.1% of a layer's
    parameters at h >= 1024, are counted at 1 B too)."""
    if sh.fp8_allgather and isinstance(key, int):
        return 1
    return 4 if precision == "fp32" else 2


def unit_uses(steps, plan, stage: int) -> list[tuple[str, int, int, object]]:
    """The (phase, micro-batch, chunk, unit key) of every unit use of one program, in program order."""
    pp, last_vs = plan.pp, plan.num_vstages - 1
    uses = []
    for phase, mb, chunk in steps:
        vs = chunk * pp + stage
        keys = list(plan.vstage_layers[vs])
        if vs == 0:
            keys.insert(0, "embed")
        if vs == last_vs:
            keys.append("head")
        if phase != "fwd":
            keys.reverse()
        uses.extend((phase, mb, chunk, k) for k in keys)
    return uses


def gather_needed(uses: list, reshard_after_forward: bool) -> list[bool]:
    """Whether each use must all-gather its unit (module docstring: reshard rules)."""
    gathered: set = set()
    need = []
    for i, (phase, _mb, chunk, key) in enumerate(uses):
        unit = (chunk, key)
        need.append(unit not in gathered)
        gathered.add(unit)
        nxt = (uses[i + 1][2], uses[i + 1][3]) if i + 1 < len(uses) else None
        if nxt != unit and not (phase == "fwd" and not reshard_after_forward):
            gathered.discard(unit)
    return need


class FsdpEmitter:
    """Emits ZeRO-3's all-gathers and reduce-scatters around the units of one program (module docstring).

    The compiler calls :meth:`pre` just before each unit use (in program order, with the handle the unit's
    first op would wait on) and :meth:`post_bwd` after each unit's backward."""

    def __init__(self, prog, sh: Sharding, steps, plan, stage: int, grad_items: dict, precision: str,
                 gb: int) -> None:
        self.p, self.sh, self.gb, self.precision = prog, sh, gb, precision
        self.params = {(c, it[0]): (it[1], it[2]) for c in range(plan.chunks) for it in grad_items[(stage, c)]}
        self.uses = unit_uses(steps, plan, stage)
        self.need = gather_needed(self.uses, sh.reshard_after_forward)
        self.i = 0
        self.gathers: dict[int, tuple] = {}
        self.reduce_ops: list[int] = []
        """Every reduce-scatter / replicate all-reduce (the optimizer waits for them)."""

    def _parts(self, chunk: int, key) -> list[tuple[str, int, float]]:
        """(group, group size, parameters) of a unit's dense and expert parts that are sharded."""
        dense, expert = self.params[(chunk, key)]
        sh = self.sh
        out = []
        if dense > 0 and sh.dense_n > 1:
            out.append((sh.dense_group, sh.dense_n, dense))
        if expert > 0 and sh.expert_n > 1:
            out.append(("edp", sh.expert_n, expert))
        return out

    def _gather(self, i: int, deps: tuple) -> None:
        phase, mb, chunk, key = self.uses[i]
        pb = allgather_bytes_per_param(self.sh, key, self.precision)
        layer = key if isinstance(key, int) else -1
        out: tuple = ()
        for group, _n, n in self._parts(chunk, key):
            out += self.p.comm("fsdp_param_allgather", "allgather", group, int(n * pb),
                               f"{group}:ag:{phase}:mb{mb}:c{chunk}:{key}", deps, phase, mb, layer, chunk,
                               stream="dp", kind="dp")
        self.gathers[i] = out

    def pre(self, deps: tuple, phase: str, mb: int, chunk: int, key) -> tuple:
        """Before use ``i`` of a unit: its own all-gather (first use only: later ones were prefetched) and the
        prefetch of the next use's; returns ``deps`` plus the all-gather it waits for."""
        i = self.i
        if self.uses[i] != (phase, mb, chunk, key):  # the compiler walks the units in the same order
            raise AssertionError(f"FSDP unit order: expected {self.uses[i]}, got {(phase, mb, chunk, key)}")
        if i == 0 and self.need[0]:
            self._gather(0, ())
        if i + 1 < len(self.uses) and self.need[i + 1]:
            self._gather(i + 1, deps)  # issued when this unit starts: overlaps its compute
        self.i += 1
        return deps + self.gathers.pop(i, ())

    def post_bwd(self, prod: int, mb: int, chunk: int, key) -> None:
        """Reduce-scatter of the unit's gradients once its backward (``prod``) is done (+ HSDP all-reduce)."""
        sh = self.sh
        layer = key if isinstance(key, int) else -1
        for group, n, params in self._parts(chunk, key):
            rs = self.p.comm("fsdp_grad_reducescatter", "reducescatter", group, int(params * self.gb),
                             f"{group}:rs:mb{mb}:c{chunk}:{key}", (prod,), "bwd", mb, layer, chunk,
                             stream="dp", kind="dp")
            self.reduce_ops.append(rs[0])
            if sh.hybrid and group == "shard":
                ar = self.p.comm("fsdp_grad_replicate_allreduce", "allreduce", "replicate",
                                 int(params * self.gb / n), f"replicate:ar:mb{mb}:c{chunk}:{key}", rs, "bwd", mb,
                                 layer, chunk, stream="dp_replicate", kind="dp")
                self.reduce_ops.append(ar[0])

    def finished(self) -> None:
        if self.i != len(self.uses):
            raise AssertionError(f"FSDP: {len(self.uses) - self.i} unit uses never emitted")
