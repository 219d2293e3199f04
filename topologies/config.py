"""Cluster (what nodes exist) and fabric (how their NICs are wired) descriptions.

Names, used everywhere downstream: node ``{group}-{i}``, GPU ``{node}/gpu{j}``,
NIC ``{node}/nic{k}``, switches as the generator names them (``leaf3``, ``spine0``,
``pod1-agg2``, ``core5``...). Global GPU rank = position in the cluster's GPU order
(groups in file order, nodes in order, GPUs in order).
"""
from __future__ import annotations

import warnings
from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from hscommon.bounds import (CLUSTER_GPUS_MAX, DEGRADED_FACTOR_MIN, DELAY_NS_MAX, GPUS_PER_NODE_MAX,
                               LATENCY_NS_MAX, NIC_GBPS_MIN, NICS_PER_NODE_MAX, NVLINK_GBYTES_MAX, OVERSUBSCRIPTION_MAX,
                               PCIE_GBYTES_MAX, PCIE_GBYTES_MIN, SLOWDOWN_MAX, SWITCH_RADIX_MAX, BoundedModel,
                               Bounded, LinkGbps)

_Strict = BoundedModel

DelayNs = Bounded(int, 0, DELAY_NS_MAX, unit="ns")
Radix = Bounded(int, 1, SWITCH_RADIX_MAX)
Oversubscription = Bounded(float, 1.0, OVERSUBSCRIPTION_MAX)


RENAMED_NODE_FIELDS = {"nvlink_gbps": "nvlink_gBps", "pcie_gbps": "pcie_gBps",
                       "pcie_switch_uplink_gbps": "pcie_switch_uplink_gBps"}
"""Old -> new names of the node fields in GB/s: ``_gbps`` is the project's suffix for Gb/s (``nic_gbps``), so
these were misnamed. The old names are read, with a :class:`RenamedFieldWarning`, for one release."""


def renamed_node_fields(data: Any, where: str = "") -> Any:
    """``data`` with old node-field names replaced by the new ones (a warning for each); both given is an error."""
    from hscommon.errors import RenamedFieldWarning, UserError

    if not isinstance(data, dict) or not RENAMED_NODE_FIELDS.keys() & data.keys():
        return data
    data = dict(data)
    for old, new in RENAMED_NODE_FIELDS.items():
        if old not in data:
            continue
        loc = f"{where}.{old}" if where else old
        if new in data:
            raise UserError(f"give {new} only ({old} is its old name)", field=loc, value=data[old])
        warnings.warn(f"{loc} is renamed {new} (GB/s; the _gbps suffix means Gb/s); the old name is read "
                      "for this release only", RenamedFieldWarning, stacklevel=2)
        data[new] = data.pop(old)
    return data


class NodeType(_Strict):
    """A server design; ``topologies/node_types.yaml`` holds the catalog."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return renamed_node_fields(data)

    gpu: str
    """Device catalog key (``H100-SXM``, ``A100-80``, ``L40S``...)."""
    gpus_per_node: Bounded(int, 1, GPUS_PER_NODE_MAX) = 8
    intra: Literal["nvswitch", "pcie", "c2c"] = "nvswitch"
    """NVSwitch all-to-all, PCIe switches only, or a Grace-Hopper superchip."""
    nvlink_gBps: Bounded(float, 0.0, NVLINK_GBYTES_MAX, unit="GB/s") = 0.0
    """Per-GPU NVLink bandwidth per direction, GB/s (0 = none)."""
    nvls: bool = False
    """NVSwitch supports in-switch reductions (NVLink SHARP, Hopper+)."""
    pcie_gBps: Bounded(float, PCIE_GBYTES_MIN, PCIE_GBYTES_MAX, unit="GB/s") = 32.0
    """Per-direction PCIe bandwidth of a GPU/NIC slot, GB/s (Gen4 x16 ~ 32, Gen5 ~ 64)."""
    gpus_per_pcie_switch: Bounded(int, 1, GPUS_PER_NODE_MAX) = 2
    """GPUs (and their NIC) sharing one PCIe switch uplink."""
    pcie_switch_uplink_gBps: Bounded(float, PCIE_GBYTES_MIN, PCIE_GBYTES_MAX, unit="GB/s") | None = None
    """PCIe switch -> root complex bandwidth, GB/s; None = pcie_gBps."""
    nics_per_node: Bounded(int, 1, NICS_PER_NODE_MAX) = 8
    nic_gbps: LinkGbps = 400.0
    """Per-NIC line rate, Gb/s."""
    nic_latency_ns: Bounded(int, 0, LATENCY_NS_MAX, unit="ns") = 0
    """Extra NIC processing latency, paid once on the way out (host to wire) and once on the way in (wire to
    host): topologies/build.py adds it to the delay of the NIC's access link, so both network backends (and
    everything that reads link delays: routes, PFC headroom, HPCC's base RTT) see it alike, and a message
    between NICs a and b takes exactly ``lat_a + lat_b`` longer. Default 0: every inter-node collective
    transfer already pays NCCL's per-step network hardware latency (heterosim/comm/planner.py HW_LAT_US["net"],
    NCCL src/graph/tuning.cc: 2.7-14 us, NICs included), which covers a typical RDMA NIC's ~0.4 us each way
    (perftest ib_send_lat, half a round trip through two NICs and a cable: ~0.8 us for 32 B over RC); adding it
    here too would count it twice. Set it for what NCCL's figure leaves out (a slower NIC, a host stack)."""
    source: str | None = None


class DeviceGroup(_Strict):
    """A set of identical nodes (one GPU generation, one NIC speed)."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    node_type: str
    """Key in the node-type catalog."""
    num_nodes: Bounded(int, 1, CLUSTER_GPUS_MAX)
    overrides: dict[str, float | int | str | bool] = Field(default_factory=dict)
    """Per-group overrides of NodeType fields (e.g. ``nic_gbps: 200``)."""
    slowdown: Bounded(float, 1.0, SLOWDOWN_MAX) = 1.0
    """Soft heterogeneity: compute time multiplier (throttled or shared GPUs)."""
    pod: Bounded(int, 0, CLUSTER_GPUS_MAX) | None = None
    """Fabric placement hint (which pod/leaf block); None = packed in order."""


class Straggler(_Strict):
    """One GPU slower than the rest of its group (throttled, shared or failing)."""

    gpu: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*-[0-9]+/gpu[0-9]+$")
    """GPU name, ``{group}-{node}/gpu{j}``."""
    slowdown: Bounded(float, 1.0, SLOWDOWN_MAX)
    """Compute time multiplier, on top of the group's ``slowdown``."""


class LinkDegradation(_Strict):
    """A fabric link running below its nominal rate (a lane down, a flapping optic)."""

    a: str
    """One end: a NIC (``{node}/nic{k}``) or a switch name."""
    b: str | None = None
    """The other end; None = every link of ``a``."""
    factor: Bounded(float, DEGRADED_FACTOR_MIN, 1.0)
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
    rate_gbps: Bounded(float, NIC_GBPS_MIN, NVLINK_GBYTES_MAX * 8, unit="Gb/s")
    delay_ns: DelayNs = 500


class _Fabric(_Strict):
    """Fields every fabric kind has."""

    in_network_reduction: Literal["none", "sharp"] = "none"
    """Switch-side reduction the fabric's switches offer. ``sharp``: InfiniBand SHARP streaming aggregation
    (SHARPv2 on NVIDIA Quantum HDR switches, SHARPv3 on Quantum-2 NDR, SHARPv4 on Quantum-3 XDR: NVIDIA SHARP
    docs; Graham et al., "SHARP Streaming-Aggregation Hardware Design and Evaluation", ISC 2020), which NCCL uses
    through its CollNet plugin (Mellanox/nccl-rdma-sharp-plugins, ``NCCL_COLLNET_ENABLE=1``): every switch gets an
    aggregation endpoint ``{switch}/sharp`` (topologies/sharp.py) and the comm planner's ``collnet`` algorithm
    reduces there (docs/in-network-reduction.md). Flow backend only; the ns-3 backend refuses it. ``none``: no
    in-network reduction (what HeteroSim modelled before this field)."""


class LeafSpineFabric(_Fabric):
    """Two tiers: NICs -> leaves -> spines (every leaf to every spine)."""

    kind: Literal["leaf_spine"] = "leaf_spine"
    hosts_per_leaf: Radix = 16
    """NIC ports per leaf."""
    oversubscription: Oversubscription = 1.0
    """Downlink:uplink bandwidth ratio at the leaves."""
    uplink_gbps: LinkGbps = 400.0
    num_spines: Radix | None = None
    """None = derived from oversubscription."""
    link_delay_ns: DelayNs = 500


class FatTreeFabric(_Fabric):
    """Three tiers: leaves -> aggregation (per pod) -> core."""

    kind: Literal["fat_tree"] = "fat_tree"
    hosts_per_leaf: Radix = 16
    leaves_per_pod: Radix = 4
    oversubscription: Oversubscription = 1.0
    """At the leaves."""
    core_oversubscription: Oversubscription = 1.0
    """At the aggregation switches."""
    uplink_gbps: LinkGbps = 400.0
    link_delay_ns: DelayNs = 500


class RailOptimizedFabric(_Fabric):
    """NIC k of every node in a block goes to rail leaf k; leaves -> spines."""

    kind: Literal["rail_optimized"] = "rail_optimized"
    nodes_per_block: Radix = 16
    """Nodes sharing one set of rail leaves."""
    oversubscription: Oversubscription = 1.0
    uplink_gbps: LinkGbps = 400.0
    num_spines: Radix | None = None
    link_delay_ns: DelayNs = 500


class LinkListFabric(_Fabric):
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
