"""benchmarks/bench_ns3_accel.replica_offsets: how far apart data-parallel replicas' pipeline sends start
(the quantity the GPT-3 b64 regime table in docs/packet-level-acceleration.md is read by), on a hand-made
message log."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_ns3_accel import replica_offsets  # noqa: E402

from netbackend import Message  # noqa: E402

# NIC -> (replica, stage, TP position): two replicas of a two-stage pipeline, two GPUs per stage
ROLES = {f"n{d}{s}{t}": (d, s, t) for d in (0, 1) for s in (0, 1) for t in (0, 1)}


def _send(mid: int, src: str, dst: str, t: int) -> Message:
    return Message(mid, src, dst, 1000, t)


def test_pairs_kth_sends_per_stage_pair_and_tp_position():
    msgs = [
        # replica 0, stage 0 -> 1, both TP positions, two micro-batches
        _send(1, "n000", "n010", 100), _send(2, "n001", "n011", 100),
        _send(3, "n000", "n010", 900), _send(4, "n001", "n011", 905),
        # replica 1: 30 ns behind at first, then 50 ns (TP 0) and 45 ns (TP 1)
        _send(5, "n100", "n110", 130), _send(6, "n101", "n111", 130),
        _send(7, "n100", "n110", 950), _send(8, "n101", "n111", 950),
        # backward, stage 1 -> 0: replica 1 20 ns ahead
        _send(9, "n010", "n000", 500), _send(10, "n110", "n100", 480),
        # not pipeline sends: data-parallel (across replicas) and within a stage (TP)
        _send(11, "n000", "n100", 0), _send(12, "n000", "n001", 0),
    ]
    out = sorted(replica_offsets({"roles": ROLES, "messages": msgs}))
    assert out == sorted([30, 30, 50, 45, -20])


def test_sends_are_paired_in_start_order_not_log_order():
    msgs = [_send(1, "n000", "n010", 900), _send(2, "n000", "n010", 100),
            _send(3, "n100", "n110", 110), _send(4, "n100", "n110", 1000)]
    assert sorted(replica_offsets({"roles": ROLES, "messages": msgs})) == [10, 100]


def test_one_replica_or_unknown_nics_give_nothing():
    msgs = [_send(1, "n000", "n010", 100), _send(2, "x", "n110", 100)]
    assert replica_offsets({"roles": ROLES, "messages": msgs}) == []
