"""Jobs together on one fabric: alone they give exactly their single-job result; on disjoint leaves of a
non-blocking fabric they leave each other alone; sharing an oversubscribed spine they slow each other down;
runs repeat exactly."""
from __future__ import annotations

import copy

import pytest

from heterosim import api
from heterosim.cluster import run
from heterosim.config.loader import scenario_from_dict

from .helpers import cluster, write

SKIP = ("simulation", "scenario", "framework")


def _single_job_summary(data: dict, backend: str) -> dict:
    job = {k: copy.deepcopy(data["jobs"][0][k]) for k in ("model", "parallelism", "training")}
    sc = scenario_from_dict({"name": "single", **job, "cluster": data["cluster"],
                             "fabric": data["fabric"], "network": data["network"],
                             # the single job with every simulation setting at its default (issue 40: the
                             # default is exact, so it must match the cluster path, which simulates every lane)
                             "output": {"trace": False, "plots": False}})
    return api.run(sc, backend=backend).summary


@pytest.mark.parametrize("backend,iterations,accel", [("flow", 2, "off"),
                                                      pytest.param("ns3", 1, "off", marks=pytest.mark.slow),
                                                      pytest.param("ns3", 1, "auto", marks=pytest.mark.slow)])
def test_a_job_alone_gives_its_single_job_result(tmp_path, backend, iterations, accel):
    job = {"name": "only", "placement": {"group": "h100"}, "iterations": iterations}
    if backend == "ns3":  # packet by packet: a narrower model (10 MB of gradients per GPU) keeps it short
        job["model"] = {"zoo": "gpt3-1.7b", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
                        "ffn_hidden_size": 4096, "vocab_size": 8192}
    data = cluster([job], nodes=2, hosts_per_leaf=8)  # one node per leaf: the job's traffic crosses the spine
    if backend == "ns3":
        data["network"]["acceleration"] = {"mode": accel}
    res = run(write(tmp_path, data), backend=backend)
    single = _single_job_summary(data, backend)
    its = res.jobs[0].iterations
    assert len(its) == iterations
    for it in its:  # every field of summary.json: time, breakdown, per-rank buckets, bytes, MFU
        for key in single:
            if key not in SKIP:
                assert it[key] == single[key], key


def _pair(tmp_path, policy: str, oversubscription: float):
    data = cluster([{"name": "a", "placement": {"policy": policy, "num_gpus": 16}},
                    {"name": "b", "placement": {"policy": policy, "num_gpus": 16}}],
                   oversubscription=oversubscription)
    return run(write(tmp_path, data), isolation_baseline=True)


def test_disjoint_leaves_of_a_nonblocking_fabric_do_not_interfere(tmp_path):
    res = _pair(tmp_path, "packed", 1.0)  # a on leaf 0 (nodes 0, 1), b on leaf 1 (nodes 2, 3)
    assert res.summary["fabric"]["shared_links"] == 0
    for jr in res.jobs:
        assert [s["iteration_time_ns"] for s in jr.iterations] == [s["iteration_time_ns"] for s in jr.alone]
    for job in res.summary["jobs"]:
        assert job["slowdown"] == 1.0


@pytest.mark.slow
def test_disjoint_leaves_do_not_interfere_at_packet_level(tmp_path):
    narrow = {"zoo": "gpt3-1.7b", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
              "ffn_hidden_size": 4096, "vocab_size": 8192}
    data = cluster([{"name": "a", "model": narrow, "placement": {"policy": "packed", "num_gpus": 16}},
                    {"name": "b", "model": narrow, "placement": {"policy": "packed", "num_gpus": 16}}],
                   backend="ns3")
    data["network"]["acceleration"] = {"mode": "off"}
    res = run(write(tmp_path, data), isolation_baseline=True)
    for jr in res.jobs:
        assert [s["iteration_time_ns"] for s in jr.iterations] == [s["iteration_time_ns"] for s in jr.alone]


def test_sharing_an_oversubscribed_spine_slows_both_jobs(tmp_path):
    # spread: a on nodes 0 and 2, b on nodes 1 and 3, so both jobs' gradient all-reduce crosses the same
    # leaf uplinks. At 4:1 a leaf has 16 x 400 / 4 = 1600 Gb/s up: one job's 8 NICs (3200 Gb/s) already
    # saturate it, two jobs halve each other's share, so each job's exposed DP communication must grow.
    res = _pair(tmp_path, "spread", 4.0)
    assert res.summary["fabric"]["shared_by"].get("a + b", 0) > 0
    for job in res.summary["jobs"]:
        assert job["slowdown"] > 1.05, job["name"]
        assert job["exposed_comm_s_mean"]["dp"] > job["alone"]["exposed_comm_s_mean"]["dp"]
        assert job["exposed_comm_s_mean"]["tp"] == pytest.approx(job["alone"]["exposed_comm_s_mean"]["tp"], rel=1e-9)


def test_runs_repeat_exactly(tmp_path):
    data = cluster([{"name": "a", "placement": {"policy": "random", "num_gpus": 16, "seed": 7}, "iterations": 2},
                    {"name": "b", "placement": {"policy": "spread", "num_gpus": 16}, "start_ns": 2_000_000}],
                   oversubscription=2.0)
    path = write(tmp_path, data)
    one, two = run(path), run(path)
    for s in (one.summary, two.summary):
        s.pop("simulation")
    assert one.summary == two.summary
    assert one.fabric == two.fabric


def test_start_offset_and_iteration_counts(tmp_path):
    data = cluster([{"name": "a", "placement": {"policy": "packed", "num_gpus": 16}, "iterations": 3},
                    {"name": "b", "placement": {"policy": "packed", "num_gpus": 16}, "iterations": 1,
                     "start_ns": 5_000_000}])
    res = run(write(tmp_path, data))
    a, b = res.summary["jobs"]
    assert a["iterations_run"] == 3 and b["iterations_run"] == 1
    assert b["iterations"][0]["start_ns"] == 5_000_000
    # back to back: each iteration starts where the previous ended; the run ends with the last job
    for prev, nxt in zip(a["iterations"], a["iterations"][1:]):
        assert nxt["start_ns"] == prev["end_ns"]
    assert res.sim.iteration_time_ns == max(a["iterations"][-1]["end_ns"], b["iterations"][-1]["end_ns"])
    # on disjoint leaves (non-blocking) an offset start changes nothing in b's iteration
    assert b["iteration_time_s"][0] == a["iteration_time_s"][0]
