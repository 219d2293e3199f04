"""plan / compare-suite command functions, registered on a local Typer app as the main CLI will."""
from pathlib import Path

import typer
import yaml
from typer.testing import CliRunner

from heterosim import api
from heterosim.planner.cli import compare_suite_command, plan_command

app = typer.Typer()
app.command("plan")(plan_command)
app.command("compare-suite")(compare_suite_command)

SMALL = {
    "name": "h1-small",
    "model": "gpt3-1.7b",
    "parallelism": {"tp": 8, "pp": 2, "sequence_parallel": True, "zero_stage": 1},
    "training": {"global_batch_size": 16, "micro_batch_size": 1, "seq_length": 2048},
    "cluster": {"groups": [{"name": "h100", "node_type": "dgx-h100", "num_nodes": 1},
                           {"name": "a100", "node_type": "dgx-a100", "num_nodes": 1}]},
    "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 16, "uplink_gbps": 400},
}


def _write(tmp_path: Path) -> Path:
    p = tmp_path / "h1-small.yaml"
    p.write_text("# a small heterogeneous scenario\n" + yaml.safe_dump(SMALL))
    return p


def test_plan_command_prints_ranking_and_writes_a_valid_scenario(tmp_path):
    src = _write(tmp_path)
    dest = tmp_path / "best.yaml"
    res = CliRunner().invoke(app, ["plan", str(src), "--top", "2", "--simulate", "1", "--max-candidates", "30",
                                   "--write", str(dest), "--json", str(tmp_path / "plan.json")])
    assert res.exit_code == 0, res.output
    assert "naive" in res.output and "candidates" in res.output
    best = api.load(dest)
    api.prepare(best)  # the written plan validates and fits in memory
    assert dest.read_text().startswith("# a small heterogeneous scenario\n# plan: ")
    assert (tmp_path / "plan.json").exists()


def test_plan_command_bad_input_is_one_line_exit_2(tmp_path):
    res = CliRunner().invoke(app, ["plan", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2
    res = CliRunner().invoke(app, ["plan", str(_write(tmp_path)), "--backend", "carrier-pigeon"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["plan", str(_write(tmp_path)), "--jobs", "0"])
    assert res.exit_code == 2 and "--jobs = 0: must be >= 1" in res.output and "Traceback" not in res.output


def test_compare_suite_writes_csv_and_markdown(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    sc = dict(SMALL, parallelism=dict(SMALL["parallelism"], layer_partition=[16, 8]))
    (suite / "h1-small.yaml").write_text(yaml.safe_dump(sc))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["compare-suite", str(suite), "--out", str(out)])
    assert res.exit_code == 0, res.output
    csv_text = (out / "suite.csv").read_text()
    assert csv_text.splitlines()[0].startswith("scenario,setting")
    md = (out / "suite.md").read_text()
    assert "| H1 |" in md and "inter-node share" in md
    row = csv_text.splitlines()[1].split(",")
    assert row[0] == "h1-small"


def test_plan_measurements_path_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    # as on run/compare/sweep: a relative --measurements is read from where the user stands, not
    # next to the scenario file; a folder that is not there is a one-line error naming the flag
    scen_dir = tmp_path / "scen"
    scen_dir.mkdir()
    src = _write(scen_dir)
    here = tmp_path / "here"
    (here / "tables").mkdir(parents=True)
    (here / "tables" / "gemm.csv").write_text("dtype,pass,m,n,k,ms\nbf16,fwd,1024,1024,1024,1.0\n"
                                              "bf16,fwd,4096,4096,4096,1.0\n")
    monkeypatch.chdir(here)
    res = CliRunner().invoke(app, ["plan", str(src), "--top", "1", "--max-candidates", "5", "--measurements", "tables"])
    assert res.exit_code == 0, res.output
    monkeypatch.chdir(scen_dir)  # no tables/ here
    res = CliRunner().invoke(app, ["plan", str(src), "--top", "1", "--max-candidates", "5", "--measurements", "tables"])
    assert res.exit_code == 2 and "--measurements = 'tables'" in res.output and "Traceback" not in res.output


def test_suite_rows_the_same_side_by_side(tmp_path):
    """``compare-suite --jobs``: scenarios run in forked workers give the rows, in order, of one at a time."""
    from heterosim.planner.suite import suite_table

    paths = []
    for k, part in enumerate(([16, 8], [12, 12])):
        p = tmp_path / f"h{k + 1}-small.yaml"
        p.write_text(yaml.safe_dump(dict(SMALL, parallelism=dict(SMALL["parallelism"], layer_partition=part))))
        paths.append(p)
    one = suite_table(paths, jobs=1)
    two = suite_table(paths, jobs=2)
    assert [r["scenario"] for r in two] == [r["scenario"] for r in one] and len(one) == 2
    assert two == one
    res = CliRunner().invoke(app, ["compare-suite", str(tmp_path), "--out", str(tmp_path / "o"), "--jobs", "0"])
    assert res.exit_code == 2 and "--jobs = 0: must be >= 1" in res.output
