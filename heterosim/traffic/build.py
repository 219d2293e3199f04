"""Traffic scenario file -> validated scenario, fabric and flow list (bad input: one line, exit 2).

The fabric comes from the same generators as training clusters
(``topologies.fabrics``): each host is a one-NIC node, so ``fat_tree`` with 16
hosts per leaf, 4 leaves per pod and 400G uplinks builds the HPCC paper's
320-host tree. Checks pydantic cannot do (incast larger than the fabric, a
warm-up as long as the run, a CDF file that is not a CDF) name file, field and value.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from pathlib import Path

from heterosim.config.loader import _iter_overrides, load_yaml, set_path, validate_model
from heterosim.errors import ConfigError, UserError
from heterosim.traffic.config import IncastWorkload, PatternWorkload, TrafficScenario
from netbackend.background import BUILTIN_CDFS, BackgroundTraffic, FlowSizeCdf
from netbackend.base import Message
from netbackend.topo import NetTopology
from topologies.config import NodeType
from topologies.fabrics import generate
from topologies.system import NodeInfo

KINDS = ("poisson", "incast", "pattern")
"""What generated a flow (``fct.csv`` column ``kind``)."""


def load_traffic(path: str | Path, overrides: list[str] | dict | None = None) -> TrafficScenario:
    """Read a traffic scenario, apply ``--set path=value`` overrides, validate."""
    path = Path(path)
    file = str(path)
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError("a traffic scenario must be a YAML mapping", file=file)
    data = copy.deepcopy(raw)
    for key, value in _iter_overrides(overrides, file):
        set_path(data, key, value, file=file)
    sc = validate_model(TrafficScenario, data, file=file)
    sc._source_file = file  # type: ignore[attr-defined]
    return sc


def source_file(sc: TrafficScenario) -> str | None:
    return getattr(sc, "_source_file", None)


@dataclass
class TrafficPlan:
    """Everything one simulation of the scenario needs, identical for every CC setting."""

    scenario: TrafficScenario
    topology: NetTopology
    flows: list[Message]
    """In start order, ids 1..N."""
    kinds: dict[int, str] = field(default_factory=dict)
    """Flow id -> one of :data:`KINDS`."""
    cdf: FlowSizeCdf | None = None


def host_names(sc: TrafficScenario) -> list[str]:
    return [f"{g.name}{i}" for g in sc.hosts for i in range(g.count)]


def build_topology(sc: TrafficScenario, file: str | None = None) -> NetTopology:
    """Hosts as one-NIC nodes, wired by the scenario's fabric generator."""
    nodes = []
    for gi, g in enumerate(sc.hosts):
        spec = NodeType(gpu="none", gpus_per_node=1, nics_per_node=1, nic_gbps=g.rate_gbps)
        for i in range(g.count):
            name = f"{g.name}{i}"
            nodes.append(NodeInfo(name=name, group=g.name, index=len(nodes), spec=spec, gpu_ranks=(),
                                  nics=(name,), group_index=gi, pod=g.pod))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise UserError("two host groups give the same host name (use distinct group names)", file=file,
                        field="hosts", value=dup)
    switches, links = generate(sc.fabric, nodes, file)
    clash = set(switches) & set(names)
    if clash:
        raise UserError("a host has the name of a switch", file=file, field="hosts", value=sorted(clash)[0])
    topo = NetTopology(hosts=names, switches=switches, links=links,
                       host_rate_gbps={n.name: n.spec.nic_gbps for n in nodes})
    linked = {x for link in links for x in (link.a, link.b)}
    unlinked = [h for h in names if h not in linked]
    if unlinked:
        raise UserError("host has no link in the fabric", file=file, field="fabric", value=unlinked[0])
    return topo


def resolve_cdf(name: str, file: str | None) -> FlowSizeCdf:
    """A built-in CDF by name, or a file relative to the scenario file."""
    if name in BUILTIN_CDFS:
        return FlowSizeCdf.from_file(BUILTIN_CDFS[name])
    base = Path(file).parent if file else Path.cwd()
    path = Path(name) if Path(name).is_absolute() else base / name
    field_name = "workload.poisson.cdf"
    if not path.is_file():
        raise UserError(f"no such CDF file ({path}); built-in: {', '.join(BUILTIN_CDFS)}", file=file,
                        field=field_name, value=name)
    try:
        return FlowSizeCdf.from_file(path)
    except UserError as err:
        raise UserError(f"not a flow-size CDF ({err})", file=file, field=field_name, value=name) from None


def check(sc: TrafficScenario, topo: NetTopology, file: str | None) -> None:
    """What the model alone cannot check: it needs the host count or the fabric."""
    if sc.duration_ns <= sc.warmup_ns:
        raise UserError(f"must be longer than warmup_ns ({sc.warmup_ns})", file=file, field="duration_ns",
                        value=sc.duration_ns)
    n = len(topo.hosts)
    for i, inc in enumerate(sc.workload.incast):
        if inc.senders > n - 1:
            raise UserError(f"an incast needs senders + 1 receiver <= {n} hosts", file=file,
                            field=f"workload.incast[{i}].senders", value=inc.senders)
        if inc.receiver is not None and not topo.is_host(inc.receiver):
            raise UserError("not a host of the scenario", file=file, field=f"workload.incast[{i}].receiver",
                            value=inc.receiver)
    for i, pat in enumerate(sc.workload.patterns):
        if pat.start_ns >= sc.duration_ns:
            raise UserError(f"starts after the arrival window (duration_ns {sc.duration_ns})", file=file,
                            field=f"workload.patterns[{i}].start_ns", value=pat.start_ns)
    if n < 2:
        raise UserError("a traffic study needs at least two hosts", file=file, field="hosts", value=n)
    if sc.network.background is not None:
        raise UserError("a traffic study draws its flows from workload.poisson; remove network.background",
                        file=file, field="network.background", value=sc.network.background.cdf)


def plan(sc: TrafficScenario) -> TrafficPlan:
    """Validate against the fabric and generate every flow (deterministic in ``sc.seed``)."""
    file = source_file(sc)
    topo = build_topology(sc, file)
    check(sc, topo, file)
    wl = sc.workload
    hosts = list(topo.hosts)
    rates = topo.host_rate_gbps
    tagged: list[tuple[Message, str]] = []
    cdf = None
    if wl.poisson is not None:
        cdf = resolve_cdf(wl.poisson.cdf, file)
        gen = BackgroundTraffic(cdf, wl.poisson.load, hosts, rates, seed=sc.seed, start_ns=0,
                                end_ns=sc.duration_ns - 1, id_offset=0)
        tagged += [(m, "poisson") for m in gen]
    for i, inc in enumerate(wl.incast):
        tagged += [(m, "incast") for m in incast_flows(inc, hosts, rates, sc.duration_ns,
                                                        random.Random(f"{sc.seed}:incast:{i}"))]
    for i, pat in enumerate(wl.patterns):
        tagged += [(m, "pattern") for m in pattern_flows(pat, hosts, sc.duration_ns,
                                                          random.Random(f"{sc.seed}:pattern:{i}"))]
    tagged.sort(key=lambda mk: mk[0].start_ns)  # stable: generator order within one ns
    flows, kinds = [], {}
    for k, (m, kind) in enumerate(tagged, 1):
        flows.append(Message(k, m.src, m.dst, m.size_bytes, m.start_ns, m.flow_key))
        kinds[k] = kind
    return TrafficPlan(sc, topo, flows, kinds, cdf)


def incast_events_per_ns(inc: IncastWorkload, rates: dict[str, float]) -> float:
    """Event rate: given directly, or the one whose payload is ``load`` x the hosts' total line rate."""
    if inc.rate_per_s is not None:
        return inc.rate_per_s / 1e9
    capacity_bytes_per_ns = sum(rates.values()) / 8.0
    return inc.load * capacity_bytes_per_ns / (inc.senders * inc.bytes_per_sender)


def incast_flows(inc: IncastWorkload, hosts: list[str], rates: dict[str, float], duration_ns: int,
                 rng: random.Random) -> list[Message]:
    """Incast events in [0, duration_ns); every sender of an event starts at the event time."""
    if inc.times_ns is not None:
        times = sorted(t for t in inc.times_ns if t < duration_ns)
    else:
        rate = incast_events_per_ns(inc, rates)
        times = []
        t = rng.expovariate(rate)
        while t < duration_ns:
            times.append(int(t))
            t += rng.expovariate(rate)
    out: list[Message] = []
    for t_ns in times:
        dst = inc.receiver if inc.receiver is not None else rng.choice(hosts)
        senders = rng.sample([h for h in hosts if h != dst], inc.senders)
        for src in senders:
            out.append(Message(0, src, dst, inc.bytes_per_sender, t_ns, flow_key=rng.getrandbits(32)))
    return out


def pattern_flows(pat: PatternWorkload, hosts: list[str], duration_ns: int, rng: random.Random) -> list[Message]:
    out: list[Message] = []
    t = pat.start_ns
    while t < duration_ns:
        if pat.kind == "all_to_all":
            pairs = [(a, b) for a in hosts for b in hosts if a != b]
        else:
            pairs = list(zip(hosts, derangement(hosts, rng)))
        out += [Message(0, a, b, pat.flow_bytes, t, flow_key=rng.getrandbits(32)) for a, b in pairs]
        if pat.repeat_every_ns is None:
            break
        t += pat.repeat_every_ns
    return out


def derangement(items: list[str], rng: random.Random) -> list[str]:
    """A uniformly random permutation with no fixed point (rejection sampling; ~e tries on average)."""
    while True:
        perm = items[:]
        rng.shuffle(perm)
        if all(a != b for a, b in zip(items, perm)):
            return perm
