"""benchmarks/ns3_collision_floor.py: which messages overlap another NIC's message on a port (checked
by hand on four messages)."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace as M

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from ns3_collision_floor import colliding, episodes  # noqa: E402


def test_overlap_on_a_shared_port_after_the_nic_is_a_collision():
    # ports: NIC a -> 1, NIC b -> 2, NIC c -> 3; shared uplink 9; d's own path 4 -> 8
    msgs = [M(src_ep="a", dst_ep="x", size_bytes=10, flow_key=0, start_ns=0, end_ns=100),
            M(src_ep="b", dst_ep="y", size_bytes=10, flow_key=0, start_ns=50, end_ns=150),   # meets a on 9
            M(src_ep="c", dst_ep="z", size_bytes=10, flow_key=0, start_ns=150, end_ns=250),  # starts as b ends
            M(src_ep="a", dst_ep="w", size_bytes=10, flow_key=1, start_ns=0, end_ns=100)]    # a's own, port 1 only shared
    paths = [[1, 9, 5], [2, 9, 6], [3, 9, 7], [1, 8]]
    assert colliding(msgs, paths) == [True, True, False, False]
    assert episodes(msgs, paths, colliding(msgs, paths)) == (1, 1)
