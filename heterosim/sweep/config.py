"""SWEEP.yaml: one base scenario plus the parameters to vary over it.

A sweep is a file of its own (not a scenario field) so one scenario can be swept
many ways, and so the sweep can be re-run (resumed) by naming the same file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from heterosim.config.base import Strict
from heterosim.config.loader import load_yaml, validate_model
from heterosim.errors import ConfigError

#: summary.json keys tabulated when a sweep names no ``metrics``.
DEFAULT_METRICS = (
    "iteration_time_s",
    "mfu",
    "model_tflops_per_gpu",
    "tokens_per_s",
    "breakdown.compute",
    "breakdown.exposed_comm.*",
    "breakdown.exposed_comm_total",
    "breakdown.bubble",
    "breakdown.idle",
    "inter_node_comm_share",
    "network.bytes_inter_node",
    "simulation.wall_s",
)


class SweepConfig(Strict):
    """A set of runs of one scenario with some fields overridden per run."""

    scenario: str
    """Base scenario YAML, relative to the sweep file."""
    mode: Literal["grid", "list"] = "grid"
    """grid: every combination of the values; list: the i-th value of every parameter together."""
    parameters: dict[str, list[Any]] = Field(min_length=1)
    """Dotted scenario path (``network.ecn.kmin_kb``, ``cluster.groups[0].overrides.nic_gbps``) -> values."""
    backend: str | None = None
    """Network backend for every run (flow | ns3); None = the scenario's own."""
    timeout_s: float | None = Field(None, gt=0)
    """Wall-clock limit per run; a run past it is killed and recorded as ``timeout``."""
    out: str | None = None
    """Results directory, relative to the working directory (like a scenario's ``output.dir``);
    None = ``results/sweeps/<name or sweep file stem>``. ``--out`` overrides it."""
    metrics: list[str] | None = None
    """summary.json keys (dotted; ``a.*`` = every key under ``a``) to tabulate; None = the usual ones."""
    name: str | None = None
    """Label for the table and plot; None = the sweep file's stem."""

    @field_validator("parameters")
    @classmethod
    def _values_non_empty(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        from heterosim.config.loader import _PATH_RE

        for path, values in v.items():
            if not path.strip():
                raise ValueError("parameter path is empty")
            if not _PATH_RE.fullmatch(path):
                raise ValueError(f"parameter {path!r} is not a field path (like parallelism.tp or "
                                 f"cluster.groups[0].num_nodes)")
            if not values:
                raise ValueError(f"parameter {path!r} has no values")
        return v

    def check(self, file: str | None = None) -> "SweepConfig":
        """Cross-field rules, raised with the field named (a model validator could not name it)."""
        if self.mode == "list":
            lengths = {p: len(v) for p, v in self.parameters.items()}
            if len(set(lengths.values())) > 1:
                raise ConfigError("mode list needs value lists of equal length", file=file,
                                  field="parameters", value=lengths)
        return self


def load_sweep(path: str | Path) -> tuple[SweepConfig, Path]:
    """Read and validate a sweep file; returns the model and the file's directory."""
    path = Path(path)
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("a sweep must be a YAML mapping", file=str(path))
    cfg = validate_model(SweepConfig, data, file=str(path)).check(str(path))
    return cfg, path.resolve().parent
