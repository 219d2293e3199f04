"""The planner's closed-form estimate under ZeRO (heterosim/planner/estimate.py), by hand on a stand-in cost model:
one stage, two replicas, four micro-batches of 10 us (4 forward + 6 backward), DP collectives of fixed times."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from heterosim.config import ModelConfig
from heterosim.planner.estimate import estimate
from heterosim.planner.partition import StageCost
from heterosim.workload.compiler import OPTIMIZER_FLOPS_PER_PARAM
from heterosim.workload.costs import embedding_params, head_params, layer_params

US = 1_000.0
AG, RS, AR = 3 * US, 5 * US, 9 * US  # all-gather, reduce-scatter, all-reduce of a stage's parameters/gradients
OPT_FULL = 8 * US  # the optimizer over all parameters (sharded: / dp)


def _cm(zero_stage: int, overlap_param_gather: bool = True):
    model = ModelConfig(name="m", num_layers=2, hidden_size=256, num_attention_heads=8, ffn_hidden_size=1024,
                        vocab_size=1024, max_seq_length=512, tie_embeddings=False)
    par = SimpleNamespace(zero_stage=zero_stage, overlap_grad_reduce=True, overlap_param_gather=overlap_param_gather,
                          grad_bucket_bytes=1, sequence_parallel=False)
    sc = SimpleNamespace(model=model, parallelism=par, training=SimpleNamespace(seq_length=512, precision="bf16"))

    def dp_ns(cells, nbytes, op="allreduce"):
        return {"allgather": AG, "reducescatter": RS, "allreduce": AR}[op]

    params = 2 * layer_params(model, 1, 1).dense + embedding_params(model, 1) + head_params(model, 1, 1)

    def op_ns(kernels, device):  # the Adam step: proportional to the parameters it updates
        return OPT_FULL * kernels[0][1] / (OPTIMIZER_FLOPS_PER_PARAM * params)

    cm = SimpleNamespace(scenario=sc, dp_ns=dp_ns, p2p_ns=lambda a, b, n: 0.0, _op_ns=op_ns,
                         _get_device=lambda gpu: None, _first_node={"g": SimpleNamespace(spec=SimpleNamespace(gpu="x"))},
                         _groups={"g": SimpleNamespace(slowdown=1.0)})
    cells = [[SimpleNamespace(group="g", node=0), SimpleNamespace(group="g", node=1)]]
    mapping = SimpleNamespace(pp=1, dp=2, tp=1, cells=cells)
    cost = StageCost(layer_fwd_ns=2 * US, layer_bwd_ns=3 * US, embed_ns=0.0, head_ns=0.0)
    return cm, mapping, [[cost, cost]]


@pytest.mark.parametrize("zero_stage, want_us", [
    # 4 x 10 us of pipeline, then: all-reduce 9 us, less the last backward it hides behind (6 us) = 3 us exposed
    # (the last 1-byte bucket is nothing); the optimizer over every parameter (8 us)
    (0, 40 + 3 + 8),
    # reduce-scatter 5 us hides behind the 6 us backward; the optimizer on half the parameters (4 us); the
    # parameter all-gather (3 us) beside the first forward (4 us): nothing shows
    (1, 40 + 0 + 4 + 0),
    (2, 40 + 0 + 4 + 0),
    # ZeRO-3: every micro-batch's two all-gathers and a reduce-scatter (11 us) exceed its 10 us of compute: the
    # cycle is 11 us; the reduce-scatter of the first unit (5 us over 4 units: embedding, 2 layers, head)
    # follows the last backward; optimizer 4 us; no all-gather after it
    (3, 44 + 1.25 + 4),
])
def test_zero_stages_by_hand(zero_stage, want_us):
    cm, mapping, costs = _cm(zero_stage)
    est = estimate(cm, mapping, costs, [2], [4, 4])
    assert est.time_ns == pytest.approx(want_us * US)


def test_zero1_all_gather_after_the_optimizer_without_overlap():
    cm, mapping, costs = _cm(1, overlap_param_gather=False)
    # the 3 us all-gather after the optimizer, in full
    assert estimate(cm, mapping, costs, [2], [4, 4]).time_ns == pytest.approx((40 + 0 + 4 + 3) * US)
