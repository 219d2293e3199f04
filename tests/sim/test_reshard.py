"""Pipeline messages between stages of different TP degree are re-sharded across the two TP groups."""
from __future__ import annotations

from collections import Counter

import pytest

from heterosim.sim.coordinator import Coordinator, reshard_transfers
from heterosim.workload.ir import IR, Op, Program


def two_stage_ir(tp_a: int, tp_b: int, send_bytes: int, recv_bytes: int) -> IR:
    """Stage 0 (TP tp_a) sends one message to stage 1 (TP tp_b); pp groups pair tp indices."""
    send = [Op(id=0, kind="comm", name="send", stream="pp_send", collective="send", peer_offset=+1,
               size_bytes=send_bytes, tag="f0", comm_kind="pp")]
    recv = [Op(id=0, kind="comm", name="recv", stream="pp_recv", collective="recv", peer_offset=-1,
               size_bytes=recv_bytes, tag="f0", comm_kind="pp")]
    world = tp_a + tp_b
    pp = [tuple([k] + ([tp_a + k] if k < tp_b else [])) for k in range(tp_a)]
    pp += [(tp_a + k,) for k in range(tp_a, tp_b)]
    groups = {"tp": [tuple(range(tp_a)), tuple(range(tp_a, world))], "pp": pp}
    return IR(world_size=world, programs=[Program(0, send, stage=0), Program(1, recv, stage=1)],
              rank_program=[0] * tp_a + [1] * tp_b, groups=groups)


def run(fakes, tp_a, tp_b, sb, rb):
    ir = two_stage_ir(tp_a, tp_b, sb, rb)
    system = fakes["system"](ir.world_size, 1)
    for g in system.gpus:  # stage 0 on node n0, stage 1 on node n1
        g.node = "n0" if g.rank < tp_a else "n1"
        g.node_index = 0 if g.rank < tp_a else 1
    sim = Coordinator(ir, system, fakes["compute"](), fakes["backend"](), fakes["backend"](),
                      plan_collective=fakes["plan"], intra_time_ns=fakes["intra_time"]).run()
    return sim


CASES = [  # (tp_a, tp_b, send bytes per rank, recv bytes per rank, sharded)
    (8, 4, 1000, 2000, True),
    (4, 8, 2000, 1000, True),
    (8, 4, 8000, 8000, False),
    (4, 8, 8000, 8000, False),
]


@pytest.mark.parametrize("tp_a,tp_b,sb,rb,sharded", CASES)
def test_receivers_get_what_they_need(fakes, tp_a, tp_b, sb, rb, sharded):
    sim = run(fakes, tp_a, tp_b, sb, rb)
    got = Counter()
    sent = Counter()
    for m in sim.messages:
        assert m.comm_kind == "pp" and m.end_ns >= m.start_ns
        got[m.dst] += m.size_bytes
        sent[m.src] += m.size_bytes
    receivers = range(tp_a, tp_a + tp_b)
    assert set(got) == set(receivers)
    assert all(got[j] == rb for j in receivers)  # each receiver: its shard, or the whole replicated message
    if sharded:
        assert sum(got.values()) == sb * tp_a == rb * tp_b  # conserved: nothing sent twice
        assert all(sent[i] == sb for i in range(tp_a))
    else:
        assert sum(got.values()) == tp_b * rb
    # every sender shares the work (no rank idle, none sends more than a fair slice twice over)
    assert set(sent) == set(range(tp_a))
    assert sim.iteration_time_ns > 0


def test_reshard_ranges():
    # TP8 -> TP4 sharded: receiver j gets slices 2j and 2j+1
    t = reshard_transfers(tuple(range(8)), 100, (8, 9, 10, 11), 200)
    assert t == [(i, 8 + i // 2, 100) for i in range(8)]
    # TP4 -> TP8 sharded: sender i splits its slice over receivers 2i, 2i+1
    t = reshard_transfers((0, 1, 2, 3), 200, tuple(range(4, 12)), 100)
    assert t == [(i, 4 + 2 * i + k, 100) for i in range(4) for k in range(2)]
    # replicated, uneven split of 10 bytes over 4 senders: every receiver still gets all 10
    t = reshard_transfers((0, 1, 2, 3), 10, (4, 5), 10)
    assert sorted(Counter(b for _, b, n in t for _ in range(n)).values()) == [10, 10]


def test_equal_tp_keeps_rank_to_rank(fakes):
    sim = run(fakes, 4, 4, 500, 500)
    assert sorted((m.src, m.dst, m.size_bytes) for m in sim.messages) == [(k, 4 + k, 500) for k in range(4)]
