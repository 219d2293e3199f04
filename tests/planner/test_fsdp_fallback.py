"""The planner searches fully sharded data parallelism where nothing fits otherwise (issue 38)."""
from heterosim.config.loader import scenario_from_dict
from heterosim.planner.mapping import apply_overrides
from heterosim.planner.search import Planner, plan_report
from heterosim.workload.memory import check_plan

H, V, WORLD = 12288, 147456, 64
A10_BYTES = 23028 * 2**20  # the device catalog's A10 capacity (nvidia-smi total)


def _scenario(zero: int = 1):
    """A 2-layer, 12288-wide model on 64 single-GPU A10 nodes: TP is 1 (one GPU per node) and PP at most 2."""
    return scenario_from_dict({
        "name": "fsdp-fallback",
        "model": {"name": "wide-2l", "num_layers": 2, "hidden_size": H, "num_attention_heads": 96,
                  "ffn_hidden_size": 4 * H, "vocab_size": V, "max_seq_length": 512, "tie_embeddings": False},
        "parallelism": {"tp": 1, "pp": 1, "zero_stage": zero},
        "training": {"global_batch_size": 64, "micro_batch_size": 1, "seq_length": 512},
        "cluster": {"groups": [{"name": "a10", "node_type": "pcie-a10", "num_nodes": WORLD,
                                "overrides": {"gpus_per_node": 1}}]},
    })


def test_zero1_cannot_fit_by_hand():
    # mixed-precision Adam with the distributed optimizer: 2 + 4 + 12/dp bytes per parameter (ZeRO paper, P_os)
    layer = 12 * H * H + 13 * H
    embed = V * H
    pp2 = (layer + embed) * (2 + 4 + 12 / (WORLD // 2))  # stage 0 of PP2: one layer + the embedding
    pp1 = (2 * layer + 2 * embed) * (2 + 4 + 12 / WORLD)
    # + the CUDA context (723 MiB) + stage 0's activations: 1F1B holds pp = 2 micro-batches of one layer,
    # 34 s*b*h bytes each (Korthikanti et al. 2022, fused attention, no TP)
    floor = 723 * 2**20 + 2 * 34 * 512 * H
    assert pp1 > A10_BYTES and pp2 + floor > A10_BYTES
    # ZeRO-3 over 64 ranks: 18/64 B per parameter + two gathered units (2 B) + one unit's fp32 gradients
    fsdp = (2 * layer + 2 * embed) * 18 / WORLD + 2 * 2 * max(layer, embed) + 4 * max(layer, embed)
    assert fsdp < 0.8 * A10_BYTES


def test_planner_falls_back_to_fsdp():
    assert Planner(_scenario()).search().candidates == []
    rep = plan_report(_scenario(), top_k=2, simulate=1)
    assert rep.candidates, rep.notes
    assert any("zero_stage 3, FSDP" in n for n in rep.notes)
    for cand in rep.candidates:
        assert cand.overrides["parallelism.zero_stage"] == 3
        sc = apply_overrides(_scenario(), cand.overrides)
        check_plan(sc, WORLD, ["A10"] * WORLD)  # the workload memory model admits it (raises if not)
    assert rep.best.sim_time_s is not None and rep.best.sim_time_s > 0


def test_no_fallback_when_asked_or_already_fsdp():
    rep = plan_report(_scenario(), top_k=1, simulate=0, fsdp_fallback=False)
    assert rep.candidates == [] and not any("FSDP" in n for n in rep.notes)
    rep3 = plan_report(_scenario(zero=3), top_k=1, simulate=0)
    assert rep3.candidates and not any("searched fully sharded" in n for n in rep3.notes)
