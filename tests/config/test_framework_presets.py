"""training.framework presets (heterosim/config/frameworks.yaml): each preset sets what its data file
says, explicit values win, unknown or inexpressible presets are one-line errors, no preset = no change.

Expected values come from the data file read here with plain PyYAML (not through the module), and the
headline numbers from the cited sources, written out by hand (Megatron-Core's 40M-parameter bucket, NeMo's
128 Mi, DeepSpeed's 500M-element all-reduce buffer, x the gradient's bytes)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from heterosim.config.loader import load_scenario
from heterosim.config.parallel import ParallelConfig
from heterosim.config.training import TrainingConfig
from heterosim.errors import ConfigError
from tiny_scenario import TINY_YAML, write

DATA = Path(__file__).resolve().parents[2] / "heterosim" / "config" / "frameworks.yaml"
RAW = yaml.safe_load(DATA.read_text())["presets"]
EXPRESSIBLE = [n for n, p in RAW.items() if "refuse" not in p]
REFUSED = [n for n, p in RAW.items() if "refuse" in p]


def _get(sc, path: str):
    obj = sc
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _expected(rule: dict, context: dict):
    """The data file's value for a scenario whose other fields are ``context`` (dotted path -> value)."""
    if "value" in rule:
        return rule["value"]
    return rule["cases"].get(context[rule["by"]], rule["otherwise"])


def _scenario(tmp_path, framework: str | None, extra: list[str] | None = None):
    sets = ([f"training.framework={framework}"] if framework else []) + (extra or [])
    return load_scenario(write(tmp_path, TINY_YAML), sets)


def test_the_data_file_cites_a_source_for_every_value():
    assert {"megatron-lm-2021", "megatron-core", "nemo", "megatron-bridge", "torchtitan", "deepspeed"} <= set(RAW)
    for name in EXPRESSIBLE:
        assert RAW[name]["fields"], name
        for path, rule in RAW[name]["fields"].items():
            assert len(str(rule.get("source", "")).split()) >= 5, (name, path)
    for name in REFUSED:
        assert RAW[name]["refuse"]["field"] and RAW[name]["refuse"]["reason"], name


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32", "fp8"])
@pytest.mark.parametrize("name", EXPRESSIBLE)
def test_each_preset_sets_what_its_data_file_says(tmp_path, name, precision):
    sc = _scenario(tmp_path, name, [f"training.precision={precision}"])
    # TINY_YAML: tp 2; fields the preset sets are read as it set them (file order)
    context = {"training.precision": precision, "parallelism.tp": 2, "parallelism.pp": 2}
    for path, rule in RAW[name]["fields"].items():
        want = _expected(rule, context)
        context[path] = want
        assert _get(sc, path) == want, (name, path)
    assert sc.training.framework == name
    assert sc._framework_fields == {p: context[p] for p in RAW[name]["fields"]}


# The sources' numbers by hand: bucket parameters x gradient bytes (fp32: 4, 16-bit: 2).
@pytest.mark.parametrize("name,precision,field,want", [
    ("megatron-lm-2021", "bf16", "parallelism.overlap_grad_reduce", False),   # local DDP, all-reduce after flush
    ("megatron-lm-2021", "bf16", "training.attention", "unfused"),
    ("megatron-lm-2021", "bf16", "training.grad_reduce_dtype", "fp32"),       # --bf16 forces fp32 reduction
    ("megatron-lm-2021", "fp16", "training.grad_reduce_dtype", "bf16"),       # fp16 grads: 2 bytes
    ("megatron-lm-2021", "bf16", "parallelism.zero_stage", 0),
    ("megatron-core", "bf16", "parallelism.grad_bucket_bytes", 40_000_000 * 4),
    ("megatron-core", "fp16", "parallelism.grad_bucket_bytes", 40_000_000 * 2),
    ("megatron-core", "bf16", "parallelism.zero_stage", 1),
    ("megatron-core", "bf16", "parallelism.overlap_param_gather", True),
    ("nemo", "bf16", "parallelism.grad_bucket_bytes", 128 * 1024 * 1024 * 2),
    ("nemo", "bf16", "training.grad_reduce_dtype", "bf16"),
    ("nemo", "bf16", "parallelism.tp_comm_overlap", True),
    ("megatron-bridge", "bf16", "parallelism.grad_bucket_bytes", 128 * 1024 * 1024 * 4),  # TP 2: CommOverlapConfig
    ("megatron-bridge", "bf16", "training.grad_reduce_dtype", "fp32"),
    # scripts/performance (5776a6d): grad_reduce_in_fp32 = False; bucket 128 Mi parameters x 2 bytes at TP 2
    ("megatron-bridge-perf", "bf16", "training.grad_reduce_dtype", "bf16"),
    ("megatron-bridge-perf", "bf16", "parallelism.grad_bucket_bytes", 128 * 1024 * 1024 * 2),
    ("megatron-bridge-perf", "bf16", "parallelism.overlap_grad_reduce", True),  # the recipe's, kept
    ("deepspeed", "bf16", "parallelism.zero_stage", 1),                       # BF16_Optimizer: ZeRO-1 equivalent
    ("deepspeed", "fp16", "parallelism.zero_stage", 0),
    ("deepspeed", "bf16", "parallelism.grad_bucket_bytes", 500_000_000 * 4),
    ("deepspeed", "bf16", "parallelism.overlap_grad_reduce", False),
])
def test_headline_values_match_the_sources(tmp_path, name, precision, field, want):
    assert _get(_scenario(tmp_path, name, [f"training.precision={precision}"]), field) == want


def test_bridge_bucket_at_tp1_is_megatron_cores_default(tmp_path):
    sc = _scenario(tmp_path, "megatron-bridge", ["parallelism.tp=1"])
    assert sc.parallelism.grad_bucket_bytes == 40_000_000 * 4
    sc = _scenario(tmp_path, "megatron-bridge-perf", ["parallelism.tp=1"])
    assert sc.parallelism.grad_bucket_bytes == 40_000_000 * 2  # 2-byte gradients


def test_the_bucket_follows_a_gradient_dtype_the_user_chose(tmp_path):
    sc = _scenario(tmp_path, "megatron-core", ["training.grad_reduce_dtype=bf16"])
    assert sc.parallelism.grad_bucket_bytes == 40_000_000 * 2
    assert "training.grad_reduce_dtype" not in sc._framework_fields


@pytest.mark.parametrize("name", EXPRESSIBLE)
def test_explicit_values_win(tmp_path, name):
    # in the file
    text = TINY_YAML.replace("parallelism: {tp: 2, pp: 2}",
                             "parallelism: {tp: 2, pp: 2, zero_stage: 0, overlap_grad_reduce: true,"
                             " grad_bucket_bytes: 12345}")
    text = text.replace("seq_length: 2048}", f"seq_length: 2048, framework: {name}, attention: flash}}")
    sc = load_scenario(write(tmp_path, text), ["parallelism.sequence_parallel=false",
                                               "model.make_vocab_size_divisible_by=64"])
    assert sc.parallelism.zero_stage == 0 and sc.parallelism.overlap_grad_reduce is True
    assert sc.parallelism.grad_bucket_bytes == 12345 and sc.training.attention == "flash"
    assert sc.parallelism.sequence_parallel is False and sc.model.make_vocab_size_divisible_by == 64
    given = {"parallelism.zero_stage", "parallelism.overlap_grad_reduce", "parallelism.grad_bucket_bytes",
             "training.attention", "parallelism.sequence_parallel", "model.make_vocab_size_divisible_by"}
    assert not given & set(sc._framework_fields)
    assert set(sc._framework_fields) == set(RAW[name]["fields"]) - given


def test_no_framework_changes_nothing(tmp_path):
    sc = _scenario(tmp_path, None)
    assert sc.training.framework is None and sc._framework_fields == {}
    assert sc.parallelism == ParallelConfig(tp=2, pp=2)
    default = TrainingConfig(global_batch_size=16, micro_batch_size=1, seq_length=2048)
    assert sc.training == default
    assert sc.model.make_vocab_size_divisible_by == 128  # the model's own default


def test_unknown_preset_is_one_line_naming_field_value_and_known_names(tmp_path):
    path = write(tmp_path, TINY_YAML.replace("seq_length: 2048}", "seq_length: 2048, framework: megatron-3000}"))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(path))
    assert "training.framework" in msg and "'megatron-3000'" in msg
    for name in RAW:
        assert name in msg


@pytest.mark.parametrize("name", REFUSED)
def test_inexpressible_preset_refuses_in_one_line(tmp_path, name):
    with pytest.raises(ConfigError) as exc:
        _scenario(tmp_path, name)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "training.framework" in msg and repr(name) in msg
    assert RAW[name]["refuse"]["field"] in msg and "cannot express" in msg


def test_fsdp_presets_shard_what_their_frameworks_shard(tmp_path):
    """torchtitan's FSDP2 default and DeepSpeed's stages map to zero_stage 3 / 2 (issue 38 made them expressible)."""
    assert _scenario(tmp_path, "torchtitan").parallelism.zero_stage == 3
    assert _scenario(tmp_path, "deepspeed-zero2").parallelism.zero_stage == 2
    assert _scenario(tmp_path, "deepspeed-zero3").parallelism.zero_stage == 3


def test_validation_without_the_loader_refuses_too():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="unknown framework preset"):
        TrainingConfig(global_batch_size=8, framework="nope")


def test_an_override_switches_the_preset(tmp_path):
    from heterosim.pipeline import with_overrides

    sc = _scenario(tmp_path, "megatron-core", ["parallelism.overlap_grad_reduce=true"])
    sc2 = with_overrides(sc, ["training.framework=megatron-lm-2021"])
    assert sc2.parallelism.zero_stage == 0 and sc2.training.attention == "unfused"
    assert sc2.parallelism.overlap_grad_reduce is True  # the user's value stays
    sc3 = with_overrides(sc, ["parallelism.pp=1"])  # an unrelated override keeps the preset and its record
    assert sc3.parallelism.zero_stage == 1 and sc3._framework_fields == sc._framework_fields


def test_a_cluster_job_names_its_framework(tmp_path):
    from heterosim.cluster.config import job_scenario, load_cluster_scenario

    write(tmp_path, """
    name: c
    cluster:
      groups: [{name: h100, node_type: dgx-h100, num_nodes: 1}]
    jobs:
      - name: a
        placement: {nodes: [h100-0]}
        model: gpt3-1.7b
        parallelism: {tp: 2, pp: 2, zero_stage: 0}
        training: {global_batch_size: 16, framework: megatron-core}
    """, "c.yaml")
    sc = job_scenario(load_cluster_scenario(tmp_path / "c.yaml"), 0)
    assert sc.parallelism.zero_stage == 0 and sc.parallelism.overlap_param_gather is True
    assert sc._framework_fields["parallelism.grad_bucket_bytes"] == 40_000_000 * 4


def test_summary_records_what_the_preset_set(tmp_path):
    from heterosim.pipeline import prepare, simulate

    sc = _scenario(tmp_path, "megatron-core", ["training.attention=flash"])
    res = simulate(prepare(sc), record_messages=False)
    fw = res.summary["framework"]
    assert fw["preset"] == "megatron-core"
    assert "training.attention" not in fw["preset_fields"] and fw["attention"] == {"H100-SXM": "flash"}
    assert fw["preset_fields"]["parallelism.zero_stage"] == 1
    assert set(fw["preset_notes"]) == {p for p, r in RAW["megatron-core"]["fields"].items() if r.get("note")}
    plain = simulate(prepare(_scenario(tmp_path, None)), record_messages=False).summary["framework"]
    assert "preset" not in plain and "preset_fields" not in plain


def test_the_docs_page_matches_the_data_file():
    from heterosim.config.frameworks import markdown_matrix, markdown_table

    page = (Path(__file__).resolve().parents[2] / "docs" / "framework-presets.md").read_text()
    assert markdown_matrix() in page and markdown_table() in page
