"""Issue 40: the default ``simulation.hashed_copies`` meets the project's 0.5% rule against the full run.

The reference in every test is the full simulation of the same scenario (``symmetry`` off: every lane and
every transfer its own flow), computed here; the reduced run uses whatever ``hashed_copies`` defaults to.
The scenarios are built by benchmarks/bench_hash_agreement.py (``--small``), whose matrix over every mode is
the table in docs/symmetry-reduction.md.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heterosim import api
from heterosim.config.loader import scenario_from_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_hash_agreement import issue40_scenario, small_scenario  # noqa: E402

TOL = 0.005
"""Issue 15 / issue 40: a reduction that is not exact stays within 0.5% of the full simulation."""


def _full_and_default(d: dict):
    assert "simulation" not in d  # the default mode, whatever it is
    prep = api.prepare(scenario_from_dict(d))
    return (api.simulate(prep, record_messages=False, symmetry=False),
            api.simulate(prep, record_messages=False, symmetry=True))


@pytest.mark.parametrize("oversubscription", [2.0, 1.0])
def test_issue40_case_default_within_half_a_percent(oversubscription):
    # 4 DGX H100, GPT-3 1.7B cut to 4 layers, TP4 PP2 DP4, one node per leaf, hashed ECMP: the spine carries
    # every pipeline and data-parallel transfer between nodes (ops_and_shifted_replicas: -0.999% at 2:1,
    # -0.579% at 1:1)
    full, red = _full_and_default(issue40_scenario(oversubscription))
    T = full.sim.iteration_time_ns
    assert abs(red.sim.iteration_time_ns - T) <= TOL * T, (red.sim.iteration_time_ns - T) / T


@st.composite
def small_fabrics(draw) -> dict:
    gpn = draw(st.sampled_from([2, 4, 8]))
    nodes = draw(st.sampled_from([2, 4, 8]))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if t <= gpn]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if (gpn * nodes) % (tp * p) == 0]))
    return small_scenario(gpus_per_node=gpn, nodes=nodes, nodes_per_leaf=draw(st.sampled_from([1, 2])),
                          oversubscription=draw(st.sampled_from([1.0, 2.0, 3.0, 4.0])),
                          ecmp=draw(st.sampled_from(["hash", "rail"])), tp=tp, pp=pp,
                          micro_batches=draw(st.sampled_from([1, 2, 4, 8])),
                          order=draw(st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"])),
                          seed=draw(st.integers(0, 999)))


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_fabrics())
def test_default_mode_within_half_a_percent_on_small_fabrics(d):
    full, red = _full_and_default(d)
    T = full.sim.iteration_time_ns
    assert abs(red.sim.iteration_time_ns - T) <= TOL * T, (red.sim.iteration_time_ns - T) / T
    # every copy's bytes were sent, as in the full run
    assert red.sim.net_bytes == full.sim.net_bytes


@pytest.mark.xfail(strict=True, reason="open (found by issue 40's matrix, random 84): with hashed ECMP and two nodes "
                   "per leaf the 'exact' reduction (20 orbit schedules, every lane simulated) ends 0.228% after the "
                   "full run; docs/symmetry-reduction.md")
def test_exact_mode_is_the_full_run_with_two_nodes_per_leaf():
    d = small_scenario(gpus_per_node=2, nodes=8, nodes_per_leaf=2, oversubscription=1.0, ecmp="hash", tp=2, pp=4,
                       micro_batches=8, seed=903)
    d["simulation"] = {"hashed_copies": "exact"}
    prep = api.prepare(scenario_from_dict(d))
    full = api.simulate(prep, record_messages=False, symmetry=False)
    red = api.simulate(prep, record_messages=False, symmetry=True)
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
