"""A cluster scenario: one fabric, several training jobs on it.

The cluster, the fabric, the network settings (congestion control, background traffic), the NCCL
settings (``comm``) and the seed belong to the cluster; each entry of ``jobs`` is a training scenario
(``model``, ``parallelism``, ``training``, ``hardware``, optionally based on a scenario file and with
``--set``-style overrides) plus where it runs (``placement``), when it starts (``start_ns``) and how many
iterations it runs. A file is a cluster scenario when it says ``kind: cluster`` (or lists ``jobs``).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from heterosim.config.base import Bounded, Strict
from heterosim.config.scenario import CommConfig, OutputConfig
from heterosim.config.training import ITERATIONS_MAX
from heterosim.errors import ConfigError
from hscommon.bounds import CLUSTER_GPUS_MAX, GPUS_PER_NODE_MAX
from netbackend.config import NetworkConfig
from topologies.config import ClusterConfig, FabricConfig, LeafSpineFabric

START_NS_MAX = 3600 * 10**9
"""A job starts at most an hour (simulated) after the cluster: further is a unit slip (s for ns)."""

JOBS_MAX = 1024
"""More jobs than this on one simulated fabric is a generated file gone wrong."""

class Placement(Strict):
    """Which GPUs a job runs on: an explicit list (``gpus`` or ``nodes``), a device group, or a policy.

    Policies take whole free nodes in this order: ``packed`` lowest node first (fills a leaf before the
    next), ``spread`` one node per leaf in turn (crosses the spine as much as possible), ``random`` free
    nodes drawn with ``seed``; ``rail_aligned`` takes the same ``gpus_per_node`` GPU slots (so the same
    NICs, the same rails) on every node it uses, the lowest slots free on enough nodes, so jobs can share
    nodes while each keeps to its own rails. ``group`` limits a policy to one device group; alone, it
    places the job on all of that group's GPUs."""

    policy: Literal["packed", "spread", "random", "rail_aligned"] | None = None
    num_gpus: Bounded(int, 1, CLUSTER_GPUS_MAX) | None = None
    """GPUs the job needs (policies); with an explicit list, a check of its length."""
    group: str | None = Field(None, min_length=1)
    seed: Bounded(int, 0, 2**32 - 1) = 0
    """Seed of the ``random`` policy."""
    gpus_per_node: Bounded(int, 1, GPUS_PER_NODE_MAX) | None = None
    """GPU slots per node (``rail_aligned``); None = the whole node (or the job, if smaller)."""
    gpus: list[str] | None = Field(None, min_length=1)
    """GPU names (``{group}-{i}/gpu{j}``), in the job's rank order."""
    nodes: list[str] | None = Field(None, min_length=1)
    """Node names; the job's ranks fill them in order."""

    @model_validator(mode="after")
    def _one_way(self):
        ways = [w for w, v in (("policy", self.policy), ("gpus", self.gpus), ("nodes", self.nodes)) if v is not None]
        if not ways and self.group is None:
            raise ValueError("give one of policy (with num_gpus), gpus, nodes or group")
        if len(ways) > 1:
            raise ValueError(f"give only one of policy, gpus, nodes (got {', '.join(ways)})")
        if self.policy is not None and self.num_gpus is None:
            raise ValueError(f"policy {self.policy} needs num_gpus")
        if self.gpus_per_node is not None and self.policy != "rail_aligned":
            raise ValueError("gpus_per_node applies to policy rail_aligned only")
        if self.group is not None and (self.gpus is not None or self.nodes is not None):
            raise ValueError("group limits a policy; an explicit gpus/nodes list names its GPUs itself")
        return self


class JobConfig(Strict):
    """One training job of a cluster scenario (its own fields are validated as a training scenario)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$", max_length=100)
    scenario: str | None = Field(None, min_length=1)
    """A training scenario file (relative to the cluster file) the job starts from; its cluster, fabric,
    network and output are the cluster's, not its own."""
    model: Any = None
    """A zoo name, an inline model or ``{zoo: name, ...overrides}`` (as in a training scenario)."""
    parallelism: dict[str, Any] | None = None
    training: dict[str, Any] | None = None
    hardware: dict[str, Any] | None = None
    overrides: list[str] = Field(default_factory=list)
    """``path=value`` overrides of the job's scenario (as ``heterosim run --set``)."""
    placement: Placement
    start_ns: Bounded(int, 0, START_NS_MAX, unit="ns") = 0
    """When the job's first iteration starts."""
    iterations: Bounded(int, 1, ITERATIONS_MAX) | None = None
    """Iterations the job runs back to back; None = its ``training.iterations``."""


class ClusterScenario(Strict):
    kind: Literal["cluster"] = "cluster"
    name: str = Field("cluster", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$", max_length=200)
    description: str = ""
    cluster: ClusterConfig
    fabric: FabricConfig = LeafSpineFabric()
    network: NetworkConfig = NetworkConfig()
    comm: CommConfig = CommConfig()
    """NCCL settings of the cluster's software image, shared by every job."""
    output: OutputConfig = OutputConfig()
    seed: Bounded(int, 0, 2**32 - 1) = 0
    jobs: list[JobConfig] = Field(min_length=1, max_length=JOBS_MAX)


def is_cluster_data(data: Any) -> bool:
    return isinstance(data, dict) and (data.get("kind") == "cluster" or "jobs" in data)


def is_cluster_file(path: str | Path) -> bool:
    """Whether ``path`` holds a cluster scenario (read errors are left to the loader that follows)."""
    from heterosim.config.loader import load_yaml

    try:
        return is_cluster_data(load_yaml(path))
    except Exception:
        return False


def load_cluster_scenario(path: str | Path, overrides: list[str] | dict | None = None) -> ClusterScenario:
    """Read, resolve references (``system``/``cluster``/``fabric`` files, background CDF), apply ``--set``
    overrides (``jobs[1].placement.policy=spread`` works too), validate."""
    from heterosim.config.loader import _iter_overrides, _resolve_refs, load_yaml, set_path, validate_model

    path = Path(path)
    file = str(path)
    raw = load_yaml(path)
    if not is_cluster_data(raw):
        raise ConfigError("not a cluster scenario (kind: cluster with a list of jobs)", file=file)
    data = copy.deepcopy(raw)
    for key, value in _iter_overrides(overrides, file):
        set_path(data, key, value, file=file)
    jobs = data.pop("jobs", None)
    data = _resolve_refs(data, path.parent, file)
    data["jobs"] = jobs
    sc = validate_model(ClusterScenario, data, file=file)
    seen: set[str] = set()
    for i, job in enumerate(sc.jobs):
        if job.name in seen:
            raise ConfigError("job names must be unique (results are per job)", file=file, field=f"jobs[{i}].name",
                              value=job.name)
        seen.add(job.name)
    sc._source_file = file  # type: ignore[attr-defined]
    return sc


def job_scenario(cs: ClusterScenario, index: int, iterations: int | None = None):
    """The job's training scenario: its base file and own fields over the cluster's cluster/fabric/network.

    Errors name the cluster file and ``jobs[i].<field>``."""
    from heterosim.config.loader import load_yaml, scenario_from_dict

    file = getattr(cs, "_source_file", None) or "<cluster>"
    base = Path(file).parent if not file.startswith("<") else Path.cwd()
    job = cs.jobs[index]
    where = f"jobs[{index}]"
    data: dict[str, Any] = {}
    job_base = base
    if job.scenario is not None:
        p = (base / job.scenario).resolve()
        if not p.is_file():
            raise ConfigError(f"job {job.name!r}: no such scenario file ({p})", file=file,
                              field=f"{where}.scenario", value=job.scenario)
        loaded = load_yaml(p)
        if not isinstance(loaded, dict) or is_cluster_data(loaded):
            raise ConfigError(f"job {job.name!r}: not a training scenario", file=file, field=f"{where}.scenario",
                              value=job.scenario)
        data = {k: v for k, v in loaded.items() if k in ("model", "parallelism", "training", "hardware")}
        job_base = p.parent
    for key in ("model", "parallelism", "training", "hardware"):
        val = getattr(job, key)
        if val is not None:
            data[key] = copy.deepcopy(val)
    if "model" not in data or "training" not in data:
        missing = "model" if "model" not in data else "training"
        raise ConfigError(f"job {job.name!r}: required field is missing (here or in its scenario file)",
                          file=file, field=f"{where}.{missing}")
    data.update(name=f"{cs.name}.{job.name}", cluster=cs.cluster.model_dump(), fabric=cs.fabric.model_dump(),
                network=cs.network.model_dump(), comm=cs.comm.model_dump(), seed=cs.seed,
                output={"trace": False, "plots": False})
    its = iterations if iterations is not None else job.iterations
    sets = list(job.overrides) + ([f"training.iterations={its}"] if its is not None else [])
    try:
        return scenario_from_dict(data, file=file, base=job_base, overrides=sets)
    except ConfigError as err:
        raise _in_job(err, job.name, where, file) from None


def _in_job(err, name: str, where: str, file: str):
    """The same error, located in the job: ``file: jobs[i].field = value: job 'name': reason``."""
    err.file = file
    err.field = f"{where}.{err.field}" if err.field and not err.field.startswith(where) else (err.field or where)
    if not err.reason.startswith("job "):
        err.reason = f"job {name!r}: {err.reason}"
    err.args = (err.one_line(),)
    return err
