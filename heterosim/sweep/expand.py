"""Sweep -> points: one dict of overrides per run, each with an id that does not change.

The id is a hash of the parameter paths and values (not of the point's position),
so adding a value to a sweep keeps the ids, and the finished runs, of the others.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from heterosim.sweep.config import SweepConfig


@dataclass(frozen=True)
class Point:
    """One run of a sweep."""

    id: str
    """Stable: ``p-`` + 12 hex digits of a hash of the (path, value) pairs."""
    index: int
    """Position in the expansion (for ordering tables only; not part of the id)."""
    params: dict[str, Any]
    """Dotted scenario path -> value, in the sweep file's order."""


def point_id(params: dict[str, Any]) -> str:
    """Hash of the canonical JSON of the parameters (key order does not matter; 1 and 1.0 differ)."""
    canon = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return "p-" + hashlib.sha256(canon.encode()).hexdigest()[:12]


def expand(cfg: SweepConfig) -> list[Point]:
    """grid = cartesian product of the value lists; list = the lists zipped."""
    cfg.check()
    paths = list(cfg.parameters)
    lists = [cfg.parameters[p] for p in paths]
    combos = itertools.product(*lists) if cfg.mode == "grid" else zip(*lists)
    points: list[Point] = []
    seen: dict[str, int] = {}
    for i, values in enumerate(combos):
        params = dict(zip(paths, values))
        pid = point_id(params)
        if pid in seen:  # a value listed twice: run it once
            continue
        seen[pid] = i
        points.append(Point(pid, len(points), params))
    return points
