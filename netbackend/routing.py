"""Path selection shared by the network backends: per-switch ECMP, or rail-pinned.

Each undirected :class:`~netbackend.topo.Link` ``i`` becomes two directed links:
``2*i`` (a -> b) and ``2*i + 1`` (b -> a). Paths are shortest in hop count.

Like a real fabric, the choice is made hop by hop: at every node with several
next hops that bring the packet closer to the destination, the switch hashes the
flow with its own salt and picks one. Per-switch salts avoid hash polarisation,
and nothing ever enumerates all paths, so a fabric with thousands of hosts costs
one BFS per destination *switch* (a host with a single access link shares its
switch's distance table).

ECMP contract, shared with the ns-3 switch (``RdmaEcmpIndex`` in
``ns3/src/heterosim-rdma/model/rdma-switch.h``), so a flow takes the same path in
both backends:

* the flow's hash is :meth:`Router.flow_hash32` ``(src, dst, flow_key)``, a 32-bit
  value computed once (ns-3 carries it unchanged in every data packet);
* the options at a node are its directed links to the neighbours one hop closer,
  in canonical order: by neighbour node index (hosts, then switches, as listed
  in the topology), then by link index;
* the node takes option ``ecmp_index(flow_hash32, salt, n)`` =
  ``fmix32(flow_hash32 ^ salt) % n`` (MurmurHash3's 32-bit finaliser), ``salt``
  being :meth:`Router.switch_salt32` of the node (from its name and the seed).

``ecmp: rail`` keeps its pinning: NIC ``k`` takes option ``k % n`` everywhere.

``ecmp: adaptive`` (flow backend only) models adaptive routing / per-packet spraying as its ideal: a
switch spreads every flow evenly over its equal-cost next hops, so next hops that are interchangeable
(switches with the same neighbours over links of the same rates and delays, e.g. the spines of a
two-tier leaf-spine or a rail plane) act as one switch whose links carry their summed rate. The router
routes on that merged fabric (:func:`sprayed`); what choice remains (between switches with different
neighbours, as the aggregation tier of a three-tier fat tree) is hashed as in ``hash``.

Hosts never forward: only switches are transit nodes.
"""
from __future__ import annotations

import re
from collections import Counter, deque

from hscommon.errors import NetworkError
from netbackend.topo import Link, NetTopology

_M64 = (1 << 64) - 1
_M32 = 0xFFFFFFFF
_RAIL_RE = re.compile(r"nic(\d+)$")


def rail_of(index: int, name: str) -> int:
    """Rail of a host for ``ecmp: rail``: k for a NIC named ``.../nic{k}``, else its index."""
    m = _RAIL_RE.search(name)
    return int(m.group(1)) if m else index


def mix64(x: int) -> int:
    """splitmix64 finaliser: a fast, well-spread, process-independent integer hash
    (Python's ``hash(str)`` is salted per process, so it cannot make runs repeatable)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def fmix32(h: int) -> int:
    """MurmurHash3's 32-bit finaliser (Appleby, public domain); ``RdmaMix32`` in C++."""
    h &= _M32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def ecmp_index(flow_hash32: int, salt32: int, n: int) -> int:
    """Which of ``n`` equal-cost options (canonical order) a switch with ``salt32`` takes."""
    return fmix32(flow_hash32 ^ salt32) % n


def fnv1a64(text: str) -> int:
    """FNV-1a 64-bit hash of the UTF-8 bytes of ``text`` (Fowler/Noll/Vo, public domain)."""
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & _M64
    return h


def _fold32(x: int) -> int:
    return (x ^ (x >> 32)) & _M32


PACKET_ECMP_MODES = ("hash", "rail")
"""ECMP modes a switch model with per-packet forwarding implements (the ns-3 switch)."""
ECMP_MODES = ("hash", "rail", "adaptive")
"""Every ECMP mode the router implements (``adaptive`` is a flow-level idealisation: :func:`sprayed`)."""


def check_fabric(topology: NetTopology, mode: str = "hash", modes: tuple[str, ...] = PACKET_ECMP_MODES) -> None:
    """What routing needs of a fabric (raises :class:`NetworkError`, one line): an ECMP mode of ``modes`` (the
    backend's), unique node names, links between known nodes, not a node to itself, a positive rate, a
    non-negative delay. ``Router`` runs it first; backends run it in ``check_config`` (what ``heterosim
    validate`` runs)."""
    if mode not in modes:
        extra = " ('adaptive' is modelled by the flow backend only)" if mode in ECMP_MODES else ""
        raise NetworkError(f"ECMP mode must be {' or '.join(repr(m) for m in modes)}{extra}", field="network.ecmp",
                           value=mode)
    seen: set[str] = set()
    for n in [*topology.hosts, *topology.switches]:
        if n in seen:
            raise NetworkError("node name used twice", field="topology.nodes", value=n)
        seen.add(n)
    for i, link in enumerate(topology.links):
        for end in (link.a, link.b):
            if end not in seen:
                raise NetworkError("link end is neither a host nor a switch", field=f"topology.links[{i}]", value=end)
        if link.a == link.b:
            raise NetworkError("link connects a node to itself", field=f"topology.links[{i}]", value=link.a)
        if not link.rate_gbps > 0:
            raise NetworkError("link rate must be > 0 Gb/s", field=f"topology.links[{i}].rate_gbps",
                               value=link.rate_gbps)
        if link.delay_ns < 0:
            raise NetworkError("link delay must be >= 0 ns", field=f"topology.links[{i}].delay_ns",
                               value=link.delay_ns)


def sprayed(topology: NetTopology) -> NetTopology:
    """The fabric as ideal adaptive routing sees it (``ecmp: adaptive``): switches with the same neighbours,
    reached over links of the same rates and delays, merged into one switch (named after the first, with
    ``[xN]``), and parallel links of one delay between two nodes merged into one link of their summed rate.
    Repeated until nothing merges. Per-packet spraying over interchangeable next hops loads each of them with
    1/N of every flow, which is what one resource of N times the rate gives a max-min model; hosts are never
    merged. A fabric with nothing to merge comes back unchanged (the same object)."""
    cur = topology
    while True:
        nbrs: dict[str, Counter] = {s: Counter() for s in cur.switches}
        for link in cur.links:
            for u, v in ((link.a, link.b), (link.b, link.a)):
                if u in nbrs:
                    nbrs[u][(v, link.rate_gbps, link.delay_ns)] += 1
        groups: dict[frozenset, list[str]] = {}
        for sw in cur.switches:
            if nbrs[sw]:
                groups.setdefault(frozenset(nbrs[sw].items()), []).append(sw)
        rename = {m: f"{g[0]}[x{len(g)}]" for g in groups.values() if len(g) > 1 for m in g}
        merged: dict[tuple[str, str, int], float] = {}
        for link in cur.links:
            a, b = rename.get(link.a, link.a), rename.get(link.b, link.b)
            key = (a, b, link.delay_ns) if a <= b else (b, a, link.delay_ns)
            merged[key] = merged.get(key, 0.0) + link.rate_gbps
        if not rename and len(merged) == len(cur.links):
            return cur
        switches = list(dict.fromkeys(rename.get(s, s) for s in cur.switches))
        links = [Link(a, b, rate, delay) for (a, b, delay), rate in merged.items()]
        cur = NetTopology(list(cur.hosts), switches, links, dict(cur.host_rate_gbps))


class Router:
    """Shortest-path routing with deterministic ECMP (``mode="hash"``) or rail pinning.

    ``rail`` mode: wherever there is a choice, NIC ``.../nic{k}`` always takes
    option ``k mod n`` (hosts without a ``nic{k}`` suffix use their position in
    ``topology.hosts``), so each rail's traffic stays on one plane/spine no matter
    the flow key — what rail-optimised deployments pin by configuration.
    """

    @classmethod
    def shared(cls, topology: NetTopology, mode: str = "hash", seed: int = 0) -> "Router":
        """The router of ``topology`` for (mode, seed), built once and kept with the topology: its
        distance tables and paths depend on nothing else, so every backend on that (unchanged) topology
        can share them (the planner simulates many candidates on one system)."""
        routers = topology.__dict__.setdefault("_shared_routers", {})
        r = routers.get((mode, int(seed)))
        if r is None:
            r = routers[(mode, int(seed))] = cls(topology, mode=mode, seed=seed)
        return r

    def __init__(self, topology: NetTopology, mode: str = "hash", seed: int = 0):
        check_fabric(topology, mode, ECMP_MODES)
        if mode == "adaptive":  # route on the merged fabric; remaining choices hash (module docstring)
            topology = sprayed(topology)
        self.topology = topology
        """The fabric routed on: the given one, or with ``adaptive`` its :func:`sprayed` form (link ids refer to it)."""
        self.mode = mode
        self._hashed: dict[tuple[int, int], bool] = {}
        self.seed = int(seed)
        names = list(topology.hosts) + list(topology.switches)
        self.node_names: list[str] = names
        self.node_index: dict[str, int] = {}
        for i, n in enumerate(names):
            self.node_index[n] = i
        self.num_hosts = len(topology.hosts)
        n_nodes = len(names)
        # Directed links.
        self.link_src: list[int] = []
        self.link_dst: list[int] = []
        self.link_capacity_Bps: list[float] = []
        """Line rate per directed link in bytes/s."""
        self.link_rate_gbps: list[float] = []
        self.link_delay_ns: list[int] = []
        # adjacency: node -> {neighbour: [directed link ids]} (parallel links allowed)
        self._adj: list[dict[int, list[int]]] = [dict() for _ in range(n_nodes)]
        for link in topology.links:  # (check_fabric vetted every link)
            a, b = self.node_index[link.a], self.node_index[link.b]
            for u, v in ((a, b), (b, a)):
                lid = len(self.link_src)
                self.link_src.append(u)
                self.link_dst.append(v)
                self.link_rate_gbps.append(float(link.rate_gbps))
                self.link_capacity_Bps.append(link.rate_gbps * 1e9 / 8)
                self.link_delay_ns.append(int(link.delay_ns))
                self._adj[u].setdefault(v, []).append(lid)
        # Switch neighbours in canonical order (node index; links in link order).
        self._switch_nbrs: list[list[int]] = [
            sorted(v for v in self._adj[u] if v >= self.num_hosts) for u in range(n_nodes)]
        self._name_hash = [fnv1a64(n) for n in names]
        seed_mix = mix64(self.seed & _M64)
        self._salt32 = [_fold32(mix64(h ^ seed_mix)) for h in self._name_hash]
        self._dist: dict[int, list[int]] = {}
        self._path_cache: dict[tuple[int, int, int], tuple[list[int], list[int]]] = {}
        self._rail = [self._rail_of(i, h) for i, h in enumerate(topology.hosts)]

    # ------------------------------------------------------------------ helpers
    @property
    def num_links(self) -> int:
        """Directed links."""
        return len(self.link_src)

    def link_name(self, lid: int) -> tuple[str, str]:
        return self.node_names[self.link_src[lid]], self.node_names[self.link_dst[lid]]

    @staticmethod
    def _rail_of(index: int, name: str) -> int:
        return rail_of(index, name)

    def _host_idx(self, name: str, field: str) -> int:
        i = self.node_index.get(name)
        if i is None or i >= self.num_hosts:
            raise NetworkError("unknown host", field=field, value=name)
        return i

    def _dist_table(self, target: int) -> list[int]:
        """Hop distance from every node to ``target`` through switches only (-1 = unreachable)."""
        d = self._dist.get(target)
        if d is None:
            d = [-1] * len(self.node_names)
            d[target] = 0
            q = deque([target])
            nh = self.num_hosts
            while q:
                u = q.popleft()
                du = d[u] + 1
                for v in self._adj[u]:
                    if d[v] < 0:
                        d[v] = du
                        if v >= nh:  # hosts do not forward: they get a distance, not a turn
                            q.append(v)
            self._dist[target] = d
        return d

    def _anchor(self, dst: int) -> tuple[int, int]:
        """(node whose distance table serves ``dst``, offset). A single-homed host uses its switch's."""
        nbrs = self._adj[dst]
        if len(nbrs) == 1:
            (sw,) = nbrs
            if sw >= self.num_hosts:
                return sw, 1
        return dst, 0

    def _flow_hash(self, src: int, dst: int, flow_key: int) -> int:
        return _fold32(mix64(mix64(self._name_hash[src] ^ mix64(self._name_hash[dst])) ^ (flow_key & _M64)))

    def _pick(self, options: list, at: int, fhash: int, src: int):
        if len(options) == 1:
            return options[0]
        if self.mode == "rail":
            return options[self._rail[src] % len(options)]
        return options[ecmp_index(fhash, self._salt32[at], len(options))]

    def flow_hash32(self, src: str, dst: str, flow_key: int = 0) -> int:
        """The flow's 32-bit ECMP hash: splitmix64 over the FNV-1a hashes of the two
        node names and the 64-bit flow key, folded to 32 bits (high ^ low word).

        Independent of the seed (the per-switch salts carry it) and of node order.
        """
        s = self.node_index.get(src)
        t = self.node_index.get(dst)
        if s is None or t is None:
            raise NetworkError("unknown node", field="message.src" if s is None else "message.dst",
                               value=src if s is None else dst)
        return self._flow_hash(s, t, flow_key)

    def switch_salt32(self, name: str) -> int:
        """Per-node ECMP salt: splitmix64 of the FNV-1a hash of its name xor the
        mixed seed, folded to 32 bits (the ns-3 switch gets it in FabricSpec.switchSalt)."""
        i = self.node_index.get(name)
        if i is None:
            raise NetworkError("unknown node", field="topology", value=name)
        return self._salt32[i]

    # ------------------------------------------------------------------ public
    def route(self, src: str, dst: str, flow_key: int = 0) -> tuple[list[int], list[int]]:
        """(node indices src..dst, directed link ids) for one flow. Cached."""
        s = self._host_idx(src, "message.src")
        t = self._host_idx(dst, "message.dst")
        if self.mode == "rail":
            flow_key = 0  # pinned: the key picks nothing, so every key shares one cached path
        key = (s, t, flow_key)
        hit = self._path_cache.get(key)
        if hit is not None:
            return hit
        nodes = [s]
        links: list[int] = []
        if s != t:
            anchor, _ = self._anchor(t)
            dist = self._dist_table(anchor)
            if dist[s] < 0:
                raise NetworkError(f"no path from {src} to {dst}", field="message.dst", value=dst)
            fh = self._flow_hash(s, t, flow_key)
            u = s
            while u != t:
                if t in self._adj[u]:
                    opts = self._adj[u][t]
                else:
                    # (with an anchor switch, distance to t is dist[.] + 1 for every node
                    # but t, so "one step closer" means the same in both tables)
                    want = dist[u] - 1
                    if want == 0:  # one hop from the anchor, the only node at distance 0 (no scan of a spine's ports)
                        opts = self._adj[u].get(anchor, []) if anchor >= self.num_hosts else []
                    else:
                        opts = [lid for v in self._switch_nbrs[u] if dist[v] == want for lid in self._adj[u][v]]
                    if not opts:
                        raise NetworkError(f"no path from {src} to {dst}", field="message.dst", value=dst)
                lid = self._pick(opts, u, fh, s)
                links.append(lid)
                u = self.link_dst[lid]
                nodes.append(u)
        res = (nodes, links)
        self._path_cache[key] = res
        return res

    def hashed(self, src: str, dst: str) -> bool:
        """Whether a flow src -> dst has a choice among equal-cost links that the ECMP hash makes
        (``mode == "hash"``; rail mode and single paths: False). Cached."""
        if self.mode == "rail":
            return False
        s = self._host_idx(src, "message.src")
        t = self._host_idx(dst, "message.dst")
        key = (s, t)
        hit = self._hashed.get(key)
        if hit is None:
            hit = False
            if s != t:
                dist = self._dist_table(self._anchor(t)[0])
                seen, todo = {s}, [s]
                while todo and not hit:
                    u = todo.pop()
                    if t in self._adj[u]:
                        opts = self._adj[u][t]
                    else:
                        want = dist[u] - 1
                        opts = [lid for v in self._switch_nbrs[u] if dist[v] == want for lid in self._adj[u][v]]
                    if len(opts) > 1:
                        hit = True
                    for lid in opts:
                        v = self.link_dst[lid]
                        if v != t and v not in seen:
                            seen.add(v)
                            todo.append(v)
            self._hashed[key] = hit
        return hit

    def path(self, src: str, dst: str, flow_key: int = 0) -> list[str]:
        """Node names src..dst of the path a flow takes."""
        return [self.node_names[i] for i in self.route(src, dst, flow_key)[0]]

    def links_of(self, path: list[str], flow_key: int = 0) -> list[int]:
        """Directed link ids along ``path``; among parallel links, the one the flow hashes to."""
        if len(path) >= 2 and self.topology.is_host(path[0]) and self.topology.is_host(path[-1]):
            nodes, links = self.route(path[0], path[-1], flow_key)
            if [self.node_names[i] for i in nodes] == list(path):
                return list(links)
        out = []
        s = self.node_index[path[0]]
        t = self.node_index[path[-1]]
        fh = self._flow_hash(s, t, flow_key)
        for a, b in zip(path, path[1:]):
            u, v = self.node_index[a], self.node_index[b]
            par = self._adj[u].get(v)
            if not par:
                raise NetworkError("no link between consecutive path nodes", field="path", value=(a, b))
            out.append(self._pick(par, u, fh, s if s < self.num_hosts else 0))
        return out

    def equal_cost_paths(self, src: str, dst: str, limit: int = 1024) -> list[list[str]]:
        """Every equal-cost shortest path (at most ``limit``), for inspection and tests."""
        s = self._host_idx(src, "message.src")
        t = self._host_idx(dst, "message.dst")
        if s == t:
            return [[src]]
        anchor, _ = self._anchor(t)
        dist = self._dist_table(anchor)
        if dist[s] < 0:
            return []
        out: list[list[str]] = []

        def walk(u: int, acc: list[int]) -> None:
            if len(out) >= limit:
                return
            if u == t:
                out.append([self.node_names[i] for i in acc])
                return
            if t in self._adj[u]:
                walk(t, acc + [t])
                return
            for v in self._switch_nbrs[u]:
                if dist[v] == dist[u] - 1:
                    walk(v, acc + [v])

        walk(s, [s])
        return out
