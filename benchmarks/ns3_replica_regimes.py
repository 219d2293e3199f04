"""Which regime GPT-3 b64's data-parallel replicas land in, per random draw, at packet level and in the model.

On a hashed fabric the pipeline fill's collisions leave the two replicas either in lockstep (their
pipeline sends keep meeting on the same uplinks all iteration: many ECN marks, FCT p99 ~190-208 us) or
most of a send apart (few marks, p99 ~173 us), at random (docs/packet-level-acceleration.md, "regime"
table). The regime is mostly set by the end of the fill, so a run can stop there (600 ms, about a fifth
of an iteration): over 16 model draws (seeds 1 and 4, eight each) the regime at 600 ms was the whole
iteration's in 15; in the other, lockstep broke later (seed 4 draw 6: -14.4 us at 600 ms, -175 us over
the iteration), so the lockstep count at 600 ms is an upper bound.
This runs each mode ``--draws`` times with only its random draws moved (``bench_ns3_accel --draws``:
ns-3's run number for RED, the fluid model's seed; ECMP kept) to ``--until-ms`` of simulated time and
prints each draw's median replica offset (``bench_ns3_accel.replica_offsets``) and how many landed within
``--lockstep-us`` (default 20 us). Not a test: a packet-level draw takes 6-7 CPU minutes (378-433 s
measured, against ~18 for the whole iteration).

    .venv/bin/python benchmarks/ns3_replica_regimes.py --seed 1 --draws 6 [--modes off,auto] [--from-draw 0]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_ns3_accel as B  # noqa: E402
from bench_ns3_training import scenario  # noqa: E402


class _Reached(Exception):
    """The run posted a message past ``until_ns``: the fill is over."""


def first_sends(mode: str, seed: int, draw: int, until_ns: int) -> dict:
    """Messages posted until ``until_ns`` (and the NIC roles) of GPT-3 b64 in ``mode``, draw ``draw``."""
    from heterosim import api

    B.ACC.update(collisions="fluid")  # (this child's copy of the benchmark's globals: auto as --collisions fluid)
    _, prep, log = B.prepare_training(scenario(64), mode, seed, log_messages=True, draw=draw)
    c0 = time.process_time()

    def progress(done, total):
        if log and log[-1].start_ns >= until_ns:
            raise _Reached()

    try:
        api.simulate(prep, backend="ns3", record_messages=False, progress=progress)
    except _Reached:
        pass
    return {"messages": [m for m in log if m.start_ns < until_ns], "roles": B.nic_roles(prep),
            "cpu_s": time.process_time() - c0}


def main() -> None:
    from netbackend.ns3 import run_isolated

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1, help="scenario seed (the ECMP hash)")
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--from-draw", type=int, default=0, help="first draw (more draws in another process)")
    ap.add_argument("--modes", default="off,auto")
    ap.add_argument("--until-ms", type=float, default=600.0)
    ap.add_argument("--lockstep-us", type=float, default=20.0)
    args = ap.parse_args()
    until = int(args.until_ms * 1e6)
    for mode in args.modes.split(","):
        lock = 0
        for k in range(args.from_draw, args.from_draw + args.draws):
            r = run_isolated(first_sends, mode, args.seed, k, until)
            o = sorted(B.replica_offsets(r))
            p50 = B._pct(o, .5) if o else float("nan")
            lock += abs(p50) <= args.lockstep_us * 1e3
            print(f"GPT-3 b64 seed {args.seed}, {mode}, draw {k}: {len(o)} send pairs before {args.until_ms:g} ms, "
                  f"replica offset p50 {p50 / 1e3:+.1f} us ({'lockstep' if abs(p50) <= args.lockstep_us * 1e3 else 'apart'}), "
                  f"{r['cpu_s']:.0f} s CPU", flush=True)
        print(f"GPT-3 b64 seed {args.seed}, {mode}: {lock} of {args.draws} draws in lockstep "
              f"(|offset| <= {args.lockstep_us:g} us)", flush=True)


if __name__ == "__main__":
    main()
