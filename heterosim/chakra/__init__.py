"""Chakra execution traces (MLCommons Chakra ET, what ASTRA-sim consumes) in and out.

    from heterosim.chakra import export_chakra
    export_chakra("scenarios/quickstart.yaml", "traces/qs")      # traces/qs/quickstart.<rank>.et

and a scenario with ``workload: {chakra: traces/qs}`` replays them (heterosim/chakra/importer.py).
The messages are our own definitions of the published schema (``et_def.proto``, ``schema.py``); this
package sits in the workload layer: it reads and writes the IR and knows nothing of networks.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heterosim.config.scenario import Scenario


@dataclass
class ExportResult:
    out_dir: Path
    ranks: int
    nodes: int
    process_groups: int


def export_chakra(scenario: Scenario | str | Path, out_dir: str | Path, *, overrides: list[str] | dict | None = None,
                  measurements: str | None = None, work_budget: float | None = None,
                  stream_deps: str = "ctrl") -> ExportResult:
    """Compile the scenario (or take its recorded workload) and write one ET file per rank into ``out_dir``
    (``<scenario name>.<rank>.et`` + ``comm_group.json``), atomically and only into a folder HeteroSim may
    replace (heterosim/results/writer.py). ``stream_deps``: ``ctrl`` (stream order as control dependencies)
    or ``data`` (as data dependencies too, for consumers that read only those, as Chakra's older feeder
    src/feeder/et_feeder_node.cpp did; ASTRA-sim's feeder_v3 resolves both)."""
    from heterosim import pipeline as api
    from heterosim.chakra.export import write_et_dir
    from heterosim.results.writer import atomic_dir, check_out_dir

    check_out_dir(out_dir)
    if stream_deps not in ("ctrl", "data"):
        from heterosim.errors import UserError

        raise UserError("must be ctrl or data", field="--stream-deps", value=stream_deps)
    sc = api.with_overrides(scenario, overrides) if isinstance(scenario, Scenario) else api.load(scenario, overrides)
    prep = api.prepare(sc, measurements=measurements, work_budget=work_budget)
    api.check(prep, simulating=False)
    with atomic_dir(out_dir) as tmp:
        counts: dict[str, Any] = write_et_dir(prep.ir, prep.system, prep.compute, sc.training.precision, tmp,
                                              sc.name, stream_deps)
    return ExportResult(Path(out_dir), **counts)


__all__ = ["export_chakra", "ExportResult"]
