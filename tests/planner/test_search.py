"""The planner end to end on small clusters: aware beats uniform, monotone in device speed, errors."""
import pytest

from heterosim.errors import PlanError
from heterosim.planner.mapping import apply_overrides
from heterosim.planner.search import Planner, plan, plan_report, search_space

from .conftest import small_scenario

# one configuration keeps these tests to seconds: TP8 (inside a node), PP2, DP2 on 32 GPUs
CFG = [(8, 2, 2, 1, "1f1b", 1, "none")]


PAR8 = {"tp": 8, "pp": 2, "sequence_parallel": True, "zero_stage": 1}


def test_aware_plan_beats_uniform_on_a_heterogeneous_cluster():
    # the naive plan is the scenario's own TP8 PP2 DP2 with equal layers and micro-batches
    rep = plan_report(small_scenario(parallelism=PAR8), top_k=2, configs=CFG, simulate=2)
    best, naive = rep.best, rep.naive
    assert naive is not None and naive.sim_time_s is not None and best.sim_time_s is not None
    assert best.aware
    # simulated, not estimated: the non-uniform partition/split is faster than equal layers/micro-batches
    assert best.sim_time_s < 0.9 * naive.sim_time_s
    assert best.speedup_vs_naive == pytest.approx(naive.sim_time_s / best.sim_time_s)
    # the estimate is within 25% of the simulation for every simulated plan
    for _, est, sim in rep.calibration:
        assert abs(est / sim - 1) < 0.25
    # its overrides reproduce it
    sc = apply_overrides(small_scenario(), best.overrides)
    assert sc.parallelism.tp == 8 and sc.parallelism.pp == 2


def test_uniform_plan_on_homogeneous_cluster_is_already_balanced():
    homo = small_scenario(groups=[{"name": "h100", "node_type": "dgx-h100", "num_nodes": 4}])
    rep = plan_report(homo, top_k=1, configs=CFG, simulate=0)
    # nothing to balance but the embedding/LM-head extras: layers stay within one of equal
    assert max(rep.best.layers) - min(rep.best.layers) <= 2
    assert len(set(rep.best.split)) == 1


@pytest.mark.parametrize("slower", [
    {"slowdown": 1.5},
    {"node_type": "hgx-a100-40"},
    {"overrides": {"nic_gbps": 100}},
])
def test_a_slower_group_never_makes_the_iteration_faster(slower):
    base = small_scenario()
    groups = [g.model_dump(exclude_defaults=True) for g in base.cluster.groups]
    groups[1] = {**groups[1], **slower}
    if "overrides" in slower:
        groups[1]["overrides"] = {**slower["overrides"]}
    slow = small_scenario(groups=groups)
    # (1) the planner's best estimate is monotone (same candidates, each no faster; fewer if less HBM)
    fast_rep = Planner(base).search(configs=search_space(base, 32, 8)[:60])
    slow_rep = Planner(slow).search(configs=search_space(slow, 32, 8)[:60])
    assert slow_rep.best.est_time_s >= fast_rep.best.est_time_s * (1 - 1e-9)
    # (2) a fixed plan simulated on the slower cluster is no faster
    from heterosim import api

    over = {"parallelism.tp": 8, "parallelism.pp": 2, "parallelism.dp": 2}
    t_fast = api.simulate(api.prepare(apply_overrides(base, over)), record_messages=False).summary
    t_slow = api.simulate(api.prepare(apply_overrides(slow, over)), record_messages=False).summary
    assert t_slow["iteration_time_s"] >= t_fast["iteration_time_s"] * (1 - 1e-6)


def test_plan_returns_ranked_candidates_with_naive_last():
    sc = small_scenario(training={"global_batch_size": 16, "micro_batch_size": 1, "seq_length": 2048})
    out = plan(sc, top_k=2, max_candidates=30)
    assert out[-1].label == "naive-uniform"
    ranked = out[:-1]
    assert ranked and all(c.sim_time_s is not None for c in ranked)
    assert [c.sim_time_s for c in ranked] == sorted(c.sim_time_s for c in ranked)
    assert all(c.mem_headroom >= 0.05 for c in ranked)
    assert all(c.why for c in out)


def test_planner_rejects_moe_and_context_parallel():
    sc = small_scenario()
    with pytest.raises(PlanError):
        Planner(apply_overrides(sc, {"parallelism.cp": 2}))


def test_search_prunes_by_memory():
    # GPT-3 175B on 4 nodes cannot fit with most layouts; everything reported fits
    sc = apply_overrides(small_scenario(), {"model": small_scenario().model.model_copy(
        update={"num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
                "ffn_hidden_size": 49152}).model_dump()})
    rep = Planner(sc).search(max_candidates=200)
    assert rep.pruned_memory > 0
    assert all(c.mem_headroom >= 0.05 for c in rep.candidates)
