"""Issue 40: every run whose result comes from an approximation says so, in summary.json ``approximations`` and on
the console (one line each, with its measured bound and what measured it); an exact run says nothing extra."""
from __future__ import annotations

import io
import sys
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from heterosim import api, cli
from heterosim.config.loader import scenario_from_dict
from heterosim.results.summary import approximations

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_hash_agreement import issue40_scenario, small_scenario  # noqa: E402


def _names(summary) -> list[str]:
    return [a["name"] for a in summary["approximations"]]


def _console_lines(summary) -> list[str]:
    buf = io.StringIO()
    old = cli.out
    cli.out = Console(file=buf, width=300)
    try:
        cli.print_summary(summary)
    finally:
        cli.out = old
    return [line for line in buf.getvalue().splitlines() if line.startswith("approximate:")]


def test_the_default_run_is_labelled_only_as_flow_level():
    # hashed ECMP across leaves, every setting at its default: no hashed copies merged (exact)
    res = api.simulate(api.prepare(scenario_from_dict(issue40_scenario(2.0))), record_messages=False)
    assert res.summary["simulation"]["symmetry"]["approximate"] is False
    assert _names(res.summary) == ["backend=flow"]
    lines = _console_lines(res.summary)
    assert len(lines) == 1 and "backend=flow" in lines[0] and "bench_ns3_training.py" in lines[0]


def test_an_approximate_hashed_mode_is_labelled_with_a_bound_that_covers_this_case():
    d = issue40_scenario(2.0)
    d["simulation"] = {"hashed_copies": "ops_and_shifted_replicas"}
    prep = api.prepare(scenario_from_dict(d))
    full = api.simulate(prep, record_messages=False, symmetry=False)
    red = api.simulate(prep, record_messages=False, symmetry=True)
    assert _names(full.summary) == ["backend=flow"]  # every lane and transfer: nothing merged
    assert _names(red.summary) == ["backend=flow", "hashed_copies=ops_and_shifted_replicas"]
    label = red.summary["approximations"][1]
    assert (ROOT / label["measured_by"]).is_file() and (ROOT / label["doc"]).is_file()
    err = abs(red.sim.iteration_time_ns - full.sim.iteration_time_ns) / full.sim.iteration_time_ns
    assert err > 0.005 and label["bound_rel"] >= err  # (this case is one of the matrix's: -0.999%)
    lines = _console_lines(red.summary)
    assert len(lines) == 2 and "hashed_copies=ops_and_shifted_replicas" in lines[1]
    assert f"{label['bound_rel']:.2%}" in lines[1] and "bench_hash_agreement.py" in lines[1]


def test_rails_pinned_make_no_hashed_label_whatever_the_mode():
    d = small_scenario(gpus_per_node=8, nodes=4, nodes_per_leaf=1, oversubscription=2.0, ecmp="rail", tp=4, pp=2,
                       micro_batches=2)
    d["simulation"] = {"hashed_copies": "ops_and_shifted_replicas"}
    res = api.simulate(api.prepare(scenario_from_dict(d)), record_messages=False)
    assert _names(res.summary) == ["backend=flow"]


def _ns3(accel: dict | None, mode="auto", collisions="packet"):
    sc = SimpleNamespace(network=SimpleNamespace(acceleration=SimpleNamespace(mode=mode, collisions=collisions)))
    sim = SimpleNamespace(symmetry=None, net_stats=SimpleNamespace(extra={"acceleration": accel} if accel else {}))
    return approximations(sc, sim, "ns3")


def test_packet_level_is_exact_and_prints_nothing_extra():
    assert _ns3(None, mode="off") == []
    assert _console_lines({**_summary_stub(), "approximations": []}) == []


def test_ns3_acceleration_is_labelled_by_what_it_computed():
    closed = {"bytes_closed_form": 10, "bytes_fluid": 0, "fallback_packet_level": False}
    assert [a["name"] for a in _ns3(closed)] == ["acceleration=auto (collisions: packet)"]
    fluid = {"bytes_closed_form": 10, "bytes_fluid": 5, "fallback_packet_level": False}
    (a,) = _ns3(fluid, collisions="fluid")
    assert a["name"] == "acceleration=auto (collisions: fluid)" and (ROOT / a["measured_by"]).is_file()
    # nothing qualified: plain packet level, exact
    assert _ns3({"bytes_closed_form": 0, "bytes_fluid": 0, "fallback_packet_level": True}) == []
    # a cluster job's view carries no report: its settings say what the run used
    assert [a["name"] for a in _ns3(None, collisions="fluid")] == ["acceleration=auto (collisions: fluid)"]


def _summary_stub() -> dict:
    return {"scenario": "s", "backend": "ns3", "gpus": 8, "iteration_time_s": 1.0, "model_tflops_per_gpu": 1.0,
            "mfu": 0.1, "tokens_per_s": 1.0, "inter_node_comm_share": 0.0,
            "breakdown": {"compute": 1.0, "exposed_comm": {}, "bubble": 0.0, "idle": 0.0},
            "simulation": {"events": 1, "wall_s": 1.0}}


def test_adaptive_routing_is_labelled_as_an_idealisation_without_a_measured_bound():
    sc = issue40_scenario(2.0)
    sc["network"] = {**sc.get("network", {}), "ecmp": "adaptive"}
    res = api.simulate(api.prepare(scenario_from_dict(sc)), record_messages=False)
    assert _names(res.summary) == ["backend=flow", "ecmp=adaptive"]
    (line,) = [x for x in _console_lines(res.summary) if "ecmp=adaptive" in x]
    assert "bound not measured" in line and "docs/network-model.md" in line
