"""Rank -> parallel-group mapping, with Megatron-LM's RankGenerator semantics.

A rank is a mixed-radix number whose digits are its coordinates along the
dimensions of ``order`` (fastest-varying first): with ``tp-cp-ep-dp-pp``,
``rank = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i))``. A group along a set of
dimensions is every rank sharing the coordinates of the *other* dimensions,
listed in increasing coordinate order (so ``pp`` groups are ordered by stage).

Expert parallelism is carved out of data parallelism (MoE): in the expert layout
the ``dp`` digit splits into ``ep`` (faster) and ``dp/ep`` (expert data parallel,
"edp"). Dense groups never see ``ep``.

With an expert TP degree apart from tp (``parallelism.expert_tp``, ``etp``) the expert layout is
Megatron-Core's "MoE parallel folding" (parallel_state.initialize_model_parallel builds a second
RankGenerator with tp = expert_tp, ep, dp = world / (expert_tp * ep * pp), cp = 1, the same order): the
digits of the expert layout are ``etp`` (in tp's place), ``ep``, ``edp`` (in dp's place) and ``pp``, so the
expert groups are cut out of the tp x cp x dp ranks of each pipeline stage, and ``pp`` groups are the same
in both layouts. The expert-TP groups are ``etp``.
"""
from __future__ import annotations

from itertools import product
from math import prod

from heterosim.errors import PlanError

DIMS = ("tp", "cp", "ep", "dp", "pp")


def _full_order(order: str, ep: int) -> list[str]:
    """The order with every dimension present (ep goes just before dp when missing)."""
    toks = order.split("-")
    if sorted(set(toks)) != sorted(toks) or not set(toks) <= set(DIMS):
        raise PlanError("order must be a permutation of tp-cp-ep-dp-pp", field="parallelism.order", value=order)
    if "ep" not in toks:
        toks.insert(toks.index("dp") if "dp" in toks else len(toks), "ep")
    for d in ("tp", "cp", "dp", "pp"):
        if d not in toks:
            toks.append(d)
    return toks


def _groups(sizes: list[int], mask: list[bool]) -> list[tuple[int, ...]]:
    """All groups varying the masked digits (sizes fastest-first)."""
    strides = [prod(sizes[:i]) for i in range(len(sizes))]
    in_dims = [i for i, m in enumerate(mask) if m]
    out_dims = [i for i, m in enumerate(mask) if not m]
    # iterate outer (unmasked) digits with the fastest one varying fastest
    out_ranges = [range(sizes[i]) for i in reversed(out_dims)]
    in_ranges = [range(sizes[i]) for i in reversed(in_dims)]
    groups = []
    for outer in product(*out_ranges):
        base = sum(c * strides[i] for c, i in zip(outer, reversed(out_dims)))
        members = tuple(base + sum(c * strides[i] for c, i in zip(inner, reversed(in_dims)))
                        for inner in product(*in_ranges))
        groups.append(members)
    return groups


class RankLayout:
    """Coordinates and groups of every rank for one parallel plan."""

    __slots__ = ("world_size", "tp", "pp", "dp", "cp", "ep", "etp", "order", "_dense", "_expert")

    def __init__(self, world_size: int, tp: int, pp: int, dp: int, cp: int = 1, ep: int = 1,
                 order: str = "tp-cp-ep-dp-pp", etp: int = 0) -> None:
        if tp * pp * dp * cp != world_size:
            raise PlanError(f"GPU count mismatch: tp*pp*cp*dp = {tp * pp * cp * dp} but the cluster has "
                            f"{world_size} GPUs", field="parallelism", value=f"tp={tp} pp={pp} cp={cp} dp={dp}")
        etp = 0 if etp == tp else etp
        if etp and (tp * cp * dp) % (etp * ep):
            raise PlanError(f"expert_tp * ep = {etp * ep} must divide tp*cp*dp = {tp * cp * dp}",
                            field="parallelism.expert_tp", value=etp)
        if not etp and dp % ep:
            raise PlanError(f"expert parallelism is carved out of data parallelism: ep must divide dp ({dp})",
                            field="parallelism.ep", value=ep)
        self.world_size, self.tp, self.pp, self.dp, self.cp, self.ep = world_size, tp, pp, dp, cp, ep
        self.etp = etp
        self.order = _full_order(order, ep)
        dense_size = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
        if etp:  # Megatron-Core's folding: expert RankGenerator(tp=etp, ep, dp=world/(etp*ep*pp), cp=1)
            expert_size = {"tp": etp, "cp": 1, "ep": ep, "dp": tp * cp * dp // (etp * ep), "pp": pp}
        else:
            expert_size = {"tp": tp, "cp": cp, "ep": ep, "dp": dp // ep, "pp": pp}
        self._dense = [(d, dense_size[d]) for d in self.order]
        self._expert = [(d, expert_size[d]) for d in self.order]

    def _make(self, layout, dims: set[str]) -> list[tuple[int, ...]]:
        return _groups([s for _, s in layout], [d in dims for d, _ in layout])

    def groups(self) -> dict[str, list[tuple[int, ...]]]:
        g = {
            "tp": self._make(self._dense, {"tp"}),
            "cp": self._make(self._dense, {"cp"}),
            "dp": self._make(self._dense, {"dp"}),
            "pp": self._make(self._dense, {"pp"}),
            "dp_cp": self._make(self._dense, {"dp", "cp"}),
            "tp_cp": self._make(self._dense, {"tp", "cp"}),
            "mp": self._make(self._dense, {"tp", "pp"}),
            "ep": self._make(self._expert, {"ep"}),
            "edp": self._make(self._expert, {"dp", "cp"}),
        }
        if self.etp:
            g["etp"] = self._make(self._expert, {"tp"})
        g["tp_pp"] = g["mp"]
        # tied input embedding / LM head: first and last stage of each pipeline
        embd: list[tuple[int, ...]] = []
        for pg in g["pp"]:
            if len(pg) > 1:
                embd.append((pg[0], pg[-1]))
                embd.extend((r,) for r in pg[1:-1])
            else:
                embd.append(pg)
        g["embd"] = embd
        return g

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank``: tp, cp, dp, pp (dense) and ep, edp (expert layout)."""
        if not 0 <= rank < self.world_size:
            raise PlanError(f"rank out of range (world size {self.world_size})", field="rank", value=rank)
        out: dict[str, int] = {}
        r = rank
        for d, s in self._dense:
            out[d] = r % s
            r //= s
        r = rank
        for d, s in self._expert:
            c = r % s
            r //= s
            if d == "ep":
                out["ep"] = c
            elif d == "dp":
                out["edp"] = c
            elif d == "tp" and self.etp:
                out["etp"] = c
        return out


def build_groups(world_size: int, tp: int, pp: int, dp: int, cp: int = 1, ep: int = 1,
                 order: str = "tp-cp-ep-dp-pp", etp: int = 0) -> dict[str, list[tuple[int, ...]]]:
    """Dimension -> disjoint rank groups covering the world (Megatron RankGenerator); ``etp`` != tp: the
    expert groups folded as Megatron-Core's parallel_state does (module docstring)."""
    return RankLayout(world_size, tp, pp, dp, cp, ep, order, etp).groups()


def rank_coords(rank: int, world_size: int, tp: int, pp: int, dp: int, cp: int = 1, ep: int = 1,
                order: str = "tp-cp-ep-dp-pp", etp: int = 0) -> dict[str, int]:
    """Coordinates of one rank (tp, cp, dp, pp, ep, edp; etp when folded)."""
    return RankLayout(world_size, tp, pp, dp, cp, ep, order, etp).coords(rank)


class StageTPLayout:
    """Rank layout when pipeline stages have different TP degrees (``parallelism.stage_tp``).

    Stage-major: stage ``s`` owns a contiguous block of ``dp*cp*stage_tp[s]`` ranks,
    laid out inside the block like a one-stage :class:`RankLayout` (``order`` without
    ``pp``: tp fastest, then cp, ep, dp). Groups that live inside a stage (tp, cp, dp,
    dp_cp, tp_cp, ep, edp) are the per-stage groups, offset to the block. ``mp``
    (tp x pp) is one replica's ranks over all stages.

    ``pp`` groups: for each (tp index k, cp, dp) the ranks with those coordinates in
    every stage whose degree exceeds k, in stage order. So the TP-index-0 ranks (lane
    leaders) always form full-length pipelines and ``IR.peer_of`` on a leader gives the
    leader of the neighbouring stage of the same replica; ranks with k >= some stage's
    degree sit in shorter groups (only stages with that index). Every rank is in
    exactly one group, so the groups are disjoint and cover the world. Pipeline data
    between stages of different degree is re-sharded by the coordinator per lane.
    ``embd`` (tied embedding): for k < min(stage_tp[0], stage_tp[-1]) the pair
    (first stage, last stage) at index k, every other first/last-stage rank alone.
    """

    __slots__ = ("world_size", "stage_tp", "tp", "pp", "dp", "cp", "ep", "order", "_stages", "_base")

    def __init__(self, stage_tp: list[int], dp: int, cp: int = 1, ep: int = 1,
                 order: str = "tp-cp-ep-dp-pp") -> None:
        full = _full_order(order, ep)
        if full[-1] != "pp":
            raise PlanError("uneven per-stage TP needs a stage-major layout: pp must be the slowest dimension "
                            "(e.g. tp-cp-ep-dp-pp)", field="parallelism.order", value=order)
        self.stage_tp = list(stage_tp)
        self.tp, self.pp, self.dp, self.cp, self.ep = max(stage_tp), len(stage_tp), dp, cp, ep
        self.order = full
        inner = "-".join(d for d in full if d != "pp")
        self._stages: list[RankLayout] = []
        self._base: list[int] = []
        base = 0
        for t in stage_tp:
            n = t * cp * dp
            self._stages.append(RankLayout(n, t, 1, dp, cp, ep, inner))
            self._base.append(base)
            base += n
        self.world_size = base

    def stage_of(self, rank: int) -> int:
        for s in range(self.pp - 1, -1, -1):
            if rank >= self._base[s]:
                return s
        raise PlanError(f"rank out of range (world size {self.world_size})", field="rank", value=rank)

    def rank_at(self, stage: int, c: dict[str, int]) -> int:
        """The rank of ``stage`` with dense coordinates tp, cp, dp."""
        r, stride = 0, 1
        for d, size in self._stages[stage]._dense:
            r += c.get(d, 0) * stride
            stride *= size
        return self._base[stage] + r

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank``: tp, cp, dp, pp (its stage), ep, edp."""
        if not 0 <= rank < self.world_size:
            raise PlanError(f"rank out of range (world size {self.world_size})", field="rank", value=rank)
        s = self.stage_of(rank)
        out = self._stages[s].coords(rank - self._base[s])
        out["pp"] = s
        return out

    def groups(self) -> dict[str, list[tuple[int, ...]]]:
        g: dict[str, list[tuple[int, ...]]] = {}
        per_stage = [lay.groups() for lay in self._stages]
        for dim in ("tp", "cp", "dp", "dp_cp", "tp_cp", "ep", "edp"):
            g[dim] = [tuple(self._base[s] + r for r in grp) for s in range(self.pp) for grp in per_stage[s][dim]]
        pp: list[tuple[int, ...]] = []
        mp: list[tuple[int, ...]] = []
        for d in range(self.dp):
            for c in range(self.cp):
                mp.append(tuple(self.rank_at(s, {"tp": k, "cp": c, "dp": d})
                                for s in range(self.pp) for k in range(self.stage_tp[s])))
                for k in range(self.tp):
                    pp.append(tuple(self.rank_at(s, {"tp": k, "cp": c, "dp": d})
                                    for s in range(self.pp) if k < self.stage_tp[s]))
        g["pp"] = pp
        g["mp"] = mp
        g["tp_pp"] = mp
        embd: list[tuple[int, ...]] = []
        last = self.pp - 1
        m = min(self.stage_tp[0], self.stage_tp[last])
        for grp in pp:
            ends = [r for r in grp if self.stage_of(r) in (0, last)]
            mids = [(r,) for r in grp if self.stage_of(r) not in (0, last)]
            if self.pp > 1 and len(ends) == 2 and self.coords(ends[0])["tp"] < m:
                embd.append((ends[0], ends[1]))
            else:
                embd.extend((r,) for r in ends)
            embd.extend(mids)
        g["embd"] = embd
        return g


class StageDPLayout(StageTPLayout):
    """Rank layout when pipeline stages have different DP degrees (``parallelism.stage_dp``, optionally with
    ``stage_tp``).

    Stage-major, as :class:`StageTPLayout`: stage ``s`` owns a contiguous block of ``stage_dp[s]*cp*tp_s``
    ranks laid out like a one-stage :class:`RankLayout` (tp fastest, then cp, ep, dp); the per-stage groups
    (tp, cp, dp, dp_cp, tp_cp, ep, edp) are that stage's, so each stage reduces its gradients over its own
    ``stage_dp[s]`` replicas.

    ``pp`` groups: micro-batch k runs on replica ``k mod stage_dp[s]`` of every stage s, so a replica talks to
    several replicas of its neighbours and no one-rank-per-stage group can hold its peers. One ``pp`` group
    per (tp index k, cp) instead holds every rank with those coordinates, stage by stage and replica by
    replica (stage s replica r at position ``sum(stage_dp[:s]) + r`` for the TP-index-0 ranks): a pipeline
    send/recv names its peer by the offset between the two positions (``IR.peer_of``), computed per
    micro-batch by the compiler (:mod:`heterosim.workload.stage_dp`). With uneven TP only the lane leaders'
    (index 0) groups hold every stage; pipeline data pairs whole TP groups through them, as with stage_tp.
    ``mp``/``tp_pp``: one group per cp coordinate (every rank with it: the model-parallel ranks of all the
    replicas, which now share pipelines). ``embd`` (tied embedding): for tp index k < min(tp of the first
    stage, tp of the last) and each cp, every first- and last-stage replica at that index in one group (a pair
    when both stages have one replica); the other first/last-stage ranks alone.
    """

    __slots__ = ("stage_dp",)

    def __init__(self, stage_tp: list[int], stage_dp: list[int], cp: int = 1, ep: int = 1,
                 order: str = "tp-cp-ep-dp-pp") -> None:
        full = _full_order(order, ep)
        if full[-1] != "pp":
            raise PlanError("per-stage DP degrees need a stage-major layout: pp must be the slowest dimension "
                            "(e.g. tp-cp-ep-dp-pp)", field="parallelism.order", value=order)
        self.stage_tp, self.stage_dp = list(stage_tp), list(stage_dp)
        self.tp, self.pp, self.dp, self.cp, self.ep = max(stage_tp), len(stage_tp), max(stage_dp), cp, ep
        self.order = full
        inner = "-".join(d for d in full if d != "pp")
        self._stages = []
        self._base = []
        base = 0
        for t, d in zip(stage_tp, stage_dp):
            n = t * cp * d
            self._stages.append(RankLayout(n, t, 1, d, cp, ep, inner))
            self._base.append(base)
            base += n
        self.world_size = base

    def position(self, stage: int, replica: int) -> int:
        """Index of (stage, replica) in a lane leader's ``pp`` group."""
        return sum(self.stage_dp[:stage]) + replica

    def groups(self) -> dict[str, list[tuple[int, ...]]]:
        g: dict[str, list[tuple[int, ...]]] = {}
        per_stage = [lay.groups() for lay in self._stages]
        for dim in ("tp", "cp", "dp", "dp_cp", "tp_cp", "ep", "edp"):
            g[dim] = [tuple(self._base[s] + r for r in grp) for s in range(self.pp) for grp in per_stage[s][dim]]
        stages = range(self.pp)
        g["pp"] = [tuple(self.rank_at(s, {"tp": k, "cp": c, "dp": r}) for s in stages if k < self.stage_tp[s]
                         for r in range(self.stage_dp[s])) for c in range(self.cp) for k in range(self.tp)]
        g["mp"] = [tuple(self.rank_at(s, {"tp": k, "cp": c, "dp": r}) for s in stages
                         for r in range(self.stage_dp[s]) for k in range(self.stage_tp[s])) for c in range(self.cp)]
        g["tp_pp"] = g["mp"]
        last = self.pp - 1
        m = min(self.stage_tp[0], self.stage_tp[last])
        embd: list[tuple[int, ...]] = []
        for c in range(self.cp):
            for s in (0, last) if self.pp > 1 else (0,):
                for k in range(m, self.stage_tp[s]):
                    embd.extend((self.rank_at(s, {"tp": k, "cp": c, "dp": r}),) for r in range(self.stage_dp[s]))
            for k in range(m):
                embd.append(tuple(self.rank_at(s, {"tp": k, "cp": c, "dp": r}) for s in sorted({0, last})
                                  for r in range(self.stage_dp[s])))
        for s in range(1, last):
            embd.extend((r,) for r in range(self._base[s], self._base[s] + self._stages[s].world_size))
        g["embd"] = embd
        return g


def check_tp_in_nodes(tp_groups: list[tuple[int, ...]], rank_nodes: list[str], stage_tp: list[int] | None = None,
                      file: str | None = None) -> None:
    """TP groups must stay inside one node (PlanError naming the first group that does not)."""
    for g in tp_groups:
        nodes = sorted({rank_nodes[r] for r in g})
        if len(nodes) > 1:
            fld, value = ("parallelism.stage_tp", stage_tp) if stage_tp else ("parallelism.tp", len(g))
            raise PlanError(f"tensor-parallel group of ranks {g[0]}-{g[-1]} spans nodes {nodes}; TP must stay "
                            f"inside a node", file=file, field=fld, value=value)


def hybrid_shard_groups(dense_groups: list[tuple[int, ...]], dp_coord, shard_size: int
                        ) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(shard groups, replicate groups) of hybrid sharding (HSDP, ``parallelism.shard_size``).

    Each dense data-parallel group (``dp``, or ``dp_cp`` with context parallelism) is cut by data-parallel
    coordinate: ranks with ``dp // shard_size`` equal form a shard group (they hold one full copy of the
    sharded states between them, FSDP2's "shard" mesh dimension); ranks with ``dp % shard_size`` equal
    (and the same cp coordinate) form a replicate group (one rank per copy, holding the same shard: the
    "replicate" dimension, which all-reduces gradient shards). Members keep their order in the dense group.
    ``dp_coord(rank)`` gives a rank's (dp, cp) coordinates."""
    shard: list[tuple[int, ...]] = []
    replicate: list[tuple[int, ...]] = []
    for g in dense_groups:
        by_shard: dict[int, list[int]] = {}
        by_pos: dict[tuple[int, int], list[int]] = {}
        for r in g:
            d, c = dp_coord(r)
            by_shard.setdefault(d // shard_size, []).append(r)
            by_pos.setdefault((d % shard_size, c), []).append(r)
        shard.extend(tuple(v) for v in by_shard.values())
        replicate.extend(tuple(v) for v in by_pos.values())
    return shard, replicate
