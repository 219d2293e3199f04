"""Every kind of PlanError: one line naming the field and its value."""
import re

import pytest

from heterosim.errors import PlanError
from heterosim.workload.compiler import compile_workload
from heterosim.workload.memory import check_plan

from wl_factory import gpt, scenario


def _err(sc, world, devices=None, **kw):
    with pytest.raises(PlanError) as ei:
        if devices is None:
            compile_workload(sc, world)
        else:
            check_plan(sc, world, devices, **kw)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def test_gpu_count_mismatch():
    msg = _err(scenario(tp=2, pp=2, dp=4), 8)
    assert msg == "parallelism.dp = 4: GPU count mismatch: tp*pp*cp*dp = 16 but the cluster has 8 GPUs"
    msg = _err(scenario(tp=4, pp=2), 12)
    assert msg.startswith("cluster = '12 GPUs': GPU count mismatch: tp*pp*cp = 8")


def test_tp_must_divide_heads():
    assert _err(scenario(gpt(heads=8), tp=3), 3).startswith("parallelism.tp = 3: tp must divide num_attention_heads (8)")


def test_pp_must_divide_layers_unless_partition():
    msg = _err(scenario(gpt(layers=10), pp=4), 4)
    assert msg.startswith("parallelism.pp = 4: pp = 4 does not divide num_layers (10)")
    compile_workload(scenario(gpt(layers=10), pp=4, layer_partition=[2, 3, 3, 2]), 4)
    msg = _err(scenario(gpt(layers=10), pp=4, layer_partition=[2, 3, 3, 3]), 4)
    assert msg.startswith("parallelism.layer_partition = [2, 3, 3, 3]: entries sum to 11")


def test_micro_batch_divisibility():
    msg = _err(scenario(gbs=30, mbs=2), 2)
    assert msg.startswith("training.global_batch_size = 30: global_batch_size must be a multiple of "
                          "dp*micro_batch_size = 2*2 = 4")
    msg = _err(scenario(gbs=16, split=[3, 4]), 2)
    assert msg.startswith("training.microbatch_split = [3, 4]: entries sum to 7")
    msg = _err(scenario(gbs=16, split=[16]), 2)
    assert msg.startswith("training.microbatch_split = [16]: needs one entry per data-parallel replica (dp = 2)")


def test_interleaved_needs_microbatches_multiple_of_pp():
    msg = _err(scenario(gbs=6, pp=4, schedule="interleaved", virtual_stages=2), 4)
    assert msg == ("parallelism.schedule = 'interleaved': the interleaved schedule needs micro-batches per replica "
                   "(6) to be a multiple of pp (4)")
    assert _err(scenario(pp=2, virtual_stages=2), 2).startswith("parallelism.virtual_stages = 2")


def test_out_of_memory_names_rank_stage_device():
    h = 12288
    sc = scenario(gpt(layers=96, hidden=h, heads=96, vocab=51200, seq=2048), gbs=512, seq=2048, tp=8, pp=8)
    devices = ["A100-40"] * 64
    hbm = {"A100-40": (40 * 2**30, "A100-40"), "H200": (141e9, "H200")}
    msg = _err(sc, 64, devices, hbm_of=hbm.__getitem__)
    assert re.fullmatch(r"parallelism = 'tp=8 pp=8 dp=1 cp=1 zero_stage=0 recompute=none micro_batch=1': out of "
                        r"memory: rank (\d+) \(stage (\d), A100-40\) needs \d+\.\d GiB but has 40\.0 GiB, largest term \w+ \d+\.\d GiB \(try .*\)", msg)
    # the worst rank is on the first stage (most micro-batches in flight)
    assert " (stage 0, " in msg
    # heterogeneous: only the small devices overflow once recompute frees activations
    sc2 = scenario(gpt(layers=96, hidden=h, heads=96, vocab=51200, seq=2048), gbs=512, seq=2048, tp=8, pp=8,
                   recompute="full", sequence_parallel=True)
    mixed = ["H200"] * 8 + ["A100-40"] * 56
    msg = _err(sc2, 64, mixed, hbm_of=hbm.__getitem__)
    rank = int(re.search(r"rank (\d+)", msg).group(1))
    assert rank >= 8
    check_plan(sc2, 64, ["H200"] * 64, hbm_of=hbm.__getitem__)


def test_check_plan_uses_device_catalog():
    from heterosim.hardware import get_device

    get_device("A100-40")  # the catalog must keep it: a regression fails here instead of skipping
    sc = scenario(gpt(layers=96, hidden=12288, heads=96, vocab=51200, seq=2048), gbs=512, seq=2048, tp=8, pp=8)
    msg = _err(sc, 64, ["A100-40"] * 64)
    assert "A100-40" in msg and "out of memory" in msg


def test_file_and_moe_errors():
    sc = scenario(tp=2)
    sc._source_file = "exp.yaml"
    assert _err(sc, 3).startswith("exp.yaml: cluster = '3 GPUs': GPU count mismatch")
    assert _err(scenario(ep=2), 2).startswith("parallelism.ep = 2: expert parallelism needs a mixture-of-experts")
    from heterosim.config import ModelConfig
    moe = ModelConfig(name="m", num_layers=2, hidden_size=128, num_attention_heads=4, ffn_hidden_size=256,
                      vocab_size=512, num_experts=6, moe_top_k=2)
    assert _err(scenario(moe, ep=4), 4).startswith("parallelism.ep = 4: ep must divide num_experts (6)")
    assert _err(scenario(cp=3, seq=256), 3).startswith("training.seq_length = 256: context parallelism")
