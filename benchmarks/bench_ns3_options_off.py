"""Accelerated ns-3 results with issue 41's new transport options set to the old behaviour are the
results of git revision REV, bit for bit (and with the new defaults, how many cases change).

The cases are tests/netbackend/test_ns3_accel.py's random leaf-spine fabrics (seeds 1, 2, 3, 5, 8) under
DCQCN and PFC alone, with acceleration.mode auto.  "Old behaviour": ACK/NAK in the control class and the
4 ms retransmission timeout (header_bytes keeps its default, which the one header rule does not change).

Run: .venv/bin/python benchmarks/bench_ns3_options_off.py --against REV
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SEEDS = (1, 2, 3, 5, 8)
OLD_BEHAVIOUR = {"ack_class": "control", "retransmit_timeout_ns": 4_000_000}


def fingerprint(tree: str, transport: dict | None) -> dict:
    """{case: sha256 of its sorted completions}, run with ``tree``'s netbackend."""
    sys.path.insert(0, str(Path(tree) / "tests" / "netbackend"))
    import test_ns3_accel as cases

    from netbackend.config import NetworkConfig
    from netbackend.registry import create_backend  # picks the accelerated backend for mode auto

    out = {}
    for seed in SEEDS:
        topo, msgs = cases._random_case(seed)
        for cc in ("dcqcn", "none"):
            kw = dict(backend="ns3", cc=cc, acceleration={"mode": "auto"})
            if transport:
                kw["transport"] = transport
            with create_backend("ns3", topo, NetworkConfig(**kw), 0) as b:
                for m in msgs:
                    b.send(m)
                done = cases.run_all(b)
            out[f"seed {seed} {cc}"] = hashlib.sha256(json.dumps(sorted(done.items())).encode()).hexdigest()[:12]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", metavar="REV", required=True)
    ap.add_argument("--child", nargs=2, metavar=("TREE", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        tree, variant = args.child
        print(json.dumps(fingerprint(tree, OLD_BEHAVIOUR if variant == "old-behaviour" else None)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import revisions

    here = str(Path(__file__).resolve().parents[1])
    res = {}
    with tempfile.TemporaryDirectory(prefix="hs-opts-") as old:
        revisions.extract(args.against, old)
        for label, tree, variant in ((args.against, old, "defaults"), ("this tree, old behaviour", here, "old-behaviour"),
                                     ("this tree, defaults", here, "defaults")):
            out = subprocess.run([sys.executable, __file__, "--against", args.against, "--child", tree, variant],
                                 env={**os.environ, "PYTHONPATH": tree}, cwd=tree, capture_output=True, text=True,
                                 check=True).stdout
            res[label] = json.loads(out.strip().splitlines()[-1])
    base = res[args.against]
    for label in list(res)[1:]:
        same = sum(res[label][k] == base[k] for k in base)
        print(f"{label}: {same} of {len(base)} cases identical to {args.against}")


if __name__ == "__main__":
    main()
