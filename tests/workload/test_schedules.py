"""Pipeline schedules: textbook 1F1B order and interleaved invariants."""
import pytest

from heterosim.errors import PlanError
from heterosim.workload.schedules import gpipe, interleaved, one_f_one_b, peak_in_flight


def _fmt(steps):
    return " ".join(f"{'F' if p == 'fwd' else 'B'}{m}" for p, m, _ in steps)


def test_1f1b_textbook_p4_m8():
    # Narayanan et al. 2021, Fig. 4 (top): warm-up of p-rank-1 forwards, then one-forward-one-backward
    assert _fmt(one_f_one_b(4, 8, 0)) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    assert _fmt(one_f_one_b(4, 8, 1)) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7"
    assert _fmt(one_f_one_b(4, 8, 2)) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7"
    assert _fmt(one_f_one_b(4, 8, 3)) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"


def test_1f1b_fewer_microbatches_than_stages():
    assert _fmt(one_f_one_b(4, 2, 0)) == "F0 F1 B0 B1"


def test_gpipe_and_in_flight():
    assert _fmt(gpipe(2, 3, 1)) == "F0 F1 F2 B0 B1 B2"
    assert peak_in_flight(gpipe(4, 8, 0)) == 8
    assert [peak_in_flight(one_f_one_b(4, 8, r)) for r in range(4)] == [4, 3, 2, 1]


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 8, 2), (4, 4, 3), (3, 9, 4), (4, 16, 2)])
def test_interleaved_properties(pp, m, v):
    for rank in range(pp):
        steps = interleaved(pp, m, rank, v)
        fwd = [(mb, c) for p, mb, c in steps if p == "fwd"]
        bwd = [(mb, c) for p, mb, c in steps if p == "bwd"]
        every = sorted((mb, c) for mb in range(m) for c in range(v))
        assert sorted(fwd) == every and sorted(bwd) == every
        pos = {(p, mb, c): i for i, (p, mb, c) in enumerate(steps)}
        assert all(pos[("bwd", mb, c)] > pos[("fwd", mb, c)] for mb, c in every)
        # chunks go forward in order for one micro-batch, backward in reverse order
        for mb in range(m):
            assert [pos[("fwd", mb, c)] for c in range(v)] == sorted(pos[("fwd", mb, c)] for c in range(v))
            assert [pos[("bwd", mb, c)] for c in reversed(range(v))] == sorted(pos[("bwd", mb, c)] for c in range(v))


def test_interleaved_megatron_warmup_and_memory_factor():
    pp, m, v = 4, 8, 2
    steps = interleaved(pp, m, 0, v)
    # Megatron: warm-up = (pp - rank - 1) * 2 + (v - 1) * pp forwards before the first backward
    first_b = next(i for i, s in enumerate(steps) if s[0] == "bwd")
    assert first_b == (pp - 1) * 2 + (v - 1) * pp + 1
    # first micro-batch group: chunk 0 for micro-batches 0..pp-1, then chunk 1
    assert steps[:8] == [("fwd", i, 0) for i in range(4)] + [("fwd", i, 1) for i in range(4)]
    # in-flight activations in units of a full stage (v chunks): pp * (1 + (pp-1)/(pp*v)) (Korthikanti 2022)
    assert peak_in_flight(steps) / v == pytest.approx(pp * (1 + (pp - 1) / (pp * v)))


def test_interleaved_needs_multiple_of_pp():
    with pytest.raises(PlanError, match=r"parallelism.schedule = 'interleaved'.*multiple of pp \(4\)"):
        interleaved(4, 6, 0, 2)
