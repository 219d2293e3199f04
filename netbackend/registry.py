"""Name -> backend class (and, where a backend has several implementations, the factory that picks one
from the configuration). Built-in backends are imported lazily so that the flow backend never pays for
loading ns-3.

``create_backend(name, ...)`` is how scenarios get their backend (``network.backend``): it calls the
name's factory if one was registered, else the class.  ``ns3`` registers ``create_ns3_backend``, which
returns the accelerated backend when ``network.acceleration.mode`` is not ``off``; ``backend_class``
stays the registered class (its ``check_config`` vets every configuration the factory accepts)."""
from __future__ import annotations

import importlib
from typing import Callable

from hscommon.errors import UserError

_BUILTIN = {
    "flow": "netbackend.flow",
    "ns3": "netbackend.ns3",
}
_REGISTRY: dict[str, type] = {}
_FACTORY: dict[str, Callable] = {}
"""Name -> factory(topology, config, seed, **kw) for the names registered with one."""


def register_backend(name: str, factory: Callable | None = None) -> Callable[[type], type]:
    """Class decorator: ``cls`` is backend ``name``; ``factory`` (optional) builds it for a configuration
    (and may return another NetworkBackend the configuration asks for)."""
    def deco(cls: type) -> type:
        cls.name = name
        _REGISTRY[name] = cls
        if factory is not None:
            _FACTORY[name] = factory
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


def create_backend(name: str, topology, config=None, seed: int = 0, **kw):
    """Backend ``name`` for ``topology`` and ``config`` (its factory's choice, if it registered one)."""
    cls = backend_class(name)
    return _FACTORY.get(name, cls)(topology, config, seed, **kw)
