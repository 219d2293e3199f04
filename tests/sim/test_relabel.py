"""Plans reused across isomorphic groups equal planning each group directly."""
from pathlib import Path

import pytest

from heterosim.comm import plan_collective
from heterosim.sim.coordinator import _endpoints, _with_endpoints
from topologies import load_system

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("op,algo", [("allreduce", "ring"), ("allreduce", "tree"), ("allgather", "ring"),
                                     ("allreduce", "hierarchical")])
def test_relabelled_schedule_equals_direct_plan(op, algo):
    system = load_system(ROOT / "topologies" / "dgx-h100-16node-leafspine.yaml")
    if algo == "hierarchical":
        a = tuple(r for n in (0, 1) for r in range(n * 8, n * 8 + 8))
        b = tuple(r for n in (4, 6) for r in range(n * 8, n * 8 + 8))
    else:
        a = (0, 8, 16, 24)
        b = (33, 41, 49, 57)
    base = plan_collective(op, a, 64 << 20, system, algorithm=algo)
    direct = plan_collective(op, b, 64 << 20, system, algorithm=algo)
    # what the coordinator does with a plan reused for another group: endpoints renamed, then a copy
    moved = _with_endpoints(base.transfers, _endpoints(base.transfers, dict(zip(a, b)), system))
    key = lambda x: (x.id, x.src, x.dst, x.src_ep, x.dst_ep, x.size_bytes, x.link, x.deps, x.latency_ns)
    assert [key(x) for x in moved] == [key(x) for x in direct.transfers]
