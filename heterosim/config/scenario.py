"""A scenario composes the per-concept configs; this is what a YAML file holds.

``model`` may be a zoo name (``model: gpt3-175b``), an inline model, or
``{hf_config: path/config.json}``; ``system`` may be inline (cluster + fabric) or
``{file: topologies/x.yaml}``. Paths are relative to the scenario file.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from heterosim.config.base import Strict
from heterosim.config.model import ModelConfig
from heterosim.config.parallel import ParallelConfig
from heterosim.config.training import TrainingConfig
from netbackend.config import NetworkConfig
from topologies.config import ClusterConfig, FabricConfig, LeafSpineFabric


class OutputConfig(Strict):
    dir: str | None = None
    """Results directory; None = ``results/<scenario name>``."""
    trace: bool = True
    """Write trace.json (Perfetto/Chrome)."""
    plots: bool = True
    tables: Literal["summary", "ops", "all"] = "summary"
    """summary: summary.json only; ops: + the per-op table; all: + the per-message table. Per-op and
    per-message tables are millions of rows at 1,000+ GPUs, so they are written only when asked."""
    table_format: Literal["auto", "csv", "parquet"] = "auto"
    """auto: Parquet (needs the ``parquet`` extra, pyarrow) for tables over ``PARQUET_MIN_ROWS`` rows when
    pyarrow is installed, else CSV."""


class SimulationConfig(Strict):
    """How the coordinator simulates (not what): exactness-preserving reductions."""

    symmetry: bool = True
    """Simulate one data-parallel replica per class of identical ones and one flow per orbit of a
    symmetric collective (heterosim/sim/symmetry.py); false = every lane and transfer."""


class CommConfig(Strict):
    """Communication-planner overrides (NCCL-like tuner otherwise)."""

    algorithm: str = "auto"
    """auto | ring | tree | hierarchical | nvls (per collective: see comm planner)."""
    protocol: str = "auto"
    """auto | simple | ll | ll128."""
    channels: int | None = Field(None, gt=0)
    """Parallel rings/trees; None = by topology (NCCL picks ~ NICs or NVLink count)."""


class Scenario(Strict):
    name: str = "scenario"
    description: str = ""
    model: ModelConfig
    parallelism: ParallelConfig = ParallelConfig()
    training: TrainingConfig
    cluster: ClusterConfig
    fabric: FabricConfig = LeafSpineFabric()
    network: NetworkConfig = NetworkConfig()
    comm: CommConfig = CommConfig()
    simulation: SimulationConfig = SimulationConfig()
    output: OutputConfig = OutputConfig()
    seed: int = 0
