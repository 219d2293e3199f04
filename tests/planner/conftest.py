"""Small heterogeneous scenarios (GPT-3 1.7B on 2-4 nodes) so planner tests run in seconds."""
from heterosim.config.loader import scenario_from_dict


def small_scenario(groups=None, **extra):
    groups = groups or [
        {"name": "h100", "node_type": "dgx-h100", "num_nodes": 2},
        {"name": "a100", "node_type": "dgx-a100", "num_nodes": 2, "overrides": {"nic_gbps": 400}},
    ]
    data = {
        "name": "planner-small",
        "model": "gpt3-1.7b",
        "parallelism": {"tp": 2, "pp": 2, "sequence_parallel": True, "zero_stage": 1},
        "training": {"global_batch_size": 64, "micro_batch_size": 1, "seq_length": 2048},
        "cluster": {"groups": groups},
        "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 16, "uplink_gbps": 400},
    }
    data.update(extra)
    return scenario_from_dict(data)
