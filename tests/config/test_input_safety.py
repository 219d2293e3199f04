"""Issue 14: every bad input is one line naming file, field and value -- YAML safety, references, --set,
physical bounds. Expected ranges come from the documented bounds (netbackend/bounds.py docstrings), not
from running the code."""
from __future__ import annotations

import textwrap
import time

import pytest

from heterosim import api, pipeline
from heterosim.config.loader import load_scenario, parse_scalar
from heterosim.errors import ConfigError, UserError
from cli_helpers import one_line_message
from tiny_scenario import TINY_YAML, write

BASE = TINY_YAML


one_line_error = one_line_message


# ---------------------------------------------------------------- YAML safety

def test_duplicate_key_is_refused_with_its_line(tmp_path):
    path = write(tmp_path, BASE + "training: {global_batch_size: 32}\n")
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    # BASE is a blank line + 6 lines, so the appended key is on line 8
    one_line_error(exc, str(path), "duplicate key 'training'", "line 8")


def test_alias_bomb_is_refused_before_it_expands(tmp_path):
    # 9 levels of 9 aliases expand to 9**9 (387 million) strings; refused in well under a second
    bomb = 'a0: &a0 ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"a{k}: &a{k} [" + ",".join([f"*a{k - 1}"] * 9) + "]\n" for k in range(1, 10))
    path = write(tmp_path, BASE + "bomb:\n" + textwrap.indent(bomb, "  "))
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    assert time.monotonic() - t0 < 5
    one_line_error(exc, str(path), "aliases")


def test_a_few_aliases_are_fine(tmp_path):
    path = write(tmp_path, BASE.replace("parallelism: {tp: 2, pp: 2}", "parallelism: &p {tp: 2, pp: 2}")
                 + "description: x\n")
    assert load_scenario(path).parallelism.tp == 2


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path):
    path = write(tmp_path, BASE + "deep: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    one_line_error(exc, str(path), "nested deeper than")


def test_invalid_utf8_names_byte_and_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(textwrap.dedent(BASE).encode().replace(b"name: t", b"name: t\xff"))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    one_line_error(exc, str(path), "0xff", "line 2")


def test_a_directory_or_device_is_not_read(tmp_path):
    text = BASE.replace("cluster:\n  groups: [{name: h100, node_type: dgx-h100, num_nodes: 1}]\n",
                        "system: {file: /dev/zero}\n")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    one_line_error(exc, str(path), "system.file", "/dev/zero", "not a regular file")


@pytest.mark.parametrize("model,field", [
    ("{hf_config: [1]}", "model.hf_config"),
    ("{hf_config: 3}", "model.hf_config"),
    ("{zoo: [gpt3-1.7b]}", "model.zoo"),
    ("{zoo: {a: 1}}", "model.zoo"),
])
def test_non_string_references(tmp_path, model, field):
    path = write(tmp_path, BASE.replace("model: gpt3-1.7b", f"model: {model}"))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    one_line_error(exc, str(path), field)


@pytest.mark.parametrize("ref", ["[sys.yaml]", "3", "''"])
def test_non_string_system_file(tmp_path, ref):
    text = BASE.replace("cluster:\n  groups: [{name: h100, node_type: dgx-h100, num_nodes: 1}]\n",
                        f"system: {{file: {ref}}}\n")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    one_line_error(exc, str(path), "system.file")


# ---------------------------------------------------------------- --set

@pytest.mark.parametrize("text", ["[", "'abc", '"abc', "*alias", "!tag x", "{", "a: b: c"])
def test_set_values_that_are_not_yaml(tmp_path, text):
    with pytest.raises(ConfigError) as exc:
        load_scenario(write(tmp_path, BASE), [f"parallelism.tp={text}"])
    one_line_error(exc, "--set", "parallelism.tp", "invalid YAML value")


@pytest.mark.parametrize("path", ["parallelism..tp", ".tp", "parallelism.tp.", "[0]", "cluster.groups[-1].num_nodes",
                                  "  "])
def test_set_paths_that_are_not_field_paths(tmp_path, path):
    with pytest.raises(ConfigError) as exc:
        load_scenario(write(tmp_path, BASE), [f"{path}=2"])
    one_line_error(exc, "--set", "not a field path")


def test_parse_scalar_still_reads_yaml():
    assert parse_scalar("[1, {a: 2}]") == [1, {"a": 2}]
    assert parse_scalar("1e30") == 1e30  # a number: the bounds (not the parser) refuse it


# ---------------------------------------------------------------- physical bounds

@pytest.mark.parametrize("override,field,needle", [
    ("fabric={kind: leaf_spine, uplink_gbps: 1e-9}", "fabric.uplink_gbps", "allowed: 1 to 3200 Gb/s"),
    ("fabric={kind: leaf_spine, uplink_gbps: true}", "fabric.uplink_gbps", "true"),
    ("cluster.groups[0].slowdown=.inf", "cluster.groups[0].slowdown", "finite"),
    ("cluster.groups[0].pod=1e20", "cluster.groups[0].pod", "allowed: 0 to 1,048,576"),
    ("cluster.groups[0].num_nodes=1e9", "cluster.groups[0].num_nodes", "allowed: 1 to 1,048,576"),
    ("parallelism.tp=true", "parallelism.tp", "true"),
    ("parallelism.sequence_parallel=1", "parallelism.sequence_parallel", "boolean"),
    ("parallelism.layer_partition=[24, 0]", "parallelism", "pipeline stage 1 has no layers"),
    ("parallelism.layer_partition=[24, -1]", "parallelism.layer_partition[1]", "allowed: 0 to 2048"),
    ("model.hidden_size=1e30", "model.hidden_size", "allowed: 1 to 262,144"),
    ("training.global_batch_size=1e9", "training.global_batch_size", "allowed: 1 to 1,048,576"),
    ("training.iterations=1e6", "training.iterations", "allowed: 1 to 1000"),
    ("training.seq_length=4096", "max_seq_length (2048)", "exceeds"),
    ("comm.channels=100000", "comm.channels", "allowed: 1 to 64"),
    ("seed=-1", "seed", "allowed: 0 to"),
    ("name=../../etc", "name", "pattern"),
])
def test_values_no_real_system_has(tmp_path, override, field, needle):
    with pytest.raises(ConfigError) as exc:
        load_scenario(write(tmp_path, BASE), [override])
    one_line_error(exc, field, needle)


@pytest.mark.parametrize("value,needle", [("1e30", "allowed: 1 to 3200 Gb/s"), (".inf", "finite"),
                                          ("true", "true")])
def test_node_type_overrides_are_bounded(tmp_path, value, needle):
    # overrides are checked against the node type when the system is described, before anything is built
    with pytest.raises(UserError) as exc:
        api.prepare(load_scenario(write(tmp_path, BASE), [f"cluster.groups[0].overrides={{nic_gbps: {value}}}"]))
    one_line_error(exc, str(tmp_path / "s.yaml"), "cluster.groups[0].overrides.nic_gbps", needle)


def test_node_type_overrides_are_bounded_with_the_users_field(tmp_path):
    sc = load_scenario(write(tmp_path, BASE), ["cluster.groups[0].overrides={nvlink_gBps: 0}"])
    with pytest.raises(UserError) as exc:
        api.prepare(sc)
    one_line_error(exc, "cluster.groups[0].overrides.nvlink_gBps", "NVSwitch")


def test_rate_ratio_cannot_build_millions_of_switches(tmp_path):
    # 16 ports x 3200 Gb/s over 1 Gb/s uplinks = 51,200 uplinks per leaf: a switch has 512 ports at most
    sc = load_scenario(write(tmp_path, BASE), ["cluster.groups[0].overrides={nic_gbps: 3200}",
                                               "cluster.groups[0].num_nodes=4",
                                               "fabric={kind: leaf_spine, uplink_gbps: 1}"])
    t0 = time.monotonic()
    with pytest.raises(UserError) as exc:
        api.prepare(sc)
    assert time.monotonic() - t0 < 10
    one_line_error(exc, "fabric.uplink_gbps", "512 ports")


def test_cheap_gpu_count_comes_before_building(tmp_path):
    # 131,072 nodes x 8 GPUs = 1,048,576 GPUs: the plan check must answer before any node is built
    sc = load_scenario(write(tmp_path, BASE), ["cluster.groups[0].num_nodes=131072"])
    t0 = time.monotonic()
    with pytest.raises(UserError) as exc:
        api.prepare(sc)
    assert time.monotonic() - t0 < 10
    one_line_error(exc, str(tmp_path / "s.yaml"), "global_batch_size")


def test_fp8_needs_fp8_hardware(tmp_path):
    sc = load_scenario(write(tmp_path, BASE.replace("dgx-h100", "dgx-a100")), ["training.precision=fp8"])
    with pytest.raises(UserError) as exc:
        api.prepare(sc)
    one_line_error(exc, "training.precision", "fp8")


# ---------------------------------------------------------------- references and API

def test_background_cdf_is_relative_to_the_scenario(tmp_path, monkeypatch):
    sub = tmp_path / "sc"
    sub.mkdir()
    (sub / "my.cdf").write_text("100 0\n1000 50\n10000 100\n")
    path = write(sub, BASE + "network: {background: {cdf: my.cdf, load: 0.1}}\n")
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    sc = load_scenario(path)
    assert sc.network.background.cdf == str((sub / "my.cdf").resolve())
    api.check(api.prepare(sc))  # loads the CDF


def test_api_run_honours_overrides_on_a_scenario_object(tmp_path, monkeypatch):
    sc = load_scenario(write(tmp_path, BASE))
    seen = {}

    def fake_prepare(s, **kw):
        seen["scenario"] = s
        raise UserError("stop here")

    monkeypatch.setattr(pipeline, "prepare", fake_prepare)  # api.run is pipeline.run
    with pytest.raises(UserError, match="stop here"):
        api.run(sc, overrides=["parallelism.pp=1", "training.global_batch_size=8"])
    got = seen["scenario"]
    assert (got.parallelism.pp, got.training.global_batch_size) == (1, 8)
    assert (sc.parallelism.pp, sc.training.global_batch_size) == (2, 16)  # the caller's object is unchanged
    with pytest.raises(ConfigError) as exc:
        api.with_overrides(sc, ["parallelism.tp=[" ])
    one_line_error(exc, "--set")
