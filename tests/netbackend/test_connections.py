"""Messages on one transport connection are carried in posting order by both backends (a queue
pair sends its work requests one after the other); messages on different connections share the
link.  Expected finish times by hand: 100 Gb/s, 1 us links, 4096 B payload + 78 B headers."""
from __future__ import annotations

import pytest

from netbackend import Link, Message, NetTopology
from netbackend.config import NetworkConfig
from netbackend.ns3.scenarios import run_fcts

MTU, HDR = 4096, 78


def _topo():
    return NetTopology(hosts=["h0", "h1"], switches=["s0"],
                       links=[Link("h0", "s0", 100, 1000), Link("s0", "h1", 100, 1000)])


def _run(backend: str, msgs: list[Message]) -> dict[int, int]:
    return run_fcts(_topo(), msgs, NetworkConfig(backend=backend, cc="none", per_hop_latency_ns=0))


def _serial_ns(n_pkts: int) -> float:
    return n_pkts * (MTU + HDR) * 8 / 100.0


@pytest.mark.parametrize("backend", ["flow", pytest.param("ns3", marks=pytest.mark.ns3)])
def test_same_connection_in_order_other_connection_shares(backend):
    if backend == "ns3":
        pytest.importorskip("cppyy")
    n = 250  # packets per message
    size = n * MTU
    same = _run(backend, [Message(1, "h0", "h1", size, 0, connection=5),
                          Message(2, "h0", "h1", size, 0, connection=5)])
    # In order: the second finishes one message-time after the first; both together take
    # 2n packet times on the first link, plus the last packet's second hop and 2 x 1 us.
    tail = _serial_ns(1) + 2000
    assert abs(same[1] - (_serial_ns(n) + tail)) <= 0.01 * same[1], same
    assert abs(same[2] - (_serial_ns(2 * n) + tail)) <= 0.01 * same[2], same
    apart = _run(backend, [Message(1, "h0", "h1", size, 0, connection=5),
                           Message(2, "h0", "h1", size, 0, connection=6)])
    # Two connections share the link: both finish near the end of the 2n packet times.
    for mid in (1, 2):
        assert apart[mid] >= 0.9 * (_serial_ns(2 * n) + tail), apart
