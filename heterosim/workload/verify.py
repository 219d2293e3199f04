"""Structural checks of an IR: acyclic deps, matching tags, and a deadlock-free zero-time replay.

The replay uses the strictest semantics the coordinator may choose: ops of one
stream run in program order, a compute op finishes when its deps have, and every
communication op is a rendezvous (a collective completes only when all group
members have it at the head of their stream; a send only with its receive). An
IR that replays to the end under these rules cannot deadlock under looser ones.
Cost is linear in ops over all ranks, so use it on small worlds (tests, debugging).
"""
from __future__ import annotations

from collections import Counter, defaultdict, deque

from heterosim.errors import SimulationError
from heterosim.workload.ir import IR


def check_acyclic(ir: IR) -> None:
    """Every program's deps form a DAG over its own op ids (Kahn's algorithm)."""
    for p in ir.programs:
        n = len(p.ops)
        indeg = [0] * n
        out: list[list[int]] = [[] for _ in range(n)]
        for op in p.ops:
            if op.id < 0 or op.id >= n or p.ops[op.id] is not op:
                raise SimulationError(f"program {p.id}: op id {op.id} is not its position")
            for d in op.deps:
                if not 0 <= d < n:
                    raise SimulationError(f"program {p.id}: op {op.id} depends on unknown op {d}")
                indeg[op.id] += 1
                out[d].append(op.id)
        q = deque(i for i in range(n) if indeg[i] == 0)
        seen = 0
        while q:
            i = q.popleft()
            seen += 1
            for j in out[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    q.append(j)
        if seen != n:
            raise SimulationError(f"program {p.id} ({p.label}): dependency cycle among {n - seen} ops")


def check_tags(ir: IR) -> None:
    """Collective tags are identical (same order per stream) across group members; sends meet receives."""
    # per program: stream -> [(group, collective, tag, size)] of collectives
    seqs = []
    for p in ir.programs:
        d: dict[str, list[tuple]] = defaultdict(list)
        for op in p.ops:
            if op.kind == "comm" and not op.peer_offset:
                d[op.group].append((op.stream, op.collective, op.tag, op.size_bytes))
        seqs.append(d)
    for dim in {g for d in seqs for g in d}:
        if dim not in ir.groups:
            raise SimulationError(f"ops use group {dim!r} that the IR does not define")
        for members in ir.groups[dim]:
            progs = {ir.rank_program[r] for r in members}
            lists = {tuple(seqs[pid].get(dim, ())) for pid in progs}
            if len(lists) > 1:
                raise SimulationError(f"group {dim} {members[:8]}: members issue different collectives")
    sends: Counter = Counter()
    recvs: Counter = Counter()
    lanes = _uneven_tp(ir)
    for r in range(ir.world_size):
        if lanes and ir.group_of(r, "tp")[0] != r:
            continue  # uneven TP: pipeline messages pair TP groups (via their leaders) and are re-sharded
        for op in ir.ops_of(r):
            if op.peer_offset:
                peer = ir.peer_of(r, op.peer_offset)
                size = -1 if lanes else op.size_bytes  # a TP8 and a TP4 stage hold different shards
                if op.collective == "send":
                    sends[(r, peer, op.tag, size)] += 1
                else:
                    recvs[(peer, r, op.tag, size)] += 1
    if sends != recvs:
        bad = next(iter((sends - recvs) or (recvs - sends)))
        raise SimulationError(f"unmatched point-to-point message {bad} (src, dst, tag, bytes)")
    if any(c > 1 for c in sends.values()):
        raise SimulationError("a send tag is used twice between the same ranks")


def _uneven_tp(ir: IR) -> bool:
    """TP groups of different sizes (parallelism.stage_tp): pipeline send/recv then pair whole TP groups,
    as the coordinator runs them, instead of rank with rank."""
    return len({len(g) for g in ir.groups.get("tp", ())}) > 1


def replay(ir: IR) -> int:
    """Run every rank's program with zero-time ops and rendezvous communication.

    Returns the number of ops executed; raises SimulationError naming a stuck op on deadlock."""
    total, stuck = find_deadlock(ir)
    if stuck:
        r, ops = stuck[0]
        desc = ", ".join(f"{op.name}[{op.tag or op.id}]" for op in ops[:4])
        raise SimulationError(f"deadlock: rank {r} stuck at {desc}")
    return total


def find_deadlock(ir: IR) -> tuple[int, list[tuple[int, list]]]:
    """The zero-time rendezvous replay of :func:`replay`: (ops executed, stuck ranks). Each stuck rank comes
    with the ops heading its unfinished streams, the op it cannot pass first (one blocked by a communication
    partner that never posts, rather than by a dependency); an empty list means the IR runs to the end.
    Used by the Chakra importer to refuse a trace that would hang before simulating it (``validate``)."""
    streams = []
    for p in ir.programs:
        d: dict[str, list[int]] = defaultdict(list)
        for op in p.ops:
            d[op.stream].append(op.id)
        streams.append(list(d.values()))
    W = ir.world_size
    done = [bytearray(len(ir.ops_of(r))) for r in range(W)]
    ptr = [[0] * len(streams[ir.rank_program[r]]) for r in range(W)]
    posted: dict[tuple, set[int]] = {}
    waiting = [set() for _ in range(W)]  # op ids posted but not complete
    key_members: dict[tuple, tuple] = {}
    total = 0

    lanes = _uneven_tp(ir)

    def key_of(r, op):
        if op.peer_offset and lanes:
            lead = ir.group_of(r, "tp")[0]
            peer = ir.peer_of(lead, op.peer_offset)
            src, dst = (lead, peer) if op.collective == "send" else (peer, lead)
            return ("p2p", src, dst, op.tag), ir.group_of(src, "tp") + ir.group_of(dst, "tp")
        if op.peer_offset:
            peer = ir.peer_of(r, op.peer_offset)
            src, dst = (r, peer) if op.collective == "send" else (peer, r)
            return ("p2p", src, dst, op.tag), (src, dst)
        gid = ir.group_id(r, op.group)
        return (op.group, gid, op.tag), ir.groups[op.group][gid]

    queue = deque(range(W))
    queued = [True] * W
    while queue:
        r = queue.popleft()
        queued[r] = False
        ops = ir.ops_of(r)
        progress = True
        while progress:
            progress = False
            for si, sl in enumerate(streams[ir.rank_program[r]]):
                while ptr[r][si] < len(sl):
                    op = ops[sl[ptr[r][si]]]
                    if op.id in waiting[r] or any(not done[r][d] for d in op.deps):
                        break
                    if op.kind != "comm":
                        done[r][op.id] = 1
                        ptr[r][si] += 1
                        total += 1
                        progress = True
                        continue
                    key, members = key_of(r, op)
                    s = posted.setdefault(key, set())
                    if r in s:
                        raise SimulationError(f"rank {r}: tag {op.tag!r} posted twice")
                    s.add(r)
                    waiting[r].add(op.id)
                    key_members[(key, r)] = (op.id, si)
                    if len(s) == len(members):
                        del posted[key]
                        for q in members:
                            oid, qsi = key_members.pop((key, q))
                            waiting[q].discard(oid)
                            done[q][oid] = 1
                            ptr[q][qsi] += 1
                            total += 1
                            if q != r and not queued[q]:
                                queued[q] = True
                                queue.append(q)
                        progress = True
                        continue
                    break
    stuck_ranks = []
    for r in range(W):
        if not all(done[r]):
            stuck = [ir.ops_of(r)[sl[ptr[r][si]]] for si, sl in enumerate(streams[ir.rank_program[r]])
                     if ptr[r][si] < len(sl)]
            # posted communication first (it waits on a partner), then ops waiting on dependencies
            stuck.sort(key=lambda op: (op.id not in waiting[r], op.id))
            stuck_ranks.append((r, stuck))
    return total, stuck_ranks


def verify_ir(ir: IR) -> int:
    """All structural checks; returns the ops replayed."""
    check_acyclic(ir)
    check_tags(ir)
    return replay(ir)
