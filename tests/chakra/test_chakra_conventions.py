"""ASTRA-sim's reading of what a trace leaves implicit, and the options that change it (docs/chakra.md).

Rules (github.com/astra-sim/astra-sim commit 518bd513, workload/Workload.cc): a send's missing comm_src and a
receive's missing comm_dst are the file's own rank; ``pg_name`` "" or "0" is every rank, other names are
``std::stoi`` of the name in the group file; a send completes without waiting for its receive (analytical
backend, CommonNetworkApi.cc).
"""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import yaml

pytest.importorskip("google.protobuf")

from heterosim import api  # noqa: E402
from heterosim.chakra import schema as S  # noqa: E402
from heterosim.config.loader import scenario_from_dict  # noqa: E402
from heterosim.errors import UserError  # noqa: E402

from test_chakra_errors import ROOT, error_of, node, scenario_dict, write  # noqa: E402


def prepare(folder, **workload):
    d = scenario_dict(folder)
    d["workload"].update(workload)
    return api.prepare(scenario_from_dict(d))


def coll(nid, pg, ctype=0, size=64, deps=()):
    return node(nid, "COMM_COLL_NODE", deps=deps, comm_type=ctype, comm_size=size, pg_name=pg)


def test_missing_own_end_is_the_files_rank_and_a_missing_peer_end_is_refused(tmp_path):
    send = [node(1, "COMM_SEND_NODE", comm_dst=1, comm_size=64)]
    recv = [node(1, "COMM_RECV_NODE", comm_src=0, comm_size=64)]
    prep = prepare(write(tmp_path / "ok", [send, recv]))
    assert [(o.collective, o.peer_offset) for o in prep.ir.ops_of(0)] == [("send", 1)]
    bad = [node(1, "COMM_SEND_NODE", comm_src=0, comm_size=64)]
    assert error_of(write(tmp_path / "bad", [bad, recv])).endswith("t.0.et: node[id=1].comm_dst: missing")


def test_pg_name_zero_is_every_rank_and_zero_point_zero_is_group_zero_of_the_file(tmp_path):
    """A group file with "0": [0] (one rank). pg_name "0" is still every rank (ASTRA-sim never looks "0" up);
    "0.0" is std::stoi -> group 0 of the file; under the nccl-tests reading "0" is the file's group."""
    folder = write(tmp_path / "et", [[coll(1, "0"), coll(2, "0.0", deps=[1])], [coll(1, "0")]])
    (folder / "comm_group.json").write_text('{"0": [0], "1": [0, 1]}')
    ir = prepare(folder).ir
    ops = ir.ops_of(0)
    assert ir.group_of(0, ops[0].group) == (0, 1) and ir.group_of(0, ops[1].group) == (0,)
    with pytest.raises(UserError) as exc:  # nccl-tests: names are strings; "0.0" is not in the file
        prepare(folder, chakra_convention="nccl-tests")
    assert "node[id=2].pg_name = '0.0': process group 0.0 is not in comm_group.json" in str(exc.value)


def test_group_ids_are_integers_so_two_spellings_of_one_id_are_refused(tmp_path):
    folder = write(tmp_path / "et", [[coll(1, "3")], [coll(1, "3")]])
    (folder / "comm_group.json").write_text('{"3": [0, 1], "3.0": [0, 1]}')
    assert "names the same process group as another entry" in error_of(folder)


def test_group_file_named_by_the_scenario_or_after_the_traces(tmp_path):
    """symbolic_tensor_graph writes <name>.json next to <name>.<rank>.et; any file may be named instead."""
    folder = write(tmp_path / "et", [[coll(1, "5")], [coll(1, "5")]])
    (folder / "t.json").write_text('{"5": [1, 0]}')  # declared order is kept (ring order)
    ir = prepare(folder).ir
    assert ir.group_of(0, ir.ops_of(0)[0].group) == (1, 0)
    other = tmp_path / "groups.json"
    other.write_text('{"5": [0, 1]}')
    ir = prepare(folder, chakra_comm_groups=str(other)).ir
    assert ir.group_of(0, ir.ops_of(0)[0].group) == (0, 1) and ir.meta["chakra"]["comm_groups"] == str(other)
    with pytest.raises(UserError) as exc:
        prepare(folder, chakra_comm_groups=str(tmp_path / "nope.json"))
    assert "workload.chakra_comm_groups" in str(exc.value) and "no such process-group file" in str(exc.value)


def test_eager_send_does_not_wait_for_a_late_receive(tmp_path):
    """Rank 1 computes 200 us, then receives 64 B that rank 0 sent at t = 0; rank 0 then computes 10 us.
    Eager (ASTRA-sim): rank 0's send completes when its message arrives (a few us), so rank 0 ends at about
    10 us + the send and the iteration at rank 1's 200 us; rendezvous: rank 0's send waits for rank 1's
    receive, posted at 200 us, so rank 0 ends after 210 us."""
    r0 = [node(1, "COMM_SEND_NODE", comm_dst=1, comm_size=64), node(2, "COMP_NODE", deps=[1], dur=10)]
    r1 = [node(1, "COMP_NODE", dur=200), node(2, "COMM_RECV_NODE", deps=[1], comm_src=0, comm_size=64)]
    folder = write(tmp_path / "et", [r0, r1])
    eager = api.simulate(prepare(folder), record_messages=False).summary["iteration_time_ns"]
    rdv = api.simulate(prepare(folder, chakra_sends="rendezvous"), record_messages=False).summary
    assert 200_000 <= eager < 201_000  # rank 1's compute, then a receive whose message is already there
    assert rdv["iteration_time_ns"] >= 210_000


def test_a_deadlocking_trace_is_one_line_exit_2_from_validate(tmp_path):
    """Two collectives posted in opposite orders over one group: each rank waits for the other's. ``validate``
    finds it before simulating (one line naming the node and the rank waited for, exit 2)."""
    a = [coll(1, "", ctype=0), coll(2, "", ctype=2, deps=[1])]
    b = [coll(1, "", ctype=2), coll(2, "", ctype=0, deps=[1])]
    folder = write(tmp_path / "et", [a, b])
    # (the matching check sees collective number 1 is all_reduce on rank 0, all_gather on rank 1)
    assert "is allgather here but allreduce on rank 0" in error_of(folder)
    # rank 0 sends to 1, then all-reduces; rank 1 all-reduces, then receives. Eager: the send completes on
    # arrival, both all-reduce. Rendezvous: rank 0's send waits for a receive rank 1 posts only after an
    # all-reduce rank 0 reaches only after the send: a cycle
    a = [node(1, "COMM_SEND_NODE", comm_dst=1, comm_size=64), coll(2, "", deps=[1])]
    b = [coll(1, ""), node(2, "COMM_RECV_NODE", deps=[1], comm_src=0, comm_size=64)]
    folder = write(tmp_path / "cyc", [a, b])
    assert prepare(folder).ir  # eager: the receive is posted ahead, no hang
    sc = tmp_path / "s.yaml"
    d = scenario_dict(folder)
    d["workload"]["chakra_sends"] = "rendezvous"
    sc.write_text(yaml.safe_dump(d))
    p = subprocess.run([sys.executable, "-m", "heterosim", "validate", str(sc)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"error: {folder / 't.0.et'}: node[id=1].comm_dst: the trace would deadlock: "
                               f"this send waits for rank 1, which waits at node[id=1] of {folder / 't.1.et'} "
                               f"(2 rank(s) stuck)"), p.stderr


def test_recorded_timing_warns_of_nodes_without_duration_and_compute_model_retimes_them(tmp_path):
    nodes = [node(1, "COMP_NODE", num_ops=10**12, tensor_size=10**9), node(2, "COMP_NODE", tensor_size=10**9),
             node(3, "COMP_NODE", dur=5)]
    folder = write(tmp_path / "et", [nodes, nodes])
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ir = prepare(folder).ir
    lines = [str(w.message) for w in got]
    assert len(lines) == 1 and lines[0].startswith("4 compute node(s)") and "compute_model" in lines[0]
    assert [o.duration_ns for o in ir.ops_of(0)] == [0, 0, 5000]
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ir = prepare(folder, timing="compute_model").ir
    assert not got and [o.duration_ns for o in ir.ops_of(0)] == [-1, -1, 5000]  # re-timed, roofline
    # the CLI prints it as one line
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(scenario_dict(folder)))
    p = subprocess.run([sys.executable, "-m", "heterosim", "validate", str(sc)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0 and [x for x in p.stderr.splitlines() if x.startswith("warning: 4 compute node(s)")]


def test_heterosim_exports_before_issue_39_keep_their_reading(tmp_path):
    """A file from producer heterosim without comm_size_convention: all-gather sizes are outputs and "0"
    a group of comm_group.json (what those exports meant)."""
    gm = S.GlobalMetadata(version="0.0.4", attr=[S.attr("producer", "heterosim", "string")])
    folder = write(tmp_path / "et", [[coll(1, "0", ctype=2, size=1 << 20)]] * 2, first=gm)
    (folder / "comm_group.json").write_text('{"0": [0, 1]}')
    ir = prepare(folder).ir
    assert ir.ops_of(0)[0].size_bytes == 1 << 20 and ir.meta["chakra"]["sends"] == "rendezvous"


def test_invalid_nodes_pass_dependencies_through_in_zero_time(tmp_path):
    """ASTRA-sim skips an INVALID_NODE (Workload.cc skip_invalid): 30 us, an invalid node, 20 us = 50 us."""
    nodes = [node(1, "COMP_NODE", dur=30), node(2, "INVALID_NODE", deps=[1]), node(3, "COMP_NODE", deps=[2], dur=20)]
    prep = prepare(write(tmp_path / "et", [nodes, nodes]))
    assert [o.duration_ns for o in prep.ir.ops_of(0)] == [30_000, 0, 20_000]
    assert api.simulate(prep, record_messages=False).summary["iteration_time_ns"] == 50_000


def test_comm_queue_falls_back_where_file_order_would_hang(tmp_path):
    """Rank 0: all-reduce A on group {0,1} after 50 us of compute, then all-reduce B on group {0,1} right away
    in file order... written so that rank 0's dependency order is A, B and rank 1's is B, A: one queue in that
    order hangs (each waits for the other's first), ASTRA-sim's slot would take B first on rank 0 (ready at
    once). The import falls back to one queue per process group (A and B on groups 1 and 2), with a warning."""
    r0 = [node(1, "COMP_NODE", dur=50), coll(2, "1", deps=[1]), coll(3, "2")]
    r1 = [coll(1, "2"), coll(2, "1", deps=[1])]
    folder = write(tmp_path / "et", [r0, r1])
    (folder / "comm_group.json").write_text('{"1": [0, 1], "2": [0, 1]}')
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        prep = prepare(folder)
    assert any("would hang" in str(w.message) for w in got)
    assert prep.ir.meta["chakra"]["comm_queues"] == "per process group and peer"
    assert api.simulate(prep, record_messages=False).summary["iteration_time_ns"] > 50_000
