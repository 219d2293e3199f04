"""Run a scenario suite (e.g. ``scenarios/suites/h-suite``) and tabulate it.

Every scenario runs with its own (heterogeneity-aware) plan; optionally its
naive counterpart (same parallelism and rank order, equal layers per stage,
equal micro-batches per replica) runs too, so each row carries the speed-up the
non-uniform partition buys.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Callable

from heterosim.errors import UserError

COLUMNS = ("scenario", "setting", "model", "gpus", "plan", "layers", "microbatch_split", "iteration_time_s",
           "mfu", "compute", "exposed_comm", "bubble", "idle", "inter_node_share", "inter_node_GB",
           "naive_time_s", "speedup_vs_naive")


def _plan_str(sc) -> str:
    p = sc.parallelism
    sched = p.schedule if p.virtual_stages == 1 else f"interleaved(v={p.virtual_stages})"
    if p.stage_tp is not None:
        return (f"TP{'/'.join(map(str, p.stage_tp))} PP{len(p.stage_tp)} DP{p.dp or '-'} "
                f"mbs{sc.training.micro_batch_size} {sched} rc={p.recompute}")
    return (f"TP{p.tp} PP{p.pp} DP{p.dp or '-'} mbs{sc.training.micro_batch_size} {sched} "
            f"rc={p.recompute}")


def run_one(path: Path, backend: str = "flow", naive: bool = True) -> dict:
    """Simulate one suite scenario (and its uniform twin); one table row."""
    from heterosim import pipeline as api
    from heterosim.planner.mapping import apply_overrides

    sc = api.load(path)
    sc = apply_overrides(sc, {"training.iterations": 1})
    prep = api.prepare(sc)
    res = api.simulate(prep, backend=backend, record_messages=True)
    s = res.summary
    b = s["breakdown"]
    m = re.match(r"(h\d)", path.stem)
    row = {
        "scenario": s["scenario"], "setting": m.group(1).upper() if m else "", "model": sc.model.name,
        "gpus": s["gpus"], "plan": _plan_str(sc),
        "layers": "/".join(map(str, prep.ir.meta.get("layers_per_stage", []))),
        "microbatch_split": "/".join(map(str, prep.ir.meta.get("microbatches_per_replica", []))),
        "iteration_time_s": s["iteration_time_s"], "mfu": s["mfu"], "compute": b["compute"],
        "exposed_comm": b["exposed_comm_total"], "bubble": b["bubble"], "idle": b["idle"],
        "inter_node_share": s["inter_node_comm_share"],
        "inter_node_GB": s["network"]["bytes_inter_node"] / 1e9,
        "naive_time_s": None, "speedup_vs_naive": None,
    }
    part, split = sc.parallelism.layer_partition, sc.training.microbatch_split
    uniform = (part is None or len(set(part)) == 1) and (split is None or len(set(split)) == 1)
    if naive and uniform:  # equal layers and micro-batches already: the naive plan is this plan
        row["naive_time_s"], row["speedup_vs_naive"] = row["iteration_time_s"], 1.0
    elif naive:
        try:
            nsc = apply_overrides(sc, {"parallelism.layer_partition": None, "training.microbatch_split": None})
            nres = api.simulate(api.prepare(nsc), backend=backend, record_messages=False)
            row["naive_time_s"] = nres.summary["iteration_time_s"]
            row["speedup_vs_naive"] = row["naive_time_s"] / row["iteration_time_s"]
        except UserError as err:
            row["naive_time_s"] = "OOM" if "out of memory" in str(err) else "invalid"
    return row


def suite_table(paths, backend: str = "flow", *, naive: bool = True,
                progress: Callable[[str], None] | None = None, jobs: int = 1) -> list[dict]:
    """One row per scenario file (see COLUMNS), in order; ``jobs`` scenarios at a time in forked processes
    (each run is independent and deterministic: the same rows as one at a time)."""
    from heterosim.forking import forked_map, map_forks

    paths = [Path(p) for p in paths]
    parallel = map_forks(jobs, len(paths))

    def one(k: int) -> dict:
        if progress is not None and not parallel:
            progress(f"running {paths[k]}")
        return run_one(paths[k], backend, naive)

    def done(k: int, row: dict) -> None:
        if progress is not None and parallel:
            progress(f"done {paths[k]}")

    return forked_map(one, len(paths), jobs, done)


def _fmt(key: str, v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if key in ("mfu", "compute", "exposed_comm", "bubble", "idle", "inter_node_share"):
        return f"{v:.1%}"
    if key == "speedup_vs_naive":
        return f"{v:.2f}x"
    if key in ("iteration_time_s", "naive_time_s"):
        return f"{v:.2f}"
    if key == "inter_node_GB":
        return f"{v:.0f}"
    return str(v)


def markdown(rows: list[dict]) -> str:
    cols = ["setting", "model", "plan", "layers", "microbatch_split", "iteration_time_s", "mfu", "compute",
            "exposed_comm", "bubble", "inter_node_share", "naive_time_s", "speedup_vs_naive"]
    head = ["setting", "model", "plan", "layers/stage", "mb/replica", "time (s)", "MFU", "compute",
            "exposed comm", "bubble", "inter-node share", "uniform (s)", "aware speed-up"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(c, r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def write_suite(rows: list[dict], out: Path) -> tuple[Path, Path]:
    from heterosim.results.writer import atomic_dir

    out = Path(out)
    with atomic_dir(out) as tmp:  # replaces only a folder HeteroSim wrote (stamped)
        with open(tmp / "suite.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(COLUMNS))
            w.writeheader()
            for r in rows:
                w.writerow({k: r.get(k) for k in COLUMNS})
        (tmp / "suite.md").write_text(markdown(rows))
    return out / "suite.csv", out / "suite.md"
