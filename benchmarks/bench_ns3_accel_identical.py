"""Issue 41 (structure): the accelerated backend's results of this tree against another tree, bit for bit,
over every acceleration option (closed form, shared ports, hand-backs, migration, memoization,
fast-forward, fluid collisions).

Cases:
* tests/netbackend/test_ns3_accel.py's random leaf-spine fabrics (seeds 1, 2, 3, 5, 8) under each option set;
* bench_ns3_accel.py's rings + incast traffic (200 ring messages and an 8 -> 1 incast, hashed leaf-spine);
* with ``--log FILE``: a training message log (``--make-log`` writes one from bench_ns3_accel.run_training's
  quickstart, in the tree given), posted open loop on its fabric.

Each case prints the sha256 of its sorted completions and of its statistics (link bytes, every counter of
``extra`` and ``extra["acceleration"]`` but the wall-clock timings); equal hashes are equal results.

Run: .venv/bin/python benchmarks/bench_ns3_accel_identical.py --against REV_OR_DIR [--log FILE]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import sys
from pathlib import Path

SEEDS = (1, 2, 3, 5, 8)
OPTIONS = {
    "auto": {},
    "share_ports": {"share_ports": True},
    "no_migrate": {"migrate": False},
    "memoize": {"memoize": True},
    "fast_forward": {"fast_forward": True},
    "fluid": {"collisions": "fluid"},
    "fluid_share": {"collisions": "fluid", "share_ports": True},
}
CCS = {"auto": ("dcqcn", "dcqcn_paper", "none")}
"""Option set -> CCs run with it (dcqcn only where not listed)."""
TIMING = ("wall", "python_overhead", "_cpu")
COVERAGE = ("messages_closed_form", "handbacks", "handbacks_over_capacity", "migrations", "messages_rate_limited",
            "memo_recorded", "memo_hits", "memo_interrupts", "fast_forwards", "messages_fluid")
"""Counters printed beside each case: which parts of the accelerator it exercised (this tree's run)."""


def _strip(x):
    """``x`` without the wall-clock figures (they differ between any two runs)."""
    if isinstance(x, dict):
        return {str(k): _strip(v) for k, v in x.items()
                if not (any(t in str(k) for t in TIMING) or str(k).endswith("_s"))}
    if isinstance(x, (list, tuple)):
        return [_strip(v) for v in x]
    return x


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()[:12]


def _run(topo, cfg, seed, msgs) -> tuple[str, str]:
    from netbackend.registry import create_backend

    with create_backend("ns3", topo, cfg, seed) as b:
        for m in msgs:
            b.send(m)
        done = {}
        while b.pending():
            for c in b.advance():
                done[c.id] = c.finish_ns
        st = b.stats()
    stats = {"link_bytes": sorted((repr(k), v) for k, v in st.link_bytes.items()), "messages": st.messages,
             "bytes": st.bytes_delivered, "extra": _strip(st.extra)}
    acc = st.extra["acceleration"]
    used = ",".join(f"{k} {acc[k]}" for k in COVERAGE if acc.get(k))
    return _digest(sorted(done.items())), _digest(stats), used


def fingerprint(tree: str, log: str | None) -> dict:
    """{case: (completions hash, statistics hash, counters exercised)}, run with ``tree``'s netbackend (this file's cases)."""
    sys.path.insert(0, str(Path(tree) / "tests" / "netbackend"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import test_ns3_accel as cases

    import bench_ns3_accel as ba
    import netbackend
    from netbackend.config import NetworkConfig

    assert Path(netbackend.__file__).resolve().is_relative_to(Path(tree).resolve()), netbackend.__file__
    out = {}
    for name, acc in OPTIONS.items():
        for cc in CCS.get(name, ("dcqcn",)):
            for seed in SEEDS:
                topo, msgs = cases._random_case(seed)
                cfg = NetworkConfig(backend="ns3", cc=cc, acceleration={"mode": "auto", **acc})
                out[f"random {seed} {cc} {name}"] = _run(topo, cfg, 0, msgs)
    topo = ba.traffic_topology()
    for name, acc in OPTIONS.items():
        cfg = NetworkConfig(backend="ns3", cc="dcqcn", acceleration={"mode": "auto", **acc}, ecmp="hash")
        out[f"rings+incast dcqcn {name}"] = _run(topo, cfg, 1, ba.traffic_messages(topo, 1))
    if log:
        with open(log, "rb") as f:
            lg = pickle.load(f)
        for name, acc in OPTIONS.items():
            net = lg["network"]
            cfg = net.model_copy(update={"acceleration": net.acceleration.model_copy(update={"mode": "auto", **acc})})
            out[f"training log {name}"] = _run(lg["net"], cfg, lg["seed"], lg["messages"])
    return out


def make_log(path: str) -> None:
    """Write the quickstart's training messages (bench_ns3_accel.run_training, mode off) to ``path``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_ns3_accel as ba

    res = ba.run_training("scenarios/quickstart.yaml", "off", log_messages=True)
    lg = res["log"]
    with open(path, "wb") as f:
        pickle.dump({k: lg[k] for k in ("messages", "net", "network", "seed")}, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", metavar="REV_OR_DIR")
    ap.add_argument("--log", metavar="FILE", help="also a training message log (--make-log)")
    ap.add_argument("--make-log", metavar="FILE", help=argparse.SUPPRESS)
    ap.add_argument("--child", metavar="TREE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.make_log:
        make_log(args.make_log)
        return
    if args.child:
        import time

        c0 = time.process_time()
        out = fingerprint(args.child, args.log)
        out["cpu_s"] = time.process_time() - c0
        print(json.dumps(out))
        return
    if not args.against:
        ap.error("--against is required")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import revisions

    log = ["--log", os.path.abspath(args.log)] if args.log else []
    res = revisions.last_json_of_both(args.against, lambda tree: [__file__, "--child", tree, *log], "hs-accel-id-")
    base, new = res[args.against], res["this tree"]
    cpu = base.pop("cpu_s"), new.pop("cpu_s")
    print(f"| case | completions {args.against} / this tree | statistics {args.against} / this tree | identical "
          "| exercised (this tree) |")
    print("|---|---|---|---|---|")
    for k in base:
        (bc, bs), (nc, ns, used) = base[k][:2], new[k]
        print(f"| {k} | {bc} / {nc} | {bs} / {ns} | {'yes' if (bc, bs) == (nc, ns) else 'NO'} | {used} |")
    same = sum(new[k][:2] == base[k][:2] for k in base)
    print(f"this tree: {same} of {len(base)} cases identical to {args.against} (completions and statistics)")
    print(f"CPU s of all cases (one process each, one after the other): {args.against} {cpu[0]:.1f}, this tree "
          f"{cpu[1]:.1f} (ratio {cpu[0] / cpu[1]:.3f}; > 1: this tree faster)")


if __name__ == "__main__":
    main()
