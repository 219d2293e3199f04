"""Background traffic under the real coordinator (what api.simulate does when network.background is set)."""
from __future__ import annotations

import pytest

from heterosim import api
from heterosim.config.loader import scenario_from_dict
from heterosim.sim.coordinator import Coordinator
from heterosim.sim.intra import effective_intra
from netbackend.background import BackgroundConfig, with_background
from netbackend.registry import create_backend

from .conftest import TINY


def _iteration(prep, background: BackgroundConfig | None, backend: str = "flow"):
    sc = prep.scenario
    cfg = sc.network.model_copy(update={"backend": backend})
    net = with_background(create_backend(backend, prep.system.net, cfg, sc.seed), background, seed=sc.seed)
    intra = create_backend("flow", effective_intra(prep.system.intra), api.intra_config(sc), sc.seed)
    try:
        return Coordinator(prep.ir, prep.system, prep.compute, net, intra, precision=sc.training.precision,
                           comm_options=sc.comm.model_dump()).run()
    finally:
        net.close()
        intra.close()


def test_background_load_slows_the_iteration_and_is_reported():
    prep = api.prepare(scenario_from_dict(TINY))
    base = _iteration(prep, None)
    loaded = _iteration(prep, BackgroundConfig(cdf="websearch", load=0.6))
    assert all(m.end_ns >= 0 for m in loaded.messages)
    assert loaded.iteration_time_ns > base.iteration_time_ns
    bg = loaded.net_stats.extra["background"]
    assert bg["flows_completed"] > 0
    assert loaded.net_stats.messages == sum(1 for m in loaded.messages if m.link == "net")
    assert "background" not in (base.net_stats.extra or {})


@pytest.mark.ns3
def test_background_on_ns3_under_the_coordinator():
    pytest.importorskip("cppyy")
    prep = api.prepare(scenario_from_dict(TINY))
    sim = _iteration(prep, BackgroundConfig(cdf="fb-hadoop", load=0.3, end_ns=2_000_000), backend="ns3")
    assert all(m.end_ns >= 0 for m in sim.messages)
    assert sim.net_stats.extra["background"]["flows_completed"] > 0
