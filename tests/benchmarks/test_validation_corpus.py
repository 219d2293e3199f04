"""The validation corpus (benchmarks/validation/runs.yaml) loads and meets issue 42's coverage floor.

Fast: reads YAML only, no simulation. Thresholds are the issue's (>= 40 runs, >= 8 source families,
>= 4 GPU generations, 8 to 10,000+ GPUs, dense and MoE); derived iteration times are re-derived here
from the published throughput with the formula the row names, independently of the loader.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "validation"))
import corpus  # noqa: E402

from hscommon.errors import UserError  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return corpus.load()


def test_every_row_has_source_citation_url_measured(runs):
    for r in runs:
        assert r.source and r.citation and r.url.startswith("https://") and r.measured, r.id


def test_ids_unique():
    raw = yaml.safe_load(corpus.RUNS.read_text())
    ids = [row["id"] for row in raw]
    assert len(ids) == len(set(ids))


def test_coverage_floor(runs):
    assert len(runs) >= 40
    assert len({r.source for r in runs}) >= 8
    assert len({r.generation for r in runs}) >= 4
    assert min(r.gpus for r in runs) <= 8 and max(r.gpus for r in runs) >= 10_000
    kinds = {r.moe for r in runs}
    assert kinds == {True, False}


def test_throughput_derivations_follow_their_formula(runs):
    """iteration = global_batch * seq / (tokens_per_s_per_gpu * gpus), recomputed here for every row using it."""
    checked = 0
    for r in runs:
        how = (r.derived or {}).get("how", "")
        if how.startswith("global_batch*seq/(tokens_per_s_per_gpu*gpus)"):
            t = r.training["global_batch_size"] * r.training["seq_length"] / (
                r.measured["tokens_per_s_per_gpu"] * r.gpus)
            assert r.derived["iteration_time_s"] == pytest.approx(t, rel=1e-3), r.id
            checked += 1
    assert checked >= 20


def test_not_expressible_rows_say_why(runs):
    for r in runs:
        if not r.expressible_today:
            assert r.not_expressible_because, r.id


@pytest.mark.parametrize("mutate, field", [
    (lambda rows: rows.append(dict(rows[0])), "duplicate id"),
    (lambda rows: rows[0].update(gpu="TPUv5"), "gpu"),
    (lambda rows: rows[0].update(measured={"note": "fast"}), "measured"),
    (lambda rows: rows[0].pop("url"), "url"),
    (lambda rows: rows[0].update(model="gpt-9000"), "model"),
])
def test_bad_rows_are_one_line_errors(tmp_path, mutate, field):
    rows = yaml.safe_load(corpus.RUNS.read_text())
    mutate(rows)
    bad = tmp_path / "runs.yaml"
    bad.write_text(yaml.safe_dump(rows))
    with pytest.raises(UserError) as e:
        corpus.load(bad)
    msg = e.value.one_line()
    assert str(bad) in msg and field in msg and "\n" not in msg


def test_cli_exit_2_on_bad_file(tmp_path, capsys):
    bad = tmp_path / "runs.yaml"
    bad.write_text("{not: a list}")
    assert corpus.main([str(bad)]) == 2
    assert "expected a YAML list" in capsys.readouterr().err
