"""benchmarks/validate_published.py runs: --quick prints its rows and every summary table (issue 42: the published
rows stay a benchmark, not a test, so no accuracy value is checked here); the leave-one-source-out protocol
refits a registered constant without the scored source; bad arguments are one-line errors.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "validate_published.py"


def _module():
    spec = importlib.util.spec_from_file_location("validate_published", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd or ROOT,
                          timeout=300)


QUICK = ("megatron-v1.0-1.2b-1-v100", "korthikanti-2022-22b-selective", "nemo-24.07-llama2-7b-8")


def test_quick_prints_rows_and_every_summary_table(tmp_path):
    out = tmp_path / "quick.json"
    p = _run("--quick", "--json", str(out))
    assert p.returncode == 0, p.stderr
    text = p.stdout
    for rid in QUICK:  # each row is scored or says why not: never dropped
        line = next((ln for ln in text.splitlines() if ln.startswith(rid)), None)
        assert line is not None, rid
        assert "%" in line or "REFUSED" in line or "ERROR" in line, line
    for title in ("Per source", "Per GPU generation", "Per scale band", "Dense vs MoE", "Overall",
                  "Leave-one-source-out", "Scaling series"):
        assert title in text, title
    doc = json.loads(out.read_text())
    assert doc["written_by"] == "benchmarks/validate_published.py"
    assert {r["id"] for r in doc["rows"]} == set(QUICK)
    for r in doc["rows"]:
        assert (r["status"] == "ok") == (r["predicted_s"] is not None)
        if r["status"] != "ok":
            assert r["reason"] and "\n" not in r["reason"]
    assert set(doc["groups"]) == {"source", "generation", "band", "kind", "overall", "loso"}
    # --load reprints the tables from the file without simulating
    p2 = _run("--load", str(out))
    assert p2.returncode == 0, p2.stderr
    assert "Overall" in p2.stdout and QUICK[2] in p2.stdout


def test_json_never_replaces_a_file_it_did_not_write(tmp_path):
    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": 1}')
    p = _run("--quick", "--json", str(mine))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "not written by" in p.stderr
    assert mine.read_text() == '{"mine": 1}'


@pytest.mark.parametrize("args, needle", [
    (["--rows", "no-such-row"], "--rows = 'no-such-row'"),
    (["--sources", "nobody"], "--sources = 'nobody'"),
    (["--max-gpus", "0"], "must be >= 1"),
])
def test_bad_arguments_are_one_line_errors(args, needle):
    p = _run(*args)
    assert p.returncode == 2
    assert needle in p.stderr and p.stderr.count("\n") == 1


def test_a_row_not_expressible_is_reported_not_dropped():
    p = _run("--rows", "torchtitan-llama31-8b-fsdp-8")
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("torchtitan-llama31-8b-fsdp-8"))
    assert "CORPUS" in line and "500 W" in line  # the row's own reason (benchmarks/validation/runs.yaml)


def _row(vp, rid):
    return next(r for r in vp.corpus.load() if r.id == rid)


def test_fsdp_rows_map_to_zero_stage_3():
    # Megatron-Bridge's FSDP row (parallelism.fsdp: true) and an llm-foundry FULL_SHARD row: ZeRO-3
    # (Rajbhandari et al. 2020: parameters, gradients and optimizer states sharded = PyTorch FSDP FULL_SHARD)
    vp = _module()
    for rid in ("mbridge-25.11-h100-llama3-8b-8-fp8-cs", "llmfoundry-mpt-7b-a100-40-128"):
        sc, settings, _ = vp.scenario_of(_row(vp, rid))
        assert sc["parallelism"]["zero_stage"] == 3, rid
        assert "reshard_after_forward" not in sc["parallelism"]  # FULL_SHARD frees after forward (the default)


def test_llm_foundry_mp_mode_sets_the_gradient_dtype():
    # Composer FSDP mixed precision: DEFAULT reduces in fp32, PURE in the autocast dtype (bf16)
    vp = _module()
    assert vp.scenario_of(_row(vp, "llmfoundry-mpt-7b-a100-80-8"))[0]["training"]["grad_reduce_dtype"] == "fp32"
    assert vp.scenario_of(_row(vp, "llmfoundry-mpt-7b-a100-40-128"))[0]["training"]["grad_reduce_dtype"] == "bf16"


def test_405b_rows_account_for_embedding_and_loss():
    # Megatron-Bridge's recipe fields, and MLPerf's ASYM_PP_EMBED/LOSS (passed as the same two arguments)
    vp = _module()
    for rid in ("mbridge-25.09-h100-llama31-405b-1024-fp8", "mlperf-v5.0-nvidia-llama31-405b-512"):
        par = vp.scenario_of(_row(vp, rid))[0]["parallelism"]
        assert par["account_for_embedding_in_pipeline_split"] and par["account_for_loss_in_pipeline_split"], rid
    par = vp.scenario_of(_row(vp, "mlperf-v3.1-nvidia-gpt3-175b-512"))[0]["parallelism"]
    assert "account_for_embedding_in_pipeline_split" not in par


def test_sharp_only_where_the_row_says_and_only_on_infiniband():
    vp = _module()
    eos = vp.scenario_of(_row(vp, "mlperf-v3.1-nvidia-gpt3-175b-10752"))[0]
    azure = vp.scenario_of(_row(vp, "mlperf-v3.1-azure-gpt3-175b-10752"))[0]
    assert eos["fabric"]["in_network_reduction"] == "sharp" and eos["fabric"]["kind"] == "rail_optimized"
    assert "in_network_reduction" not in azure["fabric"]  # Azure's row says InfiniBand, not SHARP
    assert eos["cluster"]["groups"][0]["overrides"] == {"nvls": False}  # the row: NVLS disabled
    off = vp.scenario_of(_row(vp, "mlperf-v3.1-nvidia-gpt3-175b-10752"), opts=vp.Options(sharp=False))[0]
    assert "in_network_reduction" not in off["fabric"]


@pytest.mark.parametrize("rid, preset", [
    ("nemo-24.07-llama2-7b-8", "nemo"), ("mlperf-v4.0-nvidia-gpt3-175b-512", "nemo"),
    ("mbridge-25.11-b200-llama3-8b-8-fp8-cs", "megatron-bridge-perf"), ("korthikanti-2022-22b-full", "megatron-lm-2021"),
    ("megatron-v1.0-1.2b-1-v100", "megatron-lm-2021"), ("llmfoundry-mpt-7b-a100-80-8", None),
])
def test_framework_preset_named_from_the_row(rid, preset):
    vp = _module()
    tr = vp.scenario_of(_row(vp, rid))[0]["training"]
    assert tr.get("framework") == preset
    assert "framework" not in vp.scenario_of(_row(vp, rid), opts=vp.Options(presets=False))[0]["training"]


def test_row_settings_stay_explicit_and_unstated_ones_are_left_to_the_preset():
    vp = _module()
    # MLPerf states tp_comm_overlap: true; the Megatron-Bridge rows do not (the preset fills it)
    assert vp.scenario_of(_row(vp, "mlperf-v3.1-nvidia-gpt3-175b-512"))[0]["parallelism"]["tp_comm_overlap"] is True
    assert "tp_comm_overlap" not in vp.scenario_of(_row(vp, "mbridge-25.11-h100-llama3-70b-64-fp8-cs"))[0]["parallelism"]
    # Korthikanti's full-recompute rows state sequence_parallel: false, which wins over any preset
    assert vp.scenario_of(_row(vp, "korthikanti-2022-22b-full"))[0]["parallelism"]["sequence_parallel"] is False


def test_loso_refits_each_registered_constant_without_the_scored_source(monkeypatch):
    # The registry is empty in the shipped simulator; the protocol is checked with a made-up constant: its fit is
    # the mean measured/predicted ratio of the rows it is given, so the value each source is scored with is
    # computable by hand from the other sources' rows.
    vp = _module()
    R = vp.RowResult
    rows = [R("a1", "A", "H100-SXM", "Hopper", 8, "1-8", "dense", "f", 2.0, predicted_s=1.0),
            R("a2", "A", "H100-SXM", "Hopper", 8, "1-8", "dense", "f", 4.0, predicted_s=2.0),
            R("b1", "B", "H100-SXM", "Hopper", 8, "1-8", "dense", "f", 3.0, predicted_s=1.0),
            R("c1", "C", "H100-SXM", "Hopper", 8, "1-8", "dense", "f", 1.0, predicted_s=1.0)]
    seen_train = {}

    def fit(train):
        return sum(r.measured_s / r.predicted_s for r in train) / len(train)

    entry = vp.Fitted("scale", "nowhere", "mean measured/predicted", fit, lambda sc, v: sc, shipped=1.0)
    monkeypatch.setattr(vp, "FITTED", [entry])

    def rerun(run, measurements, constants):
        (_, value), = constants.values()
        seen_train[run] = value
        base = next(r for r in rows if r.id == run)
        return R(base.id, base.source, base.gpu, base.generation, base.gpus, base.band, base.kind, base.framework,
                 base.measured_s, predicted_s=base.predicted_s * value)

    out, notes = vp.loso(rows, {r.id: r.id for r in rows}, "builtin", rerun=rerun)
    # A is scored with the fit on B and C: (3 + 1) / 2 = 2; B on A and C: (2 + 2 + 1) / 3; C on A and B: 7/3
    assert seen_train == {"a1": 2.0, "a2": 2.0, "b1": 5 / 3, "c1": 7 / 3}
    assert {r.id: r.predicted_s for r in out} == {"a1": 2.0, "a2": 4.0, "b1": 5 / 3, "c1": 7 / 3}
    assert len(notes) == 3
