"""Small traffic scenarios (8 hosts, two leaves) so every run takes a second or two."""
from __future__ import annotations

import copy

import pytest
import yaml

TINY = {
    "name": "tiny",
    "hosts": [{"name": "h", "count": 8, "rate_gbps": 100}],
    "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 4, "uplink_gbps": 400, "link_delay_ns": 1000},
    "network": {"backend": "flow", "mtu_bytes": 1024},
    "workload": {
        "poisson": {"cdf": "fb-hadoop", "load": 0.3},
        "incast": [{"senders": 4, "bytes_per_sender": 100_000, "load": 0.02}],
    },
    "duration_ns": 1_000_000,
    "warmup_ns": 200_000,
    "seed": 3,
}


def tiny(**changes):
    """A copy of TINY with top-level keys replaced."""
    d = copy.deepcopy(TINY)
    d.update(changes)
    return d


@pytest.fixture
def write_yaml(tmp_path):
    def _write(data, name="scenario.yaml"):
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path
    return _write
