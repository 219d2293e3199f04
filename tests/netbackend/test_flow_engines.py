"""The compiled rate engine (netbackend/flowcore) against the Python one (flow._PyRates), its reference.

The compiled engine does the Python engine's operations in the same order, so the two must agree to the
bit: every completion, every rate after every step, every link's bytes and the work counters. Random
fabrics with NIC caps, symmetric groups, hashed groups and queue pairs, under the default idle-path rules,
with rent charged on every refill (paths dropped mid-run) and with one idle path kept (every path dropped
as the next registers).
"""
from __future__ import annotations

import random
import shutil
import sysconfig
from pathlib import Path

import pytest

import netbackend.flow as flow_mod
from conformance import leaf_spine
from netbackend import Message
from netbackend import flowcore
from netbackend.config import NetworkConfig
from hscommon.errors import NetworkError, UserError
from netbackend.flow import FlowBackend

_CAN_BUILD = bool(shutil.which("g++")) and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
needs_compiled = pytest.mark.skipif(not _CAN_BUILD, reason="no g++ or no Python headers: the Python engine runs")


def _run(seed: int, engine: str, hashed_alike: bool, n: int = 80):
    rng = random.Random(seed)
    topo = leaf_spine(leaves=3, spines=2, hosts_per_leaf=4, rate_gbps=100.0,
                      uplink_gbps=rng.choice([50.0, 100.0, 200.0]))
    for h in rng.sample(topo.hosts, 3):
        topo.host_rate_gbps[h] = rng.choice([40.0, 80.0])  # NIC caps below the access link: virtual links
    b = FlowBackend(topo, NetworkConfig(), seed=seed, engine=engine)
    assert b.engine == engine
    hosts = topo.hosts
    for mid in range(1, n + 1):
        start = rng.choice([0, rng.randint(0, 400_000)])
        size = rng.randint(2_000, 1_500_000)
        s, d = rng.sample(hosts, 2)
        if rng.random() < 0.4:
            k = rng.randint(1, 3)
            si, di = hosts.index(s), hosts.index(d)
            imgs = tuple((hosts[(si // 4) * 4 + (si + j) % 4], hosts[(di // 4) * 4 + (di + j) % 4])
                         for j in range(1, k + 1))
            msg = Message(mid, s, d, size, start, flow_key=mid, connection=rng.choice([-1, 0]))
            if not b.send_group(msg, imgs, hashed_alike=hashed_alike):
                b.send(msg)
        else:
            b.send(Message(mid, s, d, size, start, flow_key=mid, connection=rng.choice([-1, 0, 1])))
    steps = []
    while b.pending():
        steps.append((tuple(b.advance()), sorted(b.rates_gbps().items())))
    st = b.stats()
    assert st.extra["rate_engine"] == engine  # network.json says which ran
    c = b.counters
    return steps, st.fct_ns, st.link_bytes, (c.events, c.refills, c.refilled_flows)


@needs_compiled
@pytest.mark.parametrize("rules", ["default", "rent", "one_idle_path"])
@pytest.mark.parametrize("seed", range(6))
def test_compiled_engine_gives_the_python_engines_results_to_the_bit(seed, rules, monkeypatch):
    if rules == "rent":  # every path charges on every refill, idle paths go at 0.2 visits a link
        monkeypatch.setattr(flow_mod, "_RENT_CLASSES", 0)
        monkeypatch.setattr(flow_mod, "_RENT_SAMPLE", 1)
        monkeypatch.setattr(flow_mod, "_RENT_PER_LINK", 0.2)
    elif rules == "one_idle_path":
        monkeypatch.setattr(flow_mod, "_IDLE_PATHS", 1)
    for hashed_alike in (False, True):
        ref = _run(seed, "python", hashed_alike)
        got = _run(seed, "compiled", hashed_alike)
        assert len(ref[0]) > 20 and ref[3][1] > 30  # many steps and refills: a real comparison
        assert got[3] == ref[3]  # same events, refills and refilled flows: the same fillings
        assert got[0] == ref[0]
        assert got[1] == ref[1] and got[2] == ref[2]


@needs_compiled
def test_a_training_run_is_identical_with_either_engine(monkeypatch):
    """A whole iteration (quickstart, flow level): the same summary with either engine, to the bit."""
    from heterosim import api

    root = Path(__file__).resolve().parents[2]
    out = {}
    for engine in ("python", "compiled"):
        monkeypatch.setenv("HETEROSIM_FLOW_ENGINE", engine)
        res = api.simulate(api.prepare(api.load(root / "scenarios/quickstart.yaml")), backend="flow",
                           record_messages=False)
        out[engine] = (res.summary["iteration_time_s"], res.summary["breakdown"])
    assert out["compiled"] == out["python"]


@needs_compiled
def test_the_compiled_engine_is_what_auto_picks_where_it_builds():
    assert flowcore.load(required=True) is not None
    b = FlowBackend(leaf_spine(leaves=2, spines=1, hosts_per_leaf=2, rate_gbps=100.0, uplink_gbps=100.0))
    assert b.engine == "compiled"


def test_an_unknown_engine_is_a_one_line_error_naming_it(monkeypatch):
    monkeypatch.setenv("HETEROSIM_FLOW_ENGINE", "fortran")
    with pytest.raises(NetworkError, match="fortran"):
        FlowBackend(leaf_spine(leaves=2, spines=1, hosts_per_leaf=2, rate_gbps=100.0, uplink_gbps=100.0))


def test_without_a_compiler_auto_runs_the_python_engine_and_compiled_is_a_one_line_error(monkeypatch, tmp_path):
    """A fresh cache and no compiler: ``auto`` falls back to the Python engine (same results), asking for the
    compiled one is a one-line error naming the setting, and nothing is left in the cache."""
    monkeypatch.setattr(flowcore, "_module", None)
    monkeypatch.setattr(flowcore, "why_not", None)
    monkeypatch.setenv("HETEROSIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    topo = leaf_spine(leaves=2, spines=1, hosts_per_leaf=2, rate_gbps=100.0, uplink_gbps=100.0)
    assert FlowBackend(topo).engine == "python"
    assert "no C++ compiler" in flowcore.why_not
    monkeypatch.setenv("HETEROSIM_FLOW_ENGINE", "compiled")
    with pytest.raises(UserError, match="HETEROSIM_FLOW_ENGINE") as err:
        FlowBackend(topo)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "cache").exists()
