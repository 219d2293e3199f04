"""Variants of one program: what a what-if may change without changing the program (B rows of :class:`Params`).

A variant is expressed in the scenario's own terms, so that the same change can be run through the normal
path (``heterosim run --set ...``, :meth:`Variant.overrides`) and compared:

* ``degrade``: fabric links between two named ends below their rate (``cluster.degraded_links``: every link
  between the two ends, both directions, ``rate * factor``);
* ``stragglers``: GPUs slower than their group (``cluster.stragglers``: their compute ops take ``slowdown`` times
  longer, a TP group running at its slowest GPU's pace);
* ``per_hop_latency_ns``: the network's switch latency (``network.per_hop_latency_ns``).

A change that would change the program (another parallel plan, another batch, another fabric shape, a failed
link that re-routes flows) is not a variant: :func:`check_variant` refuses it with one line.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from heterosim.batch.engine import Params
from heterosim.errors import UserError
from heterosim.sim.program import Program


@dataclass
class Variant:
    """One what-if: changes on top of the scenario (all optional)."""

    name: str = "baseline"
    degrade: tuple[tuple[str, str, float], ...] = ()
    """(end a, end b, factor in (0, 1]): every fabric link between a and b at ``factor`` of its rate."""
    stragglers: tuple[tuple[str, float], ...] = ()
    """(GPU name, slowdown >= 1)."""
    per_hop_latency_ns: int | None = None
    seed: int | None = None
    """The scenario's ``seed`` (what it changes in a training run: the ECMP hash's per-switch salts, so which
    equal-cost links each flow takes)."""
    tags: dict = field(default_factory=dict)
    """What the variant varies, for the tables (e.g. ``{"kind": "link", "link": "leaf0<->spine1"}``)."""

    def overrides(self, scenario) -> dict:
        """The same change as ``--set``-style overrides of ``scenario`` (a dict of field path -> value)."""
        out: dict = {}
        if self.degrade:
            cur = [d.model_dump(exclude_none=True) for d in scenario.cluster.degraded_links]
            out["cluster.degraded_links"] = cur + [{"a": a, "b": b, "factor": f} for a, b, f in self.degrade]
        if self.stragglers:
            cur = [s.model_dump() for s in scenario.cluster.stragglers]
            out["cluster.stragglers"] = cur + [{"gpu": g, "slowdown": s} for g, s in self.stragglers]
        if self.per_hop_latency_ns is not None:
            out["network.per_hop_latency_ns"] = self.per_hop_latency_ns
        if self.seed is not None:
            out["seed"] = self.seed
        return out


def check_variant(prog: Program, v: Variant, system) -> None:
    """One line for a variant the batch engine cannot run on this program."""
    names = {g: i for i, g in enumerate(prog.gpu_names)}
    for g, s in v.stragglers:
        if g not in names:
            raise UserError("no such GPU in the cluster", field="--vary straggler", value=g)
        if not s >= 1.0:
            raise UserError("a straggler's slowdown must be >= 1", field="--vary straggler", value=s)
    for a, b, f in v.degrade:
        if not 0.0 < f <= 1.0:
            raise UserError("a degraded link keeps a factor in (0, 1] of its rate (a failed link re-routes flows: "
                            "another program; use heterosim run)", field="--vary link", value=f)
        if not _links_between(system.net, a, b):
            raise UserError(f"no fabric link {a} <-> {b}", field="--vary link", value=f"{a}<->{b}")
    if v.seed is not None and not (isinstance(v.seed, int) and v.seed >= 0):
        raise UserError("an ECMP seed is an integer >= 0", field="--vary ecmp-seed", value=v.seed)
    if v.per_hop_latency_ns is not None and v.per_hop_latency_ns < 0:
        raise UserError("per-hop latency must be >= 0 ns", field="--vary hop_latency", value=v.per_hop_latency_ns)


def _links_between(net, a: str, b: str | None) -> list[int]:
    return [k for k, l in enumerate(net.links) if a in (l.a, l.b) and (b is None or b in (l.a, l.b))]


def baseline_params(prog: Program, batch: int) -> Params:
    return params(prog, [Variant()] * batch)


def params(prog: Program, variants: list[Variant], system=None, scenario=None) -> Params:
    """:class:`Params` for ``variants`` (``system``: the prepared system, needed for link variants; ``scenario``:
    the prepared scenario, needed for ECMP seed variants)."""
    B = len(variants)
    lr = len(prog.link_gbps)
    L = prog.num_links
    gbps = np.broadcast_to(prog.link_gbps, (B, lr)).copy()
    rank_slow = np.broadcast_to(prog.rank_slowdown, (B, len(prog.rank_slowdown))).copy()
    hop = np.full(B, prog.hop_ns, np.int64)
    names = {g: i for i, g in enumerate(prog.gpu_names)}
    und = prog.link_undirected
    for i, v in enumerate(variants):
        for a, b, f in v.degrade:
            found = _links_between(system.net, a, b)
            if not found:
                raise UserError(f"no fabric link {a} <-> {b}", field="variant.degrade", value=v.name)
            for k in found:
                sel = und == k
                gbps[i, sel] = gbps[i, sel] * f  # (topologies.build._degrade_links: rate_gbps * factor)
        for g, s in v.stragglers:
            rank_slow[i, names[g]] = rank_slow[i, names[g]] * s  # (topologies.build._apply_stragglers)
        if v.per_hop_latency_ns is not None:
            hop[i] = v.per_hop_latency_ns
    cap = np.full((B, L + 1), np.inf)
    cap[:, :lr] = gbps * 1e9 / 8 / 1e9  # (Router.link_capacity_Bps, then FlowBackend: bytes per ns)
    for j, (vl, nic) in enumerate(zip(prog.nic_links, prog.nic_gbps)):
        acc = prog.nic_access[j]
        total = np.zeros(B)
        for l in acc:  # (summed in link order, as the flow backend does)
            total = total + cap[:, l]
        c = nic / 8
        cap[:, vl] = np.where(c < total * (1 - 1e-12), c, np.inf)
    lanes = prog.lane_ranks
    lane_slow = np.empty((B, len(lanes)))
    for j, ranks in enumerate(lanes):
        lane_slow[:, j] = rank_slow[:, list(ranks)].max(axis=1)
    links, lat, prop, hops = prog.links, prog.lat_links, prog.prop_ns, prog.hops
    if len(links) == 0:  # (no flows: one unused path, so that gathers have a row to read)
        links = lat = np.full((1, links.shape[1]), L, np.int32)
        prop = hops = np.zeros(1, np.int64)
    np_, p = links.shape
    pl = np.broadcast_to(links, (B, np_, p)).copy()
    pt = np.broadcast_to(lat, (B, np_, p)).copy()
    pp = np.broadcast_to(prop, (B, np_)).copy()
    ph = np.broadcast_to(hops, (B, np_)).copy()
    routed: dict[int, dict] = {}
    for i, v in enumerate(variants):
        if v.seed is None or len(prog.links) == 0:  # (no flow, no route for the seed to change)
            continue
        if scenario is None or system is None:
            raise UserError("an ECMP seed variant needs the prepared scenario", field="params", value=v.name)
        t = routed.get(v.seed)
        if t is None:
            t = routed[v.seed] = prog.reroute(system, scenario, v.seed)
        pl[i], pt[i], pp[i], ph[i] = t["links"], t["lat_links"], t["prop"], t["hops"]
    return Params(cap, lane_slow, hop, pl, pt, pp, ph)
