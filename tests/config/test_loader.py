"""Scenario loading: references, overrides, number parsing, one-line errors."""
from __future__ import annotations

import pytest

from heterosim.config.loader import load_scenario, parse_scalar
from heterosim.errors import ConfigError
from tiny_scenario import TINY_YAML, write

BASE = TINY_YAML


def test_scientific_notation_is_a_number():
    assert parse_scalar("1e9") == 1e9
    assert parse_scalar("4.0e+2") == 400.0
    assert parse_scalar("abc") == "abc"


def test_zoo_reference_and_overrides(tmp_path):
    sc = load_scenario(write(tmp_path, BASE), ["parallelism.pp=1", "network.dcqcn.g=0.01", "network.mtu_bytes=2e3"])
    assert sc.model.num_layers == 24 and sc.parallelism.pp == 1
    assert sc.network.dcqcn.g == 0.01 and sc.network.mtu_bytes == 2000


def test_system_file_reference(tmp_path):
    write(tmp_path, """
    cluster:
      groups: [{name: a, node_type: dgx-a100, num_nodes: 2}]
    fabric: {kind: leaf_spine, hosts_per_leaf: 16}
    """, "sys.yaml")
    text = BASE.replace("cluster:\n  groups: [{name: h100, node_type: dgx-h100, num_nodes: 1}]\n", "system: {file: sys.yaml}\n")
    sc = load_scenario(write(tmp_path, text))
    assert sc.cluster.groups[0].node_type == "dgx-a100" and sc.fabric.hosts_per_leaf == 16


@pytest.mark.parametrize("mutate,field,value", [
    (lambda t: t + "bogus: 1\n", "bogus", "1"),
    (lambda t: t.replace("global_batch_size: 16", "global_batch_size: lots"), "training.global_batch_size", "'lots'"),
    (lambda t: t.replace("global_batch_size: 16", "global_batch_size: -4"), "training.global_batch_size", "-4"),
    (lambda t: t.replace("num_nodes: 1", "num_nodes: 1, colour: red"), "cluster.groups[0].colour", "'red'"),
    (lambda t: t + "network: {mtu_bytes: 100}\n", "network.mtu_bytes", "100"),
    (lambda t: t.replace("model: gpt3-1.7b", "model: gpt5"), "model", "'gpt5'"),
    (lambda t: t + "fabric: {kind: torus}\n", "fabric", None),
])
def test_errors_are_one_line_with_file_field_value(tmp_path, mutate, field, value):
    path = write(tmp_path, mutate(BASE))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(str(path))
    assert field in msg
    if value is not None:
        assert value in msg


def test_invalid_yaml_names_line(tmp_path):
    path = write(tmp_path, "a: [1, 2\n")
    with pytest.raises(ConfigError, match=r"line \d+"):
        load_scenario(path)


def test_whole_reference_override_is_resolved(tmp_path):
    sc = load_scenario(write(tmp_path, BASE), ["model=llama2-7b", "model.num_layers=4"])
    assert sc.model.name == "llama2-7b" and sc.model.num_layers == 4
