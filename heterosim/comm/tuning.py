"""NCCL's algorithm/protocol tuning model, evaluated on a HeteroSim group (what ``comm.algorithm: auto`` picks).

NCCL predicts, for every collective x algorithm x protocol, ``time = latency + size / bandwidth`` and runs the
fastest (NCCL 2.30.7, src/graph/tuning.cc at commit 5067397c: ``ncclTopoTuneModel`` fills
``comm->latencies``/``comm->bandwidths``, lines 244-620; ``ncclTopoGetAlgoTime`` divides, lines 630-654).
This module re-derives that model (no code copied) with NCCL's published constants:

* base latencies (us, LL/LL128/Simple): Tree 6.8/14/8.4, Ring 6.6/14/8.4, CollNet and NVLS 0, PAT 8 (l. 149-155);
* hardware latencies per step (l. 156-176): NVLink Tree .6/1.25/4, Ring .6/1.9/3.4, CollNet Direct/Chain
  Simple 3.7/2.8, NVLS/NVLSTree 25, PAT 4; network Tree 5/8.5/14, Ring 2.7/4/14, CollNet Direct/Chain Simple
  31/30, NVLS 18, NVLSTree 20.9, PAT 14;
* per-channel caps (l. 177-212): llMaxBws, perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws,
  perChMaxNVLSTreeBws; NVLS efficiency .85 Hopper / .74 Blackwell (l. 139-144);
* refinements (l. 326-383): ring LL x.5, LL128 x.92, tree x.92 capped, tree LL /3.8, tree LL128 x120/128,
  PAT x.75, CollNet Direct divided by the GPU/NIC-ratio factor and x.85 on Hopper+, NVLS busBw
  ``min(intra x eff x (nc-1)/nc x 2, inter (x2 for NVLSTree on <= 2 nodes), NVLSTree cap)``, then busBw ->
  algbw by nRanks/nsteps (ring, NVLS, NVLSTree) or .5 (tree, CollNet, PAT on AR... PAT is AG/RS only);
* latencies (l. 385-436): ring ``base + (nsteps - nInter) x max(intraLat, netOverhead) + nInter x interLat``,
  tree ``base + 2((ppn-1) intraLat + log2(nNodes) interLat)``, CollNet Direct ``2(min(1, ppn-1) intraLat
  + .4 (ppn-1)) + interLat``, Chain ``2 (ppn-1) intraLat + interLat``, NVLS ``intraLat (+ interLat)``,
  NVLSTree ``intraLat + 2 log2(nNodes) interLat``, PAT ``log2(nNodes) interLat/3.5 + 2.8 nRanks``; at one
  GPU per node the network latency is the tree's;
* enabling (l. 215-223, 491-540): PAT only with one GPU per node (NCCL 2.23+), NVLS/NVLSTree Simple only and
  >= 2 channels, NVLSTree multi-node only, CollNet (and multi-node NVLS) only where CollNet is available (here:
  a SHARP fabric), CollNet Direct only on NVSwitch nodes, LL128 only over NVLink;
* time (l. 623-654): tree bandwidth times treeCorrectionFactor by size, ring Simple multi-node allreduce
  latency x1.4 (Ampere+) "plateau".

What NCCL's topology search would give (``graphs[a]->nChannels/bwIntra/bwInter``) is approximated from the
node type (documented in :func:`graphs`); NCCL's CPU vendor terms assume an Intel x86 host (net overhead 1 us,
llMaxBws row 0). Approximations, labelled: the *pick* is NCCL's model on these inputs; the *time* HeteroSim
reports is always the flow simulation of the schedule, never this formula.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOS = ("ll", "ll128", "simple")

BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0, 0, 0),
            "collnet_chain": (0, 0, 0), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (8.0, 8.0, 8.0)}
HW_LAT = {
    "nvlink": {"tree": (.6, 1.25, 4.0), "ring": (.6, 1.9, 3.4), "collnet_direct": (0, 0, 3.7),
               "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 25.0), "nvls_tree": (0, 0, 25.0), "pat": (0, 0, 4.0)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0, 0, 3.7),
             "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (0, 0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0, 0, 31.0),
            "collnet_chain": (0, 0, 30.0), "nvls": (0, 0, 18.0), "nvls_tree": (0, 0, 20.9), "pat": (0, 0, 14.0)},
}
# per architecture (Volta, Ampere, Hopper, Blackwell) x (1 node, 2 nodes, more)
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_RING_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
PER_CH_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_NVLS_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
"""treeCorrectionFactor (tuning.cc l. 623-628): per protocol, sizes 64 B x 2^i."""
NET_OVERHEAD_US = 1.0
"""getNetOverhead on an Intel x86 host (tuning.cc l. 226-232); x3 for Simple."""

SPEED_INTER = {  # NCCL src/graph/search.cc l. 1051-1066: per-channel speeds the topology search tries, GB/s
    0: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, .24, .12),
    2: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, .24, .12),
    3: (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
        .24, .12),
}
SPEED_INTRA = {0: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
               2: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
               3: (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)}
NVLS_CHANNELS = {2: 16, 3: 32}
"""NVLS_NCHANNELS_SM90 / _SM100 (NCCL src/transport/nvls.cc l. 155-156)."""

_COMPCAP = {"V100": 0, "A100": 1, "A10": 1, "A30": 1, "A40": 1, "L40": 1, "L4": 1, "H100": 2, "H200": 2, "H800": 2,
            "H20": 2, "GH200": 2, "B200": 3, "B100": 3, "GB200": 3, "B300": 3, "GB300": 3}


def compcap_index(device: str) -> int:
    """Volta 0, Ampere (and Ada) 1, Hopper 2, Blackwell 3, from the device catalog key's prefix."""
    key = device.upper()
    for prefix in sorted(_COMPCAP, key=len, reverse=True):
        if key.startswith(prefix):
            return _COMPCAP[prefix]
    return 1


def _pick(speeds: tuple[float, ...], limit: float) -> float:
    return next((s for s in speeds if s <= limit + 1e-9), speeds[-1])


@dataclass(frozen=True)
class Graph:
    channels: int
    bw_intra: float
    bw_inter: float


@dataclass(frozen=True)
class Setup:
    """What NCCL's tuner sees of a communicator."""

    n_nodes: int
    n_ranks: int
    cc: int
    """Architecture index (Volta 0 ... Blackwell 3) of the oldest GPU."""
    nvlink: bool
    """Intra-node links are NVLink (LL128 allowed, NVLink latency rows)."""
    nvswitch: bool
    nvls: bool
    collnet: bool
    """CollNet available (a SHARP fabric)."""
    heads: int
    """NICs per node the group uses (CollNet heads)."""
    graphs: dict


def graphs(cc: int, nics: int, nic_gBps: float, intra_gBps: float, ppn: int) -> dict[str, Graph]:
    """NCCL's topology search, approximated: a ring/tree channel per NIC at the largest speed of the search's
    inter-node speed list that the NIC (and the GPU's intra-node link) can carry, doubled when NCCL doubles
    channels (search.cc ``ncclTopoDupChannels``: bw >= 25 GB/s, and on Hopper+ bw >= 50 or <= 4 channels);
    CollNet: one channel per head at that speed; NVLS: 16 (Hopper) / 32 (Blackwell) channels sharing the
    NVLink and NIC bandwidth."""
    speeds = SPEED_INTER.get(cc, SPEED_INTER[0])
    nc = max(1, min(nics, ppn))
    bw = _pick(speeds, min(nic_gBps, intra_gBps))
    ring = Graph(nc, bw, bw)
    if bw >= 25.0 and not (cc >= 2 and bw < 50.0 and nc > 4):
        ring = Graph(2 * nc, bw / 2, bw / 2)
    out = {"ring": ring, "tree": ring, "collnet_direct": Graph(nc, bw, bw), "collnet_chain": Graph(nc, bw, bw),
           "pat": ring}
    nvc = NVLS_CHANNELS.get(cc, 0)
    if nvc:
        out["nvls"] = out["nvls_tree"] = Graph(nvc, _pick(SPEED_INTRA.get(cc, SPEED_INTRA[0]), intra_gBps / nvc),
                                               _pick(speeds, nics * nic_gBps / nvc))
    return out


def _log2i(n: int) -> int:
    return max(0, int(n).bit_length() - 1)


def bandwidth_latency(s: Setup, coll: str, algo: str, proto: str) -> tuple[float, float]:
    """(algorithm bandwidth GB/s, latency us) of NCCL's model; bandwidth 0 = not eligible."""
    p = PROTOS.index(proto)
    g = s.graphs.get(algo)
    n_nodes, n_ranks, cc = s.n_nodes, s.n_ranks, s.cc
    ppn = n_ranks / n_nodes
    i2 = min(n_nodes, 3) - 1
    if g is None or not _enabled(s, coll, algo, proto):
        return 0.0, 0.0
    nsteps = 2 * (n_ranks - 1) if coll == "allreduce" else n_ranks - 1
    collnet = algo.startswith("collnet")
    bw = g.bw_intra if n_nodes <= 2 or collnet else g.bw_inter
    if algo in ("nvls", "nvls_tree"):
        if g.channels < 2:
            return 0.0, 0.0
        intra = g.bw_intra * NVLS_EFFICIENCY[cc] * (g.channels - 1) / g.channels
        intra *= 2.0 if coll == "allreduce" else (ppn - 1) / ppn
        inter = g.bw_inter * (2 if n_nodes <= 2 and algo == "nvls_tree" else 1)
        bw = min(intra, inter, PER_CH_NVLS_TREE[cc][i2] if algo == "nvls_tree" else math.inf)
    bus = g.channels * bw
    ll_max = LL_MAX_BW[cc][i2] if n_nodes == 1 else LL_MAX_BW[0][i2]
    if algo == "ring" and proto == "ll":
        bus = min(ll_max, bus * .5)
    if algo == "ring" and proto == "ll128":
        bus = min(bus * .92, g.channels * PER_CH_RING_LL128[cc][i2])
    if algo == "tree" and coll == "allreduce":
        bus = min(bus * .92, g.channels * PER_CH_TREE[cc][i2])
    if algo == "tree" and proto == "ll":
        bus = min(bus / 3.8, ll_max)
    if algo == "tree" and proto == "ll128":
        bus = min(bus * (7.0 / 9.0 if n_nodes == 1 else 120.0 / 128.0), g.channels * PER_CH_TREE_LL128[cc][i2])
    if algo == "pat":
        bus *= .75
    if algo == "collnet_direct":
        factor = ppn / g.channels
        factor -= (factor - 1) / 2
        bus /= factor
        if cc >= 2:
            bus *= .85
    if not (algo != "ring" and coll in ("allgather", "reducescatter")):
        bus *= n_ranks / nsteps if algo in ("ring", "nvls", "nvls_tree") else .5
    lat = BASE_LAT[algo][p]
    intra_kind = "nvlink" if s.nvlink else "pcie"
    intra_lat = HW_LAT[intra_kind][algo][p]
    inter_lat = HW_LAT["net"]["tree" if ppn == 1 else algo][p]
    if algo == "ring":
        overhead = (NET_OVERHEAD_US * (3 if proto == "simple" else 1)) if n_nodes > 1 else 0.0
        intra_lat = max(intra_lat, overhead)
        n_inter = 0 if n_nodes == 1 else (2 * (n_nodes - 1) if coll == "allreduce" else n_nodes - 1)
        lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
    elif algo == "tree":
        lat += 2 * ((n_ranks // n_nodes - 1) * intra_lat + _log2i(n_nodes) * inter_lat)
    elif algo == "collnet_direct":
        lat += 2 * (min(1, n_ranks // n_nodes - 1) * intra_lat + (n_ranks // n_nodes - 1) * 0.4) + inter_lat
    elif algo == "collnet_chain":
        lat += 2 * (n_ranks // n_nodes - 1) * intra_lat + inter_lat
    elif algo == "nvls":
        lat = intra_lat + (inter_lat if n_nodes > 1 else 0.0)
    elif algo == "nvls_tree":
        lat += intra_lat + 2 * _log2i(n_nodes) * inter_lat
    elif algo == "pat":
        lat += _log2i(n_nodes) * (inter_lat / 3.5) + n_ranks * 2.8
    return bus, lat


def _enabled(s: Setup, coll: str, algo: str, proto: str) -> bool:
    if coll in ("allgather", "reducescatter"):
        if algo not in ("pat", "ring", "nvls", "collnet_direct"):
            return False
        if algo == "pat" and not (proto == "simple" and s.n_nodes == s.n_ranks):
            return False
        # CollNet/NVLS all-gather and reduce-scatter across nodes need the plugin's iallgather/ireducescatter and
        # one GPU per NIC (tuning.cc l. 352-374); HeteroSim has no schedule for SHARP all-gather/reduce-scatter
        if algo in ("nvls", "collnet_direct") and s.n_nodes > 1:
            return False
    elif coll == "allreduce":
        if algo == "pat":
            return False
    else:
        return algo == "ring"
    if algo in ("nvls", "nvls_tree") and (proto != "simple" or not s.nvls):
        return False
    if algo.startswith("collnet") and proto != "simple":
        return False
    if algo == "nvls_tree" and s.n_nodes == 1:
        return False
    if not s.collnet and (algo.startswith("collnet") or (algo == "nvls" and s.n_nodes > 1)):
        return False
    if algo == "collnet_direct" and not s.nvswitch:
        return False
    if proto == "ll128" and not s.nvlink:
        return False
    return True


def algo_time_us(s: Setup, coll: str, algo: str, proto: str, size_bytes: int, ring_channels: int) -> float | None:
    """NCCL's predicted time (us) for one operation, or None when the pair is not eligible."""
    bw, lat = bandwidth_latency(s, coll, algo, proto)
    if bw <= 0:
        return None
    log_size = _log2i(size_bytes >> 6) if size_bytes >> 6 else -1
    if algo == "tree" and coll == "allreduce" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[PROTOS.index(proto)][log_size]
    if algo == "ring" and proto == "simple" and s.n_nodes > 1 and coll == "allreduce" \
            and size_bytes // (ring_channels * s.n_ranks) >= 64:
        lat *= 1.9 if s.cc == 0 else 1.4
    return lat + size_bytes / (1000.0 * bw)


def choose(s: Setup, coll: str, size_bytes: int) -> tuple[str, str, float]:
    """(NCCL algorithm, protocol, predicted us) with the smallest predicted time (ties: NCCL's loop order,
    algorithms then protocols)."""
    best = None
    for algo in ALGOS:
        for proto in PROTOS:
            t = algo_time_us(s, coll, algo, proto, size_bytes, s.graphs["ring"].channels)
            if t is not None and (best is None or t < best[2]):
                best = (algo, proto, t)
    if best is None:
        return "ring", "simple", math.inf
    return best


def setup_for(ranks, system) -> Setup:
    """The tuner's view of a group on ``system`` (nodes in first-appearance order)."""
    from heterosim.comm.collnet import sharp_available

    by_node: dict[int, list[int]] = {}
    for r in ranks:
        by_node.setdefault(system.gpus[r].node_index, []).append(r)
    nodes = [system.nodes[i] for i in by_node]
    specs = [n.spec for n in nodes]
    cc = min(compcap_index(sp.gpu) for sp in specs)
    ppn = min(len(v) for v in by_node.values())
    heads = min(len({system.gpus[r].nic for r in v}) for v in by_node.values())
    nvlink = all(sp.intra in ("nvswitch", "c2c") and sp.nvlink_gBps > 0 for sp in specs)
    intra = min((sp.nvlink_gBps if nvlink else sp.pcie_gBps) for sp in specs)
    nic = min(sp.nic_gbps for sp in specs) / 8.0
    g = graphs(cc, heads, nic, intra, ppn)
    return Setup(n_nodes=len(nodes), n_ranks=len(ranks), cc=cc, nvlink=nvlink,
                 nvswitch=all(sp.intra == "nvswitch" for sp in specs),
                 nvls=all(sp.nvls for sp in specs) and ppn >= 2,  # ncclNvlsInit: >= 2 local GPUs (nvls.cc l. 262)
                 collnet=len(nodes) > 1 and sharp_available(ranks, system), heads=heads, graphs=g)
