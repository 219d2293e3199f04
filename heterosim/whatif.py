"""What-if studies on the batch engine: many variants of one scenario's iteration in one batched run.

``whatif(scenario, vary=[...], out_dir=...)`` (``heterosim whatif``) builds the scenario's program once
(``heterosim.sim.program.export_program``), makes the variants each ``--vary`` asks for, runs them in batches
(``heterosim.batch``: JAX where it is installed, else NumPy), and writes

* ``variants.csv``: every variant (what it changed, its iteration time, the change against the baseline), and
  the same as ``variants.parquet`` where pyarrow is installed;
* ``sensitivity.csv``: the variants ranked by impact (largest slowdown first), the table printed too;
* ``summary.json``: the baseline, the engine, batches, rounds, wall and compile time, how the results relate to
  the flow backend; ``histogram.png`` and ``ranked.png`` (matplotlib).

``--vary`` forms (several may be given; each adds its variants, one change each, to the baseline):

* ``link=F``: every fabric link (each pair of ends) at F of its rate, one at a time;
* ``gpu=S``: every GPU S times slower (a straggler), one at a time;
* ``stragglers=NxK@S``: N random patterns of K stragglers, each slowed uniformly in (1, S] (seeded by the
  scenario's ``seed``);
* ``hop-latency=A,B,...``: the network's per-hop latency at each value (ns);
* ``ecmp-seed=A,B,...`` or ``ecmp-seed=A-B``: the scenario's ``seed`` at each value (under hashed ECMP it picks
  which equal-cost links each flow takes);
* ``nic=R,...``: every device group's NIC speed at each value (Gb/s), one group at a time
  (``cluster.groups[i].overrides.nic_gbps``; refused where the fabric is sized from it: pin ``fabric.num_spines``);
* ``fail=switches`` (every link between two switches down, one pair of ends at a time) or ``fail=A:B`` (the links
  between ends A and B): flows re-routed on the shortest paths left.

What changes the program (the parallel plan, the batch, the model, the fabric's shape) is no variant: it is
refused with one line and runs through ``heterosim run`` / ``heterosim sweep``.
"""
from __future__ import annotations

import csv
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from heterosim.errors import UserError

if TYPE_CHECKING:
    import numpy as np

ENGINES = ("auto", "jax", "numpy")
KINDS = ("link", "gpu", "stragglers", "hop-latency", "ecmp-seed", "nic", "fail")
DEFAULT_BATCH = 256
"""Variants per batched run (issue 43's largest measured B on the CPU; memory per variant is in summary.json)."""


@dataclass
class WhatIfResult:
    baseline_ns: int
    variants: list
    times_ns: np.ndarray
    flags: np.ndarray
    engine: str
    info: dict = field(default_factory=dict)
    out_dir: Path | None = None
    ran_on: list = field(default_factory=list)
    """Per variant: ``batch``, or ``flow backend`` where a chain decision the program took from the baseline run
    would go the other way under the variant (:func:`heterosim.batch.decisions.flipped`): run normally instead."""
    notes: list = field(default_factory=list)
    """Per variant: why it ran on the flow backend ('' where it did not)."""

    def ranked(self) -> list[tuple[int, float]]:
        """(variant index, relative change) from the largest slowdown down (the baseline left out)."""
        rel = (self.times_ns - self.baseline_ns) / self.baseline_ns  # (numpy arrays)
        order = sorted(range(1, len(self.variants)), key=lambda i: (-rel[i], i))
        return [(i, float(rel[i])) for i in order]


def parse_vary(spec: str, prepared) -> list:
    """The variants of one ``--vary`` (module docstring); one line for a spec that is not one."""
    from heterosim.batch.variants import Variant

    if "=" not in spec:
        raise UserError(f"expected KIND=VALUE with KIND one of {', '.join(KINDS)}", field="--vary", value=spec)
    kind, value = (x.strip() for x in spec.split("=", 1))
    if kind not in KINDS:
        if "." in kind:
            raise UserError("changes the program (a scenario field, e.g. the parallel plan or the batch), which the "
                            "batch engine cannot vary; use heterosim sweep or heterosim run --set", field="--vary",
                            value=spec)
        raise UserError(f"unknown kind (one of {', '.join(KINDS)})", field="--vary", value=spec)
    system = prepared.system
    try:
        if kind == "link":
            f = float(value)
            if not 0.0 < f <= 1.0:
                raise UserError("a link keeps a factor in (0, 1] of its rate (a failed link re-routes flows: "
                                "--vary fail=A:B)", field="--vary", value=spec)
            pairs = list(dict.fromkeys((l.a, l.b) for l in system.net.links))
            return [Variant(f"link {a}<->{b} x{f:g}", degrade=((a, b, f),),
                            tags={"kind": "link", "target": f"{a}<->{b}", "value": f}) for a, b in pairs]
        if kind == "gpu":
            s = float(value)
            if not s >= 1.0:
                raise UserError("a straggler's slowdown must be >= 1", field="--vary", value=spec)
            return [Variant(f"gpu {g.name} x{s:g}", stragglers=((g.name, s),),
                            tags={"kind": "gpu", "target": g.name, "value": s}) for g in system.gpus]
        if kind == "stragglers":
            m = re.fullmatch(r"(\d+)x(\d+)@([0-9.]+)", value)
            if not m:
                raise UserError("expected NxK@S (N patterns of K GPUs, slowdown up to S)", field="--vary", value=spec)
            n, k, s = int(m.group(1)), int(m.group(2)), float(m.group(3))
            if not (n >= 1 and 1 <= k <= system.num_gpus and s >= 1.0):
                raise UserError(f"needs N >= 1, 1 <= K <= {system.num_gpus} GPUs, S >= 1", field="--vary",
                                value=spec)
            import numpy as np

            rng = np.random.default_rng(prepared.scenario.seed)
            out = []
            for i in range(n):
                gpus = rng.choice(system.num_gpus, size=k, replace=False)
                slow = 1.0 + rng.random(k) * (s - 1.0)
                pat = tuple((system.gpus[int(g)].name, float(round(x, 6))) for g, x in zip(gpus, slow))
                out.append(Variant(f"stragglers #{i}", stragglers=pat,
                                   tags={"kind": "stragglers", "target": " ".join(f"{g}x{x:g}" for g, x in pat),
                                         "value": max(x for _, x in pat)}))
            return out
        if kind == "ecmp-seed":
            m = re.fullmatch(r"(\d+)-(\d+)", value)
            seeds = list(range(int(m.group(1)), int(m.group(2)) + 1)) if m else \
                [int(v) for v in value.split(",") if v.strip()]
            if not seeds or min(seeds) < 0:
                raise UserError("expected seeds >= 0: A,B,... or A-B", field="--vary", value=spec)
            return [Variant(f"ecmp seed {x}", seed=x, tags={"kind": "ecmp-seed", "target": "network", "value": x})
                    for x in seeds]
        if kind == "nic":
            rates = [float(v) for v in value.split(",") if v.strip()]
            if not rates or min(rates) <= 0:
                raise UserError("expected NIC speeds in Gb/s > 0, comma separated", field="--vary", value=spec)
            return [Variant(f"nic {g.name} {r:g} Gb/s", nic_gbps=((g.name, r),),
                            tags={"kind": "nic", "target": g.name, "value": r})
                    for g in prepared.scenario.cluster.groups for r in rates]
        if kind == "fail":
            net = system.net
            if value == "switches":
                sw = set(net.switches)
                pairs = list(dict.fromkeys((l.a, l.b) for l in net.links if l.a in sw and l.b in sw))
            else:
                a, sep, b = value.partition(":")
                if not sep or not any({l.a, l.b} == {a, b} for l in net.links):
                    raise UserError("expected fail=switches or fail=A:B naming two ends of a fabric link",
                                    field="--vary", value=spec)
                pairs = [(a, b)]
            return [Variant(f"fail {a}<->{b}", fail=((a, b),), tags={"kind": "fail", "target": f"{a}<->{b}",
                                                                      "value": 0}) for a, b in pairs]
        vals = [int(v) for v in value.split(",") if v.strip()]
        if not vals or min(vals) < 0:
            raise UserError("expected per-hop latencies in ns >= 0, comma separated", field="--vary", value=spec)
        return [Variant(f"hop latency {v} ns", per_hop_latency_ns=v,
                        tags={"kind": "hop-latency", "target": "network", "value": v}) for v in vals]
    except ValueError:
        raise UserError("not a number", field="--vary", value=spec) from None


def pick_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise UserError(f"unknown engine (one of {', '.join(ENGINES)})", field="--engine", value=engine)
    if engine == "numpy":
        return "numpy"
    try:
        import jax  # noqa: F401
    except ImportError:
        if engine == "jax":
            raise UserError("JAX is not installed (pip install 'heterosim[batch]')", field="--engine",
                            value=engine) from None
        return "numpy"
    return "jax"


def whatif(scenario, vary: list[str], out_dir: str | Path | None = None, *, overrides=None, engine: str = "auto",
           batch: int = DEFAULT_BATCH, progress: Callable[[int, int], None] | None = None) -> WhatIfResult:
    """Run the variants ``vary`` asks for (module docstring) and write them to ``out_dir`` (None: nothing)."""
    import numpy as np

    from heterosim import pipeline
    from heterosim.batch import engine as eng
    from heterosim.batch.decisions import flipped
    from heterosim.batch.variants import Variant, check_variant, params
    from heterosim.results.writer import check_out_dir
    from heterosim.sim.program import export_program

    if out_dir is not None:
        check_out_dir(out_dir)  # refuse before any work
    if not vary:
        raise UserError("nothing to vary (give --vary at least once)", field="--vary", value="")
    if not isinstance(batch, int) or batch < 1:
        raise UserError("must be >= 1", field="--batch", value=batch)
    which = pick_engine(engine)
    if not hasattr(scenario, "model_dump"):
        from heterosim.filekinds import kind_of_file

        kind = kind_of_file(scenario)
        if kind != "training":
            raise UserError(f"is a {kind.replace('-', ' ')} file; the batch engine takes one training scenario",
                            file=str(scenario))
    sc = pipeline.load(scenario, overrides) if not hasattr(scenario, "model_dump") else \
        pipeline.with_overrides(scenario, overrides)
    prepared = pipeline.prepare(sc)
    pipeline.check(prepared, backend="flow")
    variants = [Variant("baseline", tags={"kind": "baseline", "target": "", "value": ""})]
    for spec in vary:
        variants += parse_vary(spec, prepared)
    t0 = time.perf_counter()
    prog = export_program(prepared)
    export_s = time.perf_counter() - t0
    for v in variants:
        check_variant(prog, v, prepared.system)
    run = eng.run_jax if which == "jax" else eng.run_numpy
    times = np.zeros(len(variants), np.int64)
    flags = np.zeros(len(variants), np.int32)
    why: list = [None] * len(variants)
    rounds, wall, compile_s = 0, 0.0, 0.0
    done = 0
    for lo in range(0, len(variants), batch):
        chunk = variants[lo:lo + batch]
        if len(chunk) < batch and lo > 0:  # (one compiled shape: the last batch is padded with baselines)
            chunk = chunk + [variants[0]] * (batch - len(chunk))
        res = run(prog, params(prog, chunk, prepared.system, prepared.scenario))
        n = min(batch, len(variants) - lo)
        times[lo:lo + n] = res.iteration_time_ns[:n]
        flags[lo:lo + n] = res.flags[:n]
        why[lo:lo + n] = flipped(prog, res)[:n]
        rounds = max(rounds, res.rounds)
        wall += res.wall_s
        compile_s += res.compile_s
        done += n
        if progress is not None:
            progress(done, len(variants))
    if flags.any():
        bad = int(np.nonzero(flags)[0][0])
        raise UserError("the batch engine did not finish this variant (stalled: a dependency it cannot meet)",
                        field="--vary", value=variants[bad].name)
    rerun = _rerun_flipped(prepared, variants, times, why)
    info = {"scenario": sc.name, "engine": f"batch ({which})", "device": _device(which), "variants": len(variants),
            "batch": min(batch, len(variants)), "rounds_max": rounds, "wall_s": wall, "compile_s": compile_s,
            "export_s": export_s, "program": {"nodes": prog.num_nodes, "flows": prog.num_flows,
                                              "links": prog.num_links},
            "memory_per_variant_bytes": _memory_per_variant(prog),
            "compute_contention": sc.simulation.compute_contention,
            "decision_checks": prog.meta.get("decision_checks", 0),
            "flow_backend_reruns": rerun,
            "reproduces": "the flow backend run of each variant with simulation.symmetry false and the scenario's "
                          f"simulation.compute_contention ({sc.simulation.compute_contention}) (tests/batch: within "
                          "1e-6 relative; measured equal to the ns on every case tested, docs/batch-engine.md); a "
                          "variant under which a chain decision taken from the baseline run would go the other way "
                          "is run through the flow backend instead (flow_backend_reruns, the engine column)"}
    result = WhatIfResult(int(times[0]), variants, times, flags, which, info, ran_on=[
        "flow backend" if w else "batch" for w in why], notes=[w or "" for w in why])
    if out_dir is not None:
        write(result, out_dir)
    return result


def _rerun_flipped(prepared, variants: list, times, why: list) -> dict:
    """The variants under which a chain decision taken from the baseline run would go the other way (``why``):
    each run through the flow backend (every lane simulated, as the engine reproduces), its time put in ``times``.
    What was rerun, with the engine's time beside the flow backend's."""
    from heterosim import pipeline

    out = {"count": 0, "differed": 0, "variants": []}
    for i, w in enumerate(why):
        if not w:
            continue
        r = pipeline.simulate(variants[i].prepare(prepared.scenario), symmetry=False, record_messages=False)
        t = int(r.sim.iteration_time_ns)
        out["count"] += 1
        out["differed"] += int(t != int(times[i]))
        out["variants"].append({"variant": variants[i].name, "batch_engine_ns": int(times[i]), "flow_backend_ns": t,
                                "why": w})
        times[i] = t
    return out


def _device(which: str) -> str:
    if which != "jax":
        return "cpu (numpy)"
    import jax

    d = jax.devices()[0]
    return f"{d.platform} ({getattr(d, 'device_kind', '')})"


def _memory_per_variant(prog) -> int:
    """Bytes of state per variant: node counters and durations, link arrays, event and flow pools, connection
    state, path tables (the arrays the engine holds per row; temporaries of a round not counted)."""
    n = prog.num_nodes
    ke, kf = prog.meta.get("pools", (64, 64))
    np_, p = prog.links.shape
    return int(n * (4 + 8) + (prog.num_links + 1) * 8 * 4 + prog.meta.get("connections", 0) * 9
               + ke * (4 + 8 + 1 + 8) + kf * (4 + 8 * 6) + np_ * (p * 4 * 2 + 16)
               + (prog.checks.num_probes * 8 if prog.checks is not None else 0))


def write(result: WhatIfResult, out_dir: str | Path) -> Path:
    from heterosim.results.writer import atomic_dir, write_json

    base = result.baseline_ns
    with atomic_dir(out_dir) as tmp:
        with open(tmp / "variants.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["variant", "kind", "target", "value", "iteration_time_ns", "delta_ns", "delta_pct", "engine",
                        "note"])
            ran_on = result.ran_on or ["batch"] * len(result.variants)
            notes = result.notes or [""] * len(result.variants)
            for v, t, e, note in zip(result.variants, result.times_ns, ran_on, notes):
                w.writerow([v.name, v.tags.get("kind", ""), v.tags.get("target", ""), v.tags.get("value", ""),
                            int(t), int(t - base), f"{100 * (t - base) / base:.6f}", e, note])
        _parquet(tmp / "variants.parquet", result)
        ranked = result.ranked()
        with open(tmp / "sensitivity.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["rank", "variant", "kind", "target", "iteration_time_ns", "delta_pct"])
            for k, (i, rel) in enumerate(ranked, 1):
                v = result.variants[i]
                w.writerow([k, v.name, v.tags.get("kind", ""), v.tags.get("target", ""), int(result.times_ns[i]),
                            f"{100 * rel:.6f}"])
        write_json(tmp / "summary.json", {"baseline_iteration_time_ns": base, **result.info,
                                          "worst": [{"variant": result.variants[i].name, "delta_pct": 100 * r}
                                                    for i, r in ranked[:10]]})
        _plots(tmp, result, ranked)
    result.out_dir = Path(out_dir)
    return result.out_dir


def _parquet(path: Path, result: WhatIfResult) -> None:
    """variants.csv's table as Parquet where pyarrow is installed (the ``parquet`` extra); else nothing."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    base = result.baseline_ns
    v = result.variants
    pq.write_table(pa.table({
        "variant": [x.name for x in v], "kind": [str(x.tags.get("kind", "")) for x in v],
        "target": [str(x.tags.get("target", "")) for x in v], "value": [str(x.tags.get("value", "")) for x in v],
        "iteration_time_ns": [int(t) for t in result.times_ns],
        "delta_pct": [100 * (int(t) - base) / base for t in result.times_ns],
        "engine": list(result.ran_on or ["batch"] * len(v)), "note": list(result.notes or [""] * len(v))}), path)


def _plots(tmp: Path, result: WhatIfResult, ranked) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # (plots are extras: the tables say everything)
        return
    rel = 100 * (result.times_ns[1:] - result.baseline_ns) / result.baseline_ns
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(rel, bins=min(50, max(5, len(rel) // 4)))
    ax.set_xlabel("iteration time vs baseline (%)")
    ax.set_ylabel("variants")
    ax.set_title(f"{result.info.get('scenario', '')}: {len(rel)} variants")
    fig.tight_layout()
    fig.savefig(tmp / "histogram.png", dpi=100)
    plt.close(fig)
    top = ranked[:20]
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(top) + 1.2))
    ax.barh([result.variants[i].name for i, _ in top][::-1], [100 * r for _, r in top][::-1])
    ax.set_xlabel("iteration time vs baseline (%)")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(tmp / "ranked.png", dpi=100)
    plt.close(fig)
