"""User-facing errors. The CLI prints ``str(err)`` (one line) and exits 2.

Every layer raises a subclass of :class:`hscommon.errors.UserError`, which
formats ``file: field.path = value: reason``.
"""
from __future__ import annotations

from hscommon.errors import NetworkError, UserError

HeteroSimError = UserError


class ConfigError(UserError):
    """A scenario/config file that does not validate."""


class PlanError(UserError):
    """A parallel plan that cannot run on the given cluster (divisibility, memory, mapping)."""


class SimulationError(UserError):
    """A simulation that cannot finish: dependency cycle, deadlock, wall-clock limit."""


__all__ = ["UserError", "HeteroSimError", "ConfigError", "PlanError", "SimulationError", "NetworkError"]
