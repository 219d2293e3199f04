"""Cluster (what nodes exist) and fabric (how their NICs are wired) descriptions.

Names, used everywhere downstream: node ``{group}-{i}``, GPU ``{node}/gpu{j}``,
NIC ``{node}/nic{k}``, switches as the generator names them (``leaf3``, ``spine0``,
``pod1-agg2``, ``core5``...). Global GPU rank = position in the cluster's GPU order
(groups in file order, nodes in order, GPUs in order).
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from netbackend.config import StrictModel


_Strict = StrictModel


class NodeType(_Strict):
    """A server design; ``topologies/node_types.yaml`` holds the catalog."""

    gpu: str
    """Device catalog key (``H100-SXM``, ``A100-80``, ``L40S``...)."""
    gpus_per_node: int = Field(8, gt=0)
    intra: Literal["nvswitch", "pcie", "c2c"] = "nvswitch"
    """NVSwitch all-to-all, PCIe switches only, or a Grace-Hopper superchip."""
    nvlink_gbps: float = Field(0.0, ge=0)
    """Per-GPU NVLink bandwidth per direction, GB/s (0 = none)."""
    nvls: bool = False
    """NVSwitch supports in-switch reductions (NVLink SHARP, Hopper+)."""
    pcie_gbps: float = Field(32.0, gt=0)
    """Per-direction PCIe bandwidth of a GPU/NIC slot, GB/s (Gen4 x16 ~ 32, Gen5 ~ 64)."""
    gpus_per_pcie_switch: int = Field(2, gt=0)
    """GPUs (and their NIC) sharing one PCIe switch uplink."""
    pcie_switch_uplink_gbps: float | None = Field(None, gt=0)
    """PCIe switch -> root complex bandwidth, GB/s; None = pcie_gbps."""
    nics_per_node: int = Field(8, gt=0)
    nic_gbps: float = Field(400.0, gt=0)
    """Per-NIC line rate, Gb/s."""
    nic_latency_ns: int = Field(1000, ge=0)
    """Host stack + NIC processing latency per message."""
    source: str | None = None


class DeviceGroup(_Strict):
    """A set of identical nodes (one GPU generation, one NIC speed)."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    node_type: str
    """Key in the node-type catalog."""
    num_nodes: int = Field(gt=0)
    overrides: dict[str, float | int | str | bool] = Field(default_factory=dict)
    """Per-group overrides of NodeType fields (e.g. ``nic_gbps: 200``)."""
    slowdown: float = Field(1.0, ge=1.0)
    """Soft heterogeneity: compute time multiplier (throttled or shared GPUs)."""
    pod: int | None = Field(None, ge=0)
    """Fabric placement hint (which pod/leaf block); None = packed in order."""


class Straggler(_Strict):
    """One GPU slower than the rest of its group (throttled, shared or failing)."""

    gpu: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*-[0-9]+/gpu[0-9]+$")
    """GPU name, ``{group}-{node}/gpu{j}``."""
    slowdown: float = Field(ge=1.0)
    """Compute time multiplier, on top of the group's ``slowdown``."""


class LinkDegradation(_Strict):
    """A fabric link running below its nominal rate (a lane down, a flapping optic)."""

    a: str
    """One end: a NIC (``{node}/nic{k}``) or a switch name."""
    b: str | None = None
    """The other end; None = every link of ``a``."""
    factor: float = Field(gt=0.0, le=1.0)
    """Fraction of the nominal rate that remains."""


class ClusterConfig(_Strict):
    groups: list[DeviceGroup] = Field(min_length=1)
    stragglers: list[Straggler] = Field(default_factory=list)
    """Soft heterogeneity: individual GPUs slower than their group."""
    degraded_links: list[LinkDegradation] = Field(default_factory=list)
    """Soft heterogeneity: fabric links below their nominal rate."""

    @model_validator(mode="after")
    def _unique(self):
        names = [g.name for g in self.groups]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate group name(s): {sorted(dup)}")
        return self


class LinkSpec(_Strict):
    a: str
    b: str
    rate_gbps: float = Field(gt=0)
    delay_ns: int = Field(500, ge=0)


class LeafSpineFabric(_Strict):
    """Two tiers: NICs -> leaves -> spines (every leaf to every spine)."""

    kind: Literal["leaf_spine"] = "leaf_spine"
    hosts_per_leaf: int = Field(16, gt=0)
    """NIC ports per leaf."""
    oversubscription: float = Field(1.0, ge=1.0)
    """Downlink:uplink bandwidth ratio at the leaves."""
    uplink_gbps: float = Field(400.0, gt=0)
    num_spines: int | None = Field(None, gt=0)
    """None = derived from oversubscription."""
    link_delay_ns: int = Field(500, ge=0)


class FatTreeFabric(_Strict):
    """Three tiers: leaves -> aggregation (per pod) -> core."""

    kind: Literal["fat_tree"] = "fat_tree"
    hosts_per_leaf: int = Field(16, gt=0)
    leaves_per_pod: int = Field(4, gt=0)
    oversubscription: float = Field(1.0, ge=1.0)
    """At the leaves."""
    core_oversubscription: float = Field(1.0, ge=1.0)
    """At the aggregation switches."""
    uplink_gbps: float = Field(400.0, gt=0)
    link_delay_ns: int = Field(500, ge=0)


class RailOptimizedFabric(_Strict):
    """NIC k of every node in a block goes to rail leaf k; leaves -> spines."""

    kind: Literal["rail_optimized"] = "rail_optimized"
    nodes_per_block: int = Field(16, gt=0)
    """Nodes sharing one set of rail leaves."""
    oversubscription: float = Field(1.0, ge=1.0)
    uplink_gbps: float = Field(400.0, gt=0)
    num_spines: int | None = Field(None, gt=0)
    link_delay_ns: int = Field(500, ge=0)


class LinkListFabric(_Strict):
    """Anything else: switches and links listed by name (NICs named ``{node}/nic{k}``)."""

    kind: Literal["links"] = "links"
    switches: list[str] = Field(min_length=1)
    links: list[LinkSpec] = Field(min_length=1)


FabricConfig = Annotated[
    Union[LeafSpineFabric, FatTreeFabric, RailOptimizedFabric, LinkListFabric],
    Field(discriminator="kind"),
]


class SystemConfig(_Strict):
    """A topology file: the cluster and its fabric (``topologies/*.yaml``)."""

    cluster: ClusterConfig
    fabric: FabricConfig = LeafSpineFabric()
