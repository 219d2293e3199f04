"""Every training scenario shipped in scenarios/ is physically sound, checked against quantities computed here
from first principles, not from the code's own numbers:

* the plan uses every GPU: tp x pp x dp x cp (or dp x cp x sum(stage_tp)) GPUs, each running compute;
* memory fits: each rank holds at least its share of the weights, gradients and optimizer state
  (Megatron-LM mixed precision: 18 bytes per parameter, 6 + 12/dp with the distributed optimizer; parameter
  counts from the transformer formula below), and the modelled peak stays within the GPU's HBM;
* a simulated iteration adds up: per rank, compute + exposed communication + bubble + idle = the iteration
  time; MFU <= 1; tokens/s = global batch x sequence / iteration time.

scenarios/traffic/ holds traffic studies (heterosim traffic), checked in tests/traffic; scenarios/multi-job/ holds
cluster scenarios (several jobs), checked in tests/cluster.
"""
from pathlib import Path

import pytest

from heterosim import api
from heterosim.hardware.catalog import get_device
from heterosim.workload.plan import resolve_plan

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").rglob("*.yaml")
                   if not {"sweeps", "traffic", "multi-job"} & set(p.relative_to(ROOT / "scenarios").parts))
SMALL = [p for p in SCENARIOS if p.parent.name == "scenarios"]  # quickstart, stage-tp: seconds to simulate


def test_there_are_scenarios():
    assert len(SCENARIOS) >= 12  # quickstart, stage-tp and the ten H-suite files
    assert len(SMALL) >= 2


def layer_params(m) -> int:
    """Weights of one transformer layer (biases and norms ignored: a lower bound).
    Attention: Q and O are h x h, K and V are h x (kv_heads * head_dim); FFN: 2 (GELU) or 3 (SwiGLU)
    matrices of h x ffn, one per expert for MoE."""
    h, kv = m.hidden_size, m.kv_heads * m.head_size
    ffn_mats = (3 if m.activation == "swiglu" else 2) * h * (m.moe_ffn_hidden_size or m.ffn_hidden_size)
    return 2 * h * h + 2 * h * kv + ffn_mats * max(1, m.num_experts)


def state_bytes_per_param(zero_stage: int, dp: int) -> float:
    """Megatron-LM docs (distributed optimizer): bf16 weights 2 + fp32 grads 4 + fp32 master and Adam moments
    12 = 18 bytes per parameter; ZeRO (Rajbhandari et al. 2020, Figure 1) shards over the dp (or shard) group
    the optimizer state (stage 1: 6 + 12/dp), also the gradients (stage 2: 2 + 16/dp), also the weights
    (stage 3: 18/dp)."""
    return {0: 18, 1: 6 + 12 / dp, 2: 2 + 16 / dp, 3: 18 / dp}[zero_stage]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT)))
def test_scenario_is_physically_sound(path):
    prep = api.prepare(api.load(path))
    sc, ir, system = prep.scenario, prep.ir, prep.system
    meta = ir.meta
    # the plan uses every GPU
    tps = meta.get("stage_tp")
    sdp = meta.get("stage_dp") or [meta["dp"]] * meta["pp"]  # a DP degree per stage (parallelism.stage_dp)
    need = meta["cp"] * sum(t * d for t, d in zip(tps or [meta["tp"]] * meta["pp"], sdp))
    assert need == system.num_gpus == ir.world_size
    for r in range(ir.world_size):
        prog = ir.programs[ir.rank_program[r]]
        assert any(op.kind == "compute" and op.flops > 0 for op in prog.ops), f"rank {r} computes nothing"
    # memory: at least the states of its layers, at most the HBM of its GPU
    layers = meta["layers_per_stage"]
    layout = resolve_plan(sc, ir.world_size).layout
    for r in range(ir.world_size):
        stage = layout.coords(r)["pp"]
        tp = tps[stage] if tps else meta["tp"]
        ep = meta["ep"] if sc.model.is_moe else 1
        per_param = state_bytes_per_param(meta["zero_stage"], sc.parallelism.shard_size or sdp[stage])
        lower = layers[stage] * layer_params(sc.model) / tp / ep * per_param
        peak = meta["memory_bytes"][r]
        hbm = get_device(system.gpus[r].device).hbm_bytes
        assert lower <= peak <= hbm, (r, lower / 2**30, peak / 2**30, hbm / 2**30)


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.name)
def test_small_scenario_iteration_adds_up(path):
    res = api.run(path)
    s = res.summary
    t = s["iteration_time_s"]
    assert t > 0
    for r in s["per_rank"]:
        parts = r["compute"] + sum(v for k, v in r.items() if k.startswith("exposed_")) + r["bubble"] + r["idle"]
        assert parts == pytest.approx(t, rel=1e-6, abs=2e-9), r
    b = s["breakdown"]
    assert b["compute"] + sum(b["exposed_comm"].values()) + b["bubble"] + b["idle"] == pytest.approx(1.0, abs=1e-6)
    assert b["exposed_comm_total"] == pytest.approx(sum(b["exposed_comm"].values()), abs=1e-9)
    tr = res.prepared.scenario.training
    assert s["tokens_per_s"] == pytest.approx(tr.global_batch_size * tr.seq_length / t, rel=1e-9)
    assert 0 < s["mfu"] <= 1
