"""Name -> backend class. Built-in backends are imported lazily so that the
flow backend never pays for loading ns-3."""
from __future__ import annotations

import importlib
from typing import Callable

from hscommon.errors import UserError

_BUILTIN = {
    "flow": "netbackend.flow",
    "ns3": "netbackend.ns3",
}
_REGISTRY: dict[str, type] = {}


def register_backend(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return deco


def available_backends() -> list[str]:
    return sorted(set(_BUILTIN) | set(_REGISTRY))


def backend_class(name: str) -> type:
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _REGISTRY:
        raise UserError(f"unknown network backend (choose from {', '.join(available_backends())})",
                        field="network.backend", value=name)
    return _REGISTRY[name]


def create_backend(name: str, topology, config=None, seed: int = 0):
    return backend_class(name)(topology, config, seed)
