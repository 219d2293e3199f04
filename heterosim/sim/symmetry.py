"""Symmetry reduction: simulate one data-parallel replica per class of identical replicas.

Training is very symmetric: the DP replicas of a job run the same programs on the
same hardware, and the ring positions of a collective do the same thing one node
further on. Two reductions follow, both exact when the symmetry is real:

* **Replica classes** (:func:`replica_classes`). Replica ``d`` is the set of ranks at
  position ``d`` of their ``dp`` group; ``sigma_{e->d}`` maps each rank of replica
  ``e`` to the rank of the same dp group at position ``d``. Replica ``d`` joins the
  class of ``e`` when ``sigma`` preserves every fact the simulation depends on:
  program, device, slowdown (stragglers), node type, which ranks share a node,
  every intra-replica group (tp, pp, embedding...), the durations of local ops, and
  the network path (link rates, delays, NIC caps, hop count) of every pipeline
  transfer. Only one replica per class is executed by the coordinator; the others'
  pipeline traffic is sent as copies of the representative's (``send_group``), so
  it still loads the fabric, and their timelines are the representative's.
  Communication between replicas (the ``dp`` groups) is simulated as a whole.
* **Collective orbits** (:func:`schedule_orbits`). A flow schedule invariant under
  "shift every rank by k nodes" (a ring over aligned nodes is) splits into orbits
  of transfers that start and end together; each orbit is one flow with copies.
  The check is structural (endpoints, channel, step, link kind, latency, deps);
  the network sameness of an orbit's copies is checked by the caller.

Anything that breaks a condition (heterogeneous groups, stragglers, degraded
links, background traffic) just makes more classes or leaves a schedule
unreduced, so the result is the full simulation's. A dp ring must map onto itself
under the shift between two replicas (:func:`_dp_ring_period`): one unlike hop
times every ring position differently. Paths on which the ECMP hash chose links
are alike only where the caller says so (``simulation.hashed_copies``: the
profiles it passes leave the hashed links out, for replicas only with
``ops_and_replicas`` and ``ops_and_shifted_replicas``). Each copy still loads its own
hashed links, but the group flow moves at its slowest copy's pace, so that reduction is
approximate (measured against the full run: benchmarks/bench_hash_agreement.py); with
``exact`` such paths are never alike, since each copy meets its own collisions. With
``ops_and_shifted_replicas`` (the default) the coordinator sends the mirrored replicas' pipeline
copies apart, shifted by offsets a warm-up measured (Coordinator.shift_replicas_by), runs each
mirror's own copy of a replica-local collective (Coordinator._launch_shadow), and starts a
collective across replicas when the latest mirror would post it (Coordinator._mirror_post).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

# dims whose groups live inside one replica are checked for sigma-consistency; the data-parallel
# dims (groups equal to the dp groups) connect replicas and are simulated in full
_SIZE_SLACK_BYTES = 64
"""Ring segments differ by at most a byte per merged step (near-equal split); copies within this are alike."""


@dataclass
class ReplicaClasses:
    replicas: int
    """D: the size of every dp group."""
    classes: list[list[int]]
    """Replica indices per class; ``classes[c][0]`` is the one simulated."""
    position: list[int]
    """Rank -> its replica index (position in its dp group)."""
    dp_groups: list[tuple[int, ...]]
    dp_group_of: list[int]
    rep_replicas: set[int] = field(default_factory=set)
    class_of_replica: list[int] = field(default_factory=list)

    def image(self, rank: int, replica: int) -> int:
        """sigma: the rank playing ``rank``'s part in ``replica``."""
        return self.dp_groups[self.dp_group_of[rank]][replica]

    def mirrors(self, rank: int) -> list[int]:
        """The other replicas of ``rank``'s class (not simulated)."""
        cls = self.classes[self.class_of_replica[self.position[rank]]]
        return cls[1:]

    def summary(self) -> dict:
        sizes = sorted((len(c) for c in self.classes), reverse=True)
        return {"replicas": self.replicas, "classes": len(self.classes), "class_sizes": sizes[:16],
                "simulated_replicas": len(self.classes)}


def replica_classes(ir, system, used_dims: set[str], *, lane_key: Callable[[tuple[int, ...]], object],
                    pp_profile: Callable[[int, int], object],
                    dp_profile: Callable[[int, int], object] | None = None) -> ReplicaClasses | None:
    """Group the dp replicas into classes of identical ones (module docstring); None if no reduction applies.

    ``lane_key(tp_group)`` says what a TP group's local op durations are (equal keys, equal
    durations); ``pp_profile(a, b)`` the network path profile of a pipeline transfer a -> b (all
    that its timing depends on but contention); ``dp_profile(a, b)`` what the rate of a transfer
    between data-parallel neighbours depends on (a collective ends at one time for all its
    members, so only the rates its flows impose on shared links matter, not path lengths).
    """
    dp_profile = dp_profile or pp_profile
    dp = ir.groups.get("dp")
    if not dp or len(dp[0]) < 2 or any(len(g) != len(dp[0]) for g in dp):
        return None
    D = len(dp[0])
    world = ir.world_size
    position = [-1] * world
    dp_of = [-1] * world
    for gi, g in enumerate(dp):
        for i, r in enumerate(g):
            position[r] = i
            dp_of[r] = gi
    if min(position) < 0:
        return None
    dp_set = set(dp)
    intra_dims = []
    for dim in used_dims:
        groups = ir.groups.get(dim)
        if groups is None:
            return None
        if set(groups) == dp_set:
            continue  # connects replicas: simulated in full
        if any(len({position[r] for r in g}) != 1 for g in groups):
            return None  # a group spanning some replicas but not all of them: no replica symmetry
        intra_dims.append(dim)
    gpus = system.gpus
    nodes = getattr(system, "nodes", None)
    members = [[g[d] for g in dp] for d in range(D)]  # replica d's ranks, in dp-group order
    tp_groups = {}
    for g in ir.groups.get("tp") or [(r,) for r in range(world)]:
        tp_groups[g[0]] = g
    pp_pairs = []
    for g in ir.groups.get("pp", []):
        if len(g) > 1 and position[g[0]] == 0:
            for i in range(len(g)):
                pp_pairs.append((g[i], g[(i + 1) % len(g)]))
                pp_pairs.append((g[(i + 1) % len(g)], g[i]))

    def rank_sig(r: int):
        gp = gpus[r]
        spec = nodes[gp.node_index].spec if nodes is not None else None
        return (ir.rank_program[r], gp.device, gp.slowdown, gp.group, spec)

    def matches(e: int, d: int) -> bool:
        node_map: dict = {}
        used: set = set()
        for r, r2 in zip(members[e], members[d]):
            if rank_sig(r) != rank_sig(r2):
                return False
            a, b = gpus[r].node_index, gpus[r2].node_index
            if node_map.setdefault(a, b) != b:
                return False
        if len(set(node_map.values())) != len(node_map):
            return False
        for dim in intra_dims:
            groups = ir.groups[dim]
            gid = ir._group_index[dim]
            for r in members[e]:
                g = groups[gid[r]]
                if g[0] != r:
                    continue
                g2 = groups[gid[dp[dp_of[r]][d]]]
                if tuple(dp[dp_of[x]][d] for x in g) != g2:
                    return False
        for r, g in tp_groups.items():
            if position[r] != e:
                continue
            g2 = tuple(dp[dp_of[x]][d] for x in g)
            if lane_key(g) != lane_key(g2):
                return False
        return True

    period = _dp_ring_period(dp, dp_profile)
    classes: list[list[int]] = []
    class_of = [-1] * D
    for d in range(D):
        for ci, cls in enumerate(classes):
            if (d - cls[0]) % period == 0 and matches(cls[0], d) \
                    and _pp_alike(pp_pairs, cls[0], d, dp, dp_of, position, pp_profile):
                cls.append(d)
                class_of[d] = ci
                break
        else:
            class_of[d] = len(classes)
            classes.append([d])
    if len(classes) == D:
        return None
    return ReplicaClasses(D, classes, position, dp, dp_of, {c[0] for c in classes}, class_of)


def _pp_alike(pairs, e: int, d: int, dp, dp_of, position, profile) -> bool:
    """Every pipeline transfer of replica e has the same network path profile in replica d."""
    for a0, b0 in pairs:  # pairs are stated for replica 0; move them to e and d
        a, b = dp[dp_of[a0]][e], dp[dp_of[b0]][e]
        a2, b2 = dp[dp_of[a0]][d], dp[dp_of[b0]][d]
        if profile(a, b) != profile(a2, b2):
            return False
    return True


def _dp_ring_period(dp, profile) -> int:
    """The smallest shift p (a divisor of D) that maps every data-parallel ring onto itself, links included.

    The collectives of a dp group (rings over its positions) load the fabric at every position the
    same way, only if every position's links to its neighbours look alike; one unlike link (a
    degraded NIC, a slower node kind) makes each position's traffic run at its own times all round
    the ring (its steps wait on the slow hop), and another replica's pipeline traffic crossing those
    links sees that. So replicas d and e are interchangeable only when shifting the rings by d - e
    changes nothing: d - e must be a multiple of the period of every ring's link profiles."""
    D = len(dp[0])
    ids: dict = {}
    seqs = []
    for g in dp:
        seqs.append([ids.setdefault((profile(g[i], g[(i + 1) % D]), profile(g[(i + 1) % D], g[i])), len(ids))
                     for i in range(D)])
    period = 1
    for seq in seqs:
        p = next(p for p in range(1, D + 1) if D % p == 0 and all(seq[i] == seq[(i + p) % D] for i in range(D)))
        period = period * p // math.gcd(period, p)
    return period


# ----------------------------------------------------------------------------- collective orbits

@dataclass
class Orbits:
    """A flow schedule reduced to one transfer per orbit."""

    reps: list[int]
    """Index (in the schedule) of each orbit's representative transfer."""
    members: list[list[int]]
    """Indices of every orbit's transfers, representative first."""
    deps: list[tuple[int, ...]]
    """Orbit -> orbits it waits for."""
    size: list[int]
    """Orbit -> bytes of its largest transfer (copies finish together, with the last)."""


def schedule_orbits(transfers, ranks, system) -> Orbits | None:
    """Orbits of ``transfers`` under the smallest node shift that maps the schedule to itself, or None."""
    if len(transfers) < 2:
        return None
    gpus = system.gpus
    by_node: dict[int, list[int]] = {}
    for r in ranks:
        by_node.setdefault(gpus[r].node_index, []).append(r)
    layout = [sorted(rs, key=lambda r: gpus[r].local) for rs in by_node.values()]
    N = len(layout)
    if N < 2 or len({len(rs) for rs in layout}) != 1:
        return None
    if any(x.src < 0 or x.dst < 0 for x in transfers):
        return None
    pos = {}
    for i, rs in enumerate(layout):
        for j, r in enumerate(rs):
            pos[r] = (i, j)
    index = {}
    for k, x in enumerate(transfers):
        key = (x.src, x.dst, x.channel, x.step)
        if key in index:
            return None
        index[key] = k
    id_pos = {x.id: k for k, x in enumerate(transfers)}
    for shift in range(1, N // 2 + 1):
        if N % shift:
            continue
        tau = _shift_map(transfers, index, layout, pos, shift, N)
        if tau is None or not _deps_commute(transfers, tau, id_pos):
            continue
        return _cycles(transfers, tau, id_pos)
    return None


def _shift_map(transfers, index, layout, pos, shift, N):
    tau = []
    for x in transfers:
        i, j = pos[x.src]
        i2, j2 = pos[x.dst]
        y = index.get((layout[(i + shift) % N][j], layout[(i2 + shift) % N][j2], x.channel, x.step))
        if y is None:
            return None
        t = transfers[y]
        if t.link != x.link or t.latency_ns != x.latency_ns or abs(t.size_bytes - x.size_bytes) > _SIZE_SLACK_BYTES \
                or len(t.deps) != len(x.deps) or t.flow_key != x.flow_key:
            return None
        tau.append(y)
    return tau


def _deps_commute(transfers, tau, id_pos) -> bool:
    for k, x in enumerate(transfers):
        want = {tau[id_pos[d]] for d in x.deps}
        got = {id_pos[d] for d in transfers[tau[k]].deps}
        if want != got:
            return False
    return True


def _cycles(transfers, tau, id_pos) -> Orbits | None:
    orbit_of = [-1] * len(transfers)
    reps, members = [], []
    for k in range(len(transfers)):
        if orbit_of[k] >= 0:
            continue
        o = len(reps)
        cyc = [k]
        orbit_of[k] = o
        j = tau[k]
        while j != k:
            if orbit_of[j] >= 0:
                return None  # not a permutation
            orbit_of[j] = o
            cyc.append(j)
            j = tau[j]
        reps.append(k)
        members.append(cyc)
    if len(reps) == len(transfers):
        return None
    deps, size = [], []
    for o, k in enumerate(reps):
        ds = tuple(sorted({orbit_of[id_pos[d]] for d in transfers[k].deps}))
        if o in ds:
            return None  # copies waiting on each other cannot start together
        deps.append(ds)
        size.append(max(transfers[j].size_bytes for j in members[o]))
    # the orbit graph must stay acyclic (Kahn), or orbits could wait on each other forever
    indeg = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in deps]
    for o, ds in enumerate(deps):
        for d in ds:
            users[d].append(o)
    ready = [o for o, n in enumerate(indeg) if n == 0]
    seen = 0
    while ready:
        o = ready.pop()
        seen += 1
        for u in users[o]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if seen != len(deps):
        return None
    return Orbits(reps, members, deps, size)
