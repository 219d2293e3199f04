"""A scenario composes the per-concept configs; this is what a YAML file holds.

``model`` may be a zoo name (``model: gpt3-175b``), an inline model, or
``{hf_config: path/config.json}``; ``system`` may be inline (cluster + fabric) or
``{file: topologies/x.yaml}``. Paths are relative to the scenario file. Instead of ``model`` and
``parallelism``, ``workload: {chakra: DIR}`` replays recorded Chakra execution traces (heterosim/chakra).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from heterosim.config.base import Bounded, Strict
from heterosim.config.hardware import HardwareConfig
from heterosim.config.model import ModelConfig
from heterosim.config.parallel import ParallelConfig
from heterosim.config.training import TrainingConfig
from netbackend.config import NetworkConfig
from topologies.config import ClusterConfig, FabricConfig, LeafSpineFabric


NCCL_MAX_CHANNELS = 64
"""NCCL's MAXCHANNELS (src/include/device.h: 32 in NCCL 2.x up to 2.18, 64 since): no more rings/trees."""


class OutputConfig(Strict):
    dir: str | None = Field(None, min_length=1)
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
    """How the coordinator simulates (not what): exactness-preserving reductions, and under hashed ECMP an
    approximate one measured against the full run (``hashed_copies``)."""

    symmetry: bool = True
    """Simulate one data-parallel replica per class of identical ones and one flow per orbit of a
    symmetric collective (heterosim/sim/symmetry.py); false = every lane and transfer."""
    hashed_copies: Literal["exact", "ops", "ops_and_replicas", "ops_and_shifted_replicas"] = "exact"
    """Copies whose paths differ only in the links the ECMP hash chose (``network.ecmp: hash``).
    exact (default): never alike, each simulated on its own (the exact reductions still apply: the result is
    the full run's). ops: the copies one operation waits for (a collective's ring positions, a lane's rails)
    ride as one group flow, each loading its own hashed links (collisions included), the group at its slowest
    copy's pace; replicas stay apart. ops_and_replicas: data-parallel replicas too (simulated once, the others'
    traffic as copies in lockstep with it). ops_and_shifted_replicas: replicas simulated once, but each mirrored
    replica keeps its own place in time: its pipeline sends go as group flows of their own, shifted by its
    offset from the simulated one, which a warm-up measures (the same iteration with every replica simulated,
    ``ops``, stopped once every pair of pipeline lanes has started 4 transfers: the fill sets the offsets);
    it runs its own copy of a replica-local collective (the embedding all-reduce) and ends it by its own
    collisions; a collective across replicas starts when the latest copy would post it. Each class simulates
    its earliest replica. Where paths are not hashed nothing changes.
    The default is the one mode within the project's 0.5% of the full run (issue 15) on every case measured
    (issue 40): on issue 40's case and 100 random small fabrics and plans (``benchmarks/bench_hash_agreement.py
    --small 100``, docs/symmetry-reduction.md) every approximate mode was 4.66% off on one case (issue 40's
    with data-parallel outermost, 1 micro-batch) and over 0.5% on 2 (ops), 8 (ops_and_replicas) and 14
    (ops_and_shifted_replicas) of the 103; exact within 0.23% (an open bug, not by design). The approximate modes are several times faster at 1,024+
    GPUs under hashed ECMP; a run that uses one says so in summary.json ``approximations`` with its bound."""
    compute_contention: Literal["none", "sm_share"] = "sm_share"
    """How communication in flight on a GPU slows its compute (heterosim/sim/contention.py). sm_share (default):
    NCCL runs a collective or send/recv as one thread block per channel, each holding an SM for the kernel's run
    (NCCL src/enqueue.cc; Transformer Engine userbuffers pieces hold their ``num_sm``), so while k of the GPU's S
    SMs (devices.yaml ``sm_count``) are held its GEMM and attention kernels progress at (S - k) / S, re-timed at
    every start and end of its communication; memory-bound kernels keep their rate. none: overlapped
    communication is free for compute (HeteroSim before this field). The default is the mechanism every NCCL
    and userbuffers kernel has, not a fit: docs/compute-contention.md gives its measured effect."""


class CommConfig(Strict):
    """Communication-planner overrides (NCCL-like tuner otherwise)."""

    algorithm: str = "auto"
    """auto | ring | tree | hierarchical | nvls | direct (per collective: see comm planner)."""
    protocol: str = "auto"
    """auto | simple | ll | ll128."""
    channels: Bounded(int, 1, NCCL_MAX_CHANNELS) | None = None
    """Parallel rings/trees; None = by topology (NCCL picks ~ NICs or NVLink count)."""

    @field_validator("algorithm", "protocol")
    @classmethod
    def _known(cls, v: str, info) -> str:
        from heterosim.comm.planner import ALGORITHMS, PROTOCOLS

        known = ALGORITHMS if info.field_name == "algorithm" else PROTOCOLS
        if v not in known:
            raise ValueError(f"unknown {info.field_name}; known: {', '.join(known)}")
        return v


class WorkloadConfig(Strict):
    """A workload recorded elsewhere, instead of ``model`` + ``parallelism`` (heterosim/chakra/importer.py)."""

    chakra: str = Field(min_length=1)
    """Folder of Chakra ET files ``<prefix>.<rank>.et``, one per GPU (relative to the scenario file)."""
    timing: Literal["recorded", "compute_model"] = "recorded"
    """recorded: compute nodes take their ``duration_micros``; compute_model: nodes that carry FLOPs/shape
    attributes are re-timed by our compute model on the scenario's GPUs (the others keep their duration)."""
    chakra_convention: Literal["astra-sim", "nccl-tests"] = "astra-sim"
    """How to read what a trace leaves implicit (docs/chakra.md). astra-sim (ASTRA-sim's Workload.cc and
    collective code, the default): ALL_GATHER ``comm_size`` is each rank's input, ``pg_name`` "" or "0" is
    every rank and other names are groups by their leading integer; nccl-tests: ALL_GATHER ``comm_size``
    is the gathered output and "0" is a group like any other. A trace whose GlobalMetadata states its
    convention (HeteroSim's exports) is read by that."""
    chakra_sends: Literal["eager", "rendezvous"] | None = None
    """When a send completes. eager (ASTRA-sim's analytical backend, whose ``--rendezvous-protocol`` is off by
    default): it starts at once, whether or not
    its receive is posted, and completes when the message arrives; a receive completes at the later of
    arrival and its own posting. rendezvous (HeteroSim's compiled pipelines): the transfer starts when
    both sides posted. None: what the trace's GlobalMetadata states (HeteroSim's exports: rendezvous),
    else eager."""
    chakra_comm_groups: str | None = Field(None, min_length=1)
    """Process-group file (``{pg_name: [ranks]}``, ASTRA-sim's ``--comm-group-configuration``), relative to
    the scenario file. None: ``comm_group.json`` in the trace folder, else ``<prefix>.json`` there (the
    name symbolic_tensor_graph writes), else groups are the ranks that use them."""


class Scenario(Strict):
    name: str = Field("scenario", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$", max_length=200)
    """Also the default results folder (``results/<name>``): no path separators."""
    description: str = ""
    model: ModelConfig | None = None
    """The model to compile; required unless ``workload`` gives a recorded workload."""
    workload: WorkloadConfig | None = None
    parallelism: ParallelConfig = ParallelConfig()
    training: TrainingConfig
    cluster: ClusterConfig
    fabric: FabricConfig = LeafSpineFabric()
    network: NetworkConfig = NetworkConfig()
    comm: CommConfig = CommConfig()
    hardware: HardwareConfig = HardwareConfig()
    simulation: SimulationConfig = SimulationConfig()
    output: OutputConfig = OutputConfig()
    seed: Bounded(int, 0, 2**32 - 1) = 0
    """Random seed (ECMP hashing, background traffic); numpy seeds are 32-bit."""

    @model_validator(mode="after")
    def _seq_fits_model(self):
        if self.workload is not None:
            if self.model is not None:
                raise ValueError("give either model (+ parallelism) or workload (a recorded trace), not both")
            if self.parallelism != ParallelConfig():
                raise ValueError("a recorded workload (workload.chakra) brings its own parallelism; remove "
                                 "parallelism")
            return self
        if self.model is None:
            raise ValueError("model is required (a zoo name, an inline model, {hf_config: ...}), or workload: "
                             "{chakra: DIR}")
        if self.training.seq_length > self.model.max_seq_length:
            raise ValueError(f"training.seq_length ({self.training.seq_length}) exceeds the model's "
                             f"max_seq_length ({self.model.max_seq_length})")
        return self
