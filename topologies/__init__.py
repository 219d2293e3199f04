"""Cluster and fabric descriptions -> system graphs (GPUs, NICs, switches, links).

``load_system("topologies/x.yaml")`` or ``build_system(cluster, fabric)`` give a
:class:`SystemTopology`; ``node_type(name, overrides)`` reads the node catalog.
"""
from topologies.build import build_system, load_system
from topologies.catalog import node_type, node_types
from topologies.fabrics import fabric_kinds, register_fabric
from topologies.system import GpuInfo, NodeInfo, SystemTopology

__all__ = ["build_system", "load_system", "node_type", "node_types", "register_fabric", "fabric_kinds",
           "GpuInfo", "NodeInfo", "SystemTopology"]
