"""CollNet all-reduce over an InfiniBand SHARP fabric (``comm.algorithm: collnet``).

What NCCL does (NCCL src/device/all_reduce.h ``runRing``/CollNet Direct and Chain; NCCL maintainers in
NVIDIA/nccl issues 320 and 919; Mellanox/nccl-rdma-sharp-plugins): the GPUs of a node reduce their buffers
to the node's *heads* (one GPU per NIC; CollNet Direct on NVSwitch nodes: every GPU sends slice h straight
to head h), each head sends its slice once to the network, where the SHARP switches reduce it along an
aggregation tree and multicast the result back, and the head hands the result to the node's GPUs.  A node
thus puts ``size`` bytes on the wire and takes ``size`` back, where a ring puts 2(n-1)/n x size each way.

Flow model (this module):

* one SHARP tree per head (per NIC rail; HPC-X docs, "NCCL-RDMA-SHARP plugins": NCCL creates one aggregation
  streaming flow per HCA rail): the heads' NICs send to their leaf switch's aggregation endpoint
  ``{leaf}/sharp`` (topologies/sharp.py); when the rail's NICs hang off several leaves, each leaf sends its
  reduced stream to the tree's root (a switch at the smallest largest hop count from every leaf; rails
  rotate over the candidates, as SHARPv3 spreads trees over spines), which sends the result back to each leaf,
  and each leaf to its heads.  Every reduced stream is one flow, so it is bounded by the ports it crosses:
  the aggregation runs at port rate (Graham et al., ISC 2020: SHARP streaming aggregation reaches ~95% of
  point-to-point bandwidth).  Aggregation only at leaves and the root: in a three-tier fat tree the middle
  tier forwards each leaf's stream (a real SHARP tree would also reduce there: per-link bytes above the leaves
  are overstated by the leaves-per-pod factor).
* intra-node: CollNet Direct on every node kind (NCCL runs CollNet Chain where there is no NVSwitch; the
  bytes per GPU link are the same, the chain's extra latency is not modelled);
* pipelined in chunks (transfers of a chunk depend on the previous stage of the same chunk);
* latency: NCCL's CollNet Direct model (tuning.cc l. 418-421): the first chunk's intra-node legs each pay the
  NVLink CollNet latency (3.7 us) + 0.4 us per extra local rank, the head's first network send pays the
  network CollNet latency (31 us; switch and NIC processing included); fabric link delays come from the
  backend.

Switch-side ends of transfers carry the rank :data:`SHARP_SWITCH` and a ``{switch}/sharp`` endpoint.
"""
from __future__ import annotations

import math

from heterosim.comm.schedule import Transfer
from hscommon.errors import UserError

SHARP_SWITCH = -(1 << 31)
"""``Transfer.src``/``dst`` of a SHARP aggregation endpoint (the switch is in ``src_ep``/``dst_ep``). Far out of
range on purpose: code that would index GPUs by it fails loudly instead of picking a GPU."""

COLLNET_INTRA_LAT_US = 3.7
"""NCCL tuning.cc l. 160: NVLink hwLat, CollNet Direct, Simple."""
COLLNET_NET_LAT_US = 31.0
"""NCCL tuning.cc l. 172: network hwLat, CollNet Direct, Simple."""
ARITY_LAT_US = 0.4
"""NCCL tuning.cc l. 420: 'arity serialization latency' per extra local rank."""
CONNECTION_FAMILY = 4
"""Connection id family of CollNet connections (planner: ring 0, tree 1, nvls 2, p2p 3)."""


def _leaf_of(net, nic: str) -> str:
    return next(iter(net.graph.neighbors(nic)))


def sharp_available(ranks, system) -> bool:
    """Every NIC the group uses hangs off a switch with a SHARP aggregation endpoint."""
    from topologies.sharp import aggregation_endpoint

    net = system.net
    nics = {system.gpus[r].nic for r in ranks}
    try:
        return all(net.is_host(aggregation_endpoint(_leaf_of(net, nic))) for nic in nics)
    except (StopIteration, KeyError):
        return False


def _root(net, leaves: tuple[str, ...], rotate: int) -> str:
    """The switch with the smallest largest hop count to every leaf (candidates taken in turn by ``rotate``)."""
    import networkx as nx

    memo = net.__dict__.setdefault("_sharp_roots", {})
    cands = memo.get(leaves)
    if cands is None:
        dist = [nx.single_source_shortest_path_length(net.graph, leaf) for leaf in leaves]
        switches = [s for s in net.switches if all(s in d for d in dist)]
        ecc = {s: max(d[s] for d in dist) for s in switches}
        best = min(ecc.values())
        cands = memo[leaves] = [s for s in switches if ecc[s] == best]
    return cands[rotate % len(cands)]


def heads_of(layout: list[list[int]], system) -> list[list[int]]:
    """Per node, its heads: the first group rank on each distinct NIC, as many per node as the least-NIC node."""
    out = []
    for rs in layout:
        seen: dict[str, int] = {}
        for r in rs:
            seen.setdefault(system.gpus[r].nic, r)
        out.append(list(seen.values()))
    h = min(len(x) for x in out)
    return [x[:h] for x in out]


COLLNET_MIN_CHUNKS = 8
"""Chunks a CollNet schedule keeps whatever the transfer budget: with K chunks the four network stages add
~3/K of the transfer time to it (8: < 40%; measured, docs/in-network-reduction.md)."""


def leaf_count(layout: list[list[int]], system) -> int:
    """Leaf switches summed over the heads' trees."""
    heads = heads_of(layout, system)
    return sum(len({_leaf_of(system.net, system.gpus[heads[i][h]].nic) for i in range(len(layout))})
               for h in range(len(heads[0])))


def count_transfers(layout: list[list[int]], heads: int, leaves: int, chunks: int) -> int:
    intra = sum(2 * (len(rs) - 1) for rs in layout)
    return chunks * (heads * (intra + 2 * len(layout)) + 2 * leaves)


def build(b, layout: list[list[int]], size: int, chunks: int, step_bytes: int) -> None:
    """Append the CollNet all-reduce of ``size`` bytes to builder ``b`` (a planner ``_Builder``, Simple)."""
    from topologies.sharp import aggregation_endpoint

    system = b.sys
    net = system.net
    heads = heads_of(layout, system)
    H = len(heads[0])
    gpus = system.gpus
    own: dict[tuple, int] = {}
    intra_lat = [int(round((COLLNET_INTRA_LAT_US + ARITY_LAT_US * (len(rs) - 1)) * 1000)) for rs in layout]
    trees = []
    for h in range(H):
        nics = [gpus[heads[i][h]].nic for i in range(len(layout))]
        leaf = [_leaf_of(net, nic) for nic in nics]
        leaves = tuple(dict.fromkeys(leaf))
        for lf in leaves:
            if not net.is_host(aggregation_endpoint(lf)):
                raise UserError(f"switch {lf} has no SHARP aggregation endpoint: the fabric needs "
                                "in_network_reduction: sharp", field="comm.algorithm", value="collnet")
        root = leaves[0] if len(leaves) == 1 else _root(net, leaves, h)
        trees.append((nics, leaf, leaves, root))

    def net_send(src, dst, src_ep, dst_ep, size_b, deps, h, step, lat):
        key = (src_ep, dst_ep, h)
        dep_t = tuple(sorted({d for d in [own.get(key), *deps] if d is not None}))
        tid = len(b.ts)
        b.ts.append(Transfer(tid, src, dst, size_b, "net", src_ep, dst_ep, dep_t, h, step, lat, h,
                             CONNECTION_FAMILY * (1 << 16) + h, step_bytes))
        own[key] = tid
        return tid

    def intra_send(a, z, size_b, deps, h, step, lat):
        key = (a, z, h)
        tid = b.add(a, z, size_b, [own.get(key), *deps], h, step, False)
        b.ts[tid].latency_ns = lat
        own[key] = tid
        return tid

    from heterosim.comm.planner import split

    for k, piece in enumerate(split(size, chunks)):
        for h, part in enumerate(split(piece, H)):
            nics, leaf, leaves, root = trees[h]
            first = k == 0
            up: dict[str, list[int]] = {lf: [] for lf in leaves}
            for i, rs in enumerate(layout):
                head = heads[i][h]
                lat = intra_lat[i] if first else 0
                ins = [intra_send(q, head, part, [], h, 0, lat) for q in rs if q != head]
                up[leaf[i]].append(net_send(head, SHARP_SWITCH, nics[i], aggregation_endpoint(leaf[i]), part, ins,
                                            h, 1, int(COLLNET_NET_LAT_US * 1000) if first else 0))
            root_ep = aggregation_endpoint(root)
            if len(leaves) > 1:
                to_root = [net_send(SHARP_SWITCH, SHARP_SWITCH, aggregation_endpoint(lf), root_ep, part, up[lf], h, 2, 0)
                           if lf != root else None for lf in leaves]
                arrived = [t for t in to_root if t is not None] + (up[root] if root in up else [])
                down = {lf: [net_send(SHARP_SWITCH, SHARP_SWITCH, root_ep, aggregation_endpoint(lf), part, arrived,
                                      h, 3, 0)] if lf != root else arrived for lf in leaves}
            else:
                down = {leaves[0]: up[leaves[0]]}
            for i, rs in enumerate(layout):
                head = heads[i][h]
                got = net_send(SHARP_SWITCH, head, aggregation_endpoint(leaf[i]), nics[i], part, down[leaf[i]], h, 4, 0)
                lat = intra_lat[i] if first else 0
                for q in rs:
                    if q != head:
                        intra_send(head, q, part, [got], h, 5, lat)


def want_chunks(size: int, heads: int, max_chunk: int, min_chunk: int, pipeline: int) -> int:
    per = size // max(1, heads)
    k = math.ceil(per / max_chunk) if per else 1
    return max(1, k, min(pipeline, math.ceil(per / min_chunk)))
