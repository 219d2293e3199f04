"""Resolve a scenario's parallel plan against a world size, with one-line PlanErrors.

Everything the compiler and the memory model need (dp, micro-batches per
replica, layers per virtual stage...) is derived and checked here once, so both
agree and an impossible plan is reported before any op is built.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from heterosim.errors import PlanError
from heterosim.workload.groups import RankLayout, StageDPLayout, StageTPLayout
from heterosim.workload.zero_bubble import V_SCHEDULES, v_stage


@dataclass(slots=True)
class Plan:
    world_size: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    chunks: int
    """Model chunks (virtual stages) per pipeline rank."""
    schedule: str
    micro_batch: int
    seq: int
    seq_local: int
    """Sequence length on one rank (seq / cp)."""
    microbatches: list[int]
    """Micro-batches of each data-parallel replica (indexed by dp coordinate)."""
    vstage_layers: list[list[int]]
    """Global layer indices of virtual stage vs = chunk*pp + stage."""
    sp: bool
    recompute: str
    zero_stage: int
    layout: RankLayout | StageTPLayout | StageDPLayout
    stage_tp: list[int] | None = None
    """TP degree per stage (uneven TP); None = ``tp`` on every stage."""
    sp_requested: bool = False
    """parallelism.sequence_parallel as given (``sp`` is it where tp > 1)."""
    stage_dp: list[int] | None = None
    """DP degree per stage (parallelism.stage_dp, entries not all equal); None = ``dp`` on every stage. Then
    ``dp`` is the widest stage's and ``microbatches`` the most any replica runs, once per replica of the widest
    stage: use :meth:`for_stage` (a stage's own dp and counts) or :meth:`mb_count`."""
    global_microbatches: int = 0
    """global_batch_size / micro_batch_size (set with stage_dp)."""
    etp: int = 0
    """Expert tensor-parallel size (parallelism.expert_tp); 0 = ``tp`` (today's layout and MoE block)."""
    expert_load: tuple[float, ...] | None = None
    """Tokens each EP coordinate's experts receive over the mean (uneven routing, mean 1.0); None = even."""

    @property
    def expert_tp(self) -> int:
        """The degree the experts' GEMMs are split by."""
        return self.etp or self.tp

    @property
    def folded(self) -> bool:
        """Expert groups folded out of tp x cp x dp with an expert TP degree apart from tp (Megatron-Core's
        MoE parallel folding)."""
        return self.etp not in (0, self.tp)

    @property
    def edp(self) -> int:
        """Ranks holding the same experts (the ``edp`` group): dp*cp/ep, or tp*cp*dp/(expert_tp*ep) folded."""
        if self.folded:
            return self.tp * self.cp * self.dp // (self.etp * self.ep)
        return self.dp * self.cp // self.ep

    def load_of(self, ep_coord: int) -> float:
        """Token load of the experts of EP coordinate ``ep_coord`` over the mean (1.0 with even routing)."""
        return 1.0 if self.expert_load is None else self.expert_load[ep_coord]

    def for_stage(self, stage: int) -> "Plan":
        """This plan as one stage sees it: ``tp`` (and ``sp``) and, with stage_dp, ``dp`` and the micro-batches
        of each of its replicas. Itself when TP and DP are uniform."""
        if self.stage_tp is None and self.stage_dp is None:
            return self
        kw: dict = {}
        if self.stage_tp is not None:
            t = self.stage_tp[stage]
            kw.update(tp=t, sp=self.sp_requested and t > 1)
        if self.stage_dp is not None:
            d = self.stage_dp[stage]
            kw.update(dp=d, microbatches=[self.global_microbatches // d] * d)
        return replace(self, **kw)

    def mb_count(self, coords: dict[str, int]) -> int:
        """Micro-batches the replica of the rank with these coordinates (pp, dp) runs."""
        if self.stage_dp is None:
            return self.microbatches[coords["dp"]]
        return self.global_microbatches // self.stage_dp[coords["pp"]]

    def tp_of(self, stage: int) -> int:
        return self.tp if self.stage_tp is None else self.stage_tp[stage]

    @property
    def num_vstages(self) -> int:
        """Virtual stages of the model: pp x chunks, or pp under DualPipe (each stage held twice)."""
        return self.pp if self.schedule == "dualpipe" else self.pp * self.chunks

    def vstage(self, stage: int, chunk: int) -> int:
        """Virtual stage (model order) of ``chunk`` on pipeline rank ``stage``: Megatron's round robin
        (chunk * pp + stage), or the V of ZB-V (rank i: stages i and 2 pp - 1 - i)."""
        if self.schedule in V_SCHEDULES:
            return v_stage(self.pp, stage, chunk)
        if self.schedule == "dualpipe":  # chunk 0: the forward direction's stage, chunk 1: the reverse one's
            return stage if chunk == 0 else self.pp - 1 - stage
        return chunk * self.pp + stage

    def layers_of(self, stage: int, chunk: int) -> list[int]:
        return self.vstage_layers[self.vstage(stage, chunk)]

    def stage_layer_count(self, stage: int) -> int:
        return sum(len(self.layers_of(stage, c)) for c in range(self.chunks))


def resolve_plan(scenario, world_size: int, file: str | None = None) -> Plan:
    """Check the plan's divisibility rules and derive its sizes (raises PlanError)."""
    file = file if file is not None else getattr(scenario, "_source_file", None)
    try:
        return _resolve(scenario, world_size)
    except PlanError as err:
        raise err.with_file(file) if file else err


def _resolve(scenario, world_size: int) -> Plan:
    par, tr, model = scenario.parallelism, scenario.training, scenario.model
    tp, pp, cp, ep = par.tp, par.pp, par.cp, par.ep
    if world_size < 1:
        raise PlanError("the cluster has no GPUs", field="cluster", value=world_size)
    stp = list(par.stage_tp) if par.stage_tp is not None else None
    given_dp = par.dp
    if par.stage_dp is not None:
        sdp = list(par.stage_dp)
        _check_stage_dp(scenario, world_size, sdp, stp)
        if len(set(sdp)) > 1:
            return _resolve_stage_dp(scenario, world_size, sdp, stp)
        given_dp = sdp[0]  # one degree everywhere: the plain plan with dp = that degree
    if stp is not None:
        return _resolve_stage_tp(scenario, world_size, stp, given_dp)
    if given_dp is not None:
        dp = given_dp
        if tp * pp * cp * dp != world_size:
            raise PlanError(f"GPU count mismatch: tp*pp*cp*dp = {tp * pp * cp * dp} but the cluster has "
                            f"{world_size} GPUs", field="parallelism.dp", value=dp)
    else:
        if world_size % (tp * pp * cp):
            raise PlanError(f"GPU count mismatch: tp*pp*cp = {tp * pp * cp} does not divide the cluster's "
                            f"{world_size} GPUs", field="cluster", value=f"{world_size} GPUs")
        dp = world_size // (tp * pp * cp)
    _check_tp(model, tp, "parallelism.tp", tp)
    seq, seq_local, sp = _check_seq(par, tr, tp, "parallelism.tp", tp)
    return _finish(scenario, world_size, tp, pp, dp, seq, seq_local, sp,
                   lambda: RankLayout(world_size, tp, pp, dp, cp, ep, par.order,
                                      etp=par.expert_tp if par.expert_tp not in (None, tp) else 0))


def _check_per_stage(values: list[int], pp: int, fld: str, what: str) -> None:
    """A per-stage degree list (stage_tp, stage_dp): every entry >= 1, one per stage (pp 1 = take its length)."""
    if not values or any(v < 1 for v in values):
        raise PlanError(f"needs one {what} degree >= 1 per pipeline stage", field=fld, value=values)
    if pp not in (1, len(values)):
        raise PlanError(f"needs one entry per pipeline stage (pp = {pp}), got {len(values)}", field=fld, value=values)


def _resolve_stage_tp(scenario, world_size: int, stp: list[int], given_dp: int | None) -> Plan:
    """Uneven TP: one degree per stage, stage-major layout (see StageTPLayout)."""
    par, tr, model = scenario.parallelism, scenario.training, scenario.model
    cp, ep = par.cp, par.ep
    fld = "parallelism.stage_tp"
    _check_per_stage(stp, par.pp, fld, "TP")
    if par.tp not in (1, max(stp)):
        raise PlanError(f"stage_tp sets the TP degree of every stage; leave tp at 1 (tp is {par.tp})", field=fld,
                        value=stp)
    pp, total = len(stp), sum(stp)
    if given_dp is not None:
        dp = given_dp
        if dp * cp * total != world_size:
            raise PlanError(f"GPU count mismatch: dp*cp*sum(stage_tp) = {dp * cp * total} but the cluster has "
                            f"{world_size} GPUs", field=fld, value=stp)
    else:
        if world_size % (cp * total):
            raise PlanError(f"GPU count mismatch: cp*sum(stage_tp) = {cp * total} does not divide the cluster's "
                            f"{world_size} GPUs", field=fld, value=stp)
        dp = world_size // (cp * total)
    sp = False
    for t in stp:
        _check_tp(model, t, fld, stp)
        seq, seq_local, sp_t = _check_seq(par, tr, t, fld, stp)
        sp = sp or sp_t
    plan = _finish(scenario, world_size, max(stp), pp, dp, seq, seq_local, sp,
                   lambda: StageTPLayout(stp, dp, cp, ep, par.order))
    plan.stage_tp = stp
    plan.sp_requested = par.sequence_parallel
    return plan


def _check_stage_dp(scenario, world_size: int, sdp: list[int], stp: list[int] | None) -> None:
    """One-line errors of parallelism.stage_dp: lengths, degrees, world size, divisibility, what it runs with."""
    par, tr = scenario.parallelism, scenario.training
    fld = "parallelism.stage_dp"
    _check_per_stage(sdp, par.pp, fld, "DP")
    if stp is not None and len(stp) != len(sdp):
        raise PlanError(f"needs one entry per stage_tp entry ({len(stp)}), got {len(sdp)}", field=fld, value=sdp)
    if par.dp is not None:
        raise PlanError(f"stage_dp sets the DP degree of every stage; leave dp unset (dp is {par.dp})", field=fld,
                        value=sdp)
    tps = stp if stp is not None else [par.tp] * len(sdp)
    need = par.cp * sum(t * d for t, d in zip(tps, sdp))
    if need != world_size:
        what = "cp*sum(stage_tp[i]*stage_dp[i])" if stp is not None else "cp*tp*sum(stage_dp)"
        raise PlanError(f"GPU count mismatch: {what} = {need} but the cluster has {world_size} GPUs", field=fld,
                        value=sdp)
    mb = tr.micro_batch_size
    total = tr.global_batch_size // mb
    for s, d in enumerate(sdp):
        if tr.global_batch_size % mb or total % d:
            raise PlanError(f"global_batch_size/micro_batch_size ({tr.global_batch_size}/{mb}) must be a whole number "
                            f"of micro-batches divisible by every stage's DP degree (stage {s} has {d})", field=fld,
                            value=sdp)
    if len(set(sdp)) == 1:
        return
    if par.schedule not in ("1f1b", "gpipe"):
        raise PlanError(f"different DP degrees per stage run with schedule 1f1b or gpipe (schedule is "
                        f"{par.schedule})", field=fld, value=sdp)
    if par.zero_stage > 1:
        raise PlanError(f"different DP degrees per stage are modelled with zero_stage 0 or 1 (zero_stage is "
                        f"{par.zero_stage})", field=fld, value=sdp)
    if tr.microbatch_split is not None:
        raise PlanError("different DP degrees per stage split the micro-batches evenly over each stage's replicas; "
                        "leave training.microbatch_split unset", field=fld, value=sdp)
    if par.ep > 1:  # the replicas of an EP group would run different micro-batches at each all-to-all
        raise PlanError(f"different DP degrees per stage are modelled without expert parallelism (ep is {par.ep})",
                        field=fld, value=sdp)


def _resolve_stage_dp(scenario, world_size: int, sdp: list[int], stp: list[int] | None) -> Plan:
    """A DP degree per stage (checked by _check_stage_dp), stage-major layout (see StageDPLayout)."""
    par, tr, model = scenario.parallelism, scenario.training, scenario.model
    tps = stp if stp is not None else [par.tp] * len(sdp)
    fld, value = ("parallelism.stage_tp", stp) if stp is not None else ("parallelism.tp", par.tp)
    if stp is not None:
        if any(t < 1 for t in stp):
            raise PlanError("needs one TP degree >= 1 per pipeline stage", field=fld, value=stp)
        if par.tp not in (1, max(stp)):
            raise PlanError(f"stage_tp sets the TP degree of every stage; leave tp at 1 (tp is {par.tp})",
                            field=fld, value=stp)
    sp = False
    for t in tps:
        _check_tp(model, t, fld, value)
        seq, seq_local, sp_t = _check_seq(par, tr, t, fld, value)
        sp = sp or sp_t
    plan = _finish(scenario, world_size, max(tps), len(sdp), min(sdp), seq, seq_local, sp,
                   lambda: StageDPLayout(tps, sdp, par.cp, par.ep, par.order))
    total = tr.global_batch_size // tr.micro_batch_size
    plan.dp, plan.microbatches = max(sdp), [total // min(sdp)] * max(sdp)
    plan.stage_dp, plan.global_microbatches = sdp, total
    plan.stage_tp = stp
    plan.sp_requested = par.sequence_parallel
    return plan


def _check_tp(model, tp: int, fld: str, value) -> None:
    """tensor parallelism splits heads (and KV groups, replicated when tp > kv heads)"""
    if model.num_attention_heads % tp:
        raise PlanError(f"tp must divide num_attention_heads ({model.num_attention_heads})", field=fld, value=value)
    kv = model.kv_heads
    if kv % tp and tp % kv:
        raise PlanError(f"tp must divide num_kv_heads ({kv}) or be a multiple of it", field=fld, value=value)
    if model.ffn_hidden_size % tp:
        raise PlanError(f"tp must divide ffn_hidden_size ({model.ffn_hidden_size})", field=fld, value=value)
    # the vocabulary is padded to a multiple of make_vocab_size_divisible_by * tp (costs.padded_vocab)


def _check_seq(par, tr, tp: int, fld: str, value) -> tuple[int, int, bool]:
    """(seq, seq per cp rank, sequence parallel on) for one TP degree."""
    cp = par.cp
    seq = tr.seq_length
    if seq % cp:
        raise PlanError(f"context parallelism needs seq_length divisible by cp ({cp})",
                        field="training.seq_length", value=seq)
    seq_local = seq // cp
    sp = par.sequence_parallel and tp > 1
    if sp and seq_local % tp:
        raise PlanError(f"sequence parallelism needs seq_length/cp ({seq_local}) divisible by tp ({tp})",
                        field="training.seq_length", value=seq)
    return seq, seq_local, sp


def _finish(scenario, world_size: int, tp: int, pp: int, dp: int, seq: int, seq_local: int, sp: bool,
            make_layout) -> Plan:
    par, tr, model = scenario.parallelism, scenario.training, scenario.model
    cp, ep = par.cp, par.ep

    # experts
    if ep > 1 and not model.is_moe:
        raise PlanError("expert parallelism needs a mixture-of-experts model (num_experts > 0)",
                        field="parallelism.ep", value=ep)
    etp = _check_expert_tp(scenario, tp, dp)
    if not etp and dp % ep:
        raise PlanError(f"ep must divide dp ({dp}): experts are carved out of data-parallel ranks",
                        field="parallelism.ep", value=ep)
    if model.is_moe and model.num_experts % ep:
        raise PlanError(f"ep must divide num_experts ({model.num_experts})", field="parallelism.ep", value=ep)
    expert_load = _expert_load(par)

    # micro-batches per replica
    mb = tr.micro_batch_size
    microbatches = _microbatches(tr, dp, ep, etp)

    # schedule / virtual stages
    chunks = par.virtual_stages
    schedule = par.schedule
    if schedule == "interleaved":
        if pp < 2:
            raise PlanError("the interleaved schedule needs pp >= 2", field="parallelism.schedule", value=schedule)
        if chunks < 2:
            raise PlanError("the interleaved schedule needs virtual_stages >= 2",
                            field="parallelism.virtual_stages", value=chunks)
        for m in sorted(set(microbatches)):
            if m % pp:
                raise PlanError(f"the interleaved schedule needs micro-batches per replica ({m}) to be a multiple "
                                f"of pp ({pp})", field="parallelism.schedule", value=schedule)
    elif schedule == "dualpipe":
        _check_dualpipe(scenario, pp, chunks, microbatches)
        chunks = 2
    elif schedule in V_SCHEDULES:  # two chunks per rank in a V (heterosim/workload/zero_bubble.py)
        if pp < 2:
            raise PlanError(f"the {schedule} schedule needs pp >= 2", field="parallelism.schedule", value=schedule)
        if chunks not in (1, 2):
            raise PlanError(f"the {schedule} schedule places exactly 2 chunks per rank; leave virtual_stages at 1 "
                            "or set 2", field="parallelism.virtual_stages", value=chunks)
        if par.zero_stage == 3:  # FSDP's per-unit gathers and prefetch walk Megatron's round-robin chunks
            raise PlanError(f"zero_stage 3 is not modelled with schedule {schedule} (use zero_stage 0-2 or "
                            "schedule zb-h1)", field="parallelism.zero_stage", value=par.zero_stage)
        chunks = 2
    elif chunks != 1:
        raise PlanError(f"virtual stages need schedule: interleaved (schedule is {schedule})",
                        field="parallelism.virtual_stages", value=chunks)

    # layers per virtual stage
    vstage_layers = _vstage_layers(par, model.num_layers, pp, chunks, schedule)

    layout = make_layout()
    if etp and expert_load is not None:
        _check_one_load_per_tp_group(layout, par)
    return Plan(world_size=world_size, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, chunks=chunks, schedule=schedule,
                micro_batch=mb, seq=seq, seq_local=seq_local, microbatches=microbatches,
                vstage_layers=vstage_layers, sp=sp, recompute=par.recompute, zero_stage=par.zero_stage,
                layout=layout, etp=etp, expert_load=expert_load)



def _microbatches(tr, dp: int, ep: int, etp: int) -> list[int]:
    """Micro-batches per data-parallel replica: ``training.microbatch_split`` checked, or an even split."""
    mb = tr.micro_batch_size
    total_mb = tr.global_batch_size // mb
    if tr.microbatch_split is not None:
        split = list(tr.microbatch_split)
        if len(split) != dp:
            raise PlanError(f"needs one entry per data-parallel replica (dp = {dp}), got {len(split)}",
                            field="training.microbatch_split", value=split)
        if any(x < 1 for x in split):
            raise PlanError("every replica needs at least one micro-batch", field="training.microbatch_split",
                            value=split)
        if sum(split) != total_mb:
            raise PlanError(f"entries sum to {sum(split)} but global_batch_size/micro_batch_size = {total_mb}",
                            field="training.microbatch_split", value=split)
        if (ep > 1 or etp) and len(set(split)) > 1:
            raise PlanError("replicas of one expert-parallel group must run the same number of micro-batches",
                            field="training.microbatch_split", value=split)
        microbatches = split
    else:
        if tr.global_batch_size % (dp * mb):
            raise PlanError(f"global_batch_size must be a multiple of dp*micro_batch_size = {dp}*{mb} = {dp * mb}",
                            field="training.global_batch_size", value=tr.global_batch_size)
        microbatches = [total_mb // dp] * dp
    return microbatches


def _vstage_layers(par, L: int, pp: int, chunks: int, schedule: str) -> list[list[int]]:
    """The layers of each virtual stage: ``parallelism.layer_partition`` (per stage or per virtual stage) checked,
    or the even split."""
    nvs = pp if schedule == "dualpipe" else pp * chunks
    part = par.layer_partition
    if part is None:
        counts = _even_split(L, nvs, nvs // pp, pp, par)
    else:
        part = list(part)
        if any(x < 0 for x in part):
            raise PlanError("layer counts must be >= 0", field="parallelism.layer_partition", value=part)
        if sum(part) != L:
            raise PlanError(f"entries sum to {sum(part)} but the model has {L} layers",
                            field="parallelism.layer_partition", value=part)
        if len(part) == nvs:
            counts = part
        elif len(part) == pp:
            if any(x % chunks for x in part):
                raise PlanError(f"with {chunks} virtual stages every stage's layer count must be a multiple of "
                                f"{chunks}", field="parallelism.layer_partition", value=part)
            # rank of each virtual stage: round robin, or the V (vs < pp on rank vs, else on 2 pp - 1 - vs)
            rank_of = (lambda vs: min(vs, 2 * pp - 1 - vs)) if schedule in V_SCHEDULES else (lambda vs: vs % pp)
            counts = [part[rank_of(vs)] // chunks for vs in range(nvs)]
        else:
            raise PlanError(f"needs pp ({pp}) or pp*virtual_stages ({nvs}) entries, got {len(part)}",
                            field="parallelism.layer_partition", value=part)
    vstage_layers: list[list[int]] = []
    start = 0
    for c in counts:
        vstage_layers.append(list(range(start, start + c)))
        start += c
    return vstage_layers

def _check_expert_tp(scenario, tp: int, dp: int) -> int:
    """parallelism.expert_tp: 0 when it is unset or equal to tp (today's layout), else the folded degree after
    Megatron-Core's rules (parallel_state.initialize_model_parallel: world divisible by expert_tp * ep * pp;
    moe_layer.MoELayer.forward: MoE with tensor parallelism in training needs sequence parallelism)."""
    par, model = scenario.parallelism, scenario.model
    etp, fld = par.expert_tp, "parallelism.expert_tp"
    if etp is None:
        return 0
    if not model.is_moe:
        raise PlanError("expert tensor parallelism needs a mixture-of-experts model (num_experts > 0)", field=fld,
                        value=etp)
    if etp == tp:
        return 0
    if par.stage_tp is not None or par.stage_dp is not None:
        raise PlanError("an expert TP degree apart from tp is not modelled with stage_tp / stage_dp", field=fld,
                        value=etp)
    n = tp * par.cp * dp
    if n % (etp * par.ep):
        raise PlanError(f"expert_tp * ep = {etp * par.ep} must divide tp*cp*dp = {n} (the ranks of a pipeline stage "
                        "the expert groups are folded out of)", field=fld, value=etp)
    fe = model.moe_ffn_hidden_size or model.ffn_hidden_size
    if fe % etp:
        raise PlanError(f"expert_tp must divide the experts' FFN width ({fe})", field=fld, value=etp)
    if tp > 1 and not par.sequence_parallel:
        raise PlanError(f"an expert TP degree apart from tp = {tp} needs sequence_parallel: true (Megatron-Core "
                        "refuses MoE with tensor parallelism without it)", field=fld, value=etp)
    if par.moe_dispatcher != "alltoall":
        raise PlanError("an expert TP degree apart from tp is modelled with moe_dispatcher: alltoall", field=fld,
                        value=etp)
    return etp


def _check_one_load_per_tp_group(layout, par) -> None:
    """Uneven routing with folded expert TP: the ranks of a TP group run one program, so they must share their
    EP coordinate (true when expert_tp is a multiple of tp with tp fastest in the order; not when expert_tp < tp,
    whose EP groups run through the TP groups)."""
    for g in layout.groups()["tp"]:
        eps = {layout.coords(r)["ep"] for r in g}
        if len(eps) > 1:
            raise PlanError(f"uneven routing needs one EP coordinate per TP group; TP group {g[0]}-{g[-1]} holds EP "
                            f"ranks {sorted(eps)} (use expert_tp = tp or a multiple of it)",
                            field="parallelism.expert_tp", value=par.expert_tp)


def _expert_load(par) -> tuple[float, ...] | None:
    """Per-EP-coordinate token load over the mean (mean 1.0), or None when routing is even."""
    ep = par.ep
    if par.moe_rank_load is not None:
        load, fld = list(par.moe_rank_load), "parallelism.moe_rank_load"
        if ep < 2:
            raise PlanError("uneven routing needs expert parallelism (ep > 1)", field=fld, value=load)
        if len(load) != ep:
            raise PlanError(f"needs one entry per expert-parallel rank (ep = {ep}), got {len(load)}", field=fld,
                            value=load)
        total = sum(load)
        if total <= 0:
            raise PlanError("at least one entry must be > 0", field=fld, value=load)
        out = tuple(x * ep / total for x in load)
        return None if max(out) == min(out) else out
    x = par.moe_load_imbalance
    if x == 1.0:
        return None
    if ep < 2:
        raise PlanError("uneven routing needs expert parallelism (ep > 1)", field="parallelism.moe_load_imbalance",
                        value=x)
    if x > ep:
        raise PlanError(f"max/mean tokens per EP rank cannot exceed ep ({ep}): the most loaded rank would get more "
                        "than every token", field="parallelism.moe_load_imbalance", value=x)
    rest = (ep - x) / (ep - 1)
    return (x,) + (rest,) * (ep - 1)


def _check_dualpipe(scenario, pp: int, chunks: int, microbatches: list[int]) -> None:
    """One-line errors of schedule: dualpipe (heterosim/workload/dualpipe.py): DualPipe's own preconditions and
    what it is not modelled with."""
    par, tr = scenario.parallelism, scenario.training
    if pp < 2 or pp % 2:
        raise PlanError("DualPipe needs an even number of pipeline stages >= 2", field="parallelism.pp", value=pp)
    for m in sorted(set(microbatches)):
        if m % 2 or m < 2 * pp:
            raise PlanError(f"DualPipe needs an even number of micro-batches per replica >= 2 pp = {2 * pp} (half "
                            f"go each way), got {m}", field="training.global_batch_size", value=tr.global_batch_size)
    if chunks not in (1, 2):
        raise PlanError("DualPipe holds exactly 2 chunks per rank (one per direction); leave virtual_stages at 1 "
                        "or set 2", field="parallelism.virtual_stages", value=chunks)
    if par.zero_stage > 1:  # the two copies' gradients are summed before the DP reduction (dualpipe.py)
        raise PlanError("DualPipe is modelled with zero_stage 0 or 1", field="parallelism.zero_stage",
                        value=par.zero_stage)
    if par.stage_tp is not None:
        raise PlanError("DualPipe pairs rank i with rank pp - 1 - i (the two copies of a stage); uneven TP is not "
                        "modelled with it", field="parallelism.stage_tp", value=par.stage_tp)
    if scenario.model.tie_embeddings:
        raise PlanError("DualPipe is modelled without tied embeddings (each end rank holds an embedding and an "
                        "LM head copy)", field="model.tie_embeddings", value=True)


def _even_split(num_layers: int, nvs: int, chunks: int, pp: int, par) -> list[int]:
    """Layers per virtual stage when none are given: an even split, where the embedding and the loss may
    each count as one layer (``account_for_*_in_pipeline_split``, Megatron-Core's rule): the first virtual
    stage then builds one layer fewer, the last one fewer."""
    emb, loss = int(par.account_for_embedding_in_pipeline_split), int(par.account_for_loss_in_pipeline_split)
    total = num_layers + emb + loss
    if total % nvs:
        what = "pp" if chunks == 1 else ("2*pp (its V chunks)" if par.schedule in V_SCHEDULES else "pp*virtual_stages")
        extra = " + embedding" * emb + " + loss" * loss
        raise PlanError(f"{what} = {nvs} does not divide num_layers{extra} ({total}); set "
                        "parallelism.layer_partition", field="parallelism.pp", value=pp)
    counts = [total // nvs] * nvs
    counts[0] -= emb
    counts[-1] -= loss
    if min(counts) < 1:
        raise PlanError(f"a virtual stage would hold no layer ({counts[0]} first, {counts[-1]} last); use fewer "
                        "stages or layer_partition", field="parallelism.account_for_embedding_in_pipeline_split",
                        value=bool(emb))
    return counts
