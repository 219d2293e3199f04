"""Fast flow-level network backend: max-min fair fluid flows, exact event times.

Model (what a completion time means here):

* Every message is one flow on one path (:class:`~netbackend.routing.Router`,
  ECMP per ``config.ecmp``). It carries its *wire* bytes: payload plus
  ``header_bytes`` per packet of up to ``mtu_bytes`` payload, so a long flow's
  goodput is ``line rate * mtu / (mtu + header)``, as in the packet-level backend.
* Bandwidth of every directed link is shared max-min fairly among the flows
  crossing it (what an ideal congestion control converges to). A host's NIC is a
  resource too: when ``topology.host_rate_gbps`` is below its access links' total,
  a virtual link of that rate caps everything the host sends (and receives).
* Rates change only when a flow starts or drains; in between, bytes drain
  linearly. Flows starting at the same ns are activated together.
* A flow "drains" when its last wire byte leaves the source at the fluid rate.
  It completes ``ceil(drain)`` plus a fixed latency: the propagation delay of
  every link on the path, ``per_hop_latency_ns`` per switch, and store-and-forward
  of the last packet on every link after the first. The latency does not hold
  bandwidth (the fluid model has no in-flight bytes).
* ``src == dst``: no network; completes at ``start_ns``.

Constraints are *link classes*: links of one capacity crossed by the same registered paths
(a route, or the union of a symmetric group's routes) with the same copies carry the same flows,
so they are one max-min constraint. A path is registered at its first flow and stays registered
while recently used, so a flow costs work per class it crosses, not per link (a collective's
group flow crosses hundreds of links but a few classes). An idle path still splits the classes of
the links it crosses; where a busy path crosses many classes, the idle ones on them pay rent for the
visits they add to its refills and are dropped once the rent would have paid for registering them
again (``_RENT_PER_LINK``).

Rate updates are incremental and exact. After a change only a seed set of flows
(the new ones, and those bottlenecked on the links that changed) is re-filled by
progressive filling with every other flow's rate held fixed; an outside flow that
is faster than the level at which S flows freeze on a shared link joins the set
on the spot. The result is accepted when every flow has a *bottleneck* (a
saturated link where no flow is faster), which characterises the max-min fair
allocation; outside flows that lost theirs join the set and it is filled again.
Typically only a few flows around the changed links are touched, whatever the
number of active flows (``counters`` reports the work). The filling's heap holds
the classes two or more set flows cross and, per flow, only the tightest of the
classes it crosses alone within the set (the others could only pop after it froze);
a pass ends when every set flow is frozen.

The rate engine (classes, paths, filling, rent) is :class:`_PyRates` here and, compiled, ``netbackend/
flowcore/rates.cc``: the same operations in the same order, so the two give the same rates, drain times
and counters to the bit (``tests/netbackend/test_flow_engines.py``). The backend takes the compiled one
where it can be built (``FlowBackend(engine=...)``, ``HETEROSIM_FLOW_ENGINE``: ``auto`` | ``compiled`` |
``python``); messages, queue pairs and latencies stay here.
"""
from __future__ import annotations

import heapq
import os
from collections import deque
import math
from dataclasses import dataclass

from netbackend.base import Completion, Message, NetStats, NetworkBackend
from netbackend.config import NetworkConfig
from hscommon.errors import NetworkError
from netbackend.registry import register_backend
from netbackend.routing import ECMP_MODES, Router, check_fabric
from netbackend.topo import NetTopology

FLOW_SETTINGS = frozenset({"backend", "mtu_bytes", "header_bytes", "ecmp", "per_hop_latency_ns", "background",
                           "wall_limit_s"})
"""``network`` fields a flow-backend run reads (``background`` and ``wall_limit_s`` through the coordinator)."""
PACKET_LEVEL_SETTINGS = frozenset({"cc", "cc_window", "ack_interval_packets", "transport", "rng_run", "dcqcn", "ecn",
                                   "pfc", "buffer", "hpcc", "timely", "dctcp", "swift", "acceleration",
                                   "queue_sample_interval_ns", "deadlock_hold_ns", "stall_limit_ns"})
"""``network`` fields only the packet-level backend models: congestion control, ECN, PFC, switch buffers,
ACKs, transport timers, its random draws, sampling, watchdogs and acceleration. A fluid max-min model has no
packets, queues, marks or pauses for them to act on; :meth:`FlowBackend.config_warnings` names those set."""


def _changed(value, default, path: str) -> list[str]:
    """Dotted paths of the leaves of a config (sub)model that differ from its default, in declaration order."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel) and isinstance(default, BaseModel) and type(value) is type(default):
        return [p for name in type(value).model_fields
                for p in _changed(getattr(value, name), getattr(default, name), f"{path}.{name}")]
    return [] if value == default else [path]


_REL = 1e-9
"""Relative tolerance for "saturated" and "same rate" (rates are floats)."""
_DRAIN_BATCH_NS = 1e-3
"""Flows draining within a picosecond of each other are handled as one event."""
_IDLE_PATHS = 4096
"""Paths without flows kept registered (the least recently used is dropped first). Measured on the
1,024-GPU benchmark (514 distinct paths): at 64, 92k registrations of 120k flows and 22 s CPU; with
every path kept, 514 registrations and 17 s. Each kept path can split link classes, so not unbounded."""
_RENT_CLASSES = 32
"""A path crossing more classes than this charges rent to the idle paths that split them (a route crosses a few;
the hashed orbit flows of data-parallel rings 50-140, and those are refilled most)."""
_RENT_SAMPLE = 8
"""It charges on one refill in this many, for all of them (the charge costs a walk of its classes)."""
_RENT_PER_LINK = 1.4
"""An idle path is dropped once its rent (class visits) reaches this many per link: a class visit with
the loops that follow it costs ~1.4 us, re-registering a link ~1.0 us, and a drop followed by a
re-registration two of those (fit to the planner's hash-ECMP candidate and bench_run.py, 2026-11-24;
docs/symmetry-reduction.md). Ski rental: a drop and re-registration cost about what the dropped path had
cost in visits already, so the engine pays at most about twice the better of keeping or dropping."""


class _Flow:
    """One active flow as the rate engine sees it (the backend keeps its message, latency and copies)."""
    __slots__ = ("seq", "path", "rem", "rate", "t_upd", "bneck", "ver", "drain_t", "fm", "nr", "nb")

    def __init__(self, seq: int, path: _Path, wire: int, t: float):
        self.seq = seq
        self.path = path
        self.rem = float(wire)
        self.rate = 0.0
        """Wire bytes per ns (= Gb/s / 8)."""
        self.t_upd = t
        self.bneck: _LinkClass | None = None
        self.ver = 0
        self.drain_t = math.inf
        self.fm = 0
        """The progressive-filling pass that froze it last (_PyRates._pass): then ``nr`` is its new rate
        and ``nb`` the class it froze on."""
        self.nr = 0.0
        self.nb: _LinkClass | None = None

    @property
    def links(self) -> tuple[int, ...]:
        return self.path.links


class _Path:
    """One set of links with copies per link (a route, or the union of a group's routes) and its active flows.

    While registered, its links' classes know it; a path stays registered a while after its last
    flow (``_IDLE_PATHS``), so the next chunk of a collective on the same links costs no per-link work."""
    __slots__ = ("pid", "links", "w", "classes", "flows", "registered", "wire_sum", "cw", "rent", "tick")

    def __init__(self, pid: int, links: tuple[int, ...], w: tuple[int, ...]):
        self.pid = pid
        self.links = links
        self.w = w
        """Copies on each link."""
        self.classes: dict[_LinkClass, int] = {}
        """Classes of its links -> how many of its links are in each (while registered)."""
        self.flows: dict[int, _Flow] = {}
        """Active flows on it, by seq (insertion-ordered, so runs repeat exactly)."""
        self.registered = False
        self.wire_sum = 0
        """Wire bytes of one copy, summed over its drained flows (link bytes are expanded from it)."""
        self.cw: list[tuple[_LinkClass, int]] | None = None
        """(class, copies on each of its links) for each of ``classes``, in that order; None when stale.
        A class's paths never change (it is interned by them), so this changes only with ``classes``."""
        self.rent = 0.0
        """While idle: the class visits charged to it by refills of busy paths whose classes it splits
        (``_RENT_PER_LINK``)."""
        self.tick = 0
        """Refills since this path last charged rent (one in ``_RENT_SAMPLE``)."""

    def class_copies(self) -> list[tuple[_LinkClass, int]]:
        cw = self.cw
        if cw is None:
            cw = self.cw = [(c, c.paths[self]) for c in self.classes]
        return cw


class _LinkClass:
    """Links of one capacity that the same registered paths cross with the same copies: one max-min constraint.

    A link's class changes only when a path is registered or dropped; classes are interned by
    ``key = (capacity, frozenset((path id, copies)))``, so a collective's hundreds of parallel links,
    or a path of links nobody else uses, are one constraint each."""
    __slots__ = ("key", "cap", "paths", "active", "nflows", "nlinks", "load", "bn", "cid",
                 "mark", "s", "osum", "cnt", "res")

    def __init__(self, key: tuple, paths: dict[_Path, int], load: float, cid: int):
        self.key = key
        self.cap: float = key[0]
        self.paths = paths
        """Registered paths crossing the class -> their copies on each of its links."""
        self.active = {p: w for p, w in paths.items() if p.flows}
        """The paths that have flows now (the members are theirs)."""
        self.nflows = sum(len(p.flows) for p in self.active)
        self.nlinks = 0
        self.load = load
        """Sum of the member flows' committed rates times copies."""
        self.bn: dict[int, _Flow] = {}
        """Member flows whose bottleneck this class is (only those can change when it does)."""
        self.cid = cid
        """Creation order: ties in the filling break the same way in every run."""
        # scratch of one progressive filling (FlowBackend._refill), valid while mark is its pass number:
        # the pass's flows on the class, their old rates times copies, their copies not yet frozen, and
        # what the frozen and outside flows leave of the capacity (attributes: cheaper than dicts by class)
        self.mark = 0
        self.s: list[_Flow] | None = None
        self.osum = 0.0
        self.cnt = 0
        self.res = 0.0


def max_min_rates(flow_links: dict[int, tuple[int, ...]], capacity: list[float]) -> dict[int, float]:
    """Reference max-min fair rates by plain progressive filling (for checks and tests).

    A link listed k times in a flow's tuple carries k copies of that flow (a symmetric group)."""
    rate: dict[int, float] = {}
    residual = list(capacity)
    on: dict[int, list[int]] = {}
    for f, links in flow_links.items():
        for l in links:
            on.setdefault(l, []).append(f)
    active = set(flow_links)
    while active:
        best, best_l = math.inf, -1
        for l, fs in on.items():
            n = sum(1 for f in fs if f in active)
            if n and residual[l] / n < best:
                best, best_l = residual[l] / n, l
        for f in set(on[best_l]):
            if f in active:
                rate[f] = best
                active.discard(f)
                for l in flow_links[f]:
                    residual[l] -= best
    return rate


@dataclass
class _Counters:
    events: int = 0
    """Start and drain batches processed."""
    refills: int = 0
    """Progressive-filling passes (one per rate update, more when the set grows)."""
    refilled_flows: int = 0
    """Sum of the flow-set sizes filled (work measure)."""


class _PyRates:
    """The rate engine in Python: link classes, registered paths, incremental max-min (module docstring).

    The reference for the compiled engine (``netbackend/flowcore``), which does the same operations in the
    same order, so both give the same rates to the bit. The backend hands it flows by sequence number and
    path id and gets back, per drain batch, which flows drained and when."""

    def __init__(self, cap: list[float], idle_paths: int, rent_classes: int, rent_sample: int,
                 rent_per_link: float):
        self._cap = cap
        self._idle_paths = idle_paths
        self._rent_classes = rent_classes
        self._rent_sample = rent_sample
        self._rent_per_link = rent_per_link
        self._classes: dict[tuple, _LinkClass] = {}
        """Live link classes by key (:class:`_LinkClass`)."""
        self._cid = 0
        self._cls: list[_LinkClass] = [self._intern((c, frozenset()), {}, 0.0) for c in cap]
        """Class of every link (NIC caps included)."""
        for c in self._cls:
            c.nlinks += 1
        self._paths: list[_Path] = []
        """By path id."""
        self._idle: dict[_Path, None] = {}
        """Registered paths without flows, least recently used first."""
        self._drains: list[tuple[float, int, int, _Flow]] = []
        self._live: dict[int, _Flow] = {}
        """Active flows by seq."""
        self._active = 0
        self._pass = 0
        """Progressive-filling passes so far: marks which classes' scratch fields are current."""
        self.refills = 0
        """Progressive-filling passes (one per rate update, more when the set grows)."""
        self.refilled_flows = 0
        """Sum of the flow-set sizes filled (work measure)."""

    def add_path(self, links: tuple[int, ...], w: tuple[int, ...]) -> int:
        """A new path (links, copies on each); its id. Registered with its first flow."""
        self._paths.append(_Path(len(self._paths), links, w))
        return len(self._paths) - 1

    def start(self, new: list[tuple[int, int, int]], t: int) -> None:
        """Flows ``(seq, path id, wire bytes)`` start at ``t``: rates of them and whom they slow re-filled."""
        seeds: dict[int, _Flow] = {}
        paths, live = self._paths, self._live
        flows = [_Flow(seq, paths[pid], wire, t) for seq, pid, wire in new]
        for f in flows:
            seeds[f.seq] = f
            p = f.path
            if not p.registered:
                self._register(p)
            elif not p.flows:
                del self._idle[p]
            first = not p.flows
            p.flows[f.seq] = f
            for c, w in (p.cw or p.class_copies()):
                c.nflows += 1
                if first:
                    c.active[p] = w
                if c.bn:
                    seeds.update(c.bn)
        self._active += len(flows)
        for f in flows:
            live[f.seq] = f
        self._refill(seeds, float(t))

    def next_drain(self) -> float:
        """When the next flow drains (inf: none has a rate)."""
        drains = self._drains
        while drains and drains[0][3].ver != drains[0][2]:
            heapq.heappop(drains)  # stale prediction
        return drains[0][0] if drains else math.inf

    def drain(self, t0: float) -> list[tuple[int, float]]:
        """Flows draining within ``_DRAIN_BATCH_NS`` of ``t0`` leave: ``(seq, drain time)`` of each, in order;
        the rates of the flows they held back are re-filled."""
        drains = self._drains
        gone: list[_Flow] = []
        while drains:
            t, _, ver, f = drains[0]
            if f.ver != ver:
                heapq.heappop(drains)
                continue
            if t > t0 + _DRAIN_BATCH_NS:
                break
            heapq.heappop(drains)
            gone.append(f)
        seeds: dict[int, _Flow] = {}
        for f in gone:
            f.ver += 1
            self._active -= 1
            sq = f.seq
            del self._live[sq]
            if f.bneck is not None:
                del f.bneck.bn[sq]
                f.bneck = None
            p = f.path
            del p.flows[sq]
            rate = f.rate
            last = not p.flows
            for c, w in (p.cw or p.class_copies()):
                c.nflows -= 1
                if last:
                    del c.active[p]
                if c.nflows:
                    c.load -= rate * w
                else:
                    c.load = 0.0  # resets float drift
                if c.bn:
                    seeds.update(c.bn)
            if last:
                self._idle[p] = None
                p.rent = 0.0
        for f in gone:
            seeds.pop(f.seq, None)
        if seeds:
            self._refill(seeds, t0)
        return [(f.seq, f.drain_t) for f in gone]

    def rates(self) -> list[tuple[int, float]]:
        """(seq, wire bytes per ns) of every active flow."""
        return [(f.seq, f.rate) for f in self._live.values()]

    def close(self) -> None:
        """Unlink paths, link classes and flows (each refers to the others), so that they are freed with the
        backend rather than left for the cyclic collector (a 1,024-GPU run left 50k such objects, walked by the
        collection after the simulation)."""
        for p in self._paths:
            p.classes.clear()
            p.flows.clear()
            p.cw = None
        for c in self._classes.values():
            c.paths.clear()
            c.active.clear()
            c.bn.clear()
            c.s = None
        self._idle.clear()
        self._live.clear()
        self._drains.clear()

    def _intern(self, key: tuple, paths: dict[_Path, int], load: float) -> _LinkClass:
        c = self._classes.get(key)
        if c is None:
            self._cid += 1
            c = self._classes[key] = _LinkClass(key, paths, load, self._cid)
        return c

    def _register(self, p: _Path) -> None:
        """Move every link of ``p`` to the class that also has ``p`` (no flows yet: constraints unchanged)."""
        idle = self._idle
        while len(idle) >= self._idle_paths:
            self._unregister(next(iter(idle)))
        self._reclass(p, True)

    def _unregister(self, q: _Path) -> None:
        """Drop the idle path ``q`` (the least recently used, or one whose rent is paid)."""
        del self._idle[q]
        self._reclass(q, False)

    def _reclass(self, p: _Path, add: bool) -> None:
        """Register (``add``) or drop the flowless path ``p``: its links change class, no rate changes."""
        cls = self._cls
        pid = p.pid
        trans: dict = {}
        cnt: dict = {}
        for l, w in zip(p.links, p.w):
            a = cls[l]
            k = (a, w)
            b = trans.get(k)
            if b is None:
                paths = dict(a.paths)
                if add:
                    paths[p] = w
                    b = self._intern((a.cap, a.key[1] | {(pid, w)}), paths, a.load)
                else:
                    del paths[p]
                    b = self._intern((a.cap, a.key[1] - {(pid, w)}), paths, a.load)
                trans[k] = b
                cnt[k] = 1
            else:
                cnt[k] += 1
            cls[l] = b
        pcl = p.classes
        pcl.clear()
        p.cw = None
        for k, b in trans.items():
            a = k[0]
            n = cnt[k]
            a.nlinks -= n
            b.nlinks += n
            for q in a.paths:
                if q is p:
                    continue
                qcl = q.classes
                q.cw = None
                m = qcl[a] - n
                if m:
                    qcl[a] = m
                else:
                    del qcl[a]
                qcl[b] = qcl.get(b, 0) + n
            if add:
                pcl[b] = pcl.get(b, 0) + n
            if not a.nlinks:
                del self._classes[a.key]
                if a.bn:  # same flows, same load: the bottleneck carries over
                    for g in a.bn.values():
                        g.bneck = b
                    b.bn.update(a.bn)
                    a.bn.clear()
        p.registered = add

    def _refill(self, seeds: dict[int, _Flow], t: float) -> None:
        """Recompute rates of ``seeds`` (growing the set until every flow has a bottleneck); commit at ``t``.

        Constraints are link classes (:class:`_LinkClass`), so the work is per class a flow
        crosses, not per link: a flow alone on a path of any length has one or two."""
        S = dict(seeds)
        heappush, heappop = heapq.heappush, heapq.heappop
        while True:
            self.refills += 1
            self.refilled_flows += len(S)
            # --- progressive filling of S with every other flow held at its rate
            self._pass += 1
            ep = self._pass
            s_on: list[_LinkClass] = []
            """Classes S crosses, in first-touch order (their scratch fields are this pass's)."""
            for f in S.values():
                r, p = f.rate, f.path
                solo = None
                for l, w in (p.cw or p.class_copies()):
                    if l.nflows == 1:
                        # f alone on the class: its share, (cap - other load) / copies, stays put until f
                        # freezes (no other flow to freeze or pull in there), so of f's solo classes only
                        # the one first in the heap's order can freeze f; the others would pop as no-ops.
                        # Hashed group paths cross dozens of classes, many of them solo.
                        res = l.cap - (l.load - r * w)
                        if res < 0.0:
                            res = 0.0
                        v = res / w
                        # the order of (share, cid), as the heap's, without building the tuple
                        if solo is None or v < solo_v or (v == solo_v and l.cid < solo.cid):
                            solo, solo_v, solo_w = l, v, w
                        continue
                    if l.mark != ep:
                        l.mark = ep
                        l.s = [f]
                        l.osum = r * w
                        l.cnt = w
                        s_on.append(l)
                    else:
                        l.s.append(f)
                        l.osum += r * w
                        l.cnt += w
                if solo is not None:
                    solo.mark = ep
                    solo.s = [f]
                    solo.osum = r * solo_w
                    solo.cnt = solo_w
                    s_on.append(solo)
            # A class crossed by one S flow alone keeps its share until that flow freezes or a pull-in
            # adds a flow to it (which pushes a fresh entry), so, as for solo classes above, of a flow's
            # such classes only the first in the heap's order can freeze it: the others would pop after
            # it froze, as no-ops. Only that one (``rep``) enters the heap; when a pull-in takes it, the
            # first of those left enters. (A hashed group flow crosses dozens of classes, most of them
            # its own within S.)
            heap = []
            own: dict[int, list] = {}
            """S flow -> its classes no other S flow crosses (a pull-in may take some)."""
            best: dict[int, tuple] = {}
            """S flow -> the heap entry of the first of those in the heap's order (kept as they come: no tuple
            per class, a hashed group flow has dozens)."""
            for l in s_on:
                res = l.cap - (l.load - l.osum)
                if res < 0.0:
                    res = 0.0
                l.res = res
                ls = l.s
                if len(ls) == 1:
                    sq = ls[0].seq
                    v = res / l.cnt
                    o = own.get(sq)
                    if o is None:
                        own[sq] = [l]
                        best[sq] = (v, l.cid, l)
                    else:
                        o.append(l)
                        b = best[sq]
                        if v < b[0] or (v == b[0] and l.cid < b[1]):
                            best[sq] = (v, l.cid, l)
                else:
                    heap.append((res / l.cnt, l.cid, l))
            rep: dict[int, _LinkClass] = {}
            for sq, e in best.items():
                rep[sq] = e[2]
                heap.append(e)
            heapq.heapify(heap)
            left = len(S)
            """S flows not frozen yet: once none is, every class's count is 0 and the rest would pop as no-ops."""
            while heap:
                share, cid, l = heappop(heap)
                n = l.cnt
                if n == 0:
                    continue
                cur = l.res / n
                if cur > share:
                    # Freezing elsewhere only raises a link's share, so entries are left stale
                    # and refreshed when popped; a pull-in (which can lower it) pushes a fresh
                    # one. Hence an entry above the current share is rounding noise: go ahead.
                    heappush(heap, (cur, cid, l))
                    continue
                share = cur if cur > 0.0 else 0.0
                # An outside flow faster than this level on the link would deny the S flows
                # freezing here their bottleneck: it joins S now. Levels only rise, so none of
                # its links has frozen yet and the filling simply goes on.
                # (only flows outside S can be pulled in; a link carrying S flows alone has none)
                if l.nflows > len(l.s):
                    lim = share * (1 + _REL) + 1e-15
                    pulled = [g for q in l.active for g in q.flows.values() if g.rate > lim and g.seq not in S]
                else:
                    pulled = None
                if pulled:
                    left += len(pulled)
                    lost = None
                    for g in pulled:
                        S[g.seq] = g
                        r, q = g.rate, g.path
                        mine = None
                        for m, w in (q.cw or q.class_copies()):
                            if m.mark != ep:
                                m.mark = ep
                                m.s = [g]
                                m.osum = r * w
                                res = m.cap - (m.load - r * w)
                                m.res = res = res if res > 0.0 else 0.0
                                m.cnt = w
                                s_on.append(m)
                                v = res / w
                                if mine is None:
                                    mine = [m]
                                    e = (v, m.cid, m)
                                else:
                                    mine.append(m)
                                    if v < e[0] or (v == e[0] and m.cid < e[1]):
                                        e = (v, m.cid, m)
                                continue
                            else:
                                ms = m.s
                                if len(ms) == 1 and ms[0].fm != ep and rep.get(ms[0].seq) is m:
                                    if lost is None:
                                        lost = []
                                    lost.append(ms[0])
                                ms.append(g)
                                m.osum += r * w
                                m.res += r * w
                                m.cnt += w
                            heappush(heap, (m.res / m.cnt, m.cid, m))
                        if mine:  # its classes no other S flow crosses: the first enters the heap
                            own[g.seq] = mine
                            rep[g.seq] = e[2]
                            heappush(heap, e)
                    if lost:
                        for f in lost:
                            # (a class still crossed by f alone within S has kept its share since it
                            # was first seen: no other S flow froze on it or joined it)
                            o = [(m.res / m.cnt, m.cid, m) for m in own[f.seq] if len(m.s) == 1]
                            if o:
                                e = min(o)
                                rep[f.seq] = e[2]
                                heappush(heap, e)
                    continue
                for f in l.s:
                    if f.fm == ep:
                        continue
                    f.fm = ep
                    f.nr = share
                    f.nb = l
                    left -= 1
                    for m, w in f.path.cw:
                        m.cnt -= w
                        m.res -= share * w
                if not left:
                    break
            # --- does every outside flow whose bottleneck S touches still have one (a saturated
            # link where no flow is faster)? S flows have one: the link they froze on.
            # m.res is now cap - (new load) for every class S touches (m.mark == ep).
            add: dict[int, _Flow] = {}
            maxrate: dict[_LinkClass, float] = {}

            def max_on(m: _LinkClass) -> float:
                v = maxrate.get(m)
                if v is None:
                    v = 0.0
                    for q in m.active:
                        for h in q.flows.values():
                            x = h.nr if h.fm == ep else h.rate  # (S flows are all frozen now)
                            if x > v:
                                v = x
                    maxrate[m] = v
                return v

            moves = []
            for l in s_on:
                # the filling is over, so its scratch lists go now: they would hold drained flows, whose
                # ``nb`` holds the class: a reference cycle, and the run disables the cyclic collector
                # (heterosim.api.simulate), so it would never be freed (measured at 4,096 GPUs with hash
                # ECMP: 6.3 GB peak instead of 3.4). A further pass sets them afresh (S only grows).
                l.s = None
                bn = l.bn
                if not bn:
                    continue
                for g in bn.values():
                    sq = g.seq
                    if sq in S or sq in add:
                        continue
                    for m in g.path.classes:
                        res = m.res if m.mark == ep else m.cap - m.load
                        if res <= m.cap * _REL and g.rate >= max_on(m) * (1 - _REL):
                            if m is not l:
                                moves.append((g, m))
                            break
                    else:
                        add[sq] = g
            for g, m in moves:
                del g.bneck.bn[g.seq]
                g.bneck = m
                m.bn[g.seq] = g
            if not add:
                break
            S.update(add)
        # --- commit
        drains = self._drains
        for f in S.values():
            sq = f.seq
            nr = f.nr
            nb = f.nb
            if nb is not f.bneck:
                if f.bneck is not None:
                    del f.bneck.bn[sq]
                f.bneck = nb
                nb.bn[sq] = f
            if nr == f.rate and f.drain_t != math.inf:
                continue
            if f.rate:
                f.rem -= f.rate * (t - f.t_upd)
            f.t_upd = t
            d = nr - f.rate
            for l, w in f.path.cw:
                l.load += d * w
            f.rate = nr
            f.ver += 1
            if nr > 0.0:
                rem = f.rem if f.rem > 0.0 else 0.0
                f.drain_t = t + rem / nr
                heapq.heappush(drains, (f.drain_t, sq, f.ver, f))
            else:
                f.drain_t = math.inf
        if len(drains) > 4 * self._active + 256:
            # superseded predictions outnumber live ones: rebuild in place (callers hold this list)
            drains[:] = [(f.drain_t, f.seq, f.ver, f) for f in self._live.values() if f.drain_t != math.inf]
            heapq.heapify(drains)
        # --- rent: an idle path that shares links with a busy path of many classes splits them, so every
        # refill of that path visits more classes; it pays for them until they add up to re-registering it
        drop = None
        rent_classes, rent_sample, rent_per_link = self._rent_classes, self._rent_sample, self._rent_per_link
        for f in S.values():
            p = f.path
            cw = p.cw or p.class_copies()
            if len(cw) <= rent_classes:
                continue
            p.tick += 1
            if p.tick < rent_sample:
                continue
            p.tick = 0
            for l, _ in cw:
                n = len(l.paths) - len(l.active)
                if not n:
                    continue
                share = rent_sample / n
                for q in l.paths:
                    if not q.flows:
                        q.rent += share
                        if q.rent >= rent_per_link * len(q.links):
                            if drop is None:
                                drop = {}
                            drop[q] = None
        if drop:
            for q in drop:
                self._unregister(q)


ENGINES = ("compiled", "python")
"""Rate engines: the compiled one (``netbackend/flowcore``, C++ built on first use) and :class:`_PyRates`, its
reference; both give the same rates to the bit. ``auto`` takes the compiled one where it builds (it needs g++
and Python's headers) and the Python one otherwise."""


def _rate_engine(engine: str | None, cap: list[float]):
    """(engine object, its name) for ``engine`` (None: ``HETEROSIM_FLOW_ENGINE``, else ``auto``)."""
    name = engine or os.environ.get("HETEROSIM_FLOW_ENGINE") or "auto"
    if name not in ("auto", *ENGINES):
        raise NetworkError(f"unknown flow engine (one of auto, {', '.join(ENGINES)})",
                           field="FlowBackend engine" if engine else "HETEROSIM_FLOW_ENGINE", value=name)
    args = (cap, _IDLE_PATHS, _RENT_CLASSES, _RENT_SAMPLE, _RENT_PER_LINK)
    if name != "python":
        from netbackend import flowcore

        module = flowcore.load(required=name == "compiled")
        if module is not None:
            return module.Rates(*args), "compiled"
    return _PyRates(*args), "python"


@register_backend("flow")
class FlowBackend(NetworkBackend):
    """Flow-level fluid simulation with incremental max-min fair sharing (module docstring).

    ``engine``: ``compiled``, ``python`` or ``auto`` (the compiled one where it builds); None reads
    ``HETEROSIM_FLOW_ENGINE``. Results are the same with either; :attr:`engine` says which runs."""

    @classmethod
    def check_config(cls, topology: NetTopology, config: NetworkConfig) -> None:
        """What building the backend checks (``NetworkBackend.check_config``): the fabric routes
        (``routing.check_fabric``) and every NIC rate given is positive."""
        check_fabric(topology, config.ecmp, ECMP_MODES)
        for name, rate_gbps in topology.host_rate_gbps.items():
            if not rate_gbps > 0:
                raise NetworkError("host NIC rate must be > 0 Gb/s", field=f"topology.host_rate_gbps.{name}",
                                   value=rate_gbps)

    def __init__(self, topology: NetTopology, config: NetworkConfig | None = None, seed: int = 0,
                 engine: str | None = None):
        super().__init__(topology, config, seed)
        cfg = self.config
        self.check_config(topology, cfg)
        self.router = Router.shared(topology, mode=cfg.ecmp, seed=seed)
        r = self.router
        self._keyed = r.mode != "rail"
        """Whether a flow's key can change its path (hashed ECMP); with rails pinned, paths are cached per pair."""
        self._mtu = cfg.mtu_bytes
        self._hdr = cfg.header_bytes
        self._hop_ns = cfg.per_hop_latency_ns
        self._num_real = r.num_links
        cap = [c / 1e9 for c in r.link_capacity_Bps]  # bytes per ns
        # NIC caps as virtual links, only where they bind below the access links.
        out_cap = [0.0] * r.num_hosts
        in_cap = [0.0] * r.num_hosts
        for lid in range(r.num_links):
            if r.link_src[lid] < r.num_hosts:
                out_cap[r.link_src[lid]] += cap[lid]
            if r.link_dst[lid] < r.num_hosts:
                in_cap[r.link_dst[lid]] += cap[lid]
        self._nic_tx: dict[int, int] = {}
        self._nic_rx: dict[int, int] = {}
        for h, name in enumerate(topology.hosts):
            rate_gbps = topology.host_rate_gbps.get(name)
            if rate_gbps is None:
                continue
            nic = rate_gbps / 8  # (> 0: check_config)
            if nic < out_cap[h] * (1 - 1e-12):
                self._nic_tx[h] = len(cap)
                cap.append(nic)
            if nic < in_cap[h] * (1 - 1e-12):
                self._nic_rx[h] = len(cap)
                cap.append(nic)
        self._cap = cap
        self._rates, self.engine = _rate_engine(engine, cap)
        """The rate engine (:class:`_PyRates` or the compiled one, same rates) and its name."""
        self._canon: dict[tuple, tuple] = {}
        """(links, copies) -> itself: equal link sets share one tuple, so one _Path (keyed by its id)."""
        self._paths: dict[int, int] = {}
        """id(links tuple) -> path id (the tuples live in the path and group caches)."""
        self._path_links: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        """Path id -> (links, copies on each)."""
        self._wire_sum: list[int] = []
        """Path id -> wire bytes of one copy, summed over its drained flows (link bytes are expanded from it)."""
        self._now = 0
        self._seq = 0
        self._starts: list[tuple[int, int, Message, tuple]] = []
        """(start, seq, message, its _path_info): the path is looked up once, when it is sent."""
        self._done: list[tuple[int, int]] = []  # (finish_ns, message id)
        self._inflight_ids: set[int] = set()
        self._start_of: dict[int, int] = {}
        # Messages of one (src, dst, connection) are carried in posting order, as one queue pair
        # sends its work requests: the next one starts when the previous has left the sender.
        self._conn_busy: set[tuple[str, str, int]] = set()
        self._conn_wait: dict[tuple[str, str, int], deque[Message]] = {}
        self._conn_pass: set[int] = set()
        self._fct: dict[int, tuple[int, int]] = {}
        self._bytes_delivered = 0
        self._first_start: int | None = None
        self._flows: dict[int, tuple[Message, int, int, int, int]] = {}
        """Active flows by seq: (message, fixed latency, copies, wire bytes, path id)."""
        self._events = 0
        self._groups: dict[int, tuple] = {}
        """Message id -> (links, copies per link, copies, fixed latency, 1/capacity sum) (:meth:`send_group`)."""
        self._group_cache: dict[tuple, tuple[tuple[int, ...], tuple[int, ...]] | None] = {}
        self._group_ids: dict[tuple, tuple] = {}
        self._copies = 0
        self._last_finish = 0
        self._path_cache: dict[tuple[str, str, int], tuple[tuple[int, ...], int, float]] = {}
        self._rate_profiles: dict[tuple[str, str, int], tuple] = {}
        self._profiles: dict[tuple[str, str, int], tuple] = {}

    @classmethod
    def config_warnings(cls, config: NetworkConfig) -> list[str]:
        """One line naming every packet-level setting (:data:`PACKET_LEVEL_SETTINGS`) given a value other than
        its default, which this backend ignores; ``[]`` when there is none. heterosim's ``validate`` prints it
        and a run records it in summary.json (``heterosim.pipeline.config_warnings``)."""
        default = NetworkConfig()
        fields = [p for name in type(config).model_fields if name in PACKET_LEVEL_SETTINGS
                  for p in _changed(getattr(config, name), getattr(default, name), f"network.{name}")]
        if not fields:
            return []
        verb = "are packet-level settings and are" if len(fields) > 1 else "is a packet-level setting and is"
        return [f"flow backend: {', '.join(fields)} {verb} ignored (use --backend ns3)"]

    # ------------------------------------------------------------------ interface
    @property
    def now_ns(self) -> int:
        return self._now

    @property
    def counters(self) -> _Counters:
        return _Counters(self._events, self._rates.refills, self._rates.refilled_flows)

    def send(self, msg: Message) -> None:
        if msg.size_bytes <= 0:
            raise NetworkError("message size must be > 0 bytes", field="message.size_bytes", value=msg.size_bytes)
        if msg.start_ns < self._now:
            raise NetworkError(f"message starts before the backend's current time {self._now} ns",
                               field="message.start_ns", value=msg.start_ns)
        if msg.id in self._inflight_ids:
            raise NetworkError("message id already in flight", field="message.id", value=msg.id)
        info = self._path_info(msg)  # validates hosts and reachability now
        self._inflight_ids.add(msg.id)
        self._seq += 1
        heapq.heappush(self._starts, (msg.start_ns, self._seq, msg, info))
        if self._first_start is None or msg.start_ns < self._first_start:
            self._first_start = msg.start_ns

    def send_group(self, msg: Message, images: tuple[tuple[str, str], ...], hashed_alike: bool = False) -> bool:
        """Send ``msg`` and one identical copy between each ``(src, dst)`` of ``images``, as one flow.

        The copies stand for what symmetric parts of a training job (data-parallel
        replicas, ring positions) send at the same instant: they load every link of
        their own paths, and by symmetry each gets the same max-min rate, so one
        flow with a copy count per link gives every copy's rate exactly. The
        completion (``msg.id``) is the common one; where the copies' paths differ
        in length (a ring hop inside a leaf vs across the spine) it is the latest
        copy's. Returns False and sends nothing when the copies' paths do not have
        the same rates (first link, last link, narrowest link, NIC caps: e.g. a
        degraded link): the caller sends them one by one.

        ``hashed_alike``: copies whose paths differ only in the links the ECMP hash chose are
        alike too. Each still loads its own hashed links (collisions included), but the group
        has one rate, so it moves at the pace of its slowest copy: an approximation (the
        caller's choice, heterosim ``simulation.hashed_copies``), not the exact rate of each.
        """
        if not images:
            self.send(msg)
            return True
        # callers resend the same images tuple (memoized): found by identity first, since hashing a
        # tuple of hundreds of endpoint pairs on every send costs more than the send
        ikey = (msg.src, msg.dst, msg.flow_key, id(images), hashed_alike)
        entry = self._group_ids.get(ikey)
        if entry is not None and entry[0] is images:
            hit = entry[1]
        else:
            key = (msg.src, msg.dst, msg.flow_key, images, hashed_alike)
            hit = self._group_cache.get(key, False)
            if hit is False:
                hit = self._group_links(msg, images, hashed_alike)
                self._group_cache[key] = hit
            self._group_ids[ikey] = (images, hit)  # holds images, so its id is not reused meanwhile
        if hit is None:
            return False
        self.send(msg)
        self._groups[msg.id] = (hit[0], hit[1], len(images) + 1, hit[2], hit[3])
        return True

    def _profile(self, src: str, dst: str, flow_key: int, hashed_links: bool = True) -> tuple:
        """Everything a flow's timing depends on but contention: link rates in order, fixed latency; and
        where the ECMP hash chose its links, which links (whom it collides with depends on them), unless
        ``hashed_links`` is False (copies on other hashed links taken as alike: :meth:`send_group`)."""
        key = (src, dst, flow_key if self._keyed else 0)
        hit = self._profiles.get(key)
        if hit is None:
            links, fixed_ns, _ = self._path_info(Message(0, src, dst, 1, self._now, flow_key))
            hit = tuple(self._cap[l] for l in links), fixed_ns
            if src != dst and self.router.hashed(src, dst):
                hit += (links,)
            self._profiles[key] = hit
        return hit if hashed_links else hit[:2]

    def rate_profile(self, src: str, dst: str, flow_key: int = 0, hashed_links: bool = True) -> tuple:
        """What a flow's rate depends on but contention: its first, last and narrowest link (NIC caps
        included); where the ECMP hash chose its links, the links too: copies that hash onto other
        spines meet other collisions, so they are never alike (they are sent, and simulated, one by one).
        ``hashed_links=False`` leaves the links out (:meth:`send_group`'s ``hashed_alike``)."""
        key = (src, dst, flow_key if self._keyed else 0)
        hit = self._rate_profiles.get(key)
        if hit is None:
            if src == dst:
                hit = ()
            else:
                links = self._path_info(Message(0, src, dst, 1, self._now, flow_key))[0]
                caps = [self._cap[l] for l in links]
                hit = caps[0], caps[-1], min(caps)
                if self.router.hashed(src, dst):
                    hit += (links,)
            self._rate_profiles[key] = hit
        return hit if hashed_links else hit[:3]

    def rates_alike(self, p0: tuple | None, flows: list[tuple[str, str, int]], hashed_links: bool = True) -> bool:
        """Whether every (src, dst, flow_key) of ``flows`` has ``p0`` as its :meth:`rate_profile` (None where
        that raises). One call for a collective's copies of a transfer (~1,000 at 1,024 GPUs): their profiles
        are cached, and a lookup here costs half a method call."""
        cache, keyed = self._rate_profiles, self._keyed
        for f in flows:
            hit = cache.get(f if keyed else (f[0], f[1], 0))
            if hit is None:
                try:
                    hit = self.rate_profile(f[0], f[1], f[2], hashed_links)
                except Exception:
                    hit = None
            elif not hashed_links:
                hit = hit[:3]
            if hit != p0:
                return False
        return True

    def close(self) -> None:
        """Free the rate engine's paths, classes and flows now (:meth:`_PyRates.close`). :meth:`stats` still
        works; nothing else should be called."""
        self._rates.close()

    def _group_links(self, msg: Message, images, hashed_alike: bool = False):
        links_too = not hashed_alike
        prof = self.rate_profile(msg.src, msg.dst, msg.flow_key, links_too)
        count: dict[int, int] = {}
        fixed, inv = 0, 0.0
        for src, dst in ((msg.src, msg.dst), *images):
            if (src == dst) != (msg.src == msg.dst):
                return None
            if self.rate_profile(src, dst, msg.flow_key, links_too) != prof:
                return None
            links, fixed_ns, inv_cap = self._path_info(Message(0, src, dst, 1, self._now, msg.flow_key))
            fixed, inv = max(fixed, fixed_ns), max(inv, inv_cap)
            for l in links:
                count[l] = count.get(l, 0) + 1
        links, w = tuple(count), tuple(count.values())
        links, w = self._canon.setdefault((links, w), (links, w))  # one _Path per set of links and copies
        return links, w, fixed, inv

    def pending(self) -> int:
        return len(self._inflight_ids)

    def next_event_ns(self) -> int | None:
        """Earliest internal event (flow start, drain, or delivery): no completion comes sooner."""
        t = min(self._rates.next_drain(), self._starts[0][0] if self._starts else math.inf,
                self._done[0][0] if self._done else math.inf)
        return None if t == math.inf else max(self._now, math.ceil(t))

    def advance(self, until_ns: int | None = None) -> list[Completion]:
        if until_ns is not None and until_ns < self._now:
            raise ValueError(f"advance(until_ns={until_ns}) is before now_ns={self._now}")
        limit = math.inf if until_ns is None else until_ns
        starts, done, next_drain = self._starts, self._done, self._rates.next_drain
        while True:
            td = next_drain()
            ts = starts[0][0] if starts else math.inf
            tc = done[0][0] if done else math.inf
            t_int = td if td <= ts else ts
            if t_int <= tc and t_int <= limit and t_int != math.inf:
                if td <= ts:
                    self._drain_batch(td)
                else:
                    self._start_batch(ts)
                continue
            if tc <= limit and tc != math.inf:
                self._now = tc
                out = []
                while done and done[0][0] == tc:
                    _, mid = heapq.heappop(done)
                    self._inflight_ids.discard(mid)
                    out.append(Completion(mid, tc))
                return out
            if until_ns is None:
                if self._flows:  # (the flows the rate engine holds: one entry each, popped as it drains)
                    raise NetworkError("flow backend stalled: active flows with no rate", value=len(self._flows))
                return []
            self._now = until_ns
            return []

    def stats(self) -> NetStats:
        r = self.router
        wire = self._link_wire_bytes()
        link_bytes = {r.link_name(l): b for l, b in enumerate(wire) if b}
        util = 0.0
        if self._first_start is not None and self._last_finish > self._first_start:
            span = self._last_finish - self._first_start
            util = max((b / (self._cap[l] * span) for l, b in enumerate(wire)), default=0.0)
        c = self.counters
        return NetStats(
            messages=len(self._fct), bytes_delivered=self._bytes_delivered, fct_ns=dict(self._fct),
            link_bytes=link_bytes,
            extra={"max_link_utilization": util, "events": c.events, "refills": c.refills,
                   "flow_copies": self._copies,
                   "refilled_flows": c.refilled_flows, "link_bytes_are": "wire bytes (payload + headers)",
                   "rate_engine": self.engine})

    def _link_wire_bytes(self) -> list[int]:
        """Wire bytes per real link, expanded from the totals kept per path (one add per drained flow)."""
        out = [0] * self._num_real
        n = self._num_real
        for (links, w), b in zip(self._path_links, self._wire_sum):
            if b:
                for l, k in zip(links, w):
                    if l < n:
                        out[l] += b * k
        return out

    def rates_gbps(self) -> dict[int, float]:
        """Current wire rate of every active flow, by message id (for inspection and tests)."""
        flows = self._flows
        return {flows[seq][0].id: rate * 8 for seq, rate in self._rates.rates()}

    # ------------------------------------------------------------------ events
    def _start_batch(self, t: int) -> None:
        self._events += 1
        starts = self._starts
        new: list[tuple[int, int, int]] = []
        flows = self._flows
        groups = self._groups
        start_of = self._start_of
        conn_pass, conn_busy = self._conn_pass, self._conn_busy
        paths = self._paths
        mtu, hdr = self._mtu, self._hdr
        heappop = heapq.heappop
        while starts and starts[0][0] == t:
            _, seq, msg, info = heappop(starts)
            mid = msg.id
            if mid not in start_of:  # a message queued behind its connection keeps its post time
                start_of[mid] = t
            grp = groups.pop(mid, None) if groups else None
            if msg.src == msg.dst:
                self._finish(msg, t, 0)
                continue
            conn = msg.connection
            if conn >= 0:
                key = (msg.src, msg.dst, conn)
                if mid in conn_pass:
                    conn_pass.discard(mid)  # handed the connection by its predecessor
                elif key in conn_busy:
                    if grp is not None:
                        groups[mid] = grp  # it starts later with its copies
                    self._conn_wait.setdefault(key, deque()).append(msg)
                    continue
                conn_busy.add(key)
            links, fixed_ns, inv_cap = info
            if grp is not None:  # the latest copy's latency
                fixed_ns, inv_cap = grp[3], grp[4]
            size = msg.size_bytes
            npkt = -(-size // mtu)
            lat = fixed_ns + math.ceil((size - (npkt - 1) * mtu + hdr) * inv_cap - 1e-9)
            wire = size + npkt * hdr
            if grp is None:
                pid = paths.get(id(links))
                if pid is None:
                    pid = self._path(links, None)
                copies = 1
            else:
                pid, copies = self._path(grp[0], grp[1]), grp[2]
            new.append((seq, pid, wire))
            flows[seq] = (msg, lat, copies, wire, pid)
        if not new:
            return
        self._rates.start(new, t)

    def _drain_batch(self, t0: float) -> None:
        self._events += 1
        flows, wire_sum = self._flows, self._wire_sum
        gone = self._rates.drain(t0)
        for seq, drain_t in gone:
            msg, lat, copies, wire, pid = flows.pop(seq)
            wire_sum[pid] += wire
            drain_ns = math.ceil(drain_t - 1e-6)
            self._finish(msg, drain_ns, lat, copies)
            if msg.connection >= 0:
                self._next_on_connection(msg, drain_ns)

    def _path(self, links: tuple[int, ...], w: tuple[int, ...] | None) -> int:
        pid = self._paths.get(id(links))
        if pid is None:
            w = w if w is not None else (1,) * len(links)
            pid = self._paths[id(links)] = self._rates.add_path(links, w)
            self._path_links.append((links, w))
            self._wire_sum.append(0)
        return pid
    def _next_on_connection(self, msg: Message, t: int) -> None:
        key = (msg.src, msg.dst, msg.connection)
        waiting = self._conn_wait.get(key)
        if not waiting:
            self._conn_busy.discard(key)
            self._conn_wait.pop(key, None)
            return
        nxt = waiting.popleft()  # the connection stays busy: hand it to the next message
        self._conn_pass.add(nxt.id)
        self._seq += 1
        heapq.heappush(self._starts, (max(t, self._start_of[nxt.id]), self._seq, nxt, self._path_info(nxt)))

    def _finish(self, msg: Message, drain_ns: int, lat_ns: int, copies: int = 1) -> None:
        fin = max(drain_ns, self._start_of[msg.id]) + lat_ns
        heapq.heappush(self._done, (fin, msg.id))
        self._fct[msg.id] = (self._start_of.pop(msg.id), fin)
        self._bytes_delivered += msg.size_bytes * copies
        self._copies += copies
        if fin > self._last_finish:
            self._last_finish = fin

    def _path_info(self, msg: Message) -> tuple[tuple[int, ...], int, float]:
        """(links incl. NIC caps, propagation + switch latency, sum of 1/capacity after the first link).

        Cached per (src, dst, flow_key): the latency of a flow is propagation +
        switch pipeline + store-and-forward of its last packet on every link after
        the first (that last term scales with the packet, so only 1/capacity is kept).
        """
        key = (msg.src, msg.dst, msg.flow_key if self._keyed else 0)
        hit = self._path_cache.get(key)
        if hit is None:
            r = self.router
            nodes, links = r.route(msg.src, msg.dst, msg.flow_key)
            prop = sum(r.link_delay_ns[l] for l in links)
            inv_cap = sum(1.0 / self._cap[l] for l in links[1:])
            s, d = nodes[0], nodes[-1]
            full = list(links)
            if s in self._nic_tx:
                full = [self._nic_tx[s]] + full
            if d in self._nic_rx:
                full = full + [self._nic_rx[d]]
            full = tuple(full)
            full = self._canon.setdefault((full, None), (full, None))[0]  # one _Path per route
            hit = (full, prop + (len(nodes) - 2) * self._hop_ns, inv_cap)
            self._path_cache[key] = hit
        return hit

