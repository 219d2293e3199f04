"""Base types shared by every layer of HeteroSim, below all of them.

- :mod:`hscommon.errors`: :class:`UserError`, the one error type for bad input (one line, exit 2).
- :mod:`hscommon.strict`: :class:`StrictModel`, the strict pydantic base of every config model.
- :mod:`hscommon.bounds`: physical limits of config values (GPUs per node, link rates, delays).

Nothing here imports ``heterosim`` or ``netbackend``: the data flow's layers import this package,
never the other way round.
"""
