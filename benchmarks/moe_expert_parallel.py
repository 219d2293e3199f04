"""Expert parallelism as run (issue 38): the tables of docs/moe.md.

1. Expert tensor parallelism on scenarios/moe/expert-tp.yaml (Mixtral 8x7B, 4 layers, 16 H100, TP4 SP):
   expert_tp 4 (= tp, EP 4) against expert_tp 2 and 1 (EP 8, folded): iteration time, exposed communication,
   bytes each rank's MoE block puts into collectives per layer and micro-batch (forward), expert parameters per
   rank.
2. Uneven routing on scenarios/moe/uneven-routing.yaml (TP2 SP, EP8): iteration time against max/mean tokens
   per EP rank (the dispatch / combine run as all-to-allvs with their per-pair sizes).
3. One dispatch: an all-to-allv with per-pair sizes (heterosim.comm.alltoallv) against the uniform all-to-all
   sized by its largest receiver (the stand-in training runs used before the all-to-allv ran itself), each
   replayed alone on the flow backend over 8 single-GPU, single-NIC nodes of a leaf-spine (4 hosts per leaf,
   400 Gb/s), non-blocking, 2:1 and 4:1 oversubscribed. Lower bound: the largest receiver's bytes from its peers
   at the NIC's 400 Gb/s.
4. The shipped uneven scenario at 1:1, 2:1 and 4:1: the training run with its all-to-allvs, the same run with
   the symmetry reduction off, and the old stand-in (every all-to-allv op stripped of its per-pair rows, so the
   coordinator runs the uniform all-to-all of its ``size_bytes``, the largest receiver).

    .venv/bin/python benchmarks/moe_expert_parallel.py
"""
from __future__ import annotations

from pathlib import Path

from heterosim import api
from heterosim.comm import plan_collective
from heterosim.comm.alltoallv import largest_receiver_bytes, plan_alltoallv, routing_matrix
from heterosim.workload.costs import layer_params
from netbackend.base import Message
from netbackend.config import NetworkConfig
from netbackend.registry import create_backend
from topologies import build_system
from topologies.config import ClusterConfig, DeviceGroup, LeafSpineFabric

ROOT = Path(__file__).resolve().parents[1]
MOE_KINDS = ("tp", "ep")


def _moe_block_bytes(ir) -> int:
    """Bytes rank 0's first-layer forward MoE block hands to collectives (nccl-tests sizes), from the router's
    opening TP all-gather (expert_tp = tp) to the combine's closing reduce-scatter."""
    ops = ir.ops_of(0)
    i = next(k for k, o in enumerate(ops) if o.name == "moe_router")
    c = next(k for k in range(i, len(ops)) if ops[k].name == "ep_combine")
    i -= ops[i - 1].name == "tp_allgather"
    c += ops[c + 1].name == "tp_reducescatter"
    return sum(o.size_bytes for o in ops[i:c + 1] if o.kind == "comm")


def expert_tp_table() -> None:
    path = ROOT / "scenarios" / "moe" / "expert-tp.yaml"
    print("| plan | groups (ep / edp) | iteration (ms) | exposed TP | exposed EP | exposed DP | MoE block bytes "
          "per layer, fwd (MiB) | expert params per rank (M) | peak memory (GiB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for etp, ep in ((4, 4), (2, 8), (1, 8)):
        sets = [f"parallelism.expert_tp={etp}", f"parallelism.ep={ep}"]
        prep = api.prepare(api.load(path, sets))
        s = api.simulate(prep, record_messages=False).summary
        b = s["breakdown"]["exposed_comm"]
        ir = prep.ir
        model = prep.scenario.model
        lp = layer_params(model, 4, ep, etp if etp != 4 else 0)
        edp = len(ir.groups["edp"][0])
        print(f"| tp 4, expert_tp {etp}, ep {ep} | {len(ir.groups['ep'][0])} / {edp} | "
              f"{s['iteration_time_ns'] / 1e6:.1f} | {b.get('tp', 0):.1%} | {b.get('ep', 0):.1%} | "
              f"{b.get('dp', 0):.1%} | {_moe_block_bytes(ir) / 2**20:.2f} | "
              f"{lp.expert * model.num_layers / 1e6:.0f} | {max(ir.meta['memory_bytes']) / 2**30:.2f} |")


def uneven_table() -> None:
    path = ROOT / "scenarios" / "moe" / "uneven-routing.yaml"
    print("| max/mean tokens per EP rank | iteration (ms) | vs even | exposed EP | dispatch: sent per rank (MiB) | "
          "dispatch: largest receiver (MiB) |")
    print("|---|---|---|---|---|---|")
    base = None
    for x in (1.0, 1.25, 1.5, 2.0, 4.0):
        prep = api.prepare(api.load(path, [f"parallelism.moe_load_imbalance={x}"]))
        s = api.simulate(prep, record_messages=False).summary
        t = s["iteration_time_ns"]
        base = base or t
        op = next(o for o in prep.ir.ops_of(0) if o.name == "ep_dispatch")
        sent = sum(op.peer_bytes) if op.peer_bytes is not None else op.size_bytes
        print(f"| {x} | {t / 1e6:.1f} | {t / base:.3f} | {s['breakdown']['exposed_comm'].get('ep', 0):.1%} | "
              f"{sent / 2**20:.2f} | {op.size_bytes / 2**20:.2f} |")


def _replay(sched, system) -> int:
    """Completion (ns) of a schedule whose transfers all cross the network and start with it."""
    net = create_backend("flow", system.net, NetworkConfig(backend="flow"), 0)
    for t in sched.transfers:
        assert t.link == "net" and not t.deps
        net.send(Message(t.id, t.src_ep, t.dst_ep, t.size_bytes, t.latency_ns, t.flow_key, t.connection,
                         t.step_bytes))
    end = 0
    while net.pending():
        for c in net.advance(None):
            end = max(end, c.finish_ns)
    return end


def alltoallv_bound_table(send_bytes: int = 64 << 20) -> None:
    print(f"| fabric | max/mean load | all-to-allv (us) | uniform, largest receiver (us) | stand-in / all-to-allv | "
          f"NIC bound (us) |")
    print("|---|---|---|---|---|---|")
    n = 8
    for over in (1.0, 2.0, 4.0):
        system = build_system(ClusterConfig(groups=[DeviceGroup(name="h", node_type="dgx-h100", num_nodes=n,
                                                                overrides={"gpus_per_node": 1, "nics_per_node": 1})]),
                              LeafSpineFabric(hosts_per_leaf=4, oversubscription=over, uplink_gbps=400))
        for x in (1.0, 1.25, 2.0, 4.0):
            load = [x] + [(n - x) / (n - 1)] * (n - 1)
            m = routing_matrix(send_bytes, load)
            v = _replay(plan_alltoallv(list(range(n)), m, system, protocol="simple"), system)
            u = _replay(plan_collective("alltoall", list(range(n)), largest_receiver_bytes(m), system,
                                        protocol="simple"), system)
            nic = sum(m[i][0] for i in range(1, n)) / 50.0  # 400 Gb/s = 50 B/ns
            print(f"| leaf-spine {over:g}:1 | {x} | {v / 1e3:.0f} | {u / 1e3:.0f} | {u / v:.3f} | {nic / 1e3:.0f} |")


def _iteration(path, sets: list[str], stand_in: bool = False) -> tuple[int, float]:
    prep = api.prepare(api.load(path, sets))
    if stand_in:
        for prog in prep.ir.programs:
            for op in prog.ops:
                op.peer_bytes = None
    s = api.simulate(prep, record_messages=False).summary
    return s["iteration_time_ns"], s["breakdown"]["exposed_comm"].get("ep", 0)


def real_vs_stand_in_table() -> None:
    path = ROOT / "scenarios" / "moe" / "uneven-routing.yaml"
    print("| fabric | all-to-allv run (ms) | exposed EP | symmetry off (ms) | stand-in (ms) | exposed EP | "
          "stand-in / all-to-allv |")
    print("|---|---|---|---|---|---|---|")
    for over in (1.0, 2.0, 4.0):
        sets = [f"fabric.oversubscription={over}"]
        t, ep = _iteration(path, sets)
        off, _ = _iteration(path, sets + ["simulation.symmetry=false"])
        u, uep = _iteration(path, sets, stand_in=True)
        print(f"| leaf-spine {over:g}:1 | {t / 1e6:.1f} | {ep:.1%} | {off / 1e6:.1f}{'' if off == t else ' (differs)'} "
              f"| {u / 1e6:.1f} | {uep:.1%} | {u / t:.3f} |")


def main() -> None:
    expert_tp_table()
    print()
    uneven_table()
    print()
    alltoallv_bound_table()
    print()
    real_vs_stand_in_table()


if __name__ == "__main__":
    main()
