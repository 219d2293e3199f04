"""Load and check the validation corpus (benchmarks/validation/runs.yaml): published, measured training runs.

Data only: no simulation. Each row is validated by a small pydantic model (``Run``); cross-row rules (unique ids)
and references into the repository (device keys of heterosim/hardware/devices.yaml, node types of
topologies/node_types.yaml, zoo model names of heterosim/zoo/models/*.yaml) are checked by ``load``.
Bad input is one line ``file: field = value: reason`` and exit 2 (the project's UserError convention).

    .venv/bin/python benchmarks/validation/corpus.py [runs.yaml]     # prints counts per source / GPU / scale / MoE
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from hscommon.errors import UserError
from hscommon.strict import StrictModel

ROOT = Path(__file__).resolve().parents[2]
RUNS = Path(__file__).resolve().parent / "runs.yaml"
DEVICES = ROOT / "heterosim" / "hardware" / "devices.yaml"
NODE_TYPES = ROOT / "topologies" / "node_types.yaml"
ZOO = ROOT / "heterosim" / "zoo" / "models"

# Architecture generation of each device key (vendor product generations, datasheets): the unit of the
# "per GPU generation" count the issue asks for.
GENERATION = {"V100": "Volta", "A100-40": "Ampere", "A100-80": "Ampere", "A10": "Ampere",
              "H100-SXM": "Hopper", "H100-PCIe": "Hopper", "H200": "Hopper", "GH200": "Hopper",
              "B200": "Blackwell", "GB200": "Blackwell", "L40S": "Ada", "MI250X": "CDNA2", "MI300X": "CDNA3"}

# Scale bands (GPUs, inclusive upper ends): one node, a pod, a row, a hall, the 10k+ class.
BANDS = ((8, "1-8"), (64, "9-64"), (512, "65-512"), (4096, "513-4096"), (10**9, "4097+"))


class Run(StrictModel):
    """One published, measured training run (see README.md for every field's meaning)."""

    id: str = Field(min_length=1)
    """Unique, stable key."""
    source: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    """Source family: the unit of leave-one-source-out."""
    citation: str = Field(min_length=10)
    """Document, table/figure and row the numbers come from."""
    url: str = Field(pattern=r"^https://")
    """Where the source can be read (commit-pinned for repositories)."""
    year: int = Field(ge=2017, le=2030)
    framework: str
    gpu: str
    """A key of heterosim/hardware/devices.yaml (nearest one where the device is absent; said in notes)."""
    node_type: str | None = None
    """A key of topologies/node_types.yaml, or None with the node described in ``system``."""
    system: dict[str, Any]
    gpus: int = Field(ge=1)
    model: str | dict[str, Any]
    """A zoo name or a dict of model fields."""
    model_overrides: dict[str, Any] = Field(default_factory=dict)
    """ModelConfig fields set on top of a zoo model where the row's source differs from the zoo entry
    (e.g. ``hidden_dropout: 0.0``); ``model_overrides_source`` cites where the value comes from."""
    model_overrides_source: str | None = None
    parallelism: dict[str, Any]
    training: dict[str, Any]
    measured: dict[str, Any]
    """Exactly what the source states (at least one number)."""
    derived: dict[str, Any] | None = None
    """Values computed from ``measured``; ``how`` says the formula."""
    defaults_filled: dict[str, Any] = Field(default_factory=dict)
    """Settings the source does not give, with the default used and why."""
    expressible_today: bool = True
    not_expressible_because: str | None = None
    expressed_as: str | None = None
    """How the runner writes a setting HeteroSim has no field for (decided before the row was run)."""
    notes: str = ""

    @field_validator("gpu")
    @classmethod
    def _gpu_known(cls, v: str) -> str:
        if v not in GENERATION:
            raise ValueError(f"unknown GPU {v!r} (expected one of {sorted(GENERATION)})")
        return v

    @field_validator("measured")
    @classmethod
    def _measured_has_number(cls, v: dict[str, Any]) -> dict[str, Any]:
        if not any(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v.values()):
            raise ValueError("needs at least one measured number")
        return v

    @model_validator(mode="after")
    def _overrides_cited(self):
        if self.model_overrides and not isinstance(self.model, str):
            raise ValueError("model_overrides apply to a zoo model name; set the fields in the model dict instead")
        if self.model_overrides and not self.model_overrides_source:
            raise ValueError("model_overrides is set: give model_overrides_source")
        return self

    @model_validator(mode="after")
    def _reason_when_not_expressible(self):
        if not self.expressible_today and not self.not_expressible_because:
            raise ValueError("expressible_today is false: give not_expressible_because")
        if self.derived and "iteration_time_s" in self.derived and "how" not in self.derived:
            raise ValueError("derived.iteration_time_s needs derived.how")
        return self

    @property
    def generation(self) -> str:
        return GENERATION[self.gpu]

    @property
    def band(self) -> str:
        return next(name for top, name in BANDS if self.gpus <= top)

    @property
    def moe(self) -> bool:
        m = self.model
        if isinstance(m, dict):
            return bool(m.get("num_experts"))
        return m.startswith("mixtral")

    @property
    def iteration_time_s(self) -> float | None:
        """Measured iteration time if the source states it, else the derived one (None if neither)."""
        for d in (self.measured, self.derived or {}):
            t = d.get("iteration_time_s")
            if isinstance(t, (int, float)):
                return float(t)
        return None


def _keys(path: Path) -> set[str]:
    return set((yaml.safe_load(path.read_text()) or {}).keys())


def _zoo_names() -> set[str]:
    names: set[str] = set()
    for f in sorted(ZOO.glob("*.yaml")):
        names |= _keys(f)
    return names


def load(path: Path | str = RUNS) -> list[Run]:
    """Parse and validate the corpus; raise UserError (one line: file, field, value, reason) on bad input."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise UserError(f"cannot read: {e.strerror}", file=str(path)) from None
    except yaml.YAMLError as e:
        raise UserError(f"not valid YAML: {str(e).splitlines()[0]}", file=str(path)) from None
    if not isinstance(raw, list):
        raise UserError("expected a YAML list of runs", file=str(path), value=type(raw).__name__)
    devices, nodes, zoo = _keys(DEVICES), _keys(NODE_TYPES), _zoo_names()
    runs: list[Run] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        label = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
        try:
            run = Run.model_validate(item)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise UserError(err["msg"], file=str(path), field=f"[{label}].{loc}" if loc else f"[{label}]",
                            value=err.get("input", ...) if loc else ...) from None
        if run.id in seen:
            raise UserError("duplicate id", file=str(path), field=f"[{i}].id", value=run.id)
        seen.add(run.id)
        if run.gpu not in devices:
            raise UserError("not a key of heterosim/hardware/devices.yaml", file=str(path),
                            field=f"[{run.id}].gpu", value=run.gpu)
        if run.node_type is not None and run.node_type not in nodes:
            raise UserError("not a key of topologies/node_types.yaml", file=str(path),
                            field=f"[{run.id}].node_type", value=run.node_type)
        if isinstance(run.model, str) and run.model not in zoo:
            raise UserError("not a zoo model name (heterosim/zoo/models)", file=str(path),
                            field=f"[{run.id}].model", value=run.model)
        runs.append(run)
    return runs


def counts(runs: list[Run]) -> dict[str, Counter]:
    """Rows per source family, GPU generation, device key, scale band, dense/MoE and expressibility."""
    return {
        "source": Counter(r.source for r in runs),
        "generation": Counter(r.generation for r in runs),
        "gpu": Counter(r.gpu for r in runs),
        "band": Counter(r.band for r in runs),
        "kind": Counter("moe" if r.moe else "dense" for r in runs),
        "expressible_today": Counter(str(r.expressible_today).lower() for r in runs),
        "has_iteration_time": Counter(str(r.iteration_time_s is not None).lower() for r in runs),
    }


def report(runs: list[Run]) -> str:
    order = {name: i for i, (_, name) in enumerate(BANDS)}
    lines = [f"{len(runs)} runs, {len({r.source for r in runs})} sources, "
             f"{len({r.generation for r in runs})} GPU generations, GPUs {min(r.gpus for r in runs)}"
             f"-{max(r.gpus for r in runs)}"]
    for key, c in counts(runs).items():
        items = sorted(c.items(), key=lambda kv: order.get(kv[0], -kv[1])) if key == "band" else c.most_common()
        lines.append(f"{key:19} " + ", ".join(f"{k}: {v}" for k, v in items))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        runs = load(argv[0] if argv else RUNS)
    except UserError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return e.exit_code
    print(report(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
