"""Every batched rate vector is max-min fair: feasible on every link, and every flow saturated somewhere (a full
link on which no flow is faster) — the definition, checked directly — and equal to the plain progressive filling
of ``netbackend.flow.max_min_rates`` (the flow backend's reference), on random flow sets."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heterosim.batch import engine
from netbackend.flow import max_min_rates

REL = 1e-9
"""Relative slack for float sums (the flow backend's own "saturated" tolerance, netbackend/flow.py _REL)."""


@st.composite
def problems(draw):
    """B rows of the same flows on the same links (P links per flow, padded with the dummy) and per-row capacities."""
    n_links = draw(st.integers(1, 8))
    n_flows = draw(st.integers(1, 12))
    p = draw(st.integers(1, 4))
    links = np.full((n_flows, p), n_links, np.int32)
    for f in range(n_flows):
        k = draw(st.integers(1, min(p, n_links)))
        links[f, :k] = draw(st.lists(st.integers(0, n_links - 1), min_size=k, max_size=k, unique=True))
    b = draw(st.integers(1, 3))
    caps = np.array([[draw(st.sampled_from([12.5, 25.0, 50.0, 6.25, 3.0, 100.0])) for _ in range(n_links)]
                     for _ in range(b)])
    active = np.array([[draw(st.booleans()) or f == 0 for f in range(n_flows)] for _ in range(b)])
    return links, caps, active


def _rates(ops, links, caps, active):
    b, n_flows = active.shape
    n_links = caps.shape[1]
    cap = np.concatenate([caps, np.full((b, 1), np.inf)], axis=1)
    fs_f = np.where(active, np.arange(n_flows)[None, :], -1).astype(np.int32)
    xp = ops.xp
    z = xp.zeros((b, n_flows))
    paths = xp.asarray(np.broadcast_to(links, (b, *links.shape)).copy())
    out = engine._refill(ops, {"path": xp.arange(n_flows)}, {"cap": xp.asarray(cap), "path_links": paths},
                         xp.asarray(fs_f), z + 1e6, z, z, xp.full((b, n_flows), np.inf), xp.ones(b, bool), xp.zeros(b))
    return np.asarray(out[1]), cap[:, :n_links]


def _check_fair(rates, links, cap, active, n_links):
    for row in range(rates.shape[0]):
        on = np.nonzero(active[row])[0]
        load = np.zeros(n_links)
        for f in on:
            for l in links[f]:
                if l < n_links:
                    load[l] += rates[row, f]
        assert (load <= cap[row] * (1 + REL)).all(), (load, cap[row])  # feasible
        for f in on:
            assert rates[row, f] > 0
            ok = False
            for l in links[f]:
                if l >= n_links:
                    continue
                full = load[l] >= cap[row, l] * (1 - REL)
                fastest = all(rates[row, g] <= rates[row, f] * (1 + REL) for g in on if l in links[g])
                ok = ok or (full and fastest)
            assert ok, f"flow {f} has no bottleneck"
        ref = max_min_rates({int(f): tuple(int(l) for l in links[f] if l < n_links) for f in on},
                            list(cap[row]))
        for f in on:
            assert rates[row, f] == pytest.approx(ref[int(f)], rel=REL)


@settings(max_examples=150, deadline=None)
@given(problems())
def test_numpy_rates_are_max_min_fair(prob):
    links, caps, active = prob
    rates, cap = _rates(engine._Ops(np), links, caps, active)
    _check_fair(rates, links, cap, active, caps.shape[1])


def test_jax_rates_are_max_min_fair_and_equal_numpy():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(7)
    n_links, n_flows, p, b = 6, 10, 3, 4
    links = rng.integers(0, n_links + 1, (n_flows, p)).astype(np.int32)
    links[:, 0] = rng.integers(0, n_links, n_flows)
    caps = rng.choice([3.0, 12.5, 25.0, 50.0], (b, n_links))
    active = rng.random((b, n_flows)) < 0.8
    active[:, 0] = True
    ops = engine._Ops(jnp, jax.lax)
    rj, cap = _rates(ops, links, caps, active)
    rn, _ = _rates(engine._Ops(np), links, caps, active)
    assert rj.tolist() == rn.tolist()
    _check_fair(rj, links, cap, active, n_links)
