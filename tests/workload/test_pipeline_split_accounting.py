"""Megatron-Core's account_for_embedding/loss_in_pipeline_split: the embedding and the loss each take one
layer's slot in the even split (Megatron-Core transformer_block: num_layers + 1 per option, split evenly, the
first / last virtual stage building one layer fewer). Expected splits are worked out by hand below."""
from __future__ import annotations

import pytest

from heterosim.config.loader import scenario_from_dict
from heterosim.errors import PlanError
from heterosim.workload.plan import resolve_plan


def _plan(layers: int, pp: int, vp: int, emb: bool, loss: bool, gbs: int = 16):
    par = {"tp": 1, "pp": pp, "dp": 1, "account_for_embedding_in_pipeline_split": emb,
           "account_for_loss_in_pipeline_split": loss}
    if vp > 1:
        par.update({"schedule": "interleaved", "virtual_stages": vp})
    sc = scenario_from_dict({"name": "t", "model": {"zoo": "gpt3-1.7b", "num_layers": layers}, "parallelism": par,
                             "training": {"global_batch_size": gbs, "micro_batch_size": 1, "seq_length": 2048},
                             "cluster": {"groups": [{"name": "h", "node_type": "dgx-h100", "num_nodes": 1}]}},
                            file="t.yaml")
    return resolve_plan(sc, pp, "t.yaml")


def test_llama_405b_shape_126_layers_pp8_vp8():
    # 126 + 2 = 128 slots over 64 virtual stages = 2 each; first and last hold one layer
    plan = _plan(126, 8, 8, True, True)
    counts = [len(v) for v in plan.vstage_layers]
    assert counts == [1] + [2] * 62 + [1]
    assert sum(counts) == 126


def test_embedding_only_on_plain_1f1b():
    # 23 + 1 = 24 over 4 stages = 6; stage 0 builds 5
    assert [len(v) for v in _plan(23, 4, 1, True, False).vstage_layers] == [5, 6, 6, 6]


def test_off_by_default_keeps_the_plain_rule():
    with pytest.raises(PlanError, match="does not divide num_layers"):
        _plan(126, 8, 8, False, False)
    assert [len(v) for v in _plan(24, 4, 1, False, False).vstage_layers] == [6, 6, 6, 6]


def test_a_stage_left_without_layers_is_refused():
    with pytest.raises(PlanError, match="no layer"):
        _plan(6, 4, 2, True, True)  # 8 slots over 8 virtual stages: first and last would hold 0
