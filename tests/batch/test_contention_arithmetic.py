"""The batch engine's contention arithmetic (``heterosim/batch/engine.py`` ``_wall``, ``_work``, ``_rate``, vectorized
int64) against the coordinator's (``heterosim/sim/contention.py``: Python integers, the reference), on random and
edge-case inputs, including the round-half cases."""
from __future__ import annotations

import numpy as np

from heterosim.batch.engine import _rate, _wall, _work
from heterosim.sim.contention import ContentionTracker, SmShare


def _cases(n: int = 4000):
    rng = np.random.default_rng(43)
    d = rng.integers(0, 50_000_000, n)
    d[:50] = rng.integers(0, 8, 50)  # (tiny ops: rounding dominates)
    dc = (d * rng.random(n)).astype(np.int64)
    dc[::7] = d[::7]  # (all compute-bound)
    dc[::11] = 0  # (memory-bound: never slowed)
    w = (d * rng.random(n)).astype(np.int64)
    sm = rng.choice([0, 1, 108, 132, 144], n)
    k = rng.integers(0, 200, n)
    e = rng.integers(0, 80_000_000, n)
    return d, dc, w, sm, k, e


def test_rate_matches_sm_share():
    d, dc, w, sm, k, e = _cases()
    num, den = _rate(np, k, sm)
    want = [SmShare().rate(int(a), int(b)) for a, b in zip(k, sm)]
    assert list(zip(num.tolist(), den.tolist())) == want


def test_wall_and_work_match_the_coordinator():
    d, dc, w, sm, k, e = _cases()
    num, den = _rate(np, k, sm)
    got_wall = _wall(np, w, d, dc, num, den)
    got_work = _work(np, e, d, dc, num, den)
    want_wall = [ContentionTracker._wall(int(a), int(b), int(c), int(x), int(y))
                 for a, b, c, x, y in zip(w, d, dc, num, den)]
    want_work = [ContentionTracker._work(int(a), int(b), int(c), int(x), int(y))
                 for a, b, c, x, y in zip(e, d, dc, num, den)]
    assert got_wall.tolist() == want_wall
    assert got_work.tolist() == want_work
    assert (np.asarray(want_wall) != w).sum() > 1000  # (most cases are slowed: the comparison tests the formula)
