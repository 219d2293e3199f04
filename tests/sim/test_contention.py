"""Compute slowed by communication on the same GPU (simulation.compute_contention, heterosim/sim/contention.py).

Expected values by hand: a compute-bound op of nominal d under k of S SMs held for its whole run takes
d / ((S - k) / S); its memory-bound part keeps its time; a change of k mid-op keeps the work done so far."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from git_baseline import file_before

from heterosim import api
from heterosim.comm.schedule import Transfer
from heterosim.errors import SimulationError
from heterosim.sim.contention import MODELS, SmShare
from heterosim.sim.coordinator import Coordinator
from heterosim.workload.ir import IR, Op, Program

ROOT = Path(__file__).parents[2]
MS = 1_000_000
S = 132  # H100-SXM sm_count (heterosim/hardware/devices.yaml)


class _Sched:
    def __init__(self, transfers, channels):
        self.transfers, self.channels = transfers, channels


def plan_33(op, ranks, size, system, **kw):
    """Two ranks, one ring step each way, on 33 channels (33 parallel transfers of size/33 bytes)."""
    a, b = ranks
    per = size // 33
    xs = []
    for c in range(33):
        xs.append(Transfer(len(xs), a, b, per, "net", f"nic{a}", f"nic{b}", channel=c))
        xs.append(Transfer(len(xs), b, a, per, "net", f"nic{b}", f"nic{a}", channel=c))
    return _Sched(xs, 33)


class KernelTimes:
    """op time = flops in ns; kernels: (class, ns, 0, None) timed as their ns."""

    def op_time_ns(self, op, device, precision):
        return int(op.flops)

    def kernel_time_ns(self, cls, flops, nbytes, mnk, device, precision):
        return float(flops)


def two_rank_ir(compute_ns: int, lag_ns: int, coll_bytes: int, overlap: bool = True, kernels=()) -> IR:
    """Rank 0: compute op A (``compute_ns``) and, beside it on its dp stream, an all-reduce with rank 1 (after A
    unless ``overlap``). Rank 1 posts the all-reduce after ``lag_ns`` of compute: the collective moves from
    then on, for ``coll_bytes`` ns (1 byte/ns backend)."""
    progs = []
    for r in range(2):
        ops = []
        t = compute_ns if r == 0 else lag_ns
        ops.append(Op(id=0, kind="compute", name="A", op_class="gemm", flops=t,
                      kernels=kernels if r == 0 else ()))
        deps = (0,) if (r == 1 or not overlap) else ()
        ops.append(Op(id=1, kind="comm", name="ar", stream="dp", collective="allreduce", group="dp",
                      size_bytes=coll_bytes, tag="ar", comm_kind="dp", deps=deps))
        progs.append(Program(r, ops, stage=0))
    return IR(world_size=2, programs=progs, rank_program=[0, 1], groups={"tp": [(0,), (1,)], "dp": [(0, 1)]})


def run(fakes, ir, contention, compute=None):
    system = fakes["system"](ir.world_size, 1)
    coord = Coordinator(ir, system, compute or fakes["compute"](), fakes["backend"](), fakes["backend"](),
                        plan_collective=plan_33, intra_time_ns=fakes["intra_time"], contention=contention)
    return coord.run()


def op_a(sim):
    lane = sim.lanes[0]
    return lane.end_ns[0] - lane.start_ns[0]


def test_whole_op_under_33_of_132_sms(fakes):
    # the collective moves from t=0 (rank 1 posts at once) for 10 ms: A runs wholly beside it
    sim = run(fakes, two_rank_ir(MS, 0, 33 * 10 * MS), "sm_share")
    assert op_a(sim) == pytest.approx(MS / (99 / 132), abs=1)  # 1.3333 ms
    assert op_a(sim) == 1_333_333


def test_half_op_under_33_of_132_sms(fakes):
    # rank 1 posts after 0.5 ms: A's first half alone, its second beside the collective
    sim = run(fakes, two_rank_ir(MS, MS // 2, 33 * 10 * MS), "sm_share")
    assert op_a(sim) == pytest.approx(0.5 * MS + 0.5 * MS / (99 / 132), abs=1)  # 1.16667 ms


def test_collective_ending_mid_op(fakes):
    # the collective moves 0 .. 0.3 ms (33 transfers of 0.3 ms each, in parallel): 0.3 ms at 3/4 rate does
    # 0.225 ms of A's work, the remaining 0.775 ms alone: 1.075 ms
    sim = run(fakes, two_rank_ir(MS, 0, 33 * 300_000), "sm_share")
    assert op_a(sim) == pytest.approx(300_000 + (MS - 300_000 * 99 / 132), abs=1)


def test_no_overlap_unchanged(fakes):
    sim = run(fakes, two_rank_ir(MS, 0, 33 * 10 * MS, overlap=False), "sm_share")
    assert op_a(sim) == MS


def test_none_is_free(fakes):
    sim = run(fakes, two_rank_ir(MS, 0, 33 * 10 * MS), "none")
    assert op_a(sim) == MS
    assert sim.contention is None


def test_memory_bound_part_keeps_its_rate(fakes):
    # 0.6 ms of GEMM + 0.4 ms of elementwise kernels, wholly beside 33 held SMs: 0.4 + 0.6 * 132/99 = 1.2 ms
    kernels = (("gemm", 600_000, 0, None), ("elementwise", 400_000, 0, None))
    sim = run(fakes, two_rank_ir(MS, 0, 33 * 10 * MS, kernels=kernels), "sm_share", KernelTimes())
    assert op_a(sim) == pytest.approx(400_000 + 600_000 * 132 / 99, abs=1)


def test_sm_share_rate_and_cap():
    m = SmShare()
    assert m.rate(0, S) == (1, 1)
    assert m.rate(33, S) == (99, 132)
    assert m.rate(500, S) == (1, 132)  # capped: one SM left for compute
    assert m.rate(10, 0) == (1, 1)  # a device without an SM count
    assert set(MODELS) == {"none", "sm_share"}


def test_unknown_model_is_an_error(fakes):
    with pytest.raises(SimulationError, match="compute_contention"):
        run(fakes, two_rank_ir(MS, 0, 1000), "bogus")


def test_bad_field_value_is_a_one_line_error(tmp_path):
    sc = ROOT / "scenarios" / "quickstart.yaml"
    with pytest.raises(Exception) as e:
        api.load(str(sc), ["simulation.compute_contention=sm_shares"])
    assert "compute_contention" in str(e.value)


# ---------------------------------------------------------------- `none` = the code before contention existed


def _old_coordinator():
    """The coordinator module as it was before heterosim/sim/contention.py, from git."""
    src = file_before("heterosim/sim/contention.py", "heterosim/sim/coordinator.py")
    assert "contention" not in src
    spec = importlib.util.spec_from_loader("heterosim.sim._coordinator_before", loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    exec(compile(src, "coordinator_before.py", "exec"), mod.__dict__)
    return mod


@pytest.mark.parametrize("path", ["scenarios/quickstart.yaml", "scenarios/suites/h-suite/h0-llama1-65b.yaml"])
def test_none_reproduces_the_code_before_to_the_ns(path, monkeypatch):
    old = _old_coordinator()

    class Before(old.Coordinator):
        def __init__(self, *a, contention=None, **kw):
            super().__init__(*a, **kw)

    sc = api.load(str(ROOT / path), ["simulation.compute_contention=none"])
    prep = api.prepare(sc)
    now = api.simulate(prep, record_messages=False)
    import heterosim.sim.coordinator as cmod

    monkeypatch.setattr(cmod, "Coordinator", Before)
    before = api.simulate(prep, record_messages=False)
    assert now.sim.iteration_time_ns == before.sim.iteration_time_ns
    for a, b in zip(now.sim.lanes, before.sim.lanes):
        assert a.start_ns == b.start_ns and a.end_ns == b.end_ns
    assert now.sim.events == before.sim.events


@pytest.mark.parametrize("path", ["scenarios/quickstart.yaml"])
def test_sm_share_slows_and_keeps_symmetry_exact(path):
    """Contention is per lane: the symmetry reduction stays exact (the full run gives the same ns)."""
    sc = api.load(str(ROOT / path), ["simulation.compute_contention=sm_share"])
    prep = api.prepare(sc)
    red = api.simulate(prep, record_messages=False, symmetry=True)
    full = api.simulate(prep, record_messages=False, symmetry=False)
    assert red.sim.iteration_time_ns == full.sim.iteration_time_ns
    none = api.simulate(api.prepare(api.load(str(ROOT / path), ["simulation.compute_contention=none"])),
                        record_messages=False)
    assert red.sim.iteration_time_ns > none.sim.iteration_time_ns
    assert red.sim.contention["compute_stretch_ns_max"] > 0
