"""The library API the CLI is a thin layer over.

    from heterosim.api import load, run
    result = run(load("scenarios/quickstart.yaml"), out_dir="results/qs")
    print(result.summary["iteration_time_s"])

Single jobs live in :mod:`heterosim.pipeline`; this module re-exports them and adds cluster scenarios
(several jobs on one fabric). Nothing below ``api`` imports it.
"""
from __future__ import annotations

from pathlib import Path

from heterosim.errors import UserError
from heterosim.pipeline import (Prepared, RunResult, check, compute_model, config_warnings, default_out_dir,
                                framework_summary, intra_config, load, messages_to_record, prepare, run, simulate,
                                with_overrides, write_results)


def is_cluster_file(path: str | Path) -> bool:
    """Whether a scenario file is a cluster scenario (``kind: cluster``: several jobs, ``run_cluster``)."""
    from heterosim.cluster.config import is_cluster_file as _is

    return _is(path)


def run_cluster(scenario, *, out_dir: str | Path | None = None, backend: str | None = None,
                overrides: list[str] | dict | None = None, isolation_baseline: bool = False,
                work_budget: float | None = None, progress=None):
    """Several jobs on one cluster (heterosim/cluster): all together on one fabric, per-job results;
    ``isolation_baseline`` also runs each job alone for its slowdown. Returns a ``ClusterResult``."""
    from heterosim.cluster import run as _run

    return _run(scenario, backend=backend, out_dir=out_dir, isolation_baseline=isolation_baseline,
                overrides=overrides, work_budget=work_budget, progress=progress)


__all__ = ["load", "with_overrides", "prepare", "check", "simulate", "run", "write_results", "Prepared", "RunResult",
           "UserError", "is_cluster_file", "run_cluster", "compute_model", "framework_summary", "intra_config",
           "messages_to_record", "default_out_dir", "config_warnings"]
