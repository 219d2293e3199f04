"""Heterogeneity-aware planning: device-to-parallelism mapping, non-uniform partitioning, plan search.

    from heterosim.planner import plan
    for cand in plan(load("scenarios/suites/h-suite/h2-gpt3-175b.yaml"), top_k=3):
        print(cand.short(), cand.time_s, cand.why)
"""
from heterosim.planner.mapping import Mapping, candidate_mappings, group_infos, map_ranks
from heterosim.planner.partition import balance_layers, split_microbatches
from heterosim.planner.search import Candidate, Planner, PlanReport, plan, plan_report
from heterosim.planner.stage_tp import suggest_stage_tp

__all__ = ["plan", "plan_report", "Planner", "PlanReport", "Candidate", "Mapping", "map_ranks",
           "candidate_mappings", "group_infos", "balance_layers", "split_microbatches", "suggest_stage_tp"]
