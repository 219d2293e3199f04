"""Fast analytical timing of a schedule that stays inside one node.

The coordinator can time a single-node collective (TP, intra-node EP...) without
a flow simulation:

    T = max(T_bw + T_lat, T_path)

* ``T_bw``: the busiest directed resource (a GPU's NVLink egress/ingress, a PCIe
  slot, a PCIe switch uplink, a GH200 GPU pair link) divided by its effective
  bandwidth (capacity x calibrated efficiency of the transfer's link kind);
* ``T_lat``: the longest dependency chain counting only ``latency_ns``;
* ``T_path``: the longest chain with each transfer costing its latency plus its
  bytes at its bottleneck resource's effective bandwidth divided among the
  channels sharing it (catches pipeline fill in chains and trees).

Calibration (efficiencies = measured busbw / link bandwidth, large sizes):
* NVLink ring: 8x H100 SXM (450 GB/s/dir) all-reduce busbw ~360-380 GB/s in
  nccl-tests on DGX H100 (figures quoted in the project issue and NVIDIA's NCCL
  2.17+ NVLS announcements); DGX A100 (300 GB/s/dir) reaches ~230 GB/s (NCCL
  maintainer, NVIDIA/nccl-tests issue 149). One efficiency, 0.81, gives ~360 and
  ~240 GB/s: within 5% of both.
* NVLS: ~470 GB/s busbw on 8x H100 (same sources). The NVLS data path moves
  S(1+1/n) bytes per GPU per direction, whose ideal busbw is 2(n-1)/(n+1) x 450
  = 700 GB/s; efficiency 0.68 gives ~470 (the switch's reduction throughput,
  not the links, is the limit).
* PCIe Gen4 x16 GPU peer-to-peer typically measures ~25 of 32 GB/s per direction
  (CUDA p2pBandwidthLatencyTest); efficiency 0.78.
"""
from __future__ import annotations

from heterosim.comm.schedule import NVSWITCH, FlowSchedule
from hscommon.errors import UserError

LINK_EFFICIENCY = {"nvlink": 0.81, "nvls": 0.68, "pcie": 0.78, "c2c": 0.81}
"""Achievable fraction of link bandwidth per link kind (see module docstring)."""


def _resources(t, system) -> list[tuple[tuple, float]]:
    """Directed resources a transfer occupies, with capacity in bytes/ns (= GB/s)."""
    gpus = system.gpus
    if t.link == "nvls":
        gpu = t.dst if t.src == NVSWITCH else t.src
        spec = system.node_of(gpu).spec
        return [(("rx" if t.src == NVSWITCH else "tx", gpu), spec.nvlink_gBps)]
    spec = system.node_of(t.src).spec
    if t.link == "nvlink":
        return [(("tx", t.src), spec.nvlink_gBps), (("rx", t.dst), spec.nvlink_gBps)]
    if t.link == "c2c":
        pair = spec.nvlink_gBps / max(1, spec.gpus_per_node - 1)
        return [(("pair", t.src, t.dst), pair)]
    if t.link == "pcie":
        out = [(("tx", t.src), spec.pcie_gBps), (("rx", t.dst), spec.pcie_gBps)]
        sa = gpus[t.src].local // spec.gpus_per_pcie_switch
        sb = gpus[t.dst].local // spec.gpus_per_pcie_switch
        if sa != sb:
            up = spec.pcie_switch_uplink_gBps or spec.pcie_gBps
            node = gpus[t.src].node_index
            out += [(("up", node, sa), up), (("down", node, sb), up)]
        return out
    raise UserError("intra_time_ns times single-node schedules only; this one uses the network",
                    field="link", value=t.link)


def intra_time_ns(schedule: FlowSchedule, system) -> int:
    """Estimated completion time (ns) of an intra-node schedule, from its start."""
    ts = schedule.transfers
    if not ts:
        return 0
    load: dict[tuple, float] = {}
    chans: dict[tuple, set[int]] = {}
    res_of = []
    for t in ts:
        eff = LINK_EFFICIENCY[t.link] if t.link in LINK_EFFICIENCY else 1.0
        rs = _resources(t, system)
        res_of.append((rs, eff))
        for key, cap in rs:
            load[key] = load.get(key, 0.0) + t.size_bytes / (cap * eff)
            chans.setdefault(key, set()).add(t.channel)
    t_bw = max(load.values())
    lat_end = [0.0] * len(ts)
    path_end = [0.0] * len(ts)
    for i, t in enumerate(ts):
        rs, eff = res_of[i]
        rate = min(cap * eff / len(chans[key]) for key, cap in rs)
        start_lat = max((lat_end[d] for d in t.deps), default=0.0)
        start_path = max((path_end[d] for d in t.deps), default=0.0)
        lat_end[i] = start_lat + t.latency_ns
        path_end[i] = start_path + t.latency_ns + t.size_bytes / rate
    return int(round(max(t_bw + max(lat_end), max(path_end))))


def busbw_GBps(op: str, n: int, size_bytes: int, time_ns: int) -> float:
    """nccl-tests bus bandwidth: algbw x (2(n-1)/n for allreduce; (n-1)/n for allgather,
    reducescatter, alltoall; 1 for broadcast/reduce/send)."""
    if time_ns <= 0:
        return 0.0
    algbw = size_bytes / time_ns  # bytes/ns == GB/s
    factor = {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "reducescatter": (n - 1) / n,
              "alltoall": (n - 1) / n}.get(op, 1.0)
    return algbw * factor
