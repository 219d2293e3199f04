"""heterosim/budget.py: the work estimate in seconds per backend and mode, its refusal as one line, and what
``validate`` prints. No timings here: predicted vs measured lives in benchmarks/bench_budget.py's output and
docs/work-budget.md."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from heterosim import api, budget
from heterosim.budget import _crossing
from heterosim.cli import main
from heterosim.config.loader import scenario_from_dict
from tiny_scenario import write

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"  # 2 DGX H100, TP2 PP2 DP4: pipeline sends cross the nodes


def cli(capsys, monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["heterosim", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def one_line(code, err) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def estimate(path, *overrides, backend=None):
    return api.check(api.prepare(api.load(path, list(overrides))), backend=backend)


@pytest.fixture(autouse=True)
def no_budget_env(monkeypatch):
    monkeypatch.delenv(budget.ENV_VAR, raising=False)
    monkeypatch.delenv(budget.LEGACY_ENV_VAR, raising=False)


# ---------------------------------------------------------------- the estimate per backend and mode

def test_modes_order_on_one_scenario():
    """Same scenario: every packet simulated costs more than the flow model of the same messages; acceleration
    simulates fewer packets; the symmetry reduction simulates fewer lanes (DP4: 4 alike replicas)."""
    sym = estimate(QUICKSTART)
    full = estimate(QUICKSTART, "simulation.symmetry=false")
    ns3 = estimate(QUICKSTART, backend="ns3")
    auto = estimate(QUICKSTART, "network.acceleration.mode=auto", backend="ns3")
    assert (sym.mode, full.mode, ns3.mode, auto.mode) == ("flow-sym", "flow", "ns3", "ns3-auto")
    assert ns3.packets > 0 and sym.packets == full.packets == 0
    assert ns3.seconds > auto.seconds > full.seconds
    assert ns3.seconds > sym.seconds
    assert sym.sym_ops < sym.ops


def test_symmetry_estimate_is_below_the_full_one_where_replicas_are_many():
    """128 GPUs, DP32: the full run simulates every replica (bench_budget.py measured 6.7 vs 2.7 CPU s); at
    16 GPUs the symmetry analysis costs about what it saves, so no order is asserted there."""
    big = ["cluster.groups[0].num_nodes=16", "training.global_batch_size=256", "fabric.hosts_per_leaf=16"]
    sym, full = estimate(QUICKSTART, *big), estimate(QUICKSTART, *big, "simulation.symmetry=false")
    assert full.seconds > sym.seconds


def test_one_node_sends_no_packets():
    """On one DGX every transfer is NVLink (the intra model): no packet reaches the packet-level network."""
    one = estimate(QUICKSTART, "cluster.groups[0].num_nodes=1", "training.global_batch_size=16", backend="ns3")
    assert one.packets == 0


def test_crossing_share_by_hand():
    # ring 0-1-2-3 on nodes [0, 0, 1, 1]: hops 3->0 and 1->2 leave a node, 0->1 and 2->3 stay: 2 of 4
    assert _crossing([(0, 1, 2, 3)], [0, 0, 1, 1]) == 0.5
    # two rings, one inside a node (0 of 2 hops), one across (2 of 2): 2 of 4
    assert _crossing([(0, 1), (2, 3)], [0, 0, 0, 1]) == 0.5
    assert _crossing([(0, 1)], None) == 1.0


def test_seconds_add_up_per_rate():
    """seconds = overhead + s_per_item x (ops + 2 x messages) + s_per_packet x packets, with the mode's rate."""
    r = budget.RATES["ns3"]
    est = budget.WorkEstimate(ops=1000, messages=50, packets=10**6, mode="ns3")
    assert est.seconds == pytest.approx(r.overhead_s + r.s_per_item * 1100 + r.s_per_packet * 10**6)
    # a cluster (jobs merged, symmetry off): the counts add up and the packet-level rate wins
    both = budget.WorkEstimate(0, 0, 0) + budget.WorkEstimate(10, 1, 0, "flow-sym", 1, 0) + est
    assert (both.ops, both.messages, both.packets, both.mode) == (1010, 51, 10**6, "ns3")


def _bench_run():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_run
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return bench_run


def test_mlperf_and_768_gpu_runs_are_admitted_by_default():
    """Issue 40: both ran in seconds with symmetry (docs/work-budget.md) and were refused by the unit budget."""
    br = _bench_run()
    for sc in (br.mlperf_scenario(), br.scenario(96, 16, 1152)):
        est = api.check(api.prepare(scenario_from_dict(sc)))
        assert est.mode == "flow-sym"
        assert est.seconds < budget.DEFAULT_WORK_BUDGET_S


def test_packet_level_gpt3_on_1024_gpus_is_refused_by_default():
    """GPT-3 175B b64 on 128 H100 at packet level took 780-1,100 s (README, bench_ns3_training.py); the
    1,024-GPU shape moves more than 8x its inter-node bytes, so hours: refused before anything runs."""
    sc = _bench_run().scenario(128, 16, 1536)
    prep = api.prepare(scenario_from_dict(sc))
    with pytest.raises(api.UserError) as exc:
        api.check(prep, backend="ns3")
    assert budget.ENV_VAR in str(exc.value)
    assert api.check(prep, backend="ns3", work_budget=1e9).seconds > 3600


# ---------------------------------------------------------------- the refusal, one line

def _parse(line: str) -> tuple[float, float]:
    est = float(re.search(r"would take about ([0-9.e+]+) s", line).group(1))
    suggested = float(re.search(rf"{budget.ENV_VAR}=([0-9.]+)", line).group(1))
    return est, suggested


@pytest.mark.parametrize("cmd", ["run", "validate"])
def test_refusal_is_one_line_with_field_value_and_how_to_raise(tmp_path, capsys, monkeypatch, cmd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(budget.ENV_VAR, "0.01")
    out_dir = tmp_path / "r"
    args = ["run", QUICKSTART, "--out", out_dir, "--quiet"] if cmd == "run" else ["validate", QUICKSTART]
    code, _, err = cli(capsys, monkeypatch, *args)
    line = one_line(code, err)
    assert f"{QUICKSTART}: {budget.ENV_VAR} = 0.01: " in line
    est, suggested = _parse(line)
    assert suggested >= est > 0.01
    assert not out_dir.exists()
    monkeypatch.setenv(budget.ENV_VAR, str(suggested))  # the number it suggests is enough
    code, out, err = cli(capsys, monkeypatch, "validate", QUICKSTART)
    assert code in (0, None), err


@pytest.mark.parametrize("value", ["nan", "-5", "0", "soon"])
def test_bad_budget_names_the_variable(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv(budget.ENV_VAR, value)
    line = one_line(*cli(capsys, monkeypatch, "validate", QUICKSTART)[::2])
    assert budget.ENV_VAR in line and value in line


def test_old_unit_variable_still_works_and_says_it_is_deprecated(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(budget.LEGACY_ENV_VAR, "1000")  # 1000 units = 1000 / 35,000 s: too little
    line = one_line(*cli(capsys, monkeypatch, "validate", QUICKSTART)[::2])
    assert f"{budget.LEGACY_ENV_VAR} = '1000'" in line and "deprecated" in line and budget.ENV_VAR in line
    monkeypatch.setenv(budget.LEGACY_ENV_VAR, "1e12")  # plenty: admitted, with one note on stderr
    code, out, err = cli(capsys, monkeypatch, "validate", QUICKSTART)
    assert code in (0, None) and "ok" in out
    assert "deprecated" in err and "Traceback" not in err


def test_budget_in_seconds_from_the_api():
    prep = api.prepare(api.load(QUICKSTART))
    with pytest.raises(api.UserError, match="over the work budget of 0.001 s"):
        api.check(prep, work_budget=0.001)
    assert budget.work_budget() == budget.DEFAULT_WORK_BUDGET_S


# ---------------------------------------------------------------- validate prints seconds

@pytest.mark.parametrize("args, label", [
    ([], "flow backend, symmetry on"),
    (["--set", "simulation.symmetry=false"], "flow backend, symmetry off"),
    (["--backend", "ns3"], "ns-3 packet level"),
    (["--backend", "ns3", "--set", "network.acceleration.mode=auto"], "ns-3, acceleration auto"),
])
def test_validate_prints_the_estimate_in_seconds_for_the_mode_it_will_run(capsys, monkeypatch, args, label):
    code, out, err = cli(capsys, monkeypatch, "validate", QUICKSTART, *args)
    assert code in (0, None), err
    sets = [a for i, a in enumerate(args) if i and args[i - 1] == "--set"]
    backend = args[args.index("--backend") + 1] if "--backend" in args else None
    est = estimate(QUICKSTART, *sets, backend=backend)
    assert f"work about {est.seconds:.3g} s estimated ({label})" in out


def test_cluster_validate_prints_seconds(capsys, monkeypatch):
    code, out, err = cli(capsys, monkeypatch, "validate", ROOT / "scenarios" / "multi-job" / "two-gpt-packed.yaml")
    assert code in (0, None), err
    assert re.search(r"work about [0-9.e+]+ s estimated \(flow backend, symmetry off\)", out), out
