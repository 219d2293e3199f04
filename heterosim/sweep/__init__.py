"""Parameter sweeps: many runs of one scenario, one process each, resumable, tabulated.

    from heterosim.sweep import run_sweep
    res = run_sweep("scenarios/sweeps/dcqcn-kmin.yaml", jobs=2)
    print(res.counts, res.table)
"""
from heterosim.sweep.config import SweepConfig, load_sweep
from heterosim.sweep.expand import Point, expand, point_id
from heterosim.sweep.runner import SweepResult, run_sweep
from heterosim.sweep.worker import Outcome, PointTask, run_scenario

__all__ = ["SweepConfig", "load_sweep", "Point", "expand", "point_id", "SweepResult", "run_sweep",
           "Outcome", "PointTask", "run_scenario"]
