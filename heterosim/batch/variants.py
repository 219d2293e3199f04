"""Variants of one program: what a what-if may change without changing the program (B rows of :class:`Params`).

A variant is expressed in the scenario's own terms, so that the same change can be run through the normal
path (``heterosim run --set ...``, :meth:`Variant.overrides`) and compared:

* ``degrade``: fabric links between two named ends below their rate (``cluster.degraded_links``: every link
  between the two ends, both directions, ``rate * factor``);
* ``stragglers``: GPUs slower than their group (``cluster.stragglers``: their compute ops take ``slowdown`` times
  longer, a TP group running at its slowest GPU's pace);
* ``per_hop_latency_ns``: the network's switch latency (``network.per_hop_latency_ns``);
* ``seed``: the scenario's ``seed`` (the ECMP hash's per-switch salts);
* ``nic_gbps``: the NIC speed of a device group (``cluster.groups[i].overrides.nic_gbps``: its NICs' access links
  and line rate), where the comm planner plans the same schedules at that speed (checked: the variant's program
  is exported once per distinct speed and compared);
* ``fail``: fabric links down (every link between two named ends): flows re-routed on the shortest paths left,
  as the flow backend routes on the fabric without them. No scenario field says this; :meth:`Variant.prepare`
  makes the normal path's input with the links removed.

A change that would change the program (another parallel plan, another batch, another fabric shape) is not a
variant: :func:`check_variant` refuses it with one line.
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
    nic_gbps: tuple[tuple[str, float], ...] = ()
    """(device group name, NIC line rate in Gb/s)."""
    fail: tuple[tuple[str, str], ...] = ()
    """(end a, end b): every fabric link between a and b down."""
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
        for g, r in self.nic_gbps:
            i = [x.name for x in scenario.cluster.groups].index(g)
            out[f"cluster.groups[{i}].overrides"] = {**scenario.cluster.groups[i].overrides, "nic_gbps": r}
        return out

    def prepare(self, scenario):
        """The normal path's input for this variant: the scenario with :meth:`overrides`, prepared, and the failed
        links removed from its fabric (``heterosim.pipeline.simulate`` runs it)."""
        import dataclasses

        from heterosim import pipeline
        from netbackend.topo import NetTopology

        o = self.overrides(scenario)
        prep = pipeline.prepare(pipeline.with_overrides(scenario, o) if o else scenario)
        if self.fail:
            net = prep.system.net
            gone = {k for a, b in self.fail for k in _links_between(net, a, b)}
            net = NetTopology(hosts=list(net.hosts), switches=list(net.switches),
                              links=[l for k, l in enumerate(net.links) if k not in gone],
                              host_rate_gbps=dict(net.host_rate_gbps))
            prep = dataclasses.replace(prep, system=dataclasses.replace(prep.system, net=net))
        return prep


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
    groups = {n.group for n in system.nodes}
    for g, r in v.nic_gbps:
        if g not in groups:
            raise UserError("no such device group", field="--vary nic", value=g)
        if not r > 0:
            raise UserError("a NIC speed is > 0 Gb/s", field="--vary nic", value=r)
    for a, b in v.fail:
        if not _links_between(system.net, a, b):
            raise UserError(f"no fabric link {a} <-> {b}", field="--vary fail", value=f"{a}<->{b}")
    if v.per_hop_latency_ns is not None and v.per_hop_latency_ns < 0:
        raise UserError("per-hop latency must be >= 0 ns", field="--vary hop_latency", value=v.per_hop_latency_ns)


def _links_between(net, a: str, b: str | None) -> list[int]:
    return [k for k, l in enumerate(net.links) if a in (l.a, l.b) and (b is None or b in (l.a, l.b))]


def baseline_params(prog: Program, batch: int) -> Params:
    return params(prog, [Variant()] * batch)


def params(prog: Program, variants: list[Variant], system=None, scenario=None) -> Params:
    """:class:`Params` for ``variants`` (``system``: the prepared system, needed for link variants; ``scenario``:
    the prepared scenario, needed for ECMP seed, NIC speed and failure variants)."""
    B = len(variants)
    lr = len(prog.link_gbps)
    L = prog.num_links
    gbps = np.broadcast_to(prog.link_gbps, (B, lr)).copy()
    nic = np.broadcast_to(prog.nic_gbps, (B, len(prog.nic_gbps))).copy()
    rank_slow = np.broadcast_to(prog.rank_slowdown, (B, len(prog.rank_slowdown))).copy()
    hop = np.full(B, prog.hop_ns, np.int64)
    names = {g: i for i, g in enumerate(prog.gpu_names)}
    und = prog.link_undirected
    speeds: dict[tuple, Program] = {}
    for i, v in enumerate(variants):
        if v.nic_gbps:  # (first: a degraded link scales the rate its group's NIC speed gives it)
            key = tuple(sorted(v.nic_gbps))
            other = speeds.get(key)
            if other is None:
                other = speeds[key] = _nic_program(prog, v, scenario)
            gbps[i], nic[i] = other.link_gbps, other.nic_gbps
        for a, b, f in v.degrade:
            found = _links_between(system.net, a, b)
            if not found:
                raise UserError(f"no fabric link {a} <-> {b}", field="variant.degrade", value=v.name)
            for k in found:
                sel = und == k
                gbps[i, sel] = gbps[i, sel] * f  # (topologies.build._degrade_links: rate_gbps * factor)
        for a, b in v.fail:  # (no flow crosses them; a NIC's cap rule sums its access links left)
            for k in _links_between(system.net, a, b):
                gbps[i, und == k] = 0.0
        for g, s in v.stragglers:
            rank_slow[i, names[g]] = rank_slow[i, names[g]] * s  # (topologies.build._apply_stragglers)
        if v.per_hop_latency_ns is not None:
            hop[i] = v.per_hop_latency_ns
    cap = np.full((B, L + 1), np.inf)
    cap[:, :lr] = gbps * 1e9 / 8 / 1e9  # (Router.link_capacity_Bps, then FlowBackend: bytes per ns)
    for j, vl in enumerate(prog.nic_links):
        acc = prog.nic_access[j]
        total = np.zeros(B)
        for l in acc:  # (summed in link order, as the flow backend does)
            total = total + cap[:, l]
        c = nic[:, j] / 8
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
    routed: dict[tuple, dict] = {}
    for i, v in enumerate(variants):
        if (v.seed is None and not v.fail) or len(prog.links) == 0:  # (no flow, no route for them to change)
            continue
        if scenario is None or system is None:
            raise UserError("an ECMP seed or failure variant needs the prepared scenario", field="params",
                            value=v.name)
        seed = scenario.seed if v.seed is None else v.seed
        failed = tuple(sorted({k for a, b in v.fail for k in _links_between(system.net, a, b)}))
        t = routed.get((seed, failed))
        if t is None:
            t = routed[(seed, failed)] = prog.reroute(system, scenario, seed, failed)
        pl[i], pt[i], pp[i], ph[i] = t["links"], t["lat_links"], t["prop"], t["hops"]
    return Params(cap, lane_slow, hop, pl, pt, pp, ph)


_SAME_PROGRAM = ("kind", "member_ns", "member_lane", "pre_ns", "flow", "succ", "size_bytes", "wire_bytes", "path",
                 "links", "conn", "link_undirected", "nic_links", "hold_sms")
"""Program arrays a NIC speed variant must leave as they are (else the comm planner planned other schedules)."""


def _nic_program(prog: Program, v: Variant, scenario) -> Program:
    """The program of the scenario with ``v``'s NIC speeds (its link and NIC rates are the variant's); one line
    where it is another program."""
    from heterosim.sim.program import export_program

    if scenario is None:
        raise UserError("a NIC speed variant needs the prepared scenario", field="params", value=v.name)
    other = export_program(Variant(nic_gbps=v.nic_gbps).prepare(scenario))
    for name in _SAME_PROGRAM:
        a, b = getattr(prog, name), getattr(other, name)
        if (a is None) != (b is None) or (a is not None and (a.shape != b.shape or not np.array_equal(a, b))):
            raise UserError(f"changes the program at this NIC speed ({name} differs: a fabric sized from the NIC "
                            "speed, pin fabric.num_spines; or other schedules planned); use heterosim run / sweep",
                            field="--vary nic", value=", ".join(f"{g}={r:g}" for g, r in v.nic_gbps))
    return other
