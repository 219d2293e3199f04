"""Random small plans: every compiled IR replays without deadlock and keeps the work invariant."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heterosim.workload.compiler import compile_workload
from heterosim.workload.verify import verify_ir

from wl_factory import gpt, scenario

LAYERS = 24


@st.composite
def plans(draw):
    tp = draw(st.sampled_from([1, 2]))
    pp = draw(st.sampled_from([1, 2, 3]))
    cp = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2]))
    schedule = draw(st.sampled_from(["1f1b", "gpipe", "interleaved"] if pp > 1 else ["1f1b", "gpipe"]))
    v = draw(st.sampled_from([2, 4])) if schedule == "interleaved" else 1
    m = pp * draw(st.integers(1, 3)) if schedule == "interleaved" else draw(st.integers(1, 6))
    mbs = draw(st.sampled_from([1, 2]))
    par = dict(tp=tp, pp=pp, cp=cp, schedule=schedule, virtual_stages=v,
               sequence_parallel=draw(st.booleans()), recompute=draw(st.sampled_from(["none", "selective", "full"])),
               zero_stage=draw(st.sampled_from([0, 1])), overlap_grad_reduce=draw(st.booleans()),
               tp_comm_overlap=draw(st.booleans()), grad_bucket_bytes=draw(st.sampled_from([200_000, 40_000_000])))
    return par, dp, m, mbs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_random_plans_replay(p):
    par, dp, m, mbs = p
    world = par["tp"] * par["pp"] * par["cp"] * dp
    sc = scenario(gpt(layers=LAYERS, hidden=128, heads=4, vocab=512), gbs=dp * m * mbs, mbs=mbs, seq=128, **par)
    ir = compile_workload(sc, world)
    verify_ir(ir)
    # the same work split differently: matmul + attention FLOPs without recompute do not depend on the plan
    ref = compile_workload(scenario(gpt(layers=LAYERS, hidden=128, heads=4, vocab=512), gbs=dp * m * mbs, mbs=mbs,
                                    seq=128, recompute=par["recompute"]), dp)
    gemm = lambda ir_: sum(k[1] for r in range(ir_.world_size) for op in ir_.ops_of(r) for k in op.kernels
                           if k[0] in ("gemm", "attention"))
    assert gemm(ir) == pytest.approx(gemm(ref), rel=1e-9)
