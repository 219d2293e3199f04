"""Uneven MoE routing runs its dispatch / combine as the all-to-allv itself (per-pair sizes, ``Op.peer_bytes``):
rows by hand, existing ops untouched, a dispatch whose time a hand calculation gives on a 2:1 fabric where the
old stand-in (the uniform all-to-all of the largest receiver) is slower, equal to a direct replay of the
all-to-allv schedule, the symmetry reduction changing nothing, the ns-3 backend carrying the same per-pair
messages, and no approximation label left for it."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from wl_factory import gpt, scenario

from heterosim import api
from heterosim.comm.alltoallv import plan_alltoallv, routing_matrix
from heterosim.workload.compiler import compile_workload
from heterosim.workload.ir import IR
from netbackend.base import Message
from netbackend.config import NetworkConfig
from netbackend.registry import create_backend

ROOT = Path(__file__).resolve().parents[2]
H, E, K, FE = 256, 8, 2, 1024
EP_OPS = ("ep_dispatch", "ep_combine", "ep_combine_bwd", "ep_dispatch_bwd")


def moe(layers: int = 1, experts: int = E):
    return gpt(layers=layers, hidden=H, num_experts=experts, moe_top_k=K, moe_ffn_hidden_size=FE)


def _rows(ir, rank: int) -> dict:
    return {o.name: o.peer_bytes for o in ir.ops_of(rank) if o.name in EP_OPS}


def test_rows_by_hand():
    """8 GPUs, tp 1, ep 4 (EP groups 0-3 and 4-7, EP coordinate = rank mod 4), load 2.5 on coordinate 0:
    each rank sends 256 tokens x 2 x 256 x 2 B = 262,144 B, 262,144 x 2.5 / 4 = 163,840 B to coordinate 0 and
    262,144 x 0.5 / 4 = 32,768 B to each other one (rows sum to 262,144: no remainder). The combine sends back
    what came in: coordinate 0 returns 163,840 B to each member, the others 32,768 B; each backward moves as
    its forward's transpose (combine_bwd as the dispatch, dispatch_bwd as the combine). size_bytes: the
    largest receiver, 4 x 163,840 = 655,360 B."""
    ir = compile_workload(scenario(moe(), gbs=8, ep=4, moe_load_imbalance=2.5), 8)
    hot, cold = (163840, 32768, 32768, 32768), (32768,) * 4
    for r in (0, 4):
        assert _rows(ir, r) == {"ep_dispatch": hot, "ep_combine": (163840,) * 4, "ep_combine_bwd": hot,
                                "ep_dispatch_bwd": (163840,) * 4}
    for r in (1, 3, 6):
        assert _rows(ir, r) == {"ep_dispatch": hot, "ep_combine": cold, "ep_combine_bwd": hot,
                                "ep_dispatch_bwd": cold}
    assert {o.size_bytes for o in ir.ops_of(1) if o.name in EP_OPS} == {655360}


def test_rows_keep_the_remainder_at_the_own_share():
    """ep 8, load 2.0 on coordinate 0 (6/7 elsewhere), 262,144 B sent per rank: 262,144 x 2 / 8 = 65,536 B to
    coordinate 0, floor(262,144 x 6/7 / 8) = 28,086 B to each other one; 262,144 - 65,536 - 7 x 28,086 = 6 B
    stay with the sender (its own share). Rank 3 keeps 28,092 B; each rank's row is its own program's."""
    ir = compile_workload(scenario(moe(), gbs=8, ep=8, moe_load_imbalance=2.0), 8)
    assert _rows(ir, 3)["ep_dispatch"] == (65536, 28086, 28086, 28092, 28086, 28086, 28086, 28086)
    assert _rows(ir, 0)["ep_dispatch"] == (65542,) + (28086,) * 7
    assert _rows(ir, 3)["ep_combine"] == (28086, 28086, 28086, 28092, 28086, 28086, 28086, 28086)
    assert len(set(ir.rank_program)) == 8


def test_existing_ops_carry_no_per_peer_sizes():
    """Even routing (MoE and dense): no op has per-peer sizes, and the IR's JSON names no such field; an uneven
    IR's rows survive a JSON round trip as tuples."""
    for sc in (scenario(moe(), gbs=8, ep=8), scenario(gpt(layers=2), gbs=8, tp=2)):
        ir = compile_workload(sc, 8)
        assert all(op.peer_bytes is None for p in ir.programs for op in p.ops)
        assert all("peer_bytes" not in o for p in ir.to_dict()["programs"] for o in p["ops"])
    ir = compile_workload(scenario(moe(), gbs=8, ep=4, moe_load_imbalance=2.5), 8)
    back = IR.from_dict(ir.to_dict())
    assert [op.peer_bytes for op in back.ops_of(1)] == [op.peer_bytes for op in ir.ops_of(1)]
    assert isinstance(_rows(back, 1)["ep_dispatch"], tuple)


SEND = 4 << 20
"""Bytes each rank of the hand case sends: 4,096 tokens x top-2 x hidden 256 x 2 B."""


def _hand_scenario(tmp_path, **extra) -> Path:
    """4 single-GPU, single-NIC nodes, 2 per leaf, one 400 Gb/s spine uplink per leaf (2:1), tp 1, ep 4, one
    1-layer micro-batch per rank, loads [3, 1, 0, 0] (coordinate = rank), NCCL Simple on one channel."""
    src = {"name": "a2av-hand",
           "model": {"name": "t", "num_layers": 1, "hidden_size": H, "num_attention_heads": 8, "ffn_hidden_size": FE,
                     "vocab_size": 1024, "max_seq_length": 4096, "num_experts": 4, "moe_top_k": K,
                     "moe_ffn_hidden_size": FE},
           "parallelism": {"ep": 4, "moe_rank_load": [3, 1, 0, 0]},
           "training": {"global_batch_size": 4, "micro_batch_size": 1, "seq_length": 4096, "precision": "bf16"},
           "cluster": {"groups": [{"name": "h", "node_type": "dgx-h100", "num_nodes": 4,
                                   "overrides": {"gpus_per_node": 1, "nics_per_node": 1}}]},
           "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 2, "oversubscription": 2.0, "uplink_gbps": 400},
           "comm": {"protocol": "simple", "channels": 1},
           "network": {"backend": "flow"}}
    for k, v in extra.items():
        src[k].update(v)
    path = tmp_path / "hand.yaml"
    path.write_text(yaml.safe_dump(src))
    return path


def _first_dispatch(prep, stand_in: bool = False, **kw):
    if stand_in:  # the old stand-in: every op a plain all-to-all of its size_bytes (the largest receiver)
        for p in prep.ir.programs:
            for op in p.ops:
                op.peer_bytes = None
    run = api.simulate(prep, record_messages=True, **kw)
    inst = next(i for i in run.sim.instances if i.op.tag == "ep:f:mb0:L0:0")
    return inst.end_ns - inst.start_ns, run


def _wire(payload: int) -> int:
    """Payload + 78 B of headers per packet of up to 4,096 B (netbackend.config defaults)."""
    return payload + math.ceil(payload / 4096) * 78


def test_dispatch_time_by_hand_on_a_2_to_1_fabric(tmp_path):
    """Per pair (i -> j): 4 MiB x load[j] / 4: 3 MiB to rank 0, 1 MiB to rank 1, nothing to ranks 2 and 3.
    Rank 0 (leaf A) takes 3 x 3 MiB from ranks 1 (leaf A), 2 and 3 (leaf B), and its 400 Gb/s link stays full in
    every phase of the max-min sharing: (1) leaf B's uplink carries 2->0, 3->0, 2->1, 3->1 at 100 Gb/s each,
    1->0 and 0->1 get 200; (2) 0->1 (1 MiB) drains first, nothing changes for rank 0; (3) 2->1 and 3->1 drain,
    the three flows into rank 0 share its link, 133 each; (4) 1->0 drains, 2->0 and 3->0 take 200 each. So the
    last flows end when rank 0's link has carried their wire bytes, 3 x (3 MiB + 768 headers of 78 B), at
    50 B/ns, after NCCL's Simple latency over the network (base 8.4 us + 14 us, NCCL tuning.cc) and the path's
    latency leaf B -> spine -> leaf A: 4 links x 500 ns, 3 switches x 500 ns, the last packet stored and
    forwarded on 3 links (4,174 B at 50 B/ns each).
    The stand-in (each pair 3 MiB) pushes 4 x 3 MiB through each leaf's 400 Gb/s uplink: its cross-leaf flows
    run at 100 Gb/s (12.5 B/ns) throughout, 4/3 the time."""
    path = _hand_scenario(tmp_path)
    prep = api.prepare(api.load(path))
    lat = 22_400
    fixed = math.ceil(4 * 500 + 3 * 500 + 3 * (4096 + 78) / 50)
    t, _ = _first_dispatch(prep)
    assert t == lat + math.ceil(3 * _wire(3 << 20) / 50) + fixed == 218_489
    stand, _ = _first_dispatch(api.prepare(api.load(path)), stand_in=True)
    assert stand == lat + math.ceil(_wire(3 << 20) / 12.5) + fixed == 282_602
    # a direct replay of the comm planner's all-to-allv schedule, alone on a flow backend of the same fabric
    sched = plan_alltoallv([0, 1, 2, 3], routing_matrix(SEND, [3, 1, 0, 0]), prep.system, protocol="simple",
                           channels=1)
    net = create_backend("flow", prep.system.net, NetworkConfig(backend="flow"), 0)
    for x in sched.transfers:
        if x.size_bytes:  # (pairs of 0 B carry nothing)
            net.send(Message(x.id, x.src_ep, x.dst_ep, x.size_bytes, x.latency_ns, x.flow_key, x.connection,
                             x.step_bytes))
    end = 0
    while net.pending():
        end = max([end] + [c.finish_ns for c in net.advance(None)])
    assert end == t


def test_hand_case_symmetry_off_is_the_same_run(tmp_path):
    path = _hand_scenario(tmp_path)
    on = api.simulate(api.prepare(api.load(path)), record_messages=False)
    off = api.simulate(api.prepare(api.load(path)), record_messages=False, symmetry=False)
    assert on.summary["iteration_time_ns"] == off.summary["iteration_time_ns"]


@pytest.mark.parametrize("sets", [[], ["fabric.oversubscription=2.0"],
                                  ["fabric.oversubscription=2.0", "simulation.hashed_copies=exact"]])
def test_shipped_scenario_symmetry_on_equals_off(sets):
    """scenarios/moe/uneven-routing.yaml: the run with the symmetry reduction (default settings) and without it
    give the same iteration time, on the shipped 1:1 fabric and at 2:1."""
    path = ROOT / "scenarios" / "moe" / "uneven-routing.yaml"
    on = api.run(api.load(path, sets)).summary["iteration_time_ns"]
    off = api.run(api.load(path, sets + ["simulation.symmetry=false"])).summary["iteration_time_ns"]
    assert on == off


def test_rail_merged_all_to_allvs_stay_within_the_hashed_copies_bound(monkeypatch):
    """``simulation.hashed_copies: ops``: a lane's two TP ranks start their all-to-allvs (equal matrices) on
    parallel EP groups at once, and they ride as one schedule (4 layers x 4 all-to-allvs x 2 micro-batches = 32
    merges); the iteration stays within the mode's measured bound (HASHED_COPIES_BOUNDS) of the exact run."""
    from heterosim.results.summary import HASHED_COPIES_BOUNDS
    from heterosim.sim.coordinator import Coordinator

    merged: dict[str, int] = {}
    launch = Coordinator._launch_schedule

    def counted(self, inst, collective, ranks, size, images=None, merged_groups=0, shifts=None):
        if merged_groups:
            merged[collective] = merged.get(collective, 0) + 1
        return launch(self, inst, collective, ranks, size, images=images, merged_groups=merged_groups, shifts=shifts)

    monkeypatch.setattr(Coordinator, "_launch_schedule", counted)
    path = ROOT / "scenarios" / "moe" / "uneven-routing.yaml"
    exact = api.run(api.load(path)).summary["iteration_time_ns"]
    assert merged.get("alltoallv", 0) == 0
    ops = api.run(api.load(path, ["simulation.hashed_copies=ops"])).summary["iteration_time_ns"]
    assert merged["alltoallv"] == 32
    assert abs(ops - exact) / exact <= HASHED_COPIES_BOUNDS["ops"]


def test_no_stand_in_label():
    """The all-to-allv runs itself: a run's approximations name the flow backend only (no MoE entry)."""
    path = ROOT / "scenarios" / "moe" / "uneven-routing.yaml"
    s = api.run(api.load(path, ["fabric.oversubscription=2.0"])).summary
    assert [a["name"] for a in s["approximations"]] == ["backend=flow"]


def test_ns3_backend_carries_the_per_pair_sizes(tmp_path):
    """The ns-3 backend runs through the same coordinator: the first dispatch's messages are the matrix's pairs
    (3 MiB to rank 0, 1 MiB to rank 1; the 0 B pairs move nothing)."""
    pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")
    path = _hand_scenario(tmp_path, network={"backend": "ns3"})
    prep = api.prepare(api.load(path))
    _, run = _first_dispatch(prep)
    inst = next(i for i in run.sim.instances if i.op.tag == "ep:f:mb0:L0:0")
    got = {(m.src, m.dst): m.size_bytes for m in run.sim.messages
           if m.collective == "alltoall" and m.size_bytes and inst.start_ns <= m.start_ns <= inst.end_ns}
    want = {(i, j): SEND * load // 4 for i in range(4) for j, load in enumerate([3, 1, 0, 0]) if i != j and load}
    assert got == want
