"""The planner's estimate under ``tp_comm_overlap`` follows the compiler's userbuffers model.

Expected values are derived here from the schedule ``_Emitter.block_ub`` documents (ring all-gather beside
the first GEMM's local chunks, the closing GEMM's chunks beside a pipelined reduce-scatter), not read back
from the planner."""
import pytest

from heterosim.hardware import ComputeModel, get_device
from heterosim.planner.partition import CostModel
from heterosim.workload.compiler import ub_block_ns
from heterosim.workload.costs import bwd_kernels
from topologies import build_system

from .conftest import small_scenario


def test_block_critical_path_by_hand():
    # pieces (head, local chunks, middle, closing chunks) = 10, 70, 30, 70; all-gather 100; reduce-scatters 50, 10
    # forward: all-gather starts after the head: max(10 + 70, 10 + 100) + 30 + max(70, 50) + 10 = 220
    assert ub_block_ns((10, 70, 30, 70), 100, (50, 10), bwd=False) == 220
    # backward: it starts with the block: max(80, 100) + 30 + 70 + 10 = 210
    assert ub_block_ns((10, 70, 30, 70), 100, (50, 10), bwd=True) == 210
    # compute-bound: the collectives hide entirely: 10 + 70 + 30 + 70 + 10 (the last chunk's scatter shows)
    assert ub_block_ns((10, 70, 30, 70), 20, (5, 10), bwd=False) == 190


def _chunk(kern, n):
    m, nn, k, pas = kern[3]
    return ("gemm", kern[1] / n, kern[2] / n, (m // n, nn, k, pas))


def _ns(cm, kernels, dev, prec):
    return float(round(sum(cm.kernel_time_ns(k[0], k[1], k[2], k[3], dev, prec) for k in kernels)))


def test_planner_layer_estimate_follows_userbuffers_schedule():
    sc = small_scenario(groups=[{"name": "h100", "node_type": "dgx-h100", "num_nodes": 1}],
                        parallelism={"tp": 8, "pp": 1, "sequence_parallel": True, "tp_comm_overlap": True},
                        training={"global_batch_size": 8, "micro_batch_size": 1, "seq_length": 2048})
    system = build_system(sc.cluster, sc.fabric)
    cm = ComputeModel()
    model = CostModel(sc, system, cm)
    sh = model._shapes(8, 1)
    dev, prec, n = get_device("H100-SXM"), sc.training.precision, 8
    hid = sh.hidden_bytes(full=True)
    ag = model.tp_ns("h100", 8, "allgather", hid)
    rs = (model.tp_ns("h100", 8, "reducescatter", hid * 7 // 8), model.tp_ns("h100", 8, "reducescatter", hid // 8))

    def block(kernels, first, closing, bwd):
        # by hand: head = kernels before the first GEMM; its 7 local row chunks; its last chunk + what lies
        # between + the closing GEMM's first chunk; the closing GEMM's other 7 chunks + what follows
        g1, g2 = _chunk(kernels[first], n), _chunk(kernels[closing], n)
        head = _ns(cm, kernels[:first], dev, prec)
        local = _ns(cm, [g1] * (n - 1), dev, prec)
        mid = _ns(cm, [g1] + kernels[first + 1:closing] + [g2], dev, prec)
        rest = _ns(cm, [g2] * (n - 1) + kernels[closing + 1:], dev, prec)
        start = max(head + local, (0.0 if bwd else head) + ag)
        return start + mid + max(rest, rs[0]) + rs[1]

    attn, mlp = sh.attn_all(), sh.mlp()   # attn: ln, qkv, core, out, dropout; mlp: ln, fc1, act, fc2, dropout
    fwd = block(attn, 1, 3, False) + block(mlp, 1, 3, False)
    mlp_b = bwd_kernels(mlp, sh.gemm_eb)  # dropout, fc2 dgrad, wgrad, act, fc1 dgrad, wgrad, ln
    attn_b = bwd_kernels(attn, sh.gemm_eb)
    gi = [i for i, k in enumerate(mlp_b) if k[0] == "gemm"]
    di = [i for i in gi if mlp_b[i][3][3] == "dgrad"]
    ai = [i for i, k in enumerate(attn_b) if k[0] == "gemm"]
    adi = [i for i in ai if attn_b[i][3][3] == "dgrad"]
    bwd = block(mlp_b, gi[0], di[-1], True) + block(attn_b, ai[0], adi[-1], True)

    cost = model.stage_cost("h100", 8, 1, "none")
    assert cost.layer_fwd_ns == pytest.approx(fwd, rel=1e-9)
    assert cost.layer_bwd_ns == pytest.approx(bwd, rel=1e-9)
    # and it is what overlap buys: below the blocking estimate, above the compute alone
    plain = CostModel(small_scenario(groups=[{"name": "h100", "node_type": "dgx-h100", "num_nodes": 1}],
                                     parallelism={"tp": 8, "pp": 1, "sequence_parallel": True},
                                     training={"global_batch_size": 8, "micro_batch_size": 1,
                                               "seq_length": 2048}), system, cm).stage_cost("h100", 8, 1, "none")
    assert cost.layer_fwd_ns < plain.layer_fwd_ns
    assert cost.layer_fwd_ns > _ns(cm, attn, dev, prec) + _ns(cm, mlp, dev, prec)


def test_planner_layer_estimate_equals_the_simulated_layer(ub_tp8_result):
    # One code path: the planner's per-layer estimate is the span the simulator gives the same layer (one
    # node, tp 8 + SP + tp_comm_overlap, one micro-batch, measured H100 kernels as run uses them)
    from heterosim import api

    res = ub_tp8_result
    s = res.prepared.scenario
    lane = res.sim.lanes[0]
    ops = res.prepared.ir.programs[lane.program].ops

    def span(phase, first, last):
        """From the layer's first op to the reduce-scatter that follows its last compute piece."""
        blk = [o.id for o in ops if o.phase == phase and o.layer == 0 and o.microbatch == 0
               and (o.name.startswith((first, last)) or o.name.startswith("tp_"))]
        i = next(k for k, x in enumerate(blk) if ops[x].name.startswith(first))
        j = max(k for k, x in enumerate(blk) if ops[x].name.startswith(last))
        assert ops[blk[j + 1]].name == "tp_reducescatter_ub"
        ids = blk[i:j + 2]
        return max(lane.end_ns[x] for x in ids) - min(lane.start_ns[x] for x in ids)

    cost = CostModel(s, build_system(s.cluster, s.fabric), api.compute_model(s)).stage_cost("g", 8, 1, "none")
    assert cost.layer_fwd_ns == span("fwd", "attn_head", "mlp_gemm_chunks_rs")
    assert cost.layer_bwd_ns == span("bwd", "mlp_bwd_head", "attn_bwd_gemm_chunks_rs")
