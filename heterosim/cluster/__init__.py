"""Several jobs on one cluster: cluster scenarios, job placement, one simulation for all jobs, per-job results.

    from heterosim.cluster import run
    res = run("scenarios/multi-job/two-gpt-spread.yaml", out_dir="results/mj", isolation_baseline=True)
    for job in res.summary["jobs"]:
        print(job["name"], job["iteration_time_s_mean"], job.get("slowdown"))

Layers: ``config`` (the file), ``placement`` (which GPUs), ``merge`` (one IR for all jobs), ``run``
(prepare, simulate, per-job views, fabric attribution), ``results`` (files).
"""
from heterosim.cluster.config import ClusterScenario, is_cluster_file, load_cluster_scenario
from heterosim.cluster.run import ClusterResult, check, load, prepare, run, simulate

__all__ = ["ClusterScenario", "ClusterResult", "is_cluster_file", "load_cluster_scenario", "load", "prepare", "check",
           "simulate", "run"]
