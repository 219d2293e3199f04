"""Chains of local ops run in one step (heterosim/sim/coordinator.py ``_chains``/``_run_chain``).

The reference is the coordinator with no chains (every op's end queued and popped one by one): with
chains on, every lane's op starts, ends and data-movement starts must be the same, to the ns.
"""
from __future__ import annotations

import pytest

from heterosim import api
from heterosim.config.loader import scenario_from_dict
from heterosim.sim import coordinator as coord
from heterosim.sim.coordinator import _prepare_program
from heterosim.workload.ir import Op


def _scenario(par: dict, groups=None, batch=16):
    return scenario_from_dict({
        "name": "chains", "model": "gpt3-1.7b",
        "parallelism": {"tp": 4, "pp": 2, "schedule": "1f1b", "sequence_parallel": True, **par},
        "training": {"global_batch_size": batch, "micro_batch_size": 1, "seq_length": 1024, "precision": "bf16"},
        "cluster": {"groups": groups or [{"name": "h", "node_type": "dgx-h100", "num_nodes": 2}]},
        "fabric": {"kind": "rail_optimized", "nodes_per_block": 8},
        "network": {"backend": "flow", "ecmp": "rail"},
        "output": {"trace": False, "plots": False}})


def _timelines(res):
    return [(l.ranks, list(l.start_ns), list(l.end_ns), dict(l.comm_start_ns)) for l in res.sim.lanes]


CASES = {
    "1f1b-zero1": {"zero_stage": 1},
    "interleaved": {"schedule": "interleaved", "virtual_stages": 2},
    "tp-comm-overlap": {"tp_comm_overlap": True},
    "no-sequence-parallel-recompute": {"sequence_parallel": False, "recompute": "full"},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_chains_give_the_op_by_op_timelines(case, monkeypatch):
    prep = api.prepare(_scenario(CASES[case]))
    fast = api.simulate(prep, record_messages=False, symmetry=False)
    monkeypatch.setattr(coord, "_chains", lambda ops, *a: [-1] * len(ops))
    slow = api.simulate(prep, record_messages=False, symmetry=False)
    assert fast.sim.iteration_time_ns == slow.sim.iteration_time_ns
    assert _timelines(fast) == _timelines(slow)
    assert fast.summary["breakdown"] == slow.summary["breakdown"]
    assert fast.sim.events < slow.sim.events  # the chains were taken


def test_heterogeneous_nodes_with_a_straggler_keep_their_timelines(monkeypatch):
    groups = [{"name": "h", "node_type": "dgx-h100", "num_nodes": 2},
              {"name": "a", "node_type": "dgx-a100", "num_nodes": 2, "slowdown": 1.1}]
    sc = _scenario({"zero_stage": 1}, groups=groups, batch=32)
    sc = api.with_overrides(sc, {"cluster.stragglers": [{"gpu": "h-1/gpu2", "slowdown": 1.3}]})
    prep = api.prepare(sc)
    fast = api.simulate(prep, record_messages=False, symmetry=True)
    monkeypatch.setattr(coord, "_chains", lambda ops, *a: [-1] * len(ops))
    slow = api.simulate(prep, record_messages=False, symmetry=True)
    assert fast.sim.iteration_time_ns == slow.sim.iteration_time_ns
    assert _timelines(fast) == _timelines(slow)
    assert fast.sim.events < slow.sim.events


def _op(i, kind, stream, deps=(), group=""):
    return Op(id=i, kind=kind, name=f"op{i}", stream=stream, deps=tuple(deps), group=group,
              collective="allgather" if kind == "comm" else "")


def test_chain_links_by_hand():
    # 0 compute -> 1 tp -> 2 compute -> 3 tp (also waits on 5, a dp gather) -> 4 compute -> 6 pp send;
    # 5 is a dp op on its own stream. By the rule (only dependent; the op after it on its stream waits
    # on nothing but ops further down its chain):
    ops = [_op(0, "compute", "compute"),
           _op(1, "comm", "tp", [0], "tp"),
           _op(2, "compute", "compute", [1]),
           _op(3, "comm", "tp", [2, 5], "tp"),
           _op(4, "compute", "compute", [3]),
           _op(5, "comm", "dp", [], "dp"),
           _op(6, "comm", "pp_send", [4], "pp")]
    p = _prepare_program(ops)
    # 0 -> 1: 1 is 0's only dependent; 2 (next on compute) waits only on 1, which is further down 0's chain
    assert p.chain_next[0] == 1
    # 1 -> 2: 3 (next on tp) waits on 2 (chain) and on 5 (a dp op outside it): an outside event could
    # start 3 on the tp stream while 1 still runs, so 1's end must be a real event
    assert p.chain_next[1] == -1
    # 2 -> 3: 4 (next on compute) waits on 3 only
    assert p.chain_next[2] == 3
    # 3 -> 4: the last op on tp
    assert p.chain_next[3] == 4
    # 4 -> 6 (only dependent; last op on compute); 6 is a network op, so the run stops there at run time
    assert p.chain_next[4] == 6
    # 5 -> 3 is linked (3 is 5's only dependent, nothing follows 5 on dp); 3 has two deps, so it only
    # chains when the other one has ended
    assert p.chain_next[5] == 3
    assert p.chain_next[6] == -1
