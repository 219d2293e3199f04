"""Coordinator semantics on hand-built IRs (fake planners/backends isolate it)."""
from __future__ import annotations

import pytest

from heterosim.errors import SimulationError
from heterosim.results.breakdown import breakdown
from heterosim.sim.coordinator import Coordinator
from heterosim.workload.ir import IR, Op, Program
from heterosim.workload.schedules import one_f_one_b


def pipeline_ir(p: int, m: int, tf: int, tb: int, msg_bytes: int = 0) -> IR:
    """One rank per stage; fwd/bwd compute of fixed time; send/recv between stages."""
    programs = []
    for s in range(p):
        ops: list[Op] = []

        def add(**kw):
            op = Op(id=len(ops), **kw)
            ops.append(op)
            return op.id

        for phase, mb, _ in one_f_one_b(p, m, s):
            deps = []
            if phase == "fwd" and s > 0:
                deps.append(add(kind="comm", name=f"recv.f{mb}", stream="pp_recv", collective="recv", peer_offset=-1,
                                size_bytes=msg_bytes, tag=f"f{mb}:{s - 1}", comm_kind="pp"))
            if phase == "bwd" and s < p - 1:
                deps.append(add(kind="comm", name=f"recv.b{mb}", stream="pp_recv", collective="recv", peer_offset=+1,
                                size_bytes=msg_bytes, tag=f"b{mb}:{s + 1}", comm_kind="pp"))
            c = add(kind="compute", name=f"{phase}{mb}", phase=phase, microbatch=mb, op_class="layer",
                    flops=tf if phase == "fwd" else tb, deps=tuple(deps))
            if phase == "fwd" and s < p - 1:
                add(kind="comm", name=f"send.f{mb}", stream="pp_send", collective="send", peer_offset=+1,
                    size_bytes=msg_bytes, tag=f"f{mb}:{s}", comm_kind="pp", deps=(c,))
            if phase == "bwd" and s > 0:
                add(kind="comm", name=f"send.b{mb}", stream="pp_send", collective="send", peer_offset=-1,
                    size_bytes=msg_bytes, tag=f"b{mb}:{s}", comm_kind="pp", deps=(c,))
        programs.append(Program(s, ops, stage=s))
    groups = {"tp": [(r,) for r in range(p)], "pp": [tuple(range(p))]}
    return IR(world_size=p, programs=programs, rank_program=list(range(p)), groups=groups)


def make(fakes, ir, gpus_per_node=1, **kw):
    system = fakes["system"](ir.world_size, gpus_per_node, kw.pop("slowdown", None))
    return Coordinator(ir, system, fakes["compute"](), fakes["backend"](), fakes["backend"](),
                       plan_collective=fakes["plan"], intra_time_ns=fakes["intra_time"], **kw)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 8)])
def test_1f1b_bubble_is_textbook(fakes, p, m):
    tf, tb = 1000, 2000
    sim = make(fakes, pipeline_ir(p, m, tf, tb)).run()
    assert sim.iteration_time_ns == (m + p - 1) * (tf + tb)
    overall, per_lane = breakdown(sim, None)
    assert overall["bubble"] == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)
    for b in per_lane:
        assert sum(b.values()) == sim.iteration_time_ns


def test_pipeline_transfer_time_is_exposed_pp(fakes):
    p, m, tf, tb, msg = 2, 4, 1000, 2000, 300
    sim = make(fakes, pipeline_ir(p, m, tf, tb, msg)).run()
    overall, _ = breakdown(sim, None)
    assert overall["exposed_pp"] > 0
    assert sim.iteration_time_ns > (m + p - 1) * (tf + tb)


def dp_ir(n_bwd: int, t_bwd: int, bucket_bytes: int, overlap: bool) -> IR:
    """Two data-parallel ranks: backward ops, one gradient all-reduce per bwd op, then optimizer."""
    ops: list[Op] = []
    bwd_ids, ar_ids = [], []
    for i in range(n_bwd):
        ops.append(Op(id=len(ops), kind="compute", name=f"bwd{i}", phase="bwd", op_class="layer", flops=t_bwd,
                      deps=(len(ops) - 1,) if bwd_ids else ()))
        bwd_ids.append(ops[-1].id)
    for i in range(n_bwd):
        dep = bwd_ids[i] if overlap else bwd_ids[-1]
        ops.append(Op(id=len(ops), kind="comm", name=f"ar{i}", phase="bwd", stream="dp", collective="allreduce",
                      group="dp", size_bytes=bucket_bytes, tag=f"dp:{i}", comm_kind="dp", deps=(dep,)))
        ar_ids.append(ops[-1].id)
    ops.append(Op(id=len(ops), kind="compute", name="optimizer", phase="opt", op_class="optimizer", flops=10,
                  deps=tuple(ar_ids)))
    return IR(world_size=2, programs=[Program(0, ops)], rank_program=[0, 0],
              groups={"tp": [(0,), (1,)], "dp": [(0, 1)]})


def test_dp_allreduce_overlaps_backward_when_configured(fakes):
    t_overlap = make(fakes, dp_ir(8, 1000, 500, overlap=True)).run()
    t_serial = make(fakes, dp_ir(8, 1000, 500, overlap=False)).run()
    # overlapped: only the last bucket is exposed; serial: all eight are
    assert t_overlap.iteration_time_ns == 8 * 1000 + 500 + 10
    assert t_serial.iteration_time_ns == 8 * 1000 + 8 * 500 + 10
    b_overlap, _ = breakdown(t_overlap, None)
    b_serial, _ = breakdown(t_serial, None)
    assert b_overlap["exposed_dp"] < b_serial["exposed_dp"]


def test_slowdown_of_one_rank_delays_collective(fakes):
    fast = make(fakes, dp_ir(4, 1000, 100, overlap=True)).run()
    slow = make(fakes, dp_ir(4, 1000, 100, overlap=True), slowdown={1: 1.5}).run()
    assert slow.iteration_time_ns > fast.iteration_time_ns
    _, per_lane = breakdown(slow, None)
    assert per_lane[0]["idle"] > 0  # the fast rank waits for the slow one


def test_deterministic(fakes):
    a = make(fakes, pipeline_ir(4, 8, 1000, 2000, 100)).run()
    b = make(fakes, pipeline_ir(4, 8, 1000, 2000, 100)).run()
    assert a.iteration_time_ns == b.iteration_time_ns
    assert [l.end_ns for l in a.lanes] == [l.end_ns for l in b.lanes]


def test_unmatched_recv_is_reported(fakes):
    make(fakes, pipeline_ir(2, 2, 10, 20)).run()  # control: the intact pipeline finishes
    ir = pipeline_ir(2, 2, 10, 20)
    # drop stage 0's forward send of micro-batch 1: stage 1's recv.f1 can never complete
    prog = ir.programs[0]
    dropped = next(op for op in prog.ops if op.name == "send.f1")
    assert not any(dropped.id in op.deps for op in prog.ops)  # a send is a leaf: nothing else depends on it
    new_id = {op.id: i for i, op in enumerate(op for op in prog.ops if op is not dropped)}
    prog.ops = [op for op in prog.ops if op is not dropped]
    for op in prog.ops:  # renumber ids and deps together, so the DAG stays what it was
        op.id, op.deps = new_id[op.id], tuple(new_id[d] for d in op.deps)
    assert all(d < op.id for op in prog.ops for d in op.deps)  # no self- or forward dependencies
    # 1F1B with p=2, m=2: stage 1 runs f0 b0 f1 b1 and blocks at recv.f1, so it never sends b1; stage 0 runs
    # f0 f1 b0 and then waits at recv.b1 forever. Both lanes stuck, the first one named.
    with pytest.raises(SimulationError, match=r"2 lane\(s\) stuck; ranks \[0\] wait at op 'recv\.b1'"):
        make(fakes, ir).run()


def test_dependency_cycle_is_reported(fakes):
    ops = [Op(id=0, kind="compute", name="a", flops=1, deps=(1,)), Op(id=1, kind="compute", name="b", flops=1, deps=(0,))]
    ir = IR(world_size=1, programs=[Program(0, ops)], rank_program=[0], groups={"tp": [(0,)]})
    with pytest.raises(SimulationError, match="cannot finish"):
        make(fakes, ir).run()
