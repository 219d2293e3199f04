"""Placing jobs on the cluster's GPUs: explicit lists first, then the policies in job order.

A job's rank ``i`` runs on ``placement[i]`` (a global GPU rank of the cluster's system). Policies take
whole free nodes (a node a policy job uses is its own), the way batch schedulers hand out training
nodes; ``rail_aligned`` takes the same GPU slots on several nodes, so jobs can share nodes rail by rail.
Every mistake is one line naming the cluster file, the job and the field.
"""
from __future__ import annotations

import random
from collections import OrderedDict

from heterosim.cluster.config import ClusterScenario, Placement
from heterosim.errors import PlanError


def leaf_of_node(system) -> list[str]:
    """Per node: the switch its first NIC is cabled to (its leaf; on a rail fabric, its block's rail-0 leaf)."""
    nbr: dict[str, str] = {}
    hosts = set(system.net.hosts)
    for link in system.net.links:
        if link.a in hosts and link.b not in hosts:
            nbr.setdefault(link.a, link.b)
        elif link.b in hosts and link.a not in hosts:
            nbr.setdefault(link.b, link.a)
    return [nbr.get(n.nics[0], "") for n in system.nodes]


def place_jobs(cs: ClusterScenario, system, file: str | None = None) -> list[list[int]]:
    """Global GPU ranks of every job, in the job's rank order."""
    used: dict[int, int] = {}  # GPU rank -> job index
    out: list[list[int] | None] = [None] * len(cs.jobs)
    order = sorted(range(len(cs.jobs)), key=lambda i: cs.jobs[i].placement.policy is not None)
    leaves = leaf_of_node(system)
    for i in order:
        job = cs.jobs[i]
        p = job.placement
        where = f"jobs[{i}].placement"
        if p.group is not None and p.group not in {g.name for g in cs.cluster.groups}:
            raise _err(job.name, f"no device group {p.group!r} in the cluster", file, f"{where}.group", p.group)
        if p.policy is None:
            ranks = _explicit(p, system, job.name, file, where)
            for r in ranks:
                if r in used:
                    other = cs.jobs[used[r]].name
                    raise _err(job.name, f"GPU {system.gpus[r].name} is already placed for job {other!r} "
                                         f"(placements overlap)", file, where, _what(p))
        else:
            ranks = _policy(p, system, used, leaves, job.name, file, where)
        for r in ranks:
            used[r] = i
        out[i] = ranks
    return out  # type: ignore[return-value]


def _what(p: Placement):
    return p.gpus if p.gpus is not None else p.nodes if p.nodes is not None else p.group


def _explicit(p: Placement, system, name: str, file, where: str) -> list[int]:
    if p.gpus is not None:
        index = {g.name: g.rank for g in system.gpus}
        ranks = []
        for j, g in enumerate(p.gpus):
            if g not in index:
                raise _err(name, "no such GPU in the cluster (names: {group}-{i}/gpu{j})", file,
                           f"{where}.gpus[{j}]", g)
            if index[g] in ranks:
                raise _err(name, "GPU listed twice", file, f"{where}.gpus[{j}]", g)
            ranks.append(index[g])
    elif p.nodes is not None:
        names = {n.name: n for n in system.nodes}
        ranks = []
        for j, n in enumerate(p.nodes):
            if n not in names:
                raise _err(name, "no such node in the cluster", file, f"{where}.nodes[{j}]", n)
            if p.nodes.index(n) != j:
                raise _err(name, "node listed twice", file, f"{where}.nodes[{j}]", n)
            ranks.extend(names[n].gpu_ranks)
    else:
        ranks = [g.rank for g in system.gpus if g.group == p.group]
    if p.num_gpus is not None:
        if p.num_gpus > len(ranks):
            raise _err(name, f"needs {p.num_gpus} GPUs but its placement has {len(ranks)}", file,
                       f"{where}.num_gpus", p.num_gpus)
        ranks = ranks[:p.num_gpus]
    return ranks


def _policy(p: Placement, system, used: dict[int, int], leaves: list[str], name: str, file,
            where: str) -> list[int]:
    need = p.num_gpus
    nodes = [n for n in system.nodes if p.group is None or n.group == p.group]
    if p.policy == "rail_aligned":
        return _rail_aligned(p, nodes, used, name, file, where)
    free = [n for n in nodes if not any(r in used for r in n.gpu_ranks)]
    if p.policy == "packed":
        cand = free
    elif p.policy == "spread":
        by_leaf: OrderedDict[str, list] = OrderedDict()
        for n in free:
            by_leaf.setdefault(leaves[n.index], []).append(n)
        cand, queues = [], [list(q) for q in by_leaf.values()]
        while any(queues):
            for q in queues:
                if q:
                    cand.append(q.pop(0))
    else:  # random
        cand = random.Random(p.seed).sample(free, len(free))
    chosen, have = [], 0
    for n in cand:
        if have >= need:
            break
        chosen.append(n)
        have += len(n.gpu_ranks)
    if have < need:
        scope = f"group {p.group!r}" if p.group else "the cluster"
        raise _err(name, f"does not fit: needs {need} GPUs, {scope} has {sum(len(n.gpu_ranks) for n in free)} on "
                         f"free nodes", file, f"{where}.num_gpus", need)
    if p.policy != "spread":
        chosen.sort(key=lambda n: n.index)  # ranks in node order (a random *set* of nodes)
    ranks = [r for n in chosen for r in n.gpu_ranks]
    return ranks[:need]


def _rail_aligned(p: Placement, nodes, used, name, file, where) -> list[int]:
    need = p.num_gpus
    width = min(len(n.gpu_ranks) for n in nodes) if nodes else 0
    k = p.gpus_per_node if p.gpus_per_node is not None else min(need, width)
    if k > width:
        raise _err(name, f"nodes have only {width} GPUs", file, f"{where}.gpus_per_node", k)
    if need % k:
        raise _err(name, f"rail_aligned needs num_gpus a multiple of gpus_per_node ({k})", file,
                   f"{where}.num_gpus", need)
    n_nodes = need // k
    for start in range(0, width - k + 1, k):
        fits = [n for n in nodes if not any(r in used for r in n.gpu_ranks[start:start + k])]
        if len(fits) >= n_nodes:
            return [r for n in fits[:n_nodes] for r in n.gpu_ranks[start:start + k]]
    raise _err(name, f"does not fit: no {k} GPU slots free at the same position on {n_nodes} nodes", file,
               f"{where}.num_gpus", need)


def _err(job: str, reason: str, file, field: str, value) -> PlanError:
    return PlanError(f"job {job!r}: {reason}", file=file, field=field, value=value)
