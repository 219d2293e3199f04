"""Plan search: mappings x (TP, PP, DP, micro-batch, interleave, recompute) x partitions.

Three passes, each cheaper candidates first:

1. enumerate and prune: divisibility (``resolve_plan``) and memory (the workload
   memory model against every cell's HBM) reject a plan before any timing;
2. score every surviving candidate with the closed-form estimate
   (:mod:`heterosim.planner.estimate`, milliseconds each);
3. simulate the best ``top_k`` (and the naive uniform plan) with the real
   coordinator (``api.prepare`` + ``api.simulate``, flow backend, no message
   recording), rank them by *simulated* time, and report estimate vs simulation.
   With ``backend="ns3"`` the simulated ones are timed with ns-3 instead.

The naive plan is the scenario's own parallelism with equal layers per stage and
equal micro-batches per replica, in the scenario's own rank order.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from statistics import mean
from typing import Callable

from heterosim.errors import PlanError, UserError
from heterosim.planner.estimate import Estimate, estimate
from heterosim.planner.mapping import (Mapping, apply_overrides, candidate_mappings, group_infos,
                                       mapping_of_scenario)
from heterosim.planner.partition import (CostModel, MemoryModel, balance_layers, split_microbatches,
                                         vstage_partition)
from heterosim.planner.stage_dp import StageDPMapping, estimate_stage_dp, groups_differ, stage_dp_mappings

STAGE_DP_KEEP = 64
"""Per-stage-DP candidates memory-checked and kept, best estimate first (planner/stage_dp.py)."""
STAGE_DP_PP_MAX = 16
"""Pipeline depths 2..this are tried for per-stage DP besides the uniform search's (which divide the world)."""

GiB = 1 << 30


@dataclass
class Candidate:
    """One plan: the overrides that produce it, its estimated and (maybe) simulated time."""

    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    schedule: str
    virtual_stages: int
    recompute: str
    mapping: Mapping
    layers: list[int]
    """Layers per pipeline stage."""
    split: list[int]
    """Micro-batches per DP replica."""
    aware: bool
    """Heterogeneity-aware partition/split (False = equal layers and micro-batches)."""
    est: Estimate
    mem_headroom: float
    """min over GPUs of (HBM - need) / HBM."""
    peak_mem_bytes: float
    overrides: dict = field(default_factory=dict)
    sim_time_s: float | None = None
    sim_backend: str | None = None
    sim_summary: dict | None = None
    mfu: float = 0.0
    label: str = ""
    """``naive-uniform`` for the baseline."""
    why: str = ""
    speedup_vs_naive: float | None = None
    stage_dp: list[int] | None = None
    """DP degree per stage (``parallelism.stage_dp``; then ``split`` is micro-batches per replica of each
    stage); None = ``dp`` on every stage."""

    @property
    def est_time_s(self) -> float:
        return self.est.time_ns / 1e9

    @property
    def time_s(self) -> float:
        """Simulated time when available, else the estimate."""
        return self.sim_time_s if self.sim_time_s is not None else self.est_time_s

    def signature(self) -> tuple:
        """Plans equal up to which replica sits where (mirror images of one mapping) share it."""
        if self.stage_dp is not None:
            return (self.short(), self.mapping.key(), tuple(self.layers), self.mapping.strategy)
        reps = sorted((tuple(self.mapping.cells[s][r].device for s in range(self.pp)), self.split[r])
                      for r in range(self.dp))
        stages = tuple(tuple(sorted(c.device for c in row)) for row in self.mapping.cells)
        return (self.short(), tuple(reps), stages, tuple(self.layers), self.mapping.strategy)

    def config_key(self) -> tuple:
        return (self.tp, self.pp, self.dp, self.micro_batch_size, self.schedule, self.virtual_stages,
                self.recompute, self.mapping.key(), tuple(self.layers), tuple(self.split),
                tuple(self.stage_dp or ()))

    def short(self) -> str:
        sched = self.schedule if self.virtual_stages == 1 else f"interleaved(v={self.virtual_stages})"
        dp = f"DP[{','.join(map(str, self.stage_dp))}]" if self.stage_dp is not None else f"DP{self.dp}"
        return (f"TP{self.tp} PP{self.pp} {dp} mbs{self.micro_batch_size} {sched} "
                f"recompute={self.recompute}")


@dataclass
class PlanReport:
    candidates: list[Candidate]
    """Best first (simulated ones ranked by simulated time, ahead of estimated-only ones)."""
    naive: Candidate | None
    enumerated: int = 0
    pruned_divisibility: int = 0
    pruned_memory: int = 0
    scored: int = 0
    scoring_s: float = 0.0
    simulated: int = 0
    simulation_s: float = 0.0
    calibration: list[tuple[str, float, float]] = field(default_factory=list)
    """(plan, estimated s, simulated s) for every simulated candidate."""
    notes: list[str] = field(default_factory=list)

    @property
    def candidates_per_minute(self) -> float:
        return self.scored / self.scoring_s * 60 if self.scoring_s else 0.0

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


# ----------------------------------------------------------------------------- enumeration

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_space(scenario, world: int, gpus_per_node_min: int) -> list[tuple]:
    """(tp, pp, dp, mbs, schedule, v, recompute) tuples that pass the cheap divisibility rules."""
    m, tr = scenario.model, scenario.training
    L = m.num_layers
    out = []
    for tp in (1, 2, 4, 8, 16):
        if tp > gpus_per_node_min or gpus_per_node_min % tp or world % tp:
            continue
        if m.num_attention_heads % tp or m.ffn_hidden_size % tp:
            continue
        if m.kv_heads % tp and tp % m.kv_heads:
            continue
        if scenario.parallelism.sequence_parallel and tp > 1 and tr.seq_length % tp:
            continue
        for pp in _divisors(world // tp):
            if pp > L:
                continue
            dp = world // tp // pp
            for mbs in (1, 2, 4, 8):
                if tr.global_batch_size % mbs or tr.global_batch_size // mbs < dp:
                    continue
                total_mb = tr.global_batch_size // mbs
                scheds = [("1f1b", 1)]
                if pp >= 2:
                    for v in (2, 4):
                        if pp * v <= L and total_mb % pp == 0 and total_mb // pp >= dp:
                            scheds.append(("interleaved", v))
                for sched, v in scheds:
                    for rc in ("none", "selective", "full"):
                        out.append((tp, pp, dp, mbs, sched, v, rc))
    return out


def _even(total: int, parts: int, multiple: int = 1) -> list[int]:
    units = total // multiple
    return [(units // parts + (1 if i < units % parts else 0)) * multiple for i in range(parts)]


# ----------------------------------------------------------------------------- the planner

class Planner:
    """Holds the per-scenario models (system, compute, cost memo) shared by every candidate."""

    def __init__(self, scenario, compute=None, min_headroom: float = 0.0) -> None:
        from heterosim.pipeline import compute_model
        from topologies import build_system

        self.min_headroom = min_headroom
        """Fraction of HBM a plan must leave free beyond the memory model, which already reserves
        training.memory_overhead_bytes (CUDA context, NCCL, fragmentation): 0 by default, so the search
        does not throw away plans that fit."""
        compute = compute or compute_model(scenario)
        self.scenario = scenario
        self.file = getattr(scenario, "_source_file", None)
        par = scenario.parallelism
        if par.cp != 1 or par.ep != 1 or scenario.model.is_moe:
            raise PlanError("the planner searches dense models without context/expert parallelism",
                            file=self.file, field="parallelism", value=f"cp={par.cp} ep={par.ep}")
        self.system = build_system(scenario.cluster, scenario.fabric, file=self.file)
        self.world = self.system.num_gpus
        self.groups = group_infos(scenario.cluster, self.file)
        self.hbm = {g.name: g.hbm_bytes for g in self.groups}
        self.cm = CostModel(scenario, self.system, compute)
        from heterosim.hardware import get_device
        from heterosim.workload.costs import model_flops_per_iteration

        tr = scenario.training
        self.model_flops = model_flops_per_iteration(scenario.model, tr.global_batch_size, tr.seq_length)
        self.mean_peak = mean(get_device(g.device).peak_flops(tr.precision) for g in self.system.gpus)
        self._systems: dict[str, object] = {}
        """cluster + fabric (JSON) -> its system, shared by the candidates simulated (:meth:`simulate`)."""
        self._compute = None
        """The compute model of the simulations (hardware settings are the scenario's for every candidate)."""
        self.extra_overrides: dict = {}
        """Set on every candidate besides its own plan (the FSDP fallback's ``parallelism.zero_stage``)."""

    # -- one configuration ---------------------------------------------------------------------------------------
    def _config_scenario(self, tp, pp, dp, mbs, sched, v, rc, layers=None, split=None, mapping=None):
        L = self.scenario.model.num_layers
        total_mb = self.scenario.training.global_batch_size // mbs
        mult = pp if sched == "interleaved" else 1
        ov = {**self.extra_overrides,
              "parallelism.tp": tp, "parallelism.pp": pp, "parallelism.dp": dp, "parallelism.schedule": sched,
              "parallelism.virtual_stages": v, "parallelism.recompute": rc, "training.micro_batch_size": mbs,
              "parallelism.layer_partition": vstage_partition(layers, v) if layers else _even(L, pp * v),
              "training.microbatch_split": split if split else _even(total_mb, dp, mult),
              "parallelism.stage_tp": None}  # candidates have one TP degree (uneven TP is not searched)
        if mapping is not None:
            ov.update(mapping.overrides(self.scenario))
        return ov

    def evaluate(self, mapping: Mapping, mbs: int, sched: str, v: int, rc: str, layers: list[int],
                 split: list[int], memory: MemoryModel, aware: bool) -> Candidate | None:
        """Memory-check and estimate one fully specified candidate (None if it does not fit)."""
        counts = vstage_partition(layers, v)
        headroom, peak = 1.0, 0.0
        need_of: dict[tuple[int, int], float] = {}
        for s in range(mapping.pp):
            chunk_layers = [counts[c * mapping.pp + s] for c in range(v)]
            for r in range(mapping.dp):
                k = (s, split[r])
                need = need_of.get(k)
                if need is None:
                    need = need_of[k] = memory.stage_need(s, split[r], chunk_layers)
                have = self.hbm[mapping.cells[s][r].group]
                peak = max(peak, need)
                headroom = min(headroom, (have - need) / have)
        if headroom < self.min_headroom:
            return None
        costs = [[self.cm.stage_cost(c.group, mapping.tp, mbs, rc) for c in row] for row in mapping.cells]
        est = estimate(self.cm, mapping, costs, layers, split, chunks=v, mbs=mbs)
        cand = Candidate(mapping.tp, mapping.pp, mapping.dp, mbs, sched, v, rc, mapping, list(layers), list(split),
                         aware, est, headroom, peak)
        cand.overrides = self._config_scenario(mapping.tp, mapping.pp, mapping.dp, mbs, sched, v, rc,
                                               layers if aware else None, split if aware else None, mapping)
        if aware:  # equal counts need no explicit list
            if len(set(layers)) == 1 and self.scenario.model.num_layers % (mapping.pp * v) == 0:
                cand.overrides["parallelism.layer_partition"] = None
            if len(set(split)) == 1:
                cand.overrides["training.microbatch_split"] = None
        else:
            L = self.scenario.model.num_layers
            if L % (mapping.pp * v) == 0:
                cand.overrides["parallelism.layer_partition"] = None
            total = self.scenario.training.global_batch_size // mbs
            if total % mapping.dp == 0:
                cand.overrides["training.microbatch_split"] = None
        cand.mfu = self.model_flops / (est.time_ns / 1e9) / self.world / self.mean_peak
        return cand

    def aware_partition(self, mapping: Mapping, mbs: int, sched: str, v: int, rc: str,
                        memory: MemoryModel) -> tuple[list[int], list[int]]:
        """Alternate: layers balanced for the current split, split balanced for those layers."""
        L = self.scenario.model.num_layers
        pp, dp = mapping.pp, mapping.dp
        total_mb = self.scenario.training.global_batch_size // mbs
        mult = pp if sched == "interleaved" else 1
        costs = [[self.cm.stage_cost(c.group, mapping.tp, mbs, rc) for c in row] for row in mapping.cells]
        caps = []
        for s in range(pp):
            hbm = min(self.hbm[c.group] for c in mapping.cells[s])
            caps.append(memory.cap(s, hbm))
        split = _even(total_mb, dp, mult)
        layers: list[int] = []
        for _ in range(3):
            mx = max(split)
            # stage s's per-micro-batch cost, weighted by how many micro-batches each replica runs
            per_layer = [max(costs[s][r].layer_ns * split[r] / mx for r in range(dp)) for s in range(pp)]
            extra = [max(((costs[s][r].embed_ns if s == 0 else 0.0) + (costs[s][r].head_ns if s == pp - 1 else 0.0))
                         * split[r] / mx for r in range(dp)) for s in range(pp)]
            new_layers = balance_layers(L, per_layer, extra, caps, multiple=1, min_layers=max(1, v // 2))
            per_mb, fill = [], []
            for r in range(dp):
                col = [new_layers[s] * costs[s][r].layer_ns + (costs[s][r].embed_ns if s == 0 else 0.0)
                       + (costs[s][r].head_ns if s == pp - 1 else 0.0) for s in range(pp)]
                per_mb.append(max(col))
                fill.append((sum(col) - max(col)) / v)
            new_split = split_microbatches(total_mb, per_mb, fill, mult) if dp > 1 else [total_mb]
            if new_layers == layers and new_split == split:
                break
            layers, split = new_layers, new_split
        return layers, split

    # -- the search ----------------------------------------------------------------------------------------------
    def search(self, max_candidates: int | None = None, configs: list[tuple] | None = None,
               progress: Callable[[int, int], None] | None = None, require_uniform: bool = False,
               stage_dp: bool = True) -> PlanReport:
        """Score every configuration x mapping x (aware, uniform) partition. ``require_uniform`` keeps only
        configurations whose equal-layer / equal-micro-batch twin is also valid (for clean comparisons).
        ``stage_dp``: also per-stage-DP candidates (:meth:`stage_dp_candidates`; only where groups differ in
        size)."""
        from heterosim.workload.plan import resolve_plan

        L = self.scenario.model.num_layers
        gmin = min(g.gpus_per_node for g in self.groups)
        space = configs if configs is not None else search_space(self.scenario, self.world, gmin)
        rep = PlanReport(candidates=[], naive=None)
        t0 = time.perf_counter()
        mappings_memo: dict[tuple, list[Mapping]] = {}
        found: dict[tuple, Candidate] = {}
        for i, (tp, pp, dp, mbs, sched, v, rc) in enumerate(space):
            if max_candidates is not None and rep.scored >= max_candidates:
                break
            if progress is not None:
                progress(i, len(space))
            rep.enumerated += 1
            if require_uniform and (L % (pp * v) or (self.scenario.training.global_batch_size // mbs)
                                    % (dp * (pp if sched == "interleaved" else 1))):
                rep.pruned_divisibility += 1
                continue
            try:
                sc = apply_overrides(self.scenario, self._config_scenario(tp, pp, dp, mbs, sched, v, rc))
                plan = resolve_plan(sc, self.world, self.file)
                memory = MemoryModel(sc, plan)  # ZeRO-2/3 refuse unequal micro-batch counts per replica here
            except UserError:
                rep.pruned_divisibility += 1
                continue
            # quick memory prune: a stage that cannot hold even one layer on the largest GPU
            hbm_max = max(self.hbm.values())
            if any(memory.cap(s, hbm_max) < 1 for s in range(pp)) or \
                    sum(max(memory.cap(s, hbm_max), 0) for s in range(pp)) < L:
                rep.pruned_memory += 1
                continue
            key = (tp, pp, dp)
            if key not in mappings_memo:
                try:
                    mappings_memo[key] = candidate_mappings(self.groups, tp, pp, dp, self.file)
                except PlanError:
                    mappings_memo[key] = []
            if not mappings_memo[key]:
                rep.pruned_divisibility += 1
                continue
            total_mb = self.scenario.training.global_batch_size // mbs
            mult = pp if sched == "interleaved" else 1
            for mapping in mappings_memo[key]:
                variants = []
                try:
                    variants.append((True,) + self.aware_partition(mapping, mbs, sched, v, rc, memory))
                except PlanError:
                    rep.pruned_memory += 1
                if L % (pp * v) == 0 and total_mb % (dp * mult) == 0:
                    variants.append((False, [L // pp] * pp, [total_mb // dp] * dp))
                if memory.sh is not None:  # ZeRO-2/3 reduce every micro-batch: equal counts per replica only
                    variants = [x for x in variants if len(set(x[2])) == 1]
                for aware, layers, split in variants:
                    rep.scored += 1
                    cand = self.evaluate(mapping, mbs, sched, v, rc, layers, split, memory, aware)
                    if cand is None:
                        rep.pruned_memory += 1
                        continue
                    k = cand.config_key()
                    if k not in found or found[k].aware < cand.aware:
                        found[k] = cand
        if stage_dp and not require_uniform and groups_differ(self.groups):
            for cand in self.stage_dp_candidates(space, rep):
                found[cand.config_key()] = cand
        rep.scoring_s = time.perf_counter() - t0
        seen: set = set()
        ranked = []
        for c in sorted(found.values(), key=lambda c: c.est.time_ns):
            sig = c.signature()
            if sig not in seen:
                seen.add(sig)
                ranked.append(c)
        rep.candidates = ranked
        return rep

    # -- per-stage data parallelism --------------------------------------------------------------------------------
    def stage_dp_candidates(self, space: list[tuple], rep: PlanReport) -> list[Candidate]:
        """Per-stage-DP candidates (:mod:`heterosim.planner.stage_dp`) for the (tp, mbs, recompute) of ``space``
        with 1F1B, pp from ``space`` and 2..``STAGE_DP_PP_MAX``: estimated first, then memory-checked best
        first until ``STAGE_DP_KEEP`` fit (slower ones could not enter a top list that short)."""
        par = self.scenario.parallelism
        if par.zero_stage > 1 or par.cp != 1:
            return []
        L = self.scenario.model.num_layers
        gbs = self.scenario.training.global_batch_size
        names = [g.name for g in self.groups]
        orders = [names, [g.name for g in sorted(self.groups, key=lambda g: -g.peak_flops)],
                  [g.name for g in sorted(self.groups, key=lambda g: (-g.hbm_bytes, -g.peak_flops))],
                  [g.name for g in sorted(self.groups, key=lambda g: g.peak_flops)]]
        pps = sorted({c[1] for c in space} | set(range(2, STAGE_DP_PP_MAX + 1)))
        keys = sorted({(c[0], c[3], c[6]) for c in space if c[4] == "1f1b" and c[5] == 1})
        scored: list[tuple[float, Candidate]] = []
        maps_memo: dict[tuple, list[StageDPMapping]] = {}
        for tp, mbs, rc in keys:
            total_mb = gbs // mbs
            for pp in pps:
                if pp < 2 or pp > L:
                    continue
                mk = (tp, pp, total_mb)
                if mk not in maps_memo:
                    maps_memo[mk] = stage_dp_mappings(self.groups, tp, pp, total_mb, orders)
                for mapping in maps_memo[mk]:
                    costs = [self.cm.stage_cost(row[0].group, tp, mbs, rc) for row in mapping.cells]
                    per_rep = [total_mb // d for d in mapping.stage_dp]
                    per_layer = [per_rep[s] * costs[s].layer_ns for s in range(pp)]
                    extra = [per_rep[s] * ((costs[s].embed_ns if s == 0 else 0.0)
                                           + (costs[s].head_ns if s == pp - 1 else 0.0)) for s in range(pp)]
                    variants = [(True, balance_layers(L, per_layer, extra, None, min_layers=1))]
                    if L % pp == 0:
                        variants.append((False, [L // pp] * pp))
                    for aware, layers in variants:
                        rep.enumerated += 1
                        rep.scored += 1
                        est = estimate_stage_dp(self.cm, mapping, costs, layers, total_mb, mbs=mbs)
                        cand = Candidate(tp, pp, max(mapping.stage_dp), mbs, "1f1b", 1, rc, mapping, list(layers),
                                         per_rep, aware, est, 0.0, 0.0, stage_dp=list(mapping.stage_dp))
                        scored.append((est.time_ns, cand))
        scored.sort(key=lambda x: x[0])
        out: list[Candidate] = []
        for _, cand in scored:
            if len(out) >= STAGE_DP_KEEP:
                break
            if self._check_stage_dp_memory(cand, rep):
                out.append(cand)
        return out

    def _check_stage_dp_memory(self, cand: Candidate, rep: PlanReport) -> bool:
        """Resolve the candidate's plan, fill its overrides, headroom and peak from the workload memory model
        (each stage with its own micro-batch count and ZeRO-1 shard); False if it does not resolve or fit."""
        from heterosim.workload.memory import memory_for_plan
        from heterosim.workload.plan import resolve_plan

        L = self.scenario.model.num_layers
        ov = self._config_scenario(cand.tp, cand.pp, 1, cand.micro_batch_size, "1f1b", 1, cand.recompute,
                                   cand.layers, None, cand.mapping)
        ov["training.microbatch_split"] = None
        if len(set(cand.layers)) == 1 and L % cand.pp == 0:
            ov["parallelism.layer_partition"] = None
        try:
            sc = apply_overrides(self.scenario, ov)
            mem = memory_for_plan(sc, resolve_plan(sc, self.world, self.file))
        except UserError:
            rep.pruned_divisibility += 1
            return False
        headroom, peak = 1.0, 0.0
        for (s, _m), d in mem.items():
            have = self.hbm[cand.mapping.cells[s][0].group]
            peak = max(peak, d["total"])
            headroom = min(headroom, (have - d["total"]) / have)
        if headroom < self.min_headroom:
            rep.pruned_memory += 1
            return False
        cand.overrides, cand.mem_headroom, cand.peak_mem_bytes = ov, headroom, peak
        cand.mfu = self.model_flops / (cand.est.time_ns / 1e9) / self.world / self.mean_peak
        return True

    def naive(self) -> Candidate | None:
        """The scenario's own parallelism, equal layers and micro-batches, its own rank order."""
        from heterosim.workload.plan import resolve_plan

        sc0 = self.scenario
        par, tr = sc0.parallelism, sc0.training
        if par.stage_tp is not None:  # the closed-form estimate models one TP degree only
            return None
        tp, pp = par.tp, par.pp
        dp = par.dp or self.world // (tp * pp)
        mbs, v, sched, rc = tr.micro_batch_size, par.virtual_stages, par.schedule, par.recompute
        L = sc0.model.num_layers
        total_mb = tr.global_batch_size // mbs
        try:
            sc = apply_overrides(sc0, {"parallelism.layer_partition": None, "training.microbatch_split": None,
                                       "parallelism.dp": dp})
            plan = resolve_plan(sc, self.world, self.file)
            mapping = mapping_of_scenario(sc, self.groups, tp, pp, dp, self.file)
        except UserError:
            return None
        memory = MemoryModel(sc, plan)
        cand = self.evaluate(mapping, mbs, sched, v, rc, [L // pp] * pp, [total_mb // dp] * dp, memory, False)
        if cand is None:  # does not fit: still report it, with its negative headroom
            from heterosim.workload.memory import memory_for_plan

            mem = memory_for_plan(sc, plan)
            costs = [[self.cm.stage_cost(c.group, tp, mbs, rc) for c in row] for row in mapping.cells]
            est = estimate(self.cm, mapping, costs, [L // pp] * pp, [total_mb // dp] * dp, chunks=v, mbs=mbs)
            need = max(d["total"] for d in mem.values())
            cand = Candidate(tp, pp, dp, mbs, sched, v, rc, mapping, [L // pp] * pp, [total_mb // dp] * dp, False,
                             est, (min(self.hbm.values()) - need) / min(self.hbm.values()), need)
        cand.overrides = {"parallelism.layer_partition": None, "training.microbatch_split": None}
        cand.label = "naive-uniform"
        cand.mfu = self.model_flops / (cand.est.time_ns / 1e9) / self.world / self.mean_peak
        return cand

    # -- simulation -----------------------------------------------------------------------------------------------
    def simulate(self, cand: Candidate, backend: str = "flow", symmetry: bool | None = None) -> Candidate:
        """Run the real coordinator on the candidate's scenario; fills sim_time_s, sim_summary, mfu.

        Candidates share what does not depend on the plan: the system of a cluster + fabric (a mapping
        may reorder the cluster) and the compute model (its kernel-time memo carries over).
        ``symmetry``: None = the scenario's ``simulation.symmetry``."""
        from heterosim import pipeline as api

        sc, system = self._scenario_and_system(cand)
        prepared = api.prepare(sc, system=system, compute=self._compute)
        res = api.simulate(prepared, backend=backend, record_messages=False, symmetry=symmetry)
        cand.sim_time_s = res.summary["iteration_time_s"]
        cand.sim_backend = backend
        cand.sim_summary = res.summary
        cand.mfu = res.summary["mfu"]
        return cand

    def _scenario_and_system(self, cand: Candidate):
        """The candidate's one-iteration scenario and the system of its cluster + fabric (built once), with the
        compute model made: a parent builds them before forking workers, which then share them."""
        import json

        from heterosim import pipeline as api
        from topologies import build_system

        sc = apply_overrides(self.scenario, cand.overrides)
        sc = apply_overrides(sc, {"training.iterations": 1})
        key = json.dumps([sc.cluster.model_dump(mode="json"), sc.fabric.model_dump(mode="json")], sort_keys=True)
        system = self._systems.get(key)
        if system is None:
            system = self._systems[key] = build_system(sc.cluster, sc.fabric, file=self.file)
        if self._compute is None:
            self._compute = api.compute_model(sc)
        return sc, system

    def simulate_all(self, cands: list[Candidate], backend: str = "flow", jobs: int = 1,
                     progress: Callable[[str], None] | None = None) -> list[UserError | None]:
        """Simulate ``cands`` (as :meth:`simulate`), ``jobs`` at a time in forked worker processes; per
        candidate, the UserError its simulation raised, or None.

        Each simulation is deterministic and independent of the others (the shared caches hold values, not
        state), so the results are those of one process doing them in turn; workers are forked after the
        systems are built, so they share them. One job, one candidate, or no ``fork`` (not Linux): in turn,
        here."""
        from heterosim.forking import forked_map, map_forks

        errors: list[UserError | None] = [None] * len(cands)
        parallel = map_forks(jobs, len(cands))
        if parallel:
            for cand in cands:  # (built once, here, and shared by the forked workers)
                self._scenario_and_system(cand)
            if progress is not None:
                progress(f"simulating {len(cands)} plans, {min(jobs, len(cands))} at a time (forked processes)")

        def one(k: int):  # (in a worker the candidate is a copy: its simulated fields go back)
            cand = cands[k]
            if progress is not None and not parallel:
                progress(f"simulating {k + 1}/{len(cands)}: {cand.short()}")
            try:
                self.simulate(cand, backend)
            except UserError as err:
                return err
            return cand.sim_time_s, cand.sim_backend, cand.sim_summary, cand.mfu

        def done(k: int, out) -> None:
            cand = cands[k]
            if isinstance(out, UserError):
                errors[k] = out
            else:
                cand.sim_time_s, cand.sim_backend, cand.sim_summary, cand.mfu = out
            if progress is not None and parallel:
                progress(f"simulated {k + 1}/{len(cands)}: {cand.short()}")

        forked_map(one, len(cands), jobs, done)
        return errors


def _vstage_lists(counts: list[int]) -> list[list[int]]:
    out, start = [], 0
    for c in counts:
        out.append(list(range(start, start + c)))
        start += c
    return out


def why(c: Candidate, naive: Candidate | None, runner_up: Candidate | None) -> str:
    """A short reason: mapping, partition, bubble, tail, memory, comparison."""
    parts = [c.mapping.describe()]
    if c.aware and len(set(c.layers)) > 1:
        parts.append(f"layers {'/'.join(map(str, c.layers))}")
    if c.aware and len(set(c.split)) > 1:
        parts.append(f"micro-batches {'/'.join(map(str, c.split))}")
    parts.append(f"est. bubble {c.est.bubble:.0%}")
    parts.append(f"tail {c.est.tail_ns / 1e6:.0f} ms")
    parts.append(f"{c.mem_headroom:.0%} HBM headroom")
    if naive is not None and naive is not c and (naive.sim_time_s is None) == (c.sim_time_s is None):
        parts.append(f"{naive.time_s / c.time_s:.2f}x vs naive uniform {naive.short()}")
    if runner_up is not None and runner_up.time_s:
        parts.append(f"{(runner_up.time_s / c.time_s - 1) * 100:.1f}% ahead of next")
    return "; ".join(parts)


def plan_report(scenario, *, top_k: int = 5, backend: str = "flow", max_candidates: int | None = None,
                simulate: int | None = None, configs: list[tuple] | None = None,
                progress: Callable[[str], None] | None = None, require_uniform: bool = False,
                min_headroom: float = 0.0, jobs: int = 1, stage_dp: bool = True,
                fsdp_fallback: bool = True) -> PlanReport:
    """Search, then simulate the best ``simulate`` (default ``top_k``; 0 = estimates only) and the naive plan.

    ``fsdp_fallback``: where no plan fits at the scenario's ``zero_stage`` (0-2), search again with fully
    sharded data parallelism (``zero_stage: 3``, FSDP / ZeRO-3), which every candidate then sets; the report
    says so in its notes.

    ``backend``: network backend of the simulations (``flow`` or ``ns3``). ``jobs``: simulations run at once
    (forked processes; the same results as one at a time). ``stage_dp``: search per-stage-DP plans too (only where
    the device groups differ in size; see heterosim/planner/stage_dp.py)."""
    if getattr(scenario, "workload", None) is not None:  # a replayed trace brings its own plan
        raise UserError("a recorded workload has a fixed parallel plan; plan search needs model + parallelism",
                        file=getattr(scenario, "_source_file", None), field="workload.chakra",
                        value=scenario.workload.chakra)
    if scenario.parallelism.schedule in ("zb-v", "dualpipe"):  # the closed-form estimate walks one chunk per rank
        raise UserError("the planner estimates 1f1b, interleaved, gpipe and zb-h1 plans; run or validate a "
                        "zb-v / dualpipe scenario directly", file=getattr(scenario, "_source_file", None),
                        field="parallelism.schedule", value=scenario.parallelism.schedule)
    n_sim = top_k if simulate is None else simulate
    if n_sim > 0:
        from netbackend.registry import backend_class

        backend_class(backend)  # unknown backend: a one-line UserError before minutes of search
    planner = Planner(scenario, min_headroom=min_headroom)
    rep = planner.search(max_candidates=max_candidates, configs=configs, require_uniform=require_uniform,
                         stage_dp=stage_dp)
    if not rep.candidates and fsdp_fallback and scenario.parallelism.zero_stage < 3:
        planner, rep = _fsdp_search(scenario, rep, min_headroom=min_headroom, max_candidates=max_candidates,
                                    configs=configs, require_uniform=require_uniform)
    naive = planner.naive()
    rep.naive = naive
    # distinct plans only (a uniform candidate equal to the naive one is the same run)
    chosen = rep.candidates[: max(top_k, n_sim)]
    t0 = time.perf_counter()
    to_sim = chosen[:n_sim] + ([naive] if naive is not None and n_sim > 0 and naive.mem_headroom >= 0 else [])
    for cand, err in zip(to_sim, planner.simulate_all(to_sim, backend, jobs, progress)):
        if err is None:
            rep.simulated += 1
            rep.calibration.append((cand.short() + (" [naive]" if cand is naive else ""), cand.est_time_s,
                                    cand.sim_time_s))
        else:
            rep.notes.append(f"{cand.short()}: simulation failed: {err}")
    rep.simulation_s = time.perf_counter() - t0
    sim = sorted([c for c in chosen if c.sim_time_s is not None], key=lambda c: c.sim_time_s)
    rest = [c for c in chosen if c.sim_time_s is None]
    ranked = (sim + rest)[:top_k]
    naive_ok = naive is not None and naive.mem_headroom >= 0
    if naive is not None and not naive_ok:
        rep.notes.append(f"the naive uniform plan ({naive.short()}) does not fit in memory "
                         f"(headroom {naive.mem_headroom:.0%}); no speed-up reported")
    for i, c in enumerate(ranked):
        nxt = ranked[i + 1] if i + 1 < len(ranked) else None
        c.why = why(c, naive if naive_ok else None, nxt)
        # compare like with like: both simulated, or both estimated
        if naive_ok and (c.sim_time_s is None) == (naive.sim_time_s is None):
            c.speedup_vs_naive = naive.time_s / c.time_s
    if naive is not None:
        naive.why = why(naive, None, None)
        naive.speedup_vs_naive = 1.0
    rep.candidates = ranked
    return rep


def _fsdp_search(scenario, first: PlanReport, **search_kw) -> tuple[Planner, PlanReport]:
    """The search again with ``parallelism.zero_stage: 3`` (FSDP), after ``first`` found nothing that fits;
    the counts of both searches add up and a note says why (per-stage DP is not combined with ZeRO-3)."""
    zero = scenario.parallelism.zero_stage
    fsdp = apply_overrides(scenario, {"parallelism.zero_stage": 3})
    planner = Planner(fsdp, min_headroom=search_kw.pop("min_headroom"))
    planner.extra_overrides = {"parallelism.zero_stage": 3}
    rep = planner.search(stage_dp=False, **search_kw)
    for name in ("enumerated", "pruned_divisibility", "pruned_memory", "scored", "scoring_s"):
        setattr(rep, name, getattr(rep, name) + getattr(first, name))
    rep.notes.append(f"no plan fits in memory with zero_stage {zero}: searched fully sharded data parallelism "
                     f"(zero_stage 3, FSDP) instead, {len(rep.candidates)} plan(s) fit")
    return planner, rep


def plan(scenario, *, top_k: int = 5, backend: str = "flow", max_candidates: int | None = None) -> list[Candidate]:
    """Ranked candidates, best first; the naive uniform plan is appended last (``label='naive-uniform'``)."""
    rep = plan_report(scenario, top_k=top_k, backend=backend, max_candidates=max_candidates)
    out = list(rep.candidates)
    if rep.naive is not None:
        out.append(rep.naive)
    return out
