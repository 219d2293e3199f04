"""Which kind of HeteroSim YAML a file is, so ``validate`` checks each kind with the command that runs it.

HeteroSim reads six kinds of YAML; each has its own command and its own validation:

=============  ======================================  =============================================
kind           recognised by                           run with
=============  ======================================  =============================================
training       anything else (``model:`` + ...)        ``heterosim run FILE``
cluster        ``kind: cluster``                       ``heterosim run FILE`` (several jobs)
traffic        ``hosts:`` (a list of host groups)      ``heterosim traffic FILE --out DIR``
sweep          ``scenario:`` and ``parameters:``       ``heterosim sweep FILE``
topology       ``cluster:`` without ``model:``         referenced by a scenario, or ``collective``
node catalog   entries with ``gpu:`` and ``intra:``    ``topologies/node_types.yaml`` (``node_type:``)
model zoo      entries with ``num_layers:``            ``heterosim/zoo/models`` (``model:``)
=============  ======================================  =============================================

A file that cannot be read or is not a mapping is a training scenario here: its loader gives the error.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

FileKind = Literal["training", "cluster", "traffic", "sweep", "topology", "node-catalog", "model-zoo"]

RUN_WITH: dict[str, str] = {
    "training": "heterosim run {file}",
    "cluster": "heterosim run {file}",
    "traffic": "heterosim traffic {file} --out DIR",
    "sweep": "heterosim sweep {file}",
    "topology": "a scenario's cluster/fabric (or heterosim collective --topology {file})",
    "node-catalog": "a group's node_type (or its catalog: field)",
    "model-zoo": "a scenario's model: name",
}
"""How each kind is used, for ``validate``'s ok line and ``run``'s refusal of a kind it does not run."""


def kind_of_data(data: Any) -> FileKind:
    """The kind of a parsed YAML document (see the module table)."""
    if not isinstance(data, dict):
        return "training"
    if data.get("kind") == "cluster":
        return "cluster"
    if isinstance(data.get("hosts"), list) and "model" not in data:
        return "traffic"
    if "parameters" in data and "scenario" in data and "model" not in data:
        return "sweep"
    if ("cluster" in data or "system" in data) and not {"model", "training", "parallelism", "workload"} & set(data):
        return "topology"
    entries = [v for v in data.values() if isinstance(v, dict)]
    if entries and len(entries) == len(data):
        if all("gpu" in v and "gpus_per_node" in v for v in entries):
            return "node-catalog"
        if all("num_layers" in v and "hidden_size" in v for v in entries):
            return "model-zoo"
    return "training"


def kind_of_file(path: str | Path) -> FileKind:
    """The kind of a YAML file; unreadable or malformed files are ``training`` (its loader says what is wrong)."""
    from heterosim.config.loader import load_yaml

    try:
        return kind_of_data(load_yaml(path))
    except Exception:  # noqa: BLE001 - the loader that follows reports the error, with its file and line
        return "training"
