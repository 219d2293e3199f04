"""Device-to-parallelism mapping: which GPUs form each TP group, pipeline stage and DP replica.

The compiler and coordinator derive every group from two things the scenario
already carries: the cluster's GPU order (groups in file order, nodes, GPUs)
and ``parallelism.order`` (Megatron's RankGenerator, fastest-varying first).
A :class:`Mapping` is therefore expressed as *a permutation of the cluster's
device groups* plus *an order string*, and applying it is two ordinary
overrides (``cluster.groups`` reordered, ``parallelism.order``): no new
scenario field, nothing for the compiler to learn.

Two strategies:

* ``stage`` (order ``tp-cp-ep-dp-pp``, pipeline outermost): stage s is the
  contiguous block of tp*dp GPUs, so with group sizes that are multiples of
  tp*dp every stage sits on one device type and the layer partition absorbs the
  speed difference; DP replicas are identical pipelines.
* ``replica`` (order ``tp-cp-ep-pp-dp``, data parallel outermost): replica r is
  the contiguous block of tp*pp GPUs, so replicas are homogeneous and unequal
  micro-batch counts absorb the speed difference; gradient all-reduces cross
  device types.

TP always stays inside one node: a TP group that would cross nodes (and above
all one that would cross node types) is a :class:`PlanError` naming the group.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from heterosim.errors import PlanError

STRATEGIES = ("stage", "replica")
ORDER_OF = {"stage": "tp-cp-ep-dp-pp", "replica": "tp-cp-ep-pp-dp"}


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One device group of the cluster, with what the planner needs to know about it."""

    index: int
    """Position in the scenario file (for error messages)."""
    name: str
    node_type: str
    device: str
    gpus_per_node: int
    num_nodes: int
    slowdown: float
    nic_gbps_per_gpu: float
    """NIC line rate available to one GPU when all GPUs of a node send at once (Gb/s)."""
    intra: str
    peak_flops: float
    """bf16 peak / slowdown: a sort key only."""
    hbm_bytes: float

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes


@dataclass(frozen=True, slots=True)
class Cell:
    """One TP group (a coordinator lane): pipeline stage ``stage`` of DP replica ``replica``."""

    stage: int
    replica: int
    group: str
    device: str
    slowdown: float
    node: int
    """Global node index (in the mapping's rank order)."""


@dataclass
class Mapping:
    strategy: str
    order: str
    """``parallelism.order`` to set."""
    group_order: tuple[str, ...]
    """Cluster group names in the rank order the mapping needs."""
    tp: int
    pp: int
    dp: int
    cells: list[list[Cell]] = field(repr=False)
    """``cells[stage][replica]``."""

    @property
    def stage_devices(self) -> list[tuple[str, ...]]:
        """Distinct device types of every stage (one entry = the stage sits on one type)."""
        return [tuple(sorted({c.device for c in row})) for row in self.cells]

    @property
    def replica_devices(self) -> list[tuple[str, ...]]:
        return [tuple(sorted({self.cells[s][r].device for s in range(self.pp)})) for r in range(self.dp)]

    @property
    def mixed_stages(self) -> int:
        """Stages whose replicas sit on more than one device type."""
        return sum(len(d) > 1 for d in self.stage_devices)

    def key(self) -> tuple:
        """Cells' device/slowdown/group signature: two mappings with the same key perform alike."""
        return tuple((c.group, c.device, c.slowdown) for row in self.cells for c in row) + (self.order,)

    def describe(self) -> str:
        """e.g. ``stage-major: stages 0-3 H100-SXM | 4-7 A100-80``."""
        if self.strategy == "stage":
            labels = ["+".join(d) for d in self.stage_devices]
            what = "stages"
        else:
            labels = ["+".join(d) for d in self.replica_devices]
            what = "replicas"
        return f"{self.strategy}-major: {what} " + index_runs(labels)

    def overrides(self, scenario) -> dict:
        """Scenario overrides (dotted path -> value) that make the compiler use this mapping."""
        out: dict = {"parallelism.order": self.order}
        names = [g.name for g in scenario.cluster.groups]
        if list(self.group_order) != names:
            by_name = {g.name: g for g in scenario.cluster.groups}
            out["cluster.groups"] = [by_name[n].model_dump(exclude_defaults=True) for n in self.group_order]
        return out


def group_infos(cluster, file: str | None = None) -> list[GroupInfo]:
    """Per-group facts from the node-type and device catalogs (no fabric is built)."""
    from topologies.catalog import node_type

    out = []
    for gi, g in enumerate(cluster.groups):
        spec = node_type(g.node_type, g.overrides, file, field=f"cluster.groups[{gi}].node_type")
        dev = _device(spec.gpu)
        out.append(GroupInfo(index=gi, name=g.name, node_type=g.node_type, device=spec.gpu,
                             gpus_per_node=spec.gpus_per_node, num_nodes=g.num_nodes, slowdown=g.slowdown,
                             nic_gbps_per_gpu=spec.nic_gbps * spec.nics_per_node / spec.gpus_per_node,
                             intra=spec.intra, peak_flops=dev.peak_flops("bf16") / g.slowdown,
                             hbm_bytes=float(dev.hbm_bytes)))
    return out


@lru_cache(maxsize=64)
def _device(name: str):
    from heterosim.hardware import get_device

    return get_device(name)


def check_sizes(groups: list[GroupInfo], tp: int, pp: int, dp: int, file: str | None = None) -> None:
    """Group sizes must add up to tp*pp*dp and every TP group must fit inside one node of one type."""
    total = sum(g.gpus for g in groups)
    if tp * pp * dp != total:
        parts = " + ".join(f"{g.name} ({g.gpus})" for g in groups)
        raise PlanError(f"GPU count mismatch: groups {parts} = {total} GPUs but tp*pp*dp = {tp}*{pp}*{dp} = "
                        f"{tp * pp * dp}", file=file, field="cluster.groups", value=f"tp={tp} pp={pp} dp={dp}")
    # walk the TP groups (tp consecutive ranks) node by node
    owner: list[tuple[GroupInfo, int]] = []  # per rank: (group, node)
    node = 0
    for g in groups:
        for _ in range(g.num_nodes):
            owner.extend((g, node) for _ in range(g.gpus_per_node))
            node += 1
    for start in range(0, total, tp):
        members = owner[start:start + tp]
        kinds = []
        for g, _ in members:
            if g not in kinds:
                kinds.append(g)
        types = {(g.node_type, g.device) for g in kinds}
        if len(types) > 1:
            a = kinds[0]
            b = next(g for g in kinds if (g.node_type, g.device) != (a.node_type, a.device))
            raise PlanError(f"tensor-parallel group of ranks {start}-{start + tp - 1} would span node types "
                            f"{a.node_type} (group {a.name}) and {b.node_type} (group {b.name}); TP must stay "
                            f"inside a node", file=file, field=f"cluster.groups[{b.index}]", value=b.name)
        if len({n for _, n in members}) > 1:
            g = kinds[0]
            raise PlanError(f"tp = {tp} does not divide the {g.gpus_per_node} GPUs per node of group {g.name} "
                            f"({g.node_type}); TP must stay inside a node", file=file,
                            field=f"cluster.groups[{g.index}]", value=g.name)


def map_ranks(groups: list[GroupInfo], tp: int, pp: int, dp: int, strategy: str = "stage",
              group_order: list[str] | tuple[str, ...] | None = None, file: str | None = None) -> Mapping:
    """The mapping of (tp, pp, dp) onto ``groups`` laid out in ``group_order`` with ``strategy``."""
    if strategy not in STRATEGIES:
        raise PlanError(f"unknown mapping strategy (known: {', '.join(STRATEGIES)})", file=file,
                        field="planner.mapping", value=strategy)
    by_name = {g.name: g for g in groups}
    if group_order is None:
        ordered = list(groups)
    else:
        if sorted(group_order) != sorted(by_name):
            raise PlanError(f"group order must list every group once ({', '.join(by_name)})", file=file,
                            field="cluster.groups", value=list(group_order))
        ordered = [by_name[n] for n in group_order]
    check_sizes(ordered, tp, pp, dp, file)
    # one entry per TP group, in rank order: (group, node index)
    lanes: list[tuple[GroupInfo, int]] = []
    node = 0
    for g in ordered:
        per_node = g.gpus_per_node // tp
        for _ in range(g.num_nodes):
            lanes.extend((g, node) for _ in range(per_node))
            node += 1
    cells: list[list[Cell | None]] = [[None] * dp for _ in range(pp)]
    for lane, (g, n) in enumerate(lanes):
        if strategy == "stage":  # lane = dp_i + dp * pp_i
            r, s = lane % dp, lane // dp
        else:  # lane = pp_i + pp * dp_i
            s, r = lane % pp, lane // pp
        cells[s][r] = Cell(stage=s, replica=r, group=g.name, device=g.device, slowdown=g.slowdown, node=n)
    return Mapping(strategy=strategy, order=ORDER_OF[strategy], group_order=tuple(g.name for g in ordered),
                   tp=tp, pp=pp, dp=dp, cells=cells)  # type: ignore[arg-type]


def mapping_of_scenario(scenario, groups: list[GroupInfo], tp: int, pp: int, dp: int,
                        file: str | None = None) -> Mapping:
    """The mapping a scenario already implies (file group order, its ``parallelism.order``)."""
    order = scenario.parallelism.order
    toks = [t for t in order.split("-") if t in ("dp", "pp")]
    strategy = "stage" if toks.index("pp") > toks.index("dp") else "replica"
    m = map_ranks(groups, tp, pp, dp, strategy, None, file)
    m.order = order
    return m


def candidate_mappings(groups: list[GroupInfo], tp: int, pp: int, dp: int, file: str | None = None) -> list[Mapping]:
    """Distinct mappings worth scoring: both strategies x {file order, fastest first, most memory first,
    slowest first}. Raises PlanError (from :func:`check_sizes`) when no group order can keep TP in a node."""
    names = [g.name for g in groups]
    orders = [names,
              [g.name for g in sorted(groups, key=lambda g: -g.peak_flops)],
              [g.name for g in sorted(groups, key=lambda g: (-g.hbm_bytes, -g.peak_flops))],
              [g.name for g in sorted(groups, key=lambda g: g.peak_flops)]]
    seen: set = set()
    out: list[Mapping] = []
    first_err: PlanError | None = None
    for strategy in STRATEGIES:
        for order in orders:
            try:
                m = map_ranks(groups, tp, pp, dp, strategy, order, file)
            except PlanError as err:
                first_err = first_err or err
                continue
            k = m.key()
            if k not in seen:
                seen.add(k)
                out.append(m)
    if not out and first_err is not None:
        raise first_err
    return out


def apply_overrides(scenario, overrides: dict):
    """A new validated Scenario with dotted-path overrides applied (the source file is kept)."""
    from heterosim.config.loader import set_path, validate_model
    from heterosim.config.scenario import Scenario

    file = getattr(scenario, "_source_file", None)
    data = scenario.model_dump()
    for k, v in overrides.items():
        set_path(data, k, v, file=file)
    new = validate_model(Scenario, data, file=file)
    new._source_file = file  # type: ignore[attr-defined]
    fields = getattr(scenario, "_framework_fields", None)  # what a framework preset filled in (summary.json)
    if fields is not None:
        new._framework_fields = {k: v for k, v in fields.items() if k not in overrides}  # type: ignore[attr-defined]
    return new


def index_runs(labels: list[str]) -> str:
    """Consecutive equal labels as index ranges: ``0-3 H100-SXM | 4-7 A100-80`` (mapping descriptions)."""
    runs: list[str] = []
    i = 0
    while i < len(labels):
        j = i
        while j + 1 < len(labels) and labels[j + 1] == labels[i]:
            j += 1
        runs.append(f"{i}-{j} {labels[i]}" if j > i else f"{i} {labels[i]}")
        i = j + 1
    return " | ".join(runs)
