"""A tiny two-node scenario (4-layer model) so a packet-level comparison takes seconds."""
from __future__ import annotations

import pytest
import yaml

TINY = {
    "name": "tiny-cc",
    "model": {"name": "tiny", "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8,
              "ffn_hidden_size": 4096, "vocab_size": 32000, "max_seq_length": 1024},
    "parallelism": {"tp": 4, "pp": 2, "schedule": "1f1b", "sequence_parallel": True, "zero_stage": 1},
    "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_length": 1024, "precision": "bf16"},
    "cluster": {"groups": [{"name": "h100", "node_type": "dgx-h100", "num_nodes": 2}]},
    "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 8, "uplink_gbps": 400},
    "network": {"backend": "flow"},
    "seed": 0,
}


@pytest.fixture
def tiny_yaml(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY, sort_keys=False))
    return path
