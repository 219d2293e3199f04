"""`heterosim validate` takes every kind of HeteroSim YAML, and `run` names the command for the kinds it does not run.

Before: `validate` and `run` on a shipped traffic scenario answered `workload.chakra: required field is
missing`, and sweeps, topologies and the catalogs failed the same way.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli_in_process
from heterosim.filekinds import kind_of_data

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for d in ("scenarios", "topologies", "heterosim/zoo/models") for p in (REPO / d).rglob("*.yaml"))


def cli(capsys, monkeypatch, *args):
    return cli_in_process(capsys, monkeypatch, REPO, *args)


def test_the_shipped_yaml_is_all_there():
    assert len(SHIPPED) >= 25  # scenarios (training, cluster, traffic, sweeps, suites), topologies, catalogs


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(REPO)) for p in SHIPPED])
def test_every_shipped_yaml_validates(capsys, monkeypatch, path):
    code, out, err = cli(capsys, monkeypatch, "validate", path.relative_to(REPO))
    assert code == 0, err
    assert out.startswith("ok: "), out


@pytest.mark.parametrize("rel,command", [
    ("scenarios/traffic/dcqcn-incast.yaml", "heterosim traffic"),
    ("scenarios/sweeps/nic-speed.yaml", "heterosim sweep"),
    ("topologies/h100-single-node.yaml", "collective --topology"),
])
def test_run_names_the_command_for_a_file_it_does_not_run(tmp_path, capsys, monkeypatch, rel, command):
    code, _, err = cli(capsys, monkeypatch, "run", rel, "--out", tmp_path / "r")
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and rel in lines[0] and command in lines[0], err
    assert "chakra" not in err and not (tmp_path / "r").exists()


def test_validate_traffic_makes_the_checks_traffic_makes(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "t.yaml"
    bad.write_text((REPO / "scenarios/traffic/dcqcn-incast.yaml").read_text().replace("senders: 4", "senders: 9"))
    code, _, err = cli(capsys, monkeypatch, "validate", bad)
    assert code == 2 and "workload.incast[0].senders" in err and str(bad) in err
    code, _, err = cli(capsys, monkeypatch, "traffic", bad, "--out", tmp_path / "o")
    assert code == 2 and "workload.incast[0].senders" in err


def test_validate_traffic_runs_the_backend_build_checks(capsys, monkeypatch):
    """As for training scenarios: an acceleration setting with no closed form is refused by validate."""
    pytest.importorskip("ns3", reason="the ns3 extra")
    code, _, err = cli(capsys, monkeypatch, "validate", "scenarios/traffic/dcqcn-incast.yaml", "--set",
                       "network.cc=hpcc", "--set", "network.acceleration.mode=auto")
    assert code == 2 and "network.cc" in err


def test_validate_sweep_refuses_a_parameter_that_names_no_field(tmp_path, capsys, monkeypatch):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"scenario: {REPO / 'scenarios/quickstart.yaml'}\nparameters: {{parallelism.colour: [1, 2]}}\n")
    code, _, err = cli(capsys, monkeypatch, "validate", sweep)
    assert code == 2 and "parameters.parallelism.colour" in err and str(sweep) in err


@pytest.mark.parametrize("data,kind", [
    ({"kind": "cluster", "jobs": []}, "cluster"),
    ({"hosts": [{"name": "h", "count": 2}], "workload": {}}, "traffic"),
    ({"scenario": "x.yaml", "parameters": {"seed": [1]}}, "sweep"),
    ({"cluster": {"groups": []}, "fabric": {}}, "topology"),
    ({"cluster": {"groups": []}, "model": "gpt3-1.7b", "training": {}}, "training"),
    ({"dgx-x": {"gpu": "H100-SXM", "gpus_per_node": 8}}, "node-catalog"),
    ({"m": {"num_layers": 2, "hidden_size": 8}}, "model-zoo"),
    ({"model": "gpt3-1.7b"}, "training"),  # incomplete training scenarios still get the scenario loader's error
    ([1, 2], "training"),
])
def test_kinds_are_told_apart(data, kind):
    assert kind_of_data(data) == kind


def test_validate_says_what_a_framework_preset_filled_in(capsys, monkeypatch):
    """The preset fills only the fields the scenario leaves empty; validate lists them (summary.json too)."""
    import yaml

    data = yaml.safe_load((REPO / "heterosim/config/frameworks.yaml").read_text())
    assert "nemo" in str(data)
    code, out, err = cli(capsys, monkeypatch, "validate", "scenarios/quickstart.yaml",
                         "--set", "training.framework=nemo")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("framework preset nemo: set "))
    assert "parallelism.overlap_grad_reduce=True" in line
    code, out, _ = cli(capsys, monkeypatch, "validate", "scenarios/quickstart.yaml")
    assert "framework preset" not in out


def test_iteration_time_is_printed_in_a_unit_that_shows_it():
    """A microbenchmark-sized iteration used to print as "0.0000 s"."""
    from heterosim.cli import human_seconds

    assert human_seconds(1.2e-5) == "12 us"
    assert human_seconds(0.154) == "154 ms"
    assert human_seconds(18.846712) == "18.85 s"
    assert human_seconds(3e-9) == "3 ns"
