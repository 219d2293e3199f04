"""Uneven-TP suggestion: one TP degree per device group (``parallelism.stage_tp``).

When device groups have different node sizes (8-GPU DGX next to 4-GPU GH200
or PCIe nodes), a single TP degree must fit the smallest node. Stage-major with
per-stage TP instead gives each group the largest degree its nodes allow and
balances layers by each stage's throughput (TP degree x per-GPU peak / slowdown).

This is a heuristic starting point, not part of the search: the estimate
(:mod:`heterosim.planner.estimate`) models one TP degree, so the suggestion is
checked (divisibility, memory) and timed by the simulator itself.
"""
from __future__ import annotations

from heterosim.errors import PlanError
from heterosim.planner.mapping import group_infos
from heterosim.planner.partition import balance_layers


def _tp_ok(model, t: int) -> bool:
    kv = model.kv_heads
    return (model.num_attention_heads % t == 0 and (kv % t == 0 or t % kv == 0)
            and model.ffn_hidden_size % t == 0)  # the vocabulary is padded per TP degree


def suggest_stage_tp(scenario, dp: int = 1, file: str | None = None) -> dict:
    """Overrides (dotted path -> value) for a stage-major uneven-TP plan with ``dp`` replicas.

    Every group gets the largest TP degree that divides its GPUs per node and the model's
    heads, FFN and vocabulary; its GPUs form ``gpus / (tp*dp*cp)`` consecutive stages."""
    file = file if file is not None else getattr(scenario, "_source_file", None)
    model, par = scenario.model, scenario.parallelism
    cp = par.cp
    stage_tp: list[int] = []
    speed: list[float] = []
    for g in group_infos(scenario.cluster, file):
        t = max(t for t in range(1, g.gpus_per_node + 1) if g.gpus_per_node % t == 0 and _tp_ok(model, t))
        block = t * dp * cp
        if g.gpus % block:
            raise PlanError(f"group {g.name} ({g.gpus} GPUs) cannot hold whole stages of tp*dp*cp = {t}*{dp}*{cp} "
                            f"GPUs", file=file, field="parallelism.dp", value=dp)
        n = g.gpus // block
        stage_tp += [t] * n
        speed += [t * g.peak_flops] * n
    if len(stage_tp) > model.num_layers:
        raise PlanError(f"{len(stage_tp)} stages but the model has {model.num_layers} layers", file=file,
                        field="parallelism.dp", value=dp)
    layers = balance_layers(model.num_layers, [1.0 / s for s in speed], [0.0] * len(speed))
    return {"parallelism.stage_tp": stage_tp, "parallelism.tp": 1, "parallelism.pp": len(stage_tp),
            "parallelism.dp": dp, "parallelism.order": "tp-cp-ep-dp-pp", "parallelism.layer_partition": layers,
            "parallelism.virtual_stages": 1,
            "parallelism.schedule": "1f1b" if par.schedule == "interleaved" else par.schedule,
            "training.microbatch_split": None}
