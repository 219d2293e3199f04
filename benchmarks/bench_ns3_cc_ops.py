"""Issue 41, congestion control behind RdmaCongestionOps: results of this tree against another tree
(a git revision or a directory), bit for bit.

Cases: tests/netbackend/test_ns3_accel.py's random leaf-spine fabrics (seeds 1, 2, 3, 5, 8), each
(a) accelerated (acceleration.mode auto) under dcqcn, dcqcn_paper and none, the CCs acceleration takes,
and (b) plain packet level under hpcc, timely and dctcp.  Each case prints the sha256 of its sorted
completions; equal hashes are equal completions to the nanosecond.

Run: .venv/bin/python benchmarks/bench_ns3_cc_ops.py --against REV_OR_DIR
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

SEEDS = (1, 2, 3, 5, 8)
CASES = [(cc, "auto") for cc in ("dcqcn", "dcqcn_paper", "none")] + [(cc, "off") for cc in ("hpcc", "timely", "dctcp")]


def fingerprint(tree: str) -> dict:
    """{case: sha256 of its sorted completions}, run with ``tree``'s netbackend."""
    sys.path.insert(0, str(Path(tree) / "tests" / "netbackend"))
    import test_ns3_accel as cases

    from netbackend.config import NetworkConfig
    from netbackend.registry import create_backend  # picks the accelerated backend for mode auto

    out = {}
    for seed in SEEDS:
        topo, msgs = cases._random_case(seed)
        for cc, mode in CASES:
            with create_backend("ns3", topo, NetworkConfig(backend="ns3", cc=cc, acceleration={"mode": mode}), 0) as b:
                for m in msgs:
                    b.send(m)
                done = cases.run_all(b)
            out[f"seed {seed} {cc} accel {mode}"] = hashlib.sha256(json.dumps(sorted(done.items())).encode()).hexdigest()[:12]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", metavar="REV_OR_DIR", required=True)
    ap.add_argument("--child", metavar="TREE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(fingerprint(args.child)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import revisions

    res = revisions.last_json_of_both(args.against, lambda tree: [__file__, "--against", args.against, "--child", tree],
                                      "hs-ccops-")
    base, new = res[args.against], res["this tree"]
    print("| case | " + args.against + " | this tree | identical |\n|---|---|---|---|")
    for k in base:
        print(f"| {k} | {base[k]} | {new[k]} | {'yes' if base[k] == new[k] else 'NO'} |")
    same = sum(new[k] == base[k] for k in base)
    print(f"this tree: {same} of {len(base)} cases identical to {args.against}")


if __name__ == "__main__":
    main()
