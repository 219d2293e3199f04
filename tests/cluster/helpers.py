"""Small cluster scenarios for the tests: 4 DGX H100 nodes, two per leaf, and tiny GPT jobs."""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

TINY_JOB = {
    # GPT-3 1.7B cut to 2 layers: one iteration simulates in well under a second, and its gradient
    # all-reduce across two nodes (TP 8 inside each) still moves ~tens of MB per NIC over the fabric.
    "model": {"zoo": "gpt3-1.7b", "num_layers": 2},
    "parallelism": {"tp": 8, "pp": 1},
    "training": {"global_batch_size": 4, "micro_batch_size": 1, "seq_length": 2048},
}


def cluster(jobs: list[dict], *, nodes: int = 4, hosts_per_leaf: int = 16, oversubscription: float = 1.0,
            backend: str = "flow", **extra) -> dict:
    data = {"kind": "cluster", "name": "t",
            "cluster": {"groups": [{"name": "h100", "node_type": "dgx-h100", "num_nodes": nodes}]},
            "fabric": {"kind": "leaf_spine", "hosts_per_leaf": hosts_per_leaf, "uplink_gbps": 400,
                       "oversubscription": oversubscription},
            "network": {"backend": backend}, "jobs": []}
    for j in jobs:
        job = copy.deepcopy(TINY_JOB)
        job.update(j)
        data["jobs"].append(job)
    data.update(extra)
    return data


def write(tmp_path: Path, data: dict, name: str = "cluster.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p
