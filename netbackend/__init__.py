"""Network backends: move messages between NIC endpoints over a fabric.

This package knows nothing of models or parallelism. A backend is given a
:class:`~netbackend.topo.NetTopology` (hosts = NICs, switches, links) and a
:class:`~netbackend.config.NetworkConfig`, accepts :class:`~netbackend.base.Message`
objects and reports :class:`~netbackend.base.Completion` objects.
"""
from netbackend.base import Completion, Message, NetworkBackend, NetStats
from netbackend.registry import available_backends, create_backend, register_backend
from netbackend.topo import Link, NetTopology

__all__ = [
    "Completion", "Message", "NetworkBackend", "NetStats", "Link", "NetTopology",
    "available_backends", "create_backend", "register_backend",
]
