"""Workload layer: scenario -> per-rank op graphs (the IR), rank groups, schedules, memory."""
from heterosim.workload.compiler import compile_workload
from heterosim.workload.groups import RankLayout, build_groups, rank_coords
from heterosim.workload.ir import IR, Op, Program
from heterosim.workload.memory import check_plan, memory_per_rank
from heterosim.workload.plan import Plan, resolve_plan
from heterosim.workload.schedules import gpipe, interleaved, one_f_one_b, schedule_for
from heterosim.workload.verify import verify_ir

__all__ = ["compile_workload", "RankLayout", "build_groups", "rank_coords", "IR", "Op", "Program", "check_plan",
           "memory_per_rank", "Plan", "resolve_plan", "gpipe", "interleaved", "one_f_one_b", "schedule_for",
           "verify_ir"]
