"""The batch engine against the flow backend: every variant's iteration time within 1e-6 relative of the flow
backend's run of the same scenario with the same change (``Variant.overrides`` through the normal path, every
lane and flow simulated: ``symmetry=False``); NumPy and JAX drivers identical to the nanosecond.

Expected values come from the flow backend (its compiled rate engine where it builds), never from the batch
engine. Cases: the quickstart, a 4 -> 1 incast (tests/batch/incast.yaml), a pipeline bubble (pp-bubble.yaml), and
a heterogeneous cluster (scenarios/stage-dp.yaml: A100 and GH200 stages with their own DP degrees, re-sharding over
NVLink and the network; run on JAX where it is installed, the NumPy driver taking ~10x longer on it), all under the
default compute contention (``sm_share``), and the quickstart without it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from heterosim import pipeline
from heterosim.batch import engine, variants
from heterosim.batch.decisions import flipped, outcomes
from heterosim.batch.variants import Variant
from heterosim.sim.program import export_program

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
REL_TOL = 1e-6
"""Issue 43's agreement target with the flow backend."""

SM_SHARE = ["simulation.compute_contention=sm_share"]
"""The default compute contention (heterosim/sim/contention.py), set where a test scenario turns it off."""
CASES = {
    "quickstart": (ROOT / "scenarios" / "quickstart.yaml", [], [
        Variant("straggler", stragglers=(("h100-1/gpu5", 1.25),)),
        Variant("nic link halved", degrade=(("h100-0/nic0", "leaf0", 0.5),)),
        Variant("hop latency", per_hop_latency_ns=3000),
        Variant("all three", stragglers=(("h100-0/gpu2", 1.1),), degrade=(("h100-1/nic3", "leaf1", 0.3),),
                per_hop_latency_ns=100),
        Variant("ECMP seed", seed=1),
        Variant("ECMP seed and straggler", seed=7, stragglers=(("h100-0/gpu1", 1.1),)),
    ]),
    "quickstart-no-contention": (ROOT / "scenarios" / "quickstart.yaml", ["simulation.compute_contention=none"], [
        Variant("straggler", stragglers=(("h100-1/gpu5", 1.25),)),
        Variant("nic link halved", degrade=(("h100-0/nic0", "leaf0", 0.5),)),
        Variant("ECMP seed", seed=1),
    ]),
    "incast": (HERE / "incast.yaml", SM_SHARE, [
        Variant("receiver link", degrade=(("one-0/nic0", "leaf0", 0.25),)),
        Variant("sender link", degrade=(("gh-0/nic0", "leaf0", 0.5),)),
        Variant("slow receiver", stragglers=(("one-0/gpu0", 1.1),)),
        Variant("hop latency", per_hop_latency_ns=2000),
    ]),
    "pp-bubble": (HERE / "pp-bubble.yaml", SM_SHARE, [
        Variant("stage 2 straggler", stragglers=(("h100-2/gpu0", 1.3),)),
        Variant("stage 1 link", degrade=(("h100-1/nic0", "leaf0", 0.3),)),
        Variant("hop latency", per_hop_latency_ns=0),
        Variant("ECMP seed", seed=1),
    ]),
    "hetero-stage-dp": (ROOT / "scenarios" / "stage-dp.yaml", [], [
        Variant("GH200 straggler", stragglers=(("gh-0/gpu1", 1.2),)),
        Variant("A100 NIC link", degrade=(("a100-0/nic0", "leaf0", 0.4),)),
        Variant("hop latency", per_hop_latency_ns=4000),
    ]),
}
BIG = {"hetero-stage-dp"}
"""Cases compared on the JAX driver where JAX is installed (NumPy == JAX is checked on the others)."""


def _has_jax() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


def _flow_backend_ns(scenario, v: Variant) -> int:
    return flow_backend_run(scenario, v)[0]


def flow_backend_run(scenario, v: Variant) -> tuple[int, set]:
    """The flow backend's iteration time for the variant and the (lane, op) of the local TP collectives that held
    SMs in that run (recorded from the coordinator's ``ContentionTracker.start_local``: the decisions the program
    takes from the baseline run, as the coordinator takes them under this variant)."""
    from heterosim.sim import contention

    held: set = set()
    orig = contention.ContentionTracker.start_local

    def start_local(self, lane, oid):
        orig(self, lane, oid)
        if (lane.id, oid) in self.holds:
            held.add((lane.id, oid))

    contention.ContentionTracker.start_local = start_local
    try:
        r = pipeline.simulate(v.prepare(scenario), symmetry=False, record_messages=False)
    finally:
        contention.ContentionTracker.start_local = orig
    return r.sim.iteration_time_ns, held


def check_flags(prog, res, runs: list[tuple[int, set]]) -> int:
    """A variant is flagged (``decisions.flipped``) exactly where the flow backend's run of it held SMs on other
    local TP collectives than the baseline's run (``runs[0]``); the number flagged."""
    why = flipped(prog, res)
    want = [h != runs[0][1] for _, h in runs]
    assert [w is not None for w in why] == want, why
    return sum(want)


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    path, sets, vs = CASES[request.param]
    sc = pipeline.load(path, sets)
    prep = pipeline.prepare(sc)
    prog = export_program(prep)
    vs = [Variant()] + vs
    prm = variants.params(prog, vs, prep.system, prep.scenario)
    big = request.param in BIG and _has_jax()
    res = (engine.run_jax if big else engine.run_numpy)(prog, prm)
    return {"name": request.param, "scenario": sc, "prepared": prep, "program": prog, "variants": vs,
            "params": prm, "numpy": None if big else res, "result": res}


def test_every_variant_matches_the_flow_backend(case):
    res = case["result"]
    assert not res.flags.any()
    got = res.iteration_time_ns
    runs = [flow_backend_run(case["scenario"], v) for v in case["variants"]]
    want = np.array([t for t, _ in runs])
    assert len(set(want.tolist())) >= 3, want  # the variants change the iteration (else the check proves little)
    rel = np.abs(got - want) / want
    assert (rel <= REL_TOL).all(), {v.name: (int(g), int(w)) for v, g, w in zip(case["variants"], got, want)}
    assert check_flags(case["program"], res, runs) == 0  # (none of these variants holds otherwise: no alarm)
    if case["name"] == "quickstart":  # some variant's runs differ from the baseline's (ZeRO all-gathers ending
        ch = case["program"].checks  # later or sooner), holding SMs on the same ops: the replay decides it
        taken, tie = outcomes(case["program"], res.probe_ns)
        assert ((taken[:, ch.base] != ch.taken) | tie[:, ch.base]).any(axis=1)[1:].sum() >= 1


def test_contention_cases_change_the_iteration(case):
    """Where the case runs sm_share, the flow backend's baseline differs from its run without contention (else the
    agreement above would not test the contention model), and the program carries SM holds."""
    sc = case["scenario"]
    if sc.simulation.compute_contention == "none":
        assert not case["program"].contention
        return
    assert case["program"].contention and len(case["program"].hold_lane) > 0
    none = pipeline.with_overrides(sc, {"simulation.compute_contention": "none"})
    assert _flow_backend_ns(none, Variant()) < _flow_backend_ns(sc, Variant())


def test_jax_equals_numpy_to_the_nanosecond(case):
    pytest.importorskip("jax")
    if case["numpy"] is None:
        pytest.skip("compared on JAX only (BIG)")
    res = engine.run_jax(case["program"], case["params"])
    assert not res.flags.any()
    assert res.iteration_time_ns.tolist() == case["numpy"].iteration_time_ns.tolist()
    assert res.rounds == case["numpy"].rounds
    if case["numpy"].probe_ns is not None:  # (the times the chain decisions are checked on)
        assert res.probe_ns.tolist() == case["numpy"].probe_ns.tolist()


def test_batch_rows_are_independent(case):
    """A variant's result does not depend on what else is in its batch (rows advance on their own events)."""
    if case["numpy"] is None:
        pytest.skip("compared on JAX only (BIG)")
    prog, vs = case["program"], case["variants"]
    alone = engine.run_numpy(prog, variants.params(prog, [vs[-1]], case["prepared"].system, case["scenario"]))
    assert alone.iteration_time_ns[0] == case["numpy"].iteration_time_ns[-1]


@pytest.mark.parametrize("path,sets", [(HERE / "pp-bubble.yaml", SM_SHARE), (HERE / "incast.yaml", SM_SHARE)])
def test_random_combinations_match_the_flow_backend(path, sets):
    """Eight random variants, each a random straggler, a random degraded link, a random per-hop latency and a
    random ECMP seed at once, against the flow backend's run of each (compute contention on: the SM holds and the
    re-timing follow every change of timing)."""
    sc = pipeline.load(path, sets)
    prep = pipeline.prepare(sc)
    prog = export_program(prep)
    rng = np.random.default_rng(43)
    gpus = [g.name for g in prep.system.gpus]
    pairs = list(dict.fromkeys((l.a, l.b) for l in prep.system.net.links))
    vs = []
    for i in range(8):
        a, b = pairs[rng.integers(len(pairs))]
        vs.append(Variant(f"r{i}", stragglers=((gpus[rng.integers(len(gpus))], float(1 + rng.random())),),
                          degrade=((a, b, float(0.1 + 0.9 * rng.random())),),
                          per_hop_latency_ns=int(rng.integers(0, 5000)), seed=int(rng.integers(0, 1000))))
    res = engine.run_numpy(prog, variants.params(prog, [Variant()] + vs, prep.system, sc))
    got = res.iteration_time_ns
    runs = [flow_backend_run(sc, v) for v in [Variant()] + vs]
    want = np.array([t for t, _ in runs])
    assert len(set(want.tolist())) >= 6, want
    assert (np.abs(got - want) / want <= REL_TOL).all(), list(zip(got.tolist(), want.tolist()))
    check_flags(prog, res, runs)


@pytest.mark.scale
def test_heterogeneous_h_suite_case_at_reduced_size():
    """H1 (8 DGX A100 + 8 DGX H100, 128 GPUs) with 8 layers and 64 sequences: 80k flows (network and NVLink); four
    variants against the flow backend (minutes on a CPU: HETEROSIM_SCALE_TESTS=1)."""
    pytest.importorskip("jax")
    sc = pipeline.load(ROOT / "scenarios" / "suites" / "h-suite" / "h1-llama1-65b.yaml", [
        "model.num_layers=8", "parallelism.layer_partition=[1,1,1,1,1,1,1,1]",
        "training.global_batch_size=64", "training.microbatch_split=[4,4,4,4,4,4,4,4]"])
    prep = pipeline.prepare(sc)
    prog = export_program(prep)
    vs = [Variant(), Variant("a100 straggler", stragglers=(("a100-3/gpu5", 1.2),)),
          Variant("h100 nic", degrade=(("h100-2/nic1", "leaf5", 0.5),)), Variant("seed", seed=5)]
    got = engine.run_jax(prog, variants.params(prog, vs, prep.system, sc), KE=1024, KF=1024).iteration_time_ns
    want = np.array([_flow_backend_ns(sc, v) for v in vs])
    assert (np.abs(got - want) / want <= REL_TOL).all(), list(zip(got.tolist(), want.tolist()))


def test_failed_links_and_nic_speeds_match_the_flow_backend():
    """Variants that keep the program but change routes or rates: switch links down (flows re-routed on the shortest
    paths left), with an ECMP seed, a group's NIC speed, with a degraded link; against the flow backend run on the
    same change (``Variant.prepare``: the overrides, and the fabric without the failed links). The fabric's spine
    count is pinned (else the generator sizes the fabric from the NIC speed: another program, refused below)."""
    sc = pipeline.load(HERE / "pp-bubble.yaml", SM_SHARE + ["fabric.num_spines=4"])
    prep = pipeline.prepare(sc)
    prog = export_program(prep)
    vs = [Variant(), Variant("spine link down", fail=(("leaf0", "spine1"),)),
          Variant("two down, seed 3", fail=(("leaf0", "spine0"), ("leaf1", "spine2")), seed=3),
          Variant("200G NICs", nic_gbps=(("h100", 200.0),)),
          Variant("100G NICs, NIC link degraded", nic_gbps=(("h100", 100.0),),
                  degrade=(("h100-1/nic0", "leaf0", 0.5),))]
    got = engine.run_numpy(prog, variants.params(prog, vs, prep.system, sc)).iteration_time_ns
    want = np.array([pipeline.simulate(v.prepare(sc), symmetry=False, record_messages=False).sim.iteration_time_ns
                     for v in vs])
    assert len(set(want.tolist())) >= 4, want
    assert (np.abs(got - want) / want <= REL_TOL).all(), list(zip(got.tolist(), want.tolist()))


def test_a_nic_speed_that_resizes_the_fabric_is_refused():
    from heterosim.errors import UserError

    sc = pipeline.load(HERE / "pp-bubble.yaml")
    prep = pipeline.prepare(sc)
    prog = export_program(prep)
    with pytest.raises(UserError) as exc:
        variants.params(prog, [Variant("nic", nic_gbps=(("h100", 200.0),))], prep.system, sc)
    assert "fabric.num_spines" in str(exc.value) and "\n" not in str(exc.value)


def test_a_failure_that_leaves_no_path_is_refused():
    from heterosim.errors import UserError

    sc = pipeline.load(HERE / "pp-bubble.yaml")
    prep = pipeline.prepare(sc)
    prog = export_program(prep)
    with pytest.raises(UserError) as exc:
        variants.params(prog, [Variant("cut", fail=(("h100-0/nic0", "leaf0"),))], prep.system, sc)
    assert "no path" in str(exc.value) and "\n" not in str(exc.value)
