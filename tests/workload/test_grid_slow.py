"""Exhaustive small-plan grid: every option combination compiles to an IR that replays without deadlock."""
import itertools

import pytest

from heterosim.config import ModelConfig
from heterosim.workload.compiler import compile_workload
from heterosim.workload.verify import verify_ir

from wl_factory import gpt, scenario

MOE = ModelConfig(name="tinymoe", num_layers=8, hidden_size=256, num_attention_heads=8, ffn_hidden_size=1024,
                  vocab_size=1024, max_seq_length=512, num_experts=4, moe_top_k=2)


@pytest.mark.slow
def test_option_grid_replays():
    dense = gpt(layers=8, hidden=256, heads=8, vocab=1024, seq=512)
    n = 0
    for sched, pp, tp, cp, sp, rc, zero, ovl, tpo, model, ep in itertools.product(
            ["gpipe", "1f1b", "interleaved"], [1, 2, 4], [1, 2], [1, 2], [False, True], ["none", "full"], [0, 1],
            [True, False], [False, True], [dense, MOE], [1, 2]):
        if sched == "interleaved" and pp < 2 or ep > 1 and model is dense:
            continue
        v = 2 if sched == "interleaved" else 1
        sc = scenario(model, gbs=32, mbs=2, seq=256, tp=tp, pp=pp, cp=cp, ep=ep, schedule=sched, virtual_stages=v,
                      sequence_parallel=sp, recompute=rc, zero_stage=zero, overlap_grad_reduce=ovl,
                      tp_comm_overlap=tpo, grad_bucket_bytes=1_000_000)
        verify_ir(compile_workload(sc, tp * pp * cp * 4))
        n += 1
    assert n > 1000
