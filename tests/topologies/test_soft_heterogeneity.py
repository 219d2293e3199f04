"""Stragglers and degraded links: slower parts make the cluster slower, and bad names are one-line errors."""
from pathlib import Path

import pytest

from heterosim import api
from heterosim.collective import run_collective
from hscommon.errors import UserError
from topologies import build_system
from topologies.config import ClusterConfig, DeviceGroup, LeafSpineFabric

ROOT = Path(__file__).resolve().parents[2]


def cluster(**kw):
    return ClusterConfig(groups=[DeviceGroup(name="h100", node_type="dgx-h100", num_nodes=2)], **kw)


def test_straggler_and_degraded_link_are_applied():
    system = build_system(cluster(stragglers=[{"gpu": "h100-1/gpu3", "slowdown": 1.5}],
                                  degraded_links=[{"a": "h100-0/nic2", "factor": 0.25}]), LeafSpineFabric())
    assert system.gpus[11].slowdown == 1.5 and system.gpus[10].slowdown == 1.0
    rates = {(l.a, l.b): l.rate_gbps for l in system.net.links}
    assert rates[("h100-0/nic2", "leaf0")] == 100.0 and rates[("h100-0/nic1", "leaf0")] == 400.0


def test_degraded_link_slows_a_cross_node_collective():
    fast = build_system(cluster(), LeafSpineFabric())
    slow = build_system(cluster(degraded_links=[{"a": "h100-1/nic0", "factor": 0.5}]), LeafSpineFabric())
    t_fast = run_collective(fast, "allreduce", 256 << 20, 16).time_ns
    t_slow = run_collective(slow, "allreduce", 256 << 20, 16).time_ns
    assert t_slow > t_fast  # rail 0 of node 1 at half rate holds the whole collective back


def test_a_straggler_slows_the_iteration():
    base = ["training.global_batch_size=8", "output.trace=false"]
    quick = api.run(ROOT / "scenarios" / "quickstart.yaml", overrides=base)
    strag = api.run(ROOT / "scenarios" / "quickstart.yaml",
                    overrides=base + ["cluster.stragglers=[{gpu: h100-1/gpu5, slowdown: 1.3}]"])
    assert strag.summary["iteration_time_s"] > quick.summary["iteration_time_s"] * 1.05


@pytest.mark.parametrize("kw,field", [
    ({"stragglers": [{"gpu": "h100-7/gpu0", "slowdown": 2}]}, "cluster.stragglers[0].gpu"),
    ({"degraded_links": [{"a": "h100-0/nic0", "b": "spine9", "factor": 0.5}]}, "cluster.degraded_links[0]"),
])
def test_unknown_names_are_one_line_errors(kw, field):
    with pytest.raises(UserError, match=field.replace("[", r"\[").replace("]", r"\]")):
        build_system(cluster(**kw), LeafSpineFabric(), file="x.yaml")
