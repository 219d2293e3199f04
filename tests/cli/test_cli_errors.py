"""Bad input through the real CLI: one line on stderr, exit 2, no traceback, nothing written."""
from __future__ import annotations

import textwrap

import pytest
from cli_helpers import cli_subprocess, one_line
from tiny_scenario import TINY_YAML

GOOD = TINY_YAML


cli = cli_subprocess


def check_one_line_error(proc, *needles):
    one_line(proc.returncode, proc.stderr, *needles, out=proc.stdout)


@pytest.mark.parametrize("old,new,needles", [
    ("tp: 2", "tp: 2, colour: red", ["parallelism.colour"]),
    ("model: gpt3-1.7b\nparallelism: {tp: 2, pp: 2}",
     "model: {zoo: gpt3-1.7b, num_attention_heads: 36}\nparallelism: {tp: 8, pp: 1}", ["parallelism.tp", "8", "36"]),
    ("model: gpt3-1.7b", "model: {zoo: gpt3-1.7b, num_layers: 25}", ["parallelism.pp", "25"]),
    ("pp: 2}", "pp: 2, dp: 4}", ["GPU", "8"]),
    ("global_batch_size: 16", "global_batch_size: -1", ["training.global_batch_size", "-1"]),
    ("model: gpt3-1.7b", "model: gpt3-175b", ["GiB"]),
    ("node_type: dgx-h100", "node_type: dgx-zz", ["node_type", "dgx-zz"]),
])
def test_validate_errors(tmp_path, old, new, needles):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(GOOD).replace(old, new))
    check_one_line_error(cli("validate", str(path)), str(path), *needles)


def test_validate_ok(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(textwrap.dedent(GOOD))
    proc = cli("validate", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout


def test_run_unknown_backend_writes_nothing(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(textwrap.dedent(GOOD))
    out = tmp_path / "res"
    check_one_line_error(cli("run", str(path), "--backend", "carrier-pigeon", "--out", str(out)), "carrier-pigeon")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".res")]


def test_missing_file():
    check_one_line_error(cli("validate", "/nonexistent/x.yaml"), "/nonexistent/x.yaml")


def test_schema_and_compile(tmp_path):
    import json

    from heterosim.workload.ir import IR

    proc = cli("schema")
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    assert {"model", "parallelism", "training", "cluster", "network"} <= set(schema["properties"])
    path = tmp_path / "good.yaml"
    path.write_text(textwrap.dedent(GOOD))
    out = tmp_path / "ir"
    proc = cli("compile", str(path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    ir = IR.from_dict(json.loads((out / "ir.json").read_text()))
    summary = json.loads((out / "summary.json").read_text())
    assert ir.world_size == 8 and len(summary["ops_per_rank"]) == 8
    assert summary["total_flops"] == pytest.approx(ir.total_flops())
