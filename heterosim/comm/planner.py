"""NCCL-like communication planner: a collective on a rank group -> a :class:`FlowSchedule`.

Algorithms (what NCCL does, at flow granularity):

* ``ring``: ``channels`` parallel rings, each carrying size/channels, looped in
  pipeline chunks; allreduce = reduce-scatter + all-gather = 2(n-1) steps per
  loop, allgather/reducescatter n-1 steps, broadcast/reduce a pipelined chain
  along the ring. Rings visit all GPUs of a node before leaving it, and
  inter-node hops join GPUs with the same local index (rail alignment: a node
  entered at GPU e is left at GPU x, the next one entered at x and left at e).
* ``tree`` (allreduce): NCCL's double binary tree across nodes (channels
  alternate between two trees; the second is the first with node positions
  rotated by one so most leaves of one are inner nodes of the other), with a
  chain through the GPUs of each node; reduce up then broadcast down, chunked
  so both directions pipeline.
* ``hierarchical`` (allreduce): intra-node reduce-scatter (ring) -> inter-node
  ring allreduce among GPUs with the same local position, over their rail NICs
  -> intra-node all-gather; pipelined by chunks. Needs the same number of group
  ranks on every node (else ring).
* ``nvls`` (allreduce, and single-node allgather/reducescatter): NVLink SHARP.
  For every slice owner p: each GPU sends slice p to the NVSwitch (which
  reduces), the switch returns the sum to p (multimem.ld_reduce), p stores it
  back to the switch, which multicasts it to all GPUs (multimem.st). Multi-node:
  the owners run an inter-node ring allreduce of their slice between the two
  halves. Needs every node to have ``nvls: true``; otherwise UserError.
* ``collnet`` (allreduce across nodes on a SHARP fabric): NCCL CollNet: intra-node reduce to the
  node's heads (one GPU per NIC), one send per head up a SHARP aggregation tree of the fabric's switches,
  the reduced result multicast back and handed to every GPU (heterosim/comm/collnet.py). Needs
  ``fabric.in_network_reduction: sharp``; otherwise UserError.
* ``direct``: alltoall (every pair at once, destinations rotated per rank as
  NCCL does to avoid incast) and send.

Algorithms a collective does not support fall back to ring (NCCL supports tree
only for allreduce, for instance); ``FlowSchedule.algorithm`` says what ran.

``algorithm="auto"`` with ``protocol="auto"`` inside one node (allreduce,
reduce-scatter, all-gather): every ring x protocol (and nvls where the node has
it) is costed with the intra-node model and the fastest wins, as NCCL's tuner
does with its own cost model. Across nodes (allreduce, reduce-scatter, all-gather):
NCCL's own tuning model (heterosim/comm/tuning.py: NCCL src/graph/tuning.cc's latency +
bandwidth per algorithm x protocol) picks, and its pick maps to a schedule: Ring -> ring,
Tree -> tree, CollNet Direct/Chain and multi-node NVLS (NVLS + CollNet) -> collnet, NVLSTree ->
hierarchical (the same three phases: reduce inside nodes, exchange between them, broadcast inside;
with NVLink rings inside where NCCL uses NVLS, a ring between nodes where NCCL runs a tree: our
multi-node ``nvls`` schedule measured 171 GB/s busbw against hierarchical's 221 on 4 DGX H100, 1 GiB,
so it is not used for NCCL's pick until it is fixed), PAT -> ring (same bytes per rank; PAT's
log-depth latency is not modelled); ``FlowSchedule.tuned`` records NCCL's pick.
Otherwise: send/alltoall -> direct; allreduce inside one node -> nvls when every node
supports it and size >= 1 MiB, else ring; everything else -> ring.
``protocol="auto"``: ll up to 64 KiB; ll128 up to 16 MiB when every node is
NVLink-connected (NCCL enables LL128 only there); simple otherwise; nvls is
simple-only (as in NCCL).

Protocol cost (NCCL docs for NCCL_PROTO and the "NCCL protocols" GTC talks):
LL sends 8-byte words of 4 B data + 4 B flag (50% efficiency, lowest latency);
LL128 sends 128-byte lines with 120 B data + 8 B flag (93.75%); Simple moves raw
data (100%) but synchronises with memory fences (highest latency). Latencies
are NCCL's tuning model (src/graph/tuning.cc, NCCL 2.19+: baseLat and hwLat per
algorithm/protocol/link type, in us).

Size bounds: chunks hold at most MAX_CHUNK_BYTES per transfer; a schedule holds
at most ``max_transfers`` transfers (fewer chunks first, then consecutive ring
steps merged into one transfer carrying their bytes and latency).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Callable

from heterosim.comm.schedule import NVSWITCH, FlowSchedule, Transfer
from hscommon.errors import UserError

OPS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "alltoall", "send")
ALGORITHMS = ("auto", "ring", "tree", "hierarchical", "nvls", "collnet", "direct")
PROTOCOLS = ("auto", "simple", "ll", "ll128")

INFLATION = {"simple": 1.0, "ll": 2.0, "ll128": 128.0 / 120.0}
"""Wire bytes per payload byte (LL: 4 B flag per 4 B data; LL128: 8 B per 120 B)."""

_PROTO_IDX = {"ll": 0, "ll128": 1, "simple": 2}
# NCCL src/graph/tuning.cc (2.19+), microseconds, (LL, LL128, Simple).
BASE_LAT_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
HW_LAT_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "c2c": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
NVLS_BASE_LAT_US = 25.0
"""NVLS is Simple-only with a large fixed cost (NCCL's NVLS rows are ~25 us); approximate."""
NVLS_HW_LAT_US = 3.4
"""Per NVLS step we charge the NVLink Ring/Simple step latency (approximation)."""

MAX_CHUNK_BYTES = 4 << 20
MIN_CHUNK_BYTES = 128 << 10
PIPELINE_CHUNKS = 8
"""Pipelined algorithms (chains, trees, hierarchical, nvls) want at least this many chunks."""
MAX_TRANSFERS = 4096

NVLS_MIN_BYTES = 1 << 20
TREE_MAX_BYTES = 16 << 20
LL_MAX_BYTES = 64 << 10
LL128_MAX_BYTES = 16 << 20

_INTRA_LINK = {"nvswitch": "nvlink", "pcie": "pcie", "c2c": "c2c"}


def split(total: int, parts: int) -> list[int]:
    """``total`` bytes in ``parts`` near-equal integer pieces (exact sum)."""
    q, r = divmod(total, parts)
    return [q + 1 if i < r else q for i in range(parts)]


def _prefix(segs: list[int]) -> list[int]:
    out = [0]
    for x in segs:
        out.append(out[-1] + x)
    return out


def _circ_sum(pre: list[int], hi: int, length: int) -> int:
    """Sum of segments hi, hi-1, ..., hi-length+1 (mod n): ring steps merged into one transfer."""
    n = len(pre) - 1
    whole, length = divmod(length, n)  # allreduce merges up to 2(n-1) steps: wraps at most twice
    total = whole * pre[n]
    if length == 0:
        return total
    lo = (hi - length + 1) % n
    if lo + length <= n:
        return total + pre[lo + length] - pre[lo]
    return total + pre[n] - pre[lo] + pre[lo + length - n]


class _Builder:
    """Appends transfers, resolving link kind and endpoints from the system."""

    def __init__(self, system, family: str, protocol: str) -> None:
        self.sys = system
        self.ts: list[Transfer] = []
        self.inflation = INFLATION[protocol]
        pi = _PROTO_IDX[protocol]
        self.family = family
        self.conn_family = family
        """Which of NCCL's connection sets carries net transfers (p2p for send/alltoall)."""
        rows = "tree" if family == "tree" else "ring"  # NVLS's inter-node part is a ring
        self.hw_ns = {link: int(round(v[rows][pi] * 1000)) for link, v in HW_LAT_US.items()}
        self.hw_ns["nvls"] = int(NVLS_HW_LAT_US * 1000)
        self.base_ns = int(round((NVLS_BASE_LAT_US if family == "nvls" else BASE_LAT_US[family][pi]) * 1000))

    def add(self, src: int, dst: int, payload: int, deps, channel: int, step: int, first: bool,
            *, node: str | None = None, steps: int = 1) -> int:
        gpus = self.sys.gpus
        if src == NVSWITCH or dst == NVSWITCH:
            link = "nvls"
            sw = f"{node}/nvswitch"
            src_ep = sw if src == NVSWITCH else gpus[src].name
            dst_ep = sw if dst == NVSWITCH else gpus[dst].name
        elif gpus[src].node_index == gpus[dst].node_index:
            link = _INTRA_LINK[self.sys.nodes[gpus[src].node_index].spec.intra]
            src_ep, dst_ep = gpus[src].name, gpus[dst].name
        else:
            link = "net"
            src_ep, dst_ep = gpus[src].nic, gpus[dst].nic
        dep_t = tuple(sorted({d for d in deps if d is not None}))
        lat = self.hw_ns[link] * steps if first else 0
        if not dep_t:
            lat += self.base_ns
        size = payload if self.inflation == 1.0 else math.ceil(payload * self.inflation)
        tid = len(self.ts)
        conn, step_bytes = -1, 0
        if link == "net":
            conn = _CONNECTION_FAMILY[self.conn_family] * _CONNECTIONS_PER_FAMILY + channel
            step_bytes = NCCL_P2P_CHUNK_BYTES if self.conn_family == "p2p" else NCCL_STEP_BYTES
        self.ts.append(Transfer(tid, src, dst, size, link, src_ep, dst_ep, dep_t, channel, step, lat, channel,
                                conn, step_bytes))
        return tid


# ----------------------------------------------------------------------------- layout helpers

def _layout(ranks: Sequence[int], system) -> list[list[int]]:
    """Group ranks by node (nodes in order of first appearance), each sorted by local index."""
    by_node: dict[int, list[int]] = {}
    for r in ranks:
        by_node.setdefault(system.gpus[r].node_index, []).append(r)
    return [sorted(rs, key=lambda r: system.gpus[r].local) for rs in by_node.values()]


def _aligned(layout: list[list[int]], system) -> bool:
    """Every node holds the same local indices (so positions are rails)."""
    locals0 = [system.gpus[r].local for r in layout[0]]
    return all([system.gpus[r].local for r in rs] == locals0 for rs in layout)


def ring_order(ranks: Sequence[int], system, channel: int = 0) -> list[int]:
    """Rail-aligned ring for one channel: whole nodes in turn, inter-node hops on one local index."""
    layout = _layout(ranks, system)
    if len(layout) == 1:  # odd channels run the other way round: uses both directions of mesh links
        return list(layout[0]) if channel % 2 == 0 else [layout[0][0], *reversed(layout[0][1:])]
    if not _aligned(layout, system) or len(layout[0]) == 1:
        return [r for rs in layout for r in rs]
    m = len(layout[0])
    e, x = channel % m, (channel + 1) % m
    order: list[int] = []
    for i, rs in enumerate(layout):
        mid = [rs[j] for j in range(m) if j not in (e, x)]
        if i % 2 == 0:
            order += [rs[e], *mid, rs[x]]
        else:
            order += [rs[x], *mid, rs[e]]
    return order


def _btree_parents(n: int, rotate: int = 0) -> list[int]:
    """Balanced in-order binary tree over positions 0..n-1 (parent of each; -1 = root).

    ``rotate`` relabels position p as (p + rotate) % n before building, giving the
    second tree of the double binary tree.
    """
    base = [-1] * n
    stack = [(0, n - 1, -1)]
    while stack:
        lo, hi, par = stack.pop()
        if lo > hi:
            continue
        mid = (lo + hi) // 2
        base[mid] = par
        stack.append((lo, mid - 1, mid))
        stack.append((mid + 1, hi, mid))
    if not rotate:
        return base
    out = [-1] * n
    for p in range(n):
        q = base[(p + rotate) % n]
        out[p] = -1 if q == -1 else (q - rotate) % n
    return out


# ----------------------------------------------------------------------------- algorithms

def _ring_loops(b: _Builder, orders: list[list[int]], per_channel: list[int], K: int, g: int,
                nsteps: int, start_deps: Callable[[int, int], list] | None = None) -> list[dict[int, int]]:
    """Ring collective (reduce-scatter / all-gather / both) on each channel's ``order``.

    At step s position p sends segment (p - s) mod n to p+1. Returns, per channel,
    rank -> id of the last transfer it received (for phase chaining).
    """
    done: list[dict[int, int]] = []
    for c, order in enumerate(orders):
        n = len(order)
        prev_own: list[int | None] = [None] * n
        last_in: dict[int, int] = {}
        for k, ck in enumerate(split(per_channel[c], K)):
            segs = split(ck, n)
            pre = _prefix(segs)
            prev_blk: list[int | None] = [None] * n
            for s0 in range(0, nsteps, g):
                blk = range(s0, min(s0 + g, nsteps))
                cur: list[int | None] = [None] * n
                for p in range(n):
                    size = _circ_sum(pre, p - blk[0], len(blk))
                    deps = [prev_own[p], prev_blk[(p - 1) % n]]
                    if s0 == 0 and start_deps is not None:
                        deps += start_deps(order[p], k)
                    tid = b.add(order[p], order[(p + 1) % n], size, deps, c, k * nsteps + s0, k == 0,
                                steps=len(blk))
                    cur[p] = prev_own[p] = tid
                    last_in[order[(p + 1) % n]] = tid
                prev_blk = cur
        done.append(last_in)
    return done


def _chain(b: _Builder, chains: list[list[int]], per_channel: list[int], K: int) -> None:
    """Pipelined chain chain[0] -> chain[1] -> ... per channel (broadcast, and reduce reversed)."""
    for c, chain in enumerate(chains):
        last_send: list[int | None] = [None] * len(chain)
        for k, ck in enumerate(split(per_channel[c], K)):
            arrive = None
            for p in range(len(chain) - 1):
                arrive = last_send[p] = b.add(chain[p], chain[p + 1], ck, (last_send[p], arrive), c, p, k == 0)


def _tree(b: _Builder, layout: list[list[int]], per_channel: list[int], K: int) -> None:
    N = len(layout)
    trees = [_btree_parents(N, 0), _btree_parents(N, 1)] if N > 1 else [[-1]]
    for c, data in enumerate(per_channel):
        parent = trees[c % len(trees)]
        children: list[list[int]] = [[] for _ in range(N)]
        root = parent.index(-1)
        for p, q in enumerate(parent):
            if q >= 0:
                children[q].append(p)
        pre: list[int] = []
        stack = [root]
        while stack:
            p = stack.pop()
            pre.append(p)
            stack.extend(children[p])
        chains = []
        for rs in layout:
            h = c % len(rs)
            chains.append([rs[h]] + rs[:h] + rs[h + 1:])
        heads = [ch[0] for ch in chains]
        own: dict[tuple[int, int], int] = {}

        def send(a: int, z: int, size: int, deps, k: int, step: int) -> int:
            tid = b.add(a, z, size, [own.get((a, z)), *deps], c, step, k == 0)
            own[(a, z)] = tid
            return tid

        for k, ck in enumerate(split(data, K)):
            up_sent: dict[int, int] = {}
            root_in: list[int | None] = []
            for pos in reversed(pre):  # children before parents
                ch = chains[pos]
                arr = None
                for i in range(len(ch) - 1, 0, -1):
                    arr = send(ch[i], ch[i - 1], ck, [arr], k, 0)
                head_in = [arr] + [up_sent[cp] for cp in children[pos]]
                if parent[pos] >= 0:
                    up_sent[pos] = send(heads[pos], heads[parent[pos]], ck, head_in, k, 1)
                else:
                    root_in = head_in
            down_to: dict[int, int] = {}
            for pos in pre:
                ch = chains[pos]
                in_deps = root_in if pos == root else [down_to[pos]]
                for cp in children[pos]:
                    down_to[cp] = send(heads[pos], heads[cp], ck, in_deps, k, 2)
                arr_deps = in_deps
                for i in range(len(ch) - 1):
                    arr_deps = [send(ch[i], ch[i + 1], ck, arr_deps, k, 3)]


def _hier(b: _Builder, layout: list[list[int]], size: int, C: int, K: int, g: int, use_nvls: bool) -> None:
    """Intra reduce (ring RS or NVLS) -> inter-node ring allreduce per position -> intra gather.

    ``g`` merges up to g consecutive ring steps (intra and inter) into one transfer.
    NVLS transfers are merged per GPU: one GPU->switch transfer carries all its
    slices, one switch->GPU multicast transfer delivers all slices.
    """
    N, m = len(layout), len(layout[0])
    nodes = [b.sys.gpus[rs[0]].node for rs in layout]
    own: dict[tuple, int] = {}
    gi = max(1, min(g, m - 1))

    def send(a, z, sz, deps, c, step, k, key, node=None, steps=1):
        tid = b.add(a, z, sz, [own.get(key), *deps], c, step, k == 0, node=node, steps=steps)
        own[key] = tid
        return tid

    def intra_ring(rs, segs, c, k, phase, first_deps, offset):
        """m-1 ring steps on one node; step s at p sends segs[(p - s - offset) % m]. Returns arrival per p."""
        prev: list[int | None] = [None] * m
        for s0 in range(0, m - 1, gi):
            blk = range(s0, min(s0 + gi, m - 1))
            cur: list[int | None] = [None] * m
            for p in range(m):
                deps = [prev[(p - 1) % m]] + (first_deps(p) if s0 == 0 else [])
                cur[p] = send(rs[p], rs[(p + 1) % m], sum(segs[(p - s - offset) % m] for s in blk), deps,
                              c, (300 if phase == "ag" else 0) + s0, k, (phase, rs[p], c), steps=len(blk))
            prev = cur
        return [prev[(p - 1) % m] for p in range(m)]

    for k, piece in enumerate(split(size, K)):
        for c, data in enumerate(split(piece, C)):
            segs = split(data, m)  # position p owns segment p after the intra reduce
            ready: dict[tuple[int, int], list] = {}  # (node i, position p) -> deps of "segment p reduced here"
            for i, rs in enumerate(layout):
                if use_nvls:  # every GPU sends its whole buffer to the switch; the switch returns slice p to p
                    ups = [send(rs[q], NVSWITCH, data, [], c, 0, k, ("ld", rs[q], c), nodes[i]) for q in range(m)]
                    for p in range(m):
                        ready[(i, p)] = [send(NVSWITCH, rs[p], segs[p], ups, c, 1, k, ("ldr", rs[p], c), nodes[i])]
                else:  # reduce-scatter: after m-1 steps position p holds segment p
                    arrived = intra_ring(rs, segs, c, k, "rs", lambda p: [], 1)
                    for p in range(m):
                        ready[(i, p)] = [arrived[p]]
            if N > 1:  # inter-node ring allreduce of segment p among position-p ranks
                nsteps = 2 * (N - 1)
                for p in range(m):
                    pre = _prefix(split(segs[p], N))
                    prev_blk: list[int | None] = [None] * N
                    for s0 in range(0, nsteps, g):
                        blk = range(s0, min(s0 + g, nsteps))
                        cur = [None] * N
                        for i in range(N):
                            deps = [prev_blk[(i - 1) % N]] + (ready[(i, p)] if s0 == 0 else [])
                            cur[i] = send(layout[i][p], layout[(i + 1) % N][p], _circ_sum(pre, i - blk[0], len(blk)),
                                          deps, c, 100 + s0, k, ("ar", layout[i][p], c), steps=len(blk))
                        prev_blk = cur
                    for i in range(N):
                        ready[(i, p)] = [prev_blk[(i - 1) % N]]
            for i, rs in enumerate(layout):
                if use_nvls:  # owners store their reduced slice; the switch multicasts all slices to everyone
                    sts = [send(rs[p], NVSWITCH, segs[p], ready[(i, p)], c, 200, k, ("st", rs[p], c), nodes[i])
                           for p in range(m)]
                    for q in range(m):
                        send(NVSWITCH, rs[q], data, sts, c, 201, k, ("mc", rs[q], c), nodes[i])
                else:  # all-gather: step s at p forwards segment (p - s)
                    intra_ring(rs, segs, c, k, "ag", lambda p, i=i: ready[(i, p)], 0)


def _nvls_single(b: _Builder, op: str, rs: list[int], size: int, C: int, K: int) -> None:
    """Single-node NVLS allgather (each GPU stores its shard, the switch multicasts all shards to
    every GPU) or reducescatter (every GPU sends its buffer, the switch returns slice p reduced to p)."""
    m = len(rs)
    node = b.sys.gpus[rs[0]].node
    own: dict[tuple, int] = {}

    def send(a, z, sz, deps, c, step, k, key):
        tid = b.add(a, z, sz, [own.get(key), *deps], c, step, k == 0, node=node)
        own[key] = tid
        return tid

    for k, piece in enumerate(split(size, K)):
        for c, data in enumerate(split(piece, C)):
            slices = split(data, m)
            if op == "allgather":
                sts = [send(rs[p], NVSWITCH, slices[p], [], c, 0, k, ("st", p, c)) for p in range(m)]
                for q in range(m):
                    send(NVSWITCH, rs[q], data, sts, c, 1, k, ("mc", q, c))
            else:
                ups = [send(rs[q], NVSWITCH, data, [], c, 0, k, ("ld", q, c)) for q in range(m)]
                for p in range(m):
                    send(NVSWITCH, rs[p], slices[p], ups, c, 1, k, ("ldr", p, c))


def _direct_alltoall(b: _Builder, ranks: list[int], size: int, C: int) -> None:
    n = len(ranks)
    parts = split(size, n)  # part `shift` goes to rank i+shift, so every rank sends and receives the same
    for shift in range(1, n):  # destinations rotated per rank (NCCL's order): no incast at one rank
        for i, src in enumerate(ranks):
            part = parts[shift]
            for c, piece in enumerate(split(part, C)):
                b.add(src, ranks[(i + shift) % n], piece, (), c, shift, True)


# ----------------------------------------------------------------------------- tuner

def _fastest_in_node(op, ranks, size_bytes, system, channels, root, max_transfers) -> FlowSchedule:
    """Inside one node, pick the (algorithm, protocol) the cost model says is fastest.

    That is how NCCL's tuner works (it evaluates its latency/bandwidth model for
    every algorithm x protocol and takes the minimum); a size threshold would
    make the busbw-vs-size curve jump where the threshold sits.
    """
    from heterosim.comm.intranode import intra_time_ns

    nodes = _nodes_of(ranks, system)
    # NCCL enables LL128 only where NVLink carries it, never over PCIe
    candidates = [("ring", p) for p in ("simple", "ll", "ll128") if p != "ll128" or nodes[0].spec.intra != "pcie"]
    if op in ("allreduce", "allgather", "reducescatter") and all(nd.spec.nvls for nd in nodes):
        candidates.append(("nvls", "simple"))
    best = None
    for algo, proto in candidates:
        sched = plan_collective(op, ranks, size_bytes, system, algorithm=algo, protocol=proto, channels=channels,
                                root=root, max_transfers=max_transfers)
        t = intra_time_ns(sched, system)
        if best is None or t < best[0]:
            best = (t, sched)
    return best[1]


def _nodes_of(ranks, system):
    return [system.nodes[i] for i in sorted({system.gpus[r].node_index for r in ranks})]


def choose_algorithm(op: str, ranks: Sequence[int], size_bytes: int, system) -> str:
    """The ``auto`` rule documented in the module docstring."""
    if op in ("send", "alltoall"):
        return "direct"
    layout = _layout(ranks, system)
    if op in ("allgather", "reducescatter") and len(layout) > 1:
        return TUNED_TO_SCHEDULE[nccl_choice(op, ranks, size_bytes, system)[0]]
    if op != "allreduce":
        return "ring"
    nodes = _nodes_of(ranks, system)
    if len(layout) == 1:
        if size_bytes >= NVLS_MIN_BYTES and len(ranks) > 2 and all(n.spec.nvls for n in nodes):
            return "nvls"
        return "ring"
    return TUNED_TO_SCHEDULE[nccl_choice(op, ranks, size_bytes, system)[0]]


TUNED_TO_SCHEDULE = {"ring": "ring", "tree": "tree", "collnet_direct": "collnet", "collnet_chain": "collnet",
                     "nvls": "collnet", "nvls_tree": "hierarchical", "pat": "ring"}
"""NCCL's algorithm (tuning model, multi-node) -> the schedule HeteroSim builds for it (module docstring)."""


def nccl_choice(op: str, ranks: Sequence[int], size_bytes: int, system) -> tuple[str, str, float]:
    """NCCL's (algorithm, protocol, predicted us) for this group (heterosim/comm/tuning.py)."""
    from heterosim.comm.tuning import choose, setup_for

    return choose(setup_for(ranks, system), op, size_bytes)


def choose_protocol(algorithm: str, size_bytes: int, ranks: Sequence[int], system) -> str:
    if algorithm == "nvls":
        return "simple"
    if size_bytes <= LL_MAX_BYTES:
        return "ll"
    if size_bytes <= LL128_MAX_BYTES and all(n.spec.intra != "pcie" for n in _nodes_of(ranks, system)):
        return "ll128"
    return "simple"


def _auto_channels(op: str, algorithm: str, layout: list[list[int]], system) -> int:
    if op == "send":
        return 1 if len(layout) == 1 else 2  # NCCL_NCHANNELS_PER_NET_PEER defaults to 2
    if op == "alltoall":
        return 1
    if len(layout) == 1:
        return 2
    nics = min(system.nodes[system.gpus[rs[0]].node_index].spec.nics_per_node for rs in layout)
    m = min(len(rs) for rs in layout)
    return max(2, min(m, nics))


def _fit(count: Callable[[int, int, int], int], C: int, K: int, max_g: int, budget: int) -> tuple[int, int, int]:
    """Fewer chunks, then merged steps, then fewer channels, until count(C, K, g) <= budget."""
    g = 1
    while K > 1 and count(C, K, g) > budget:
        K = max(1, K // 2)
    while g < max_g and count(C, K, g) > budget:
        g = min(max_g, g * 2)
    while C > 1 and count(C, K, g) > budget:
        C -= 1
    return C, K, g


def _want_chunks(per_channel: int, div: int, pipelined: bool) -> int:
    k = math.ceil(per_channel / (div * MAX_CHUNK_BYTES)) if per_channel else 1
    if pipelined:
        k = max(k, min(PIPELINE_CHUNKS, math.ceil(per_channel / (div * MIN_CHUNK_BYTES))))
    return max(1, k)


# ----------------------------------------------------------------------------- entry point

NCCL_STEP_BYTES = (4 << 20) // 8
"""NCCL_BUFFSIZE (4 MiB) / NCCL_STEPS (8): bytes per network step of a collective (NCCL docs)."""
NCCL_P2P_CHUNK_BYTES = 128 << 10
"""NCCL_P2P_NET_CHUNKSIZE default (NCCL docs): bytes per network step of send/recv."""
_CONNECTION_FAMILY = {"ring": 0, "tree": 1, "nvls": 2, "p2p": 3}
_CONNECTIONS_PER_FAMILY = 1 << 16
"""Connection ids: family x 2^16 + channel (NCCL sets up separate connections per family)."""


def plan_collective(op: str, ranks: Sequence[int], size_bytes: int, system, *, algorithm: str = "auto",
                    protocol: str = "auto", channels: int | None = None, root: int | None = None,
                    max_transfers: int = MAX_TRANSFERS) -> FlowSchedule:
    """Plan one collective instance on ``ranks`` (global GPU ranks of ``system``).

    Size semantics follow nccl-tests (see FlowSchedule.size_bytes); ``send`` takes
    ``ranks=[src, dst]``. Raises UserError for bad input (unknown op/algorithm,
    ranks not in the topology, nvls on nodes without NVLS).
    """
    ranks, root = _checked_request(op, ranks, size_bytes, system, algorithm, protocol, channels, root)
    n = len(ranks)
    layout = _layout(ranks, system)
    _check_algorithm_fits(algorithm, ranks, layout, system)
    if algorithm == "auto" and protocol == "auto" and len(layout) == 1 and n > 2 and size_bytes > 0 \
            and op in ("allreduce", "reducescatter", "allgather"):
        return _fastest_in_node(op, ranks, size_bytes, system, channels, root, max_transfers)
    algo, proto, tuned = _algorithm_and_protocol(op, ranks, size_bytes, system, algorithm, protocol, layout)
    if algo in ("nvls", "collnet"):
        proto = "simple"
    family = "nvls" if algo == "nvls" else ("tree" if algo == "tree" else "ring")
    sched = FlowSchedule(op=op, algorithm=algo, protocol=proto, ranks=tuple(ranks), size_bytes=size_bytes,
                         inflation=INFLATION[proto], root=root,
                         tuned=None if tuned is None else f"{tuned[0]}/{tuned[1]}")
    if n < 2 or size_bytes == 0:
        return sched

    b = _Builder(system, family, proto)
    b.conn_family = "p2p" if op in ("send", "alltoall") else family
    C = channels or _auto_channels(op, algo, layout, system)
    C = max(1, min(C, size_bytes // max(1, n) or 1))  # no channel without at least a byte per rank
    N, m = len(layout), len(layout[0])

    if op == "send":
        for c, piece in enumerate(split(size_bytes, C)):
            b.add(ranks[0], ranks[1], piece, (), c, 0, True)
        K = g = 1
    elif op == "alltoall":
        C, K, g = _fit(lambda c, k, g: n * (n - 1) * c, C, 1, 1, max_transfers)
        _direct_alltoall(b, ranks, size_bytes, C)
    elif algo == "ring":
        if op in ("broadcast", "reduce"):
            K0 = _want_chunks(size_bytes // C, 1, True)
            C, K, g = _fit(lambda c, k, g: c * k * (n - 1), C, K0, 1, max_transfers)
            chains = []
            for c in range(C):
                order = ring_order(ranks, system, c)
                i = order.index(root)
                order = order[i:] + order[:i]
                chains.append(order if op == "broadcast" else order[1:] + order[:1])
            _chain(b, chains, split(size_bytes, C), K)
        else:
            nsteps = 2 * (n - 1) if op == "allreduce" else n - 1
            K0 = _want_chunks(size_bytes // C, n, False)
            C, K, g = _fit(lambda c, k, g: c * k * n * math.ceil(nsteps / g), C, K0, nsteps, max_transfers)
            orders = [ring_order(ranks, system, c) for c in range(C)]
            _ring_loops(b, orders, split(size_bytes, C), K, g, nsteps)
    elif algo == "collnet":
        from heterosim.comm import collnet

        heads = len(collnet.heads_of(layout, system)[0])
        leaves = collnet.leaf_count(layout, system)
        K0 = collnet.want_chunks(size_bytes, heads, MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, PIPELINE_CHUNKS)
        K = K0
        while K > 1 and collnet.count_transfers(layout, heads, leaves, K) > max_transfers:
            K = max(1, K // 2)
        # the network legs are four store-and-forward stages (NIC -> leaf -> root -> leaf -> NIC): unpipelined
        # they would take ~4x as long, so keep COLLNET_MIN_CHUNKS chunks even past the transfer budget
        K = max(K, min(K0, collnet.COLLNET_MIN_CHUNKS))
        C, g = heads, 1
        collnet.build(b, layout, size_bytes, K, NCCL_STEP_BYTES)
    elif algo == "tree":
        K0 = _want_chunks(size_bytes // C, 1, True)
        C, K, g = _fit(lambda c, k, g: c * k * 2 * (n - 1), C, K0, 1, max_transfers)
        _tree(b, layout, split(size_bytes, C), K)
    elif algo in ("hierarchical", "nvls") and op == "allreduce":
        use_nvls = algo == "nvls"
        nsteps = 2 * (N - 1)

        def count(c, k, g):
            intra = 4 * m if use_nvls else 2 * m * math.ceil((m - 1) / max(1, min(g, m - 1)))
            return k * c * (N * intra + (m * N * math.ceil(nsteps / g) if N > 1 else 0))
        K0 = _want_chunks(size_bytes // C, m, True)
        C, K, g = _fit(count, C, K0, max(1, nsteps, m - 1), max_transfers)
        _hier(b, layout, size_bytes, C, K, g, use_nvls)
    else:  # single-node nvls allgather / reducescatter
        K0 = _want_chunks(size_bytes // C, m, True)
        C, K, g = _fit(lambda c, k, g: k * c * 2 * m, C, K0, 1, max_transfers)
        _nvls_single(b, op, layout[0], size_bytes, C, K)

    sched.transfers = b.ts
    sched.channels, sched.chunks, sched.step_group = C, K, g
    return sched



def _checked_request(op: str, ranks, size_bytes: int, system, algorithm: str, protocol: str,
                     channels: int | None, root: int | None) -> tuple[list[int], int | None]:
    """``plan_collective``'s input checks (one-line UserErrors); (ranks as ints, the root of broadcast/reduce)."""
    if op == "recv":
        raise UserError("plan the matching send instead (ranks=[src, dst])", field="op", value=op)
    if op not in OPS:
        raise UserError(f"unknown collective; known: {', '.join(OPS)}", field="op", value=op)
    if algorithm not in ALGORITHMS:
        raise UserError(f"unknown algorithm; known: {', '.join(ALGORITHMS)}", field="comm.algorithm",
                        value=algorithm)
    if protocol not in PROTOCOLS:
        raise UserError(f"unknown protocol; known: {', '.join(PROTOCOLS)}", field="comm.protocol", value=protocol)
    if channels is not None and channels < 1:
        raise UserError("must be >= 1", field="comm.channels", value=channels)
    if size_bytes < 0:
        raise UserError("must be >= 0", field="size_bytes", value=size_bytes)
    ranks = [int(r) for r in ranks]
    for r in ranks:
        if not 0 <= r < system.num_gpus:
            raise UserError(f"group rank {r} is not a GPU of the topology ({system.num_gpus} GPUs)",
                            field="group", value=tuple(ranks) if len(ranks) <= 16 else r)
    if len(set(ranks)) != len(ranks):
        raise UserError("group lists a rank twice", field="group", value=tuple(ranks))
    if op == "send" and len(ranks) != 2:
        raise UserError("send needs ranks=[src, dst]", field="group", value=tuple(ranks))
    if op in ("broadcast", "reduce"):
        root = ranks[0] if root is None else root
        if root not in ranks:
            raise UserError("root is not in the group", field="root", value=root)
    return ranks, root


def _check_algorithm_fits(algorithm: str, ranks: list[int], layout, system) -> None:
    """An explicitly requested nvls / collnet needs the hardware for it (NVLS switches; a SHARP fabric)."""
    if algorithm == "nvls":
        for node in _nodes_of(ranks, system):
            if not node.spec.nvls:
                what = node.spec.intra + (" without NVLS" if node.spec.intra == "nvswitch" else "")
                raise UserError(f"algorithm nvls needs an NVSwitch with NVLS; node {node.name} is {what}",
                                field="comm.algorithm", value="nvls")
    if algorithm == "collnet":
        from heterosim.comm.collnet import sharp_available

        if len(layout) > 1 and not sharp_available(ranks, system):
            raise UserError("algorithm collnet needs a fabric with in_network_reduction: sharp",
                            field="comm.algorithm", value="collnet")


def _algorithm_and_protocol(op: str, ranks: list[int], size_bytes: int, system, algorithm: str, protocol: str,
                            layout) -> tuple[str, str, tuple | None]:
    """(schedule algorithm, protocol, NCCL's tuned (algorithm, protocol) or None): across nodes ``auto``
    follows NCCL's tuning model (heterosim/comm/tuning.py), else the planner's own choice."""
    tuned = None
    if algorithm == "auto" and len(layout) > 1 and op in ("allreduce", "allgather", "reducescatter") and size_bytes:
        tuned = nccl_choice(op, ranks, size_bytes, system)
        algo = TUNED_TO_SCHEDULE[tuned[0]]
    else:
        algo = choose_algorithm(op, ranks, size_bytes, system) if algorithm == "auto" else algorithm
    algo = _supported(op, algo, layout)
    if protocol != "auto":
        proto = protocol
    elif tuned is not None and algo == TUNED_TO_SCHEDULE[tuned[0]]:
        proto = tuned[1]
    else:
        proto = choose_protocol(algo, size_bytes, ranks, system)
    return algo, proto, tuned


def _supported(op: str, algo: str, layout: list[list[int]]) -> str:
    """Fall back to ring (direct for alltoall/send) where ``algo`` does not apply."""
    if op in ("send", "alltoall"):
        return "direct"
    if algo == "direct":
        return "ring"
    if algo == "tree":
        return "tree" if op == "allreduce" else "ring"
    uniform = len({len(rs) for rs in layout}) == 1
    if algo == "hierarchical":
        return "hierarchical" if op == "allreduce" and len(layout) > 1 and uniform else "ring"
    if algo == "collnet":
        return "collnet" if op == "allreduce" and len(layout) > 1 else "ring"
    if algo == "nvls":
        if op == "allreduce" and uniform and len(layout[0]) > 1:
            return "nvls"
        if op in ("allgather", "reducescatter") and len(layout) == 1:
            return "nvls"
        return "ring"
    return algo
