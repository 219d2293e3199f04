"""What the flow engine's per-message fast path must keep (issue 15, hash-ECMP speed work).

* A message queued behind a busy connection is routed on *its own* hashed path when it starts (the
  path is looked up when a message is sent and carried with it; a queued message is looked up again).
* ``Message`` and ``Completion`` stay immutable, hashable values with the documented defaults.

Expected times by hand: 100 Gb/s links, 4096 B payload + 78 B headers per packet.
"""
from __future__ import annotations

import math

import pytest

from conformance import leaf_spine
from netbackend import Completion, Message
from netbackend.config import NetworkConfig
from netbackend.flow import FlowBackend
from netbackend.routing import Router

MTU, HDR = 4096, 78


def _keys_by_spine(topo, src: str, dst: str) -> dict[str, int]:
    """The first flow key that hashes ``src -> dst`` over each spine."""
    r = Router.shared(topo, mode="hash", seed=0)
    out: dict[str, int] = {}
    for key in range(64):
        out.setdefault(r.path(src, dst, key)[2], key)  # host, leaf, spine, leaf, host
    assert len(out) == 2, out
    return out


def test_a_queued_message_takes_its_own_hashed_path():
    """h0_0 -> h1_0 sends two messages on one connection: the first hashed over the spine nobody else
    uses (alone: 100 Gb/s), the second over the spine a long flow h0_1 -> h1_1 crosses (it starts when
    the first has left, and shares that spine's links: 50 Gb/s). Both cross four links and three
    switches, so they have the same fixed latency: the second finishes two of the first's transfer
    times after it. Had it inherited the first one's path, it would finish one transfer time after."""
    topo = leaf_spine(leaves=2, spines=2, hosts_per_leaf=2, rate_gbps=100.0, uplink_gbps=100.0)
    cfg = NetworkConfig(ecmp="hash")
    busy = _keys_by_spine(topo, "h0_1", "h1_1")["spine0"]
    mine = _keys_by_spine(topo, "h0_0", "h1_0")
    n = 200
    size = n * MTU
    b = FlowBackend(topo, cfg, seed=0)
    b.send(Message(10, "h0_1", "h1_1", 20 * size, 0, flow_key=busy))
    b.send(Message(1, "h0_0", "h1_0", size, 0, flow_key=mine["spine1"], connection=3))
    b.send(Message(2, "h0_0", "h1_0", size, 0, flow_key=mine["spine0"], connection=3))
    fin: dict[int, int] = {}
    while len(fin) < 2:
        for c in b.advance():
            fin[c.id] = c.finish_ns
    t_alone = n * (MTU + HDR) * 8 / 100.0  # ns at 100 Gb/s
    assert abs((fin[2] - fin[1]) - 2 * t_alone) <= 2, (fin, t_alone)
    assert fin[1] >= t_alone and fin[1] - t_alone < 10_000  # alone, plus a few us of latency


def test_message_and_completion_are_immutable_values():
    m = Message(1, "a", "b", 100, 5)
    assert (m.flow_key, m.connection, m.step_bytes) == (0, -1, 0)
    assert m == Message(id=1, src="a", dst="b", size_bytes=100, start_ns=5)
    assert len({m, Message(1, "a", "b", 100, 5)}) == 1
    with pytest.raises(AttributeError):
        m.size_bytes = 7  # type: ignore[misc]
    c = Completion(3, 9)
    assert (c.id, c.finish_ns) == (3, 9)
    with pytest.raises(AttributeError):
        c.finish_ns = 1  # type: ignore[misc]
    assert not math.isnan(c.finish_ns)


def test_finished_flows_are_freed_without_the_cyclic_collector():
    """A run disables the cyclic garbage collector (heterosim.api.simulate), so the engine must leave no
    reference to a finished flow and build no cycle through one: after every message of a busy hashed
    fabric has completed, no flow object is left."""
    import gc
    import random

    from conformance import run_all
    from netbackend.flow import _Flow

    topo = leaf_spine(leaves=3, spines=2, hosts_per_leaf=4, rate_gbps=100.0, uplink_gbps=100.0)
    rng = random.Random(7)
    was = gc.isenabled()
    gc.collect()  # what earlier tests left
    gc.disable()
    try:
        b = FlowBackend(topo, NetworkConfig(ecmp="hash"), seed=0)
        for mid in range(1, 81):
            s, d = rng.sample(topo.hosts, 2)
            b.send(Message(mid, s, d, rng.randint(10_000, 2_000_000), rng.choice([0, rng.randint(0, 300_000)]),
                           flow_key=mid, connection=rng.choice([-1, 0, 1])))
        assert len(run_all(b)) == 80
        assert b.counters.refills > 40  # the rates were re-filled many times (shared links)
        left = [o for o in gc.get_objects() if isinstance(o, _Flow)]
        assert not left, f"{len(left)} finished flows still referenced"
    finally:
        if was:
            gc.enable()
