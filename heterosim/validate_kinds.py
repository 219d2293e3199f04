"""``heterosim validate`` for the kinds of YAML that are not a training scenario (``heterosim.filekinds``).

Each function makes the checks the command that uses the file makes before it simulates, touches nothing,
raises the same one-line :class:`UserError` that command would, and returns the ok line's detail.
Training and cluster scenarios are validated by :func:`heterosim.pipeline.check` and
:func:`heterosim.cluster.check` (``heterosim/cli.py``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from heterosim.errors import ConfigError, UserError


def validate_traffic(path: Path, backend: str | None, overrides: list[str]) -> str:
    """What ``heterosim traffic`` checks before simulating: the model, the fabric, every generated flow,
    and what building the backend checks (``NetworkBackend.check_config``)."""
    from heterosim.traffic.build import load_traffic, plan
    from netbackend.registry import backend_class

    sc = load_traffic(path, overrides)
    name = backend or sc.network.backend
    try:
        cls = backend_class(name)
    except UserError as err:
        raise err.with_file(str(path)) from None
    p = plan(sc)
    try:
        cls.check_config(p.topology, sc.network.model_copy(update={"backend": name}))
    except UserError as err:
        raise err.with_file(str(path)) from None
    return f"traffic scenario, {len(p.topology.hosts)} hosts, {len(p.flows):,} flows ({name} backend)"


def validate_sweep(path: Path, backend: str | None, overrides: list[str]) -> str:
    """What ``heterosim sweep`` checks before running: the sweep file, its scenario, and every point's
    scenario (a parameter path that names no field is an error; a point whose value is invalid is
    reported, as the sweep records it, and runs none)."""
    from heterosim.sweep.config import load_sweep
    from heterosim.sweep.expand import expand
    from heterosim.sweep.runner import _check_points

    _no_overrides(path, overrides, "a sweep file")
    cfg, base = load_sweep(path)
    scenario = (base / cfg.scenario).resolve()
    if not scenario.is_file():
        raise ConfigError("scenario file not found", file=str(path), field="scenario", value=str(cfg.scenario))
    points = expand(cfg)
    invalid = _check_points(points, scenario, str(path))
    detail = f"sweep over {scenario.name}, {len(points)} points"
    if invalid:
        first = next(iter(invalid.items()))
        detail += f", {len(invalid)} invalid (recorded as such when run; {first[0]}: {first[1]})"
    return detail


def validate_topology(path: Path, backend: str | None, overrides: list[str]) -> str:
    """A topology file (``cluster:`` + ``fabric:``) builds: node types, sizes, fabric, connectivity."""
    from topologies import load_system

    _no_overrides(path, overrides, "a topology file")
    system = load_system(path)
    return (f"topology, {system.num_gpus} GPUs, {len(system.net.hosts)} NICs, "
            f"{len(system.net.switches)} switches")


def validate_node_catalog(path: Path, backend: str | None, overrides: list[str]) -> str:
    """Every entry of a node-type catalog is a valid ``NodeType``."""
    from topologies.catalog import node_types

    _no_overrides(path, overrides, "a node-type catalog")
    return f"node-type catalog, {len(node_types(path))} node types"


def validate_model_zoo(path: Path, backend: str | None, overrides: list[str]) -> str:
    """Every entry of a model-zoo file is a valid ``ModelConfig``."""
    from pydantic import ValidationError

    from heterosim.config.loader import load_yaml
    from heterosim.config.model import ModelConfig
    from topologies._util import user_error_from_validation

    _no_overrides(path, overrides, "a model-zoo file")
    data = load_yaml(path)
    for name, fields in data.items():
        try:
            ModelConfig.model_validate({"name": name, **fields})
        except ValidationError as exc:
            raise user_error_from_validation(exc, str(path), prefix=str(name)) from None
    return f"model zoo, {len(data)} models"


def _no_overrides(path: Path, overrides: list[str], what: str) -> None:
    if overrides:
        raise UserError(f"{what} takes no --set overrides", file=str(path), field="--set", value=overrides[0])


VALIDATORS: dict[str, Callable[[Path, str | None, list[str]], str]] = {
    "traffic": validate_traffic, "sweep": validate_sweep, "topology": validate_topology,
    "node-catalog": validate_node_catalog, "model-zoo": validate_model_zoo,
}
"""File kind -> its validator (training and cluster scenarios are validated in ``heterosim/cli.py``)."""
