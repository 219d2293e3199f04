"""Sweep points run on the batch engine (``heterosim.batch``): those that differ only in what a variant expresses.

A sweep parameter a :class:`~heterosim.batch.variants.Variant` can express keeps the iteration's program:

* ``seed`` (the ECMP hash's salts), ``network.per_hop_latency_ns``;
* ``cluster.stragglers`` and ``cluster.degraded_links`` (whole lists; factors > 0);
* ``cluster.groups[i].overrides.nic_gbps`` (where the fabric is not sized from it: else the group runs normally).

Points whose other parameters are equal share one program: such a group of at least ``MIN_GROUP`` points is run as
one batch (JAX where it is installed, else NumPy), each point's folder getting ``summary.json`` with the iteration
time and what follows from it (``model_tflops_per_gpu``, ``mfu``, ``tokens_per_s``: ``make_summary``'s
definitions) and ``engine: batch``; the per-GPU breakdown and network counters are the normal path's only. Every
other point, and every group the engine refuses (one line, recorded in the point's ``point.json``), runs through
the normal path, and so does every point under which a chain decision the program took from the scenario's own
run would go the other way (``heterosim.batch.decisions``; named in the report's line). The batch engine
reproduces the flow backend's run of each point with every lane simulated (tests/batch, within 1e-6 relative;
tests/sweep checks equality with the normal path's runs).
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from heterosim.errors import UserError

MIN_GROUP = 2
"""Points a group needs to be batched (one point alone gains nothing from a batch)."""
_NIC = re.compile(r"^cluster\.groups\[(\d+)\]\.overrides\.nic_gbps$")
_LISTS = ("cluster.stragglers", "cluster.degraded_links")


def variant_path(path: str) -> bool:
    """Whether a sweep parameter is one the batch engine varies without changing the program."""
    return path in ("seed", "network.per_hop_latency_ns", *_LISTS) or bool(_NIC.match(path))


@dataclass
class Group:
    """Points sharing one program: the overrides of their other parameters, and each task's own."""

    base: dict[str, Any]
    tasks: list = field(default_factory=list)


@dataclass
class BatchReport:
    """What the batch engine ran in a sweep."""

    points: list[str] = field(default_factory=list)
    """Ids of the points the batch engine ran."""
    batches: int = 0
    engine: str = ""
    refused: dict[str, str] = field(default_factory=dict)
    """Group (its other parameters) -> why it ran through the normal path instead."""
    flipped: dict[str, str] = field(default_factory=dict)
    """Point id -> the chain decision taken from the baseline run that would go the other way under the point's
    own times (:func:`heterosim.batch.decisions.flipped`): the point runs through the normal path instead."""
    wall_s: float = 0.0

    def line(self, total: int) -> str:
        if not self.points and not self.refused:
            return f"batch engine: not used ({total} points through the normal path)"
        s = (f"batch engine ({self.engine}): {len(self.points)} of {total} points in {self.batches} batch(es), "
             f"{self.wall_s:.1f} s (iteration time, MFU, tokens/s; the breakdown columns come from the normal path "
             f"only); normal path: {total - len(self.points)} points")
        for k, why in self.refused.items():
            s += f"\n  normal path for {k}: {why}"
        for k, why in self.flipped.items():
            s += f"\n  normal path for point {k}: {why}"
        return s


def plan(tasks: list, backend: str | None) -> list[Group]:
    """The groups of ``tasks`` (``PointTask``) the batch engine may run: at least ``MIN_GROUP`` points whose
    non-variant overrides are equal, on the flow backend."""
    if backend not in (None, "flow"):
        return []
    groups: dict[str, Group] = {}
    for t in tasks:
        other = {k: v for k, v in t.overrides.items() if not variant_path(k)}
        key = json.dumps(other, sort_keys=True, default=str)
        groups.setdefault(key, Group(other)).tasks.append(t)
    return [g for g in groups.values() if len(g.tasks) >= MIN_GROUP]


def _variant(task, scenario):
    """The point's change as a Variant on top of its group's base (whose list fields are emptied)."""
    from heterosim.batch.variants import Variant

    kw: dict[str, Any] = {}
    o = task.overrides
    if "seed" in o:
        kw["seed"] = int(o["seed"])
    if "network.per_hop_latency_ns" in o:
        kw["per_hop_latency_ns"] = int(o["network.per_hop_latency_ns"])
    if "cluster.stragglers" in o:
        kw["stragglers"] = tuple((s["gpu"], float(s["slowdown"])) for s in o["cluster.stragglers"])
    if "cluster.degraded_links" in o:
        kw["degrade"] = tuple((d["a"], d.get("b"), float(d["factor"])) for d in o["cluster.degraded_links"])
    nic = []
    for k, v in o.items():
        m = _NIC.match(k)
        if m:
            nic.append((scenario.cluster.groups[int(m.group(1))].name, float(v)))
    kw["nic_gbps"] = tuple(nic)
    return Variant(task.point_id, **kw)


def run_groups(groups: list[Group], scenario_path: str, on_done: Callable, engine: str = "auto") -> BatchReport:
    """Run each group as one batch; write each point's summary.json and call ``on_done(task, Outcome)``. A group
    the engine refuses is left for the normal path (its reason in the report)."""
    from heterosim import pipeline
    from heterosim.batch import engine as eng
    from heterosim.batch.decisions import flipped
    from heterosim.batch.variants import check_variant, params
    from heterosim.sim.program import export_program
    from heterosim.sweep.worker import Outcome
    from heterosim.whatif import pick_engine

    rep = BatchReport(engine=pick_engine(engine))
    run = eng.run_jax if rep.engine == "jax" else eng.run_numpy
    for g in groups:
        label = ", ".join(f"{k}={v}" for k, v in g.base.items()) or "the base scenario"
        t0 = time.perf_counter()
        try:
            lists = {k: [] for k in _LISTS if any(k in t.overrides for t in g.tasks)}
            sc = pipeline.load(scenario_path, {**g.base, **lists})
            if sc.training.iterations != 1:
                raise UserError("the batch engine runs one iteration", field="training.iterations",
                                value=sc.training.iterations)
            prepared = pipeline.prepare(sc)
            pipeline.check(prepared, backend="flow")
            prog = export_program(prepared)
            vs = [_variant(t, sc) for t in g.tasks]
            for v in vs:
                check_variant(prog, v, prepared.system)
            res = run(prog, params(prog, vs, prepared.system, sc))
            if res.flags.any():
                raise UserError("the batch engine did not finish a point (stalled)", field="point",
                                value=g.tasks[int(res.flags.nonzero()[0][0])].point_id)
        except UserError as err:
            rep.refused[label] = str(err).replace("\n", " ")
            continue
        wall = time.perf_counter() - t0
        rep.batches += 1
        rep.wall_s += wall
        why = flipped(prog, res)
        for t, ns, w in zip(g.tasks, res.iteration_time_ns.tolist(), why):
            if w:  # (not exact for certain: left to the normal path)
                rep.flipped[t.point_id] = w
                continue
            _write_summary(Path(t.out_dir), summary_of(prepared, int(ns), rep.engine, wall / len(g.tasks)))
            on_done(t, Outcome("ok", wall_s=wall / len(g.tasks)))
            rep.points.append(t.point_id)
    return rep


def summary_of(prepared, t_ns: int, engine: str, wall_s: float) -> dict[str, Any]:
    """A batched point's summary.json: the iteration time and what follows from it, by ``make_summary``'s
    definitions (heterosim/results/summary.py ``iteration_figures``)."""
    from heterosim.results.summary import iteration_figures

    return {"scenario": prepared.scenario.name, "backend": "flow", "engine": f"batch ({engine})",
            **iteration_figures(prepared.scenario, prepared.system, prepared.ir, t_ns),
            "simulation": {"wall_s": wall_s, "engine": f"batch ({engine})"},
            "approximations": ["batch engine: the flow backend's run with every lane simulated (tests/batch: within "
                               "1e-6 relative); no per-GPU breakdown or network counters"]}


def _write_summary(out: Path, data: dict) -> None:
    from heterosim.sweep.worker import SUMMARY, _write_json

    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / SUMMARY, data)
