"""Stand-in run functions for sweep tests (module-level so a spawned child can import them).

Behaviour is chosen by the point's ``seed`` override so one sweep can mix outcomes:
13 -> the process dies of SIGSEGV, 7 -> the run raises, 666 -> it hangs; else a summary.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def _record(task) -> None:
    """Append the point id to runs.log beside points/ (counts how often each point ran)."""
    log = Path(task.out_dir).parent.parent / "runs.log"
    with open(log, "a") as fh:
        fh.write(task.point_id + "\n")


def fake_run(task) -> dict:
    _record(task)
    seed = task.overrides.get("seed", 0)
    if seed == 13:
        os.kill(os.getpid(), signal.SIGSEGV)
    if seed == 7:
        raise ValueError("seed 7 is unlucky")
    if seed == 666:
        time.sleep(120)
    kmin = task.overrides.get("network.ecn.kmin_kb", 400)
    pfc = task.overrides.get("network.pfc.enabled", True)
    t = 1.0 + seed * 0.01 + kmin / 1e4 + (0.0 if pfc else 0.05)
    summary = {"scenario": "fake", "iteration_time_s": t, "mfu": 0.4 / t, "model_tflops_per_gpu": 400 / t,
               "tokens_per_s": 1e5 / t,
               "breakdown": {"compute": 0.6, "exposed_comm": {"tp": 0.1, "dp": 0.05}, "exposed_comm_total": 0.15,
                             "bubble": 0.2, "idle": 0.05, "unit": "fraction"},
               "per_rank": [{"rank": 0}], "simulation": {"wall_s": 0.01, "events": 10}}
    out = Path(task.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary))
    (out / "network.json").write_text(json.dumps({"messages": 5, "bytes_delivered": 100,
                                                  "pfc_pause_frames": 0 if pfc else 3, "ecn_marks": int(kmin),
                                                  "per_link": {f"l{i}": i for i in range(100)}}))
    return summary


def returns_only(task) -> dict:
    """A run function that writes nothing itself: the worker must write summary.json."""
    _record(task)
    return {"iteration_time_s": 2.0, "mfu": 0.1}


def fake_run_recording_overrides(task) -> dict:
    """fake_run, and the overrides the point ran with in overrides.json (checks command-line overrides)."""
    summary = fake_run(task)
    Path(task.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(task.out_dir) / "overrides.json").write_text(json.dumps(task.overrides))
    return summary
