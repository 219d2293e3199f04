"""Malformed Chakra ET files: one line naming the file, the node and the field; exit 2; nothing written."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("google.protobuf")

from heterosim import api  # noqa: E402
from heterosim.chakra import schema as S  # noqa: E402
from heterosim.config.loader import scenario_from_dict  # noqa: E402
from heterosim.errors import UserError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def node(nid, ntype, deps=(), ctrl=(), dur=0, **attrs):
    kinds = {int: "int64", str: "string", bool: "bool"}
    a = [S.attr(k, v, "int32" if k in ("comm_src", "comm_dst", "comm_tag") else kinds[type(v)])
         for k, v in attrs.items()]
    return S.Node(id=nid, name=f"n{nid}", type=S.NODE_TYPES[ntype], data_deps=list(deps), ctrl_deps=list(ctrl),
                  duration_micros=dur, attr=a)


def good_nodes():
    """Both ranks: compute, then an all-reduce of 1 MiB over both."""
    return [node(1, "COMP_NODE", dur=10), node(2, "COMM_COLL_NODE", deps=[1], comm_type=0, comm_size=1 << 20)]


def write(folder: Path, per_rank: list[list], first=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, nodes in enumerate(per_rank):
        with open(folder / f"t.{r}.et", "wb") as fh:
            S.write_message(fh, first if first is not None else S.GlobalMetadata(version="0.0.4"))
            for n in nodes:
                S.write_message(fh, n)
    return folder


def scenario_dict(folder: Path) -> dict:
    return {"name": "bad", "workload": {"chakra": str(folder)}, "training": {"global_batch_size": 1},
            "cluster": {"groups": [{"name": "gh", "node_type": "gh200", "num_nodes": 2,
                                    "overrides": {"gpus_per_node": 1}}]}}


def error_of(folder: Path) -> str:
    with pytest.raises(UserError) as exc:
        api.prepare(scenario_from_dict(scenario_dict(folder)))
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_a_good_trace_prepares(tmp_path):
    prep = api.prepare(scenario_from_dict(scenario_dict(write(tmp_path / "et", [good_nodes(), good_nodes()]))))
    assert [o.collective for o in prep.ir.ops_of(1)] == ["", "allreduce"]


def test_a_gzipped_trace_is_read_decompressed(tmp_path):
    """Traces are often shipped gzipped (under their .et name); they used to fail as "truncated"."""
    import gzip

    folder = write(tmp_path / "et", [good_nodes(), good_nodes()])
    plain = api.prepare(scenario_from_dict(scenario_dict(folder))).ir
    f = folder / "t.1.et"
    f.write_bytes(gzip.compress(f.read_bytes()))
    zipped = api.prepare(scenario_from_dict(scenario_dict(folder))).ir
    assert [(o.kind, o.collective, o.size_bytes) for o in zipped.ops_of(1)] == \
        [(o.kind, o.collective, o.size_bytes) for o in plain.ops_of(1)]
    f.write_bytes(gzip.compress(b"x" * 100)[:-8])  # gzip that does not decompress: one line naming the file
    msg = error_of(folder)
    assert msg.startswith(str(f)) and "gzip" in msg


def test_truncated_file_names_the_node(tmp_path):
    folder = write(tmp_path / "et", [good_nodes(), good_nodes()])
    f = folder / "t.1.et"
    f.write_bytes(f.read_bytes()[:-3])
    msg = error_of(folder)
    assert msg.startswith(f"{f}: node[id=2]") and "truncated" in msg


def test_file_cut_inside_a_length_prefix(tmp_path):
    folder = write(tmp_path / "et", [good_nodes(), good_nodes()])
    f = folder / "t.0.et"
    f.write_bytes(f.read_bytes() + b"\x85")  # a length varint whose continuation byte never comes
    assert "truncated" in error_of(folder) and str(f) in error_of(folder)


def test_wrong_first_message(tmp_path):
    folder = write(tmp_path / "et", [good_nodes(), good_nodes()], first=node(0, "COMP_NODE", dur=3))
    msg = error_of(folder)
    assert msg.startswith(f"{folder / 't.0.et'}: GlobalMetadata") and "wrong message" in msg


def test_wrong_message_among_nodes(tmp_path):
    folder = write(tmp_path / "et", [good_nodes() + [S.GlobalMetadata(version="0.0.4")], good_nodes()])
    msg = error_of(folder)
    assert msg.startswith(f"{folder / 't.0.et'}: node[after id=2]") and "not a Chakra Node" in msg


def test_dependency_on_a_missing_node(tmp_path):
    bad = [node(1, "COMP_NODE", dur=10), node(2, "COMM_COLL_NODE", deps=[7], comm_type=0, comm_size=64)]
    msg = error_of(write(tmp_path / "et", [good_nodes(), bad]))
    assert msg == f"{tmp_path / 'et' / 't.1.et'}: node[id=2].data_deps = 7: no node 7 in this file"


def test_cycle(tmp_path):
    bad = [node(1, "COMP_NODE", deps=[3], dur=10), node(2, "COMP_NODE", deps=[1], dur=1),
           node(3, "COMP_NODE", ctrl=[2], dur=1)]
    msg = error_of(write(tmp_path / "et", [bad, good_nodes()]))
    assert msg.startswith(f"{tmp_path / 'et' / 't.0.et'}: node[id=1].data_deps = 3: dependency cycle 1 -> 3 -> 2 -> 1")


@pytest.mark.parametrize("ctype, why", [(42, "unknown collective"), (S.COLLECTIVE_TYPES["GATHER"], "GATHER"),
                                        (S.COLLECTIVE_TYPES["BARRIER"], "BARRIER")])
def test_unknown_or_unmodelled_collective(tmp_path, ctype, why):
    bad = [node(1, "COMP_NODE", dur=10), node(2, "COMM_COLL_NODE", deps=[1], comm_type=ctype, comm_size=64)]
    msg = error_of(write(tmp_path / "et", [good_nodes(), bad]))
    assert msg.startswith(f"{tmp_path / 'et' / 't.1.et'}: node[id=2].comm_type = {ctype}: ") and why in msg


def test_missing_comm_size_and_unknown_node_type(tmp_path):
    bad = [node(1, "COMM_COLL_NODE", comm_type=0)]
    assert "node[id=1].comm_size: missing" in error_of(write(tmp_path / "a", [good_nodes(), bad]))
    bad = [node(5, "MEM_LOAD_NODE")]
    assert "node[id=5].type = 2: node type MEM_LOAD_NODE is not modelled" in error_of(
        write(tmp_path / "b", [good_nodes(), bad]))


def test_send_without_receive(tmp_path):
    send = [node(1, "COMM_SEND_NODE", comm_src=0, comm_dst=1, comm_size=64)]
    msg = error_of(write(tmp_path / "et", [send, [node(1, "COMP_NODE", dur=1)]]))
    assert msg.startswith(f"{tmp_path / 'et' / 't.0.et'}: node[id=1].comm_dst = 1: send number 1")


def test_rank_count_must_match_the_cluster(tmp_path):
    folder = write(tmp_path / "et", [good_nodes()] * 3)
    assert "workload.chakra" in error_of(folder) and "3 ET files (ranks) but the cluster has 2 GPUs" in error_of(folder)


def test_cli_exit_2_one_line_nothing_written(tmp_path):
    folder = write(tmp_path / "et", [good_nodes(), [node(1, "COMP_NODE", deps=[9], dur=1)]])
    import yaml

    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(scenario_dict(folder)))
    out = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "heterosim", "run", str(sc), "--out", str(out), "-q"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == f"error: {folder / 't.1.et'}: node[id=1].data_deps = 9: no node 9 in this file"
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["et", "s.yaml"]


def test_export_refuses_a_foreign_folder(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    p = subprocess.run([sys.executable, "-m", "heterosim", "export-chakra", str(ROOT / "scenarios" / "quickstart.yaml"),
                        "--out", str(foreign)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--out" in p.stderr
    assert [x.name for x in foreign.iterdir()] == ["notes.txt"]


def test_collective_without_counterpart(tmp_path):
    extra = good_nodes() + [node(3, "COMM_COLL_NODE", deps=[2], comm_type=2, comm_size=64)]
    msg = error_of(write(tmp_path / "et", [good_nodes(), extra]))
    assert msg.startswith(f"{tmp_path / 'et' / 't.1.et'}: node[id=3].pg_name = '': collective number 2 on process "
                          f"group world has no counterpart on rank 0")


def test_retimed_node_the_compute_model_cannot_time(tmp_path):
    bad = [node(1, "COMP_NODE", dur=10, num_ops=10**9, op_class="quantum"),
           node(2, "COMM_COLL_NODE", deps=[1], comm_type=0, comm_size=1 << 20)]
    folder = write(tmp_path / "et", [good_nodes(), bad])
    d = scenario_dict(folder)
    d["workload"]["timing"] = "compute_model"
    with pytest.raises(UserError) as exc:
        api.prepare(scenario_from_dict(d))
    assert str(exc.value).startswith(f"{folder / 't.1.et'}: node[id=1].op_class = 'quantum': the compute model "
                                     f"cannot time it")
    d["workload"]["timing"] = "recorded"  # recorded durations need no compute model
    assert api.prepare(scenario_from_dict(d)).ir.ops_of(1)[0].duration_ns == 10_000


def test_send_and_receive_with_different_tags(tmp_path):
    send = [node(1, "COMM_SEND_NODE", comm_src=0, comm_dst=1, comm_size=64, comm_tag=3)]
    recv = [node(1, "COMM_RECV_NODE", comm_src=0, comm_dst=1, comm_size=64, comm_tag=4)]
    msg = error_of(write(tmp_path / "et", [send, recv]))
    assert msg.startswith(f"{tmp_path / 'et' / 't.0.et'}: node[id=1].comm_dst = 1: send number 1 from rank 0 to "
                          f"rank 1 with comm_tag 3 and comm_size 64 has no matching receive")


def test_cpu_ops_run_beside_the_gpu_stream_and_metadata_nodes_take_no_time(tmp_path):
    """A 100 us CPU op and a 50 us then 30 us GPU chain (through a metadata node) overlap: 100 us in all;
    on one stream they would take 180 us. The metadata node holds up nothing (ASTRA-sim finishes it once its
    dependencies are done): a stream of its own."""
    nodes = [node(1, "COMP_NODE", dur=100, is_cpu_op=True), node(2, "COMP_NODE", dur=50),
             node(3, "METADATA_NODE", deps=[2]), node(4, "COMP_NODE", deps=[3], dur=30)]
    prep = api.prepare(scenario_from_dict(scenario_dict(write(tmp_path / "et", [nodes, nodes]))))
    assert [o.stream for o in prep.ir.ops_of(0)] == ["cpu", "compute", "meta:3", "compute"]
    assert api.simulate(prep, record_messages=False).summary["iteration_time_ns"] == 100_000


def test_comm_group_file_checked(tmp_path):
    coll = [node(1, "COMM_COLL_NODE", comm_type=0, comm_size=64, pg_name="7")]
    folder = write(tmp_path / "et", [coll, coll])
    (folder / "comm_group.json").write_text('{"7": [0, 5]}')
    assert error_of(folder) == f"{folder / 'comm_group.json'}: 7 = [0, 5]: must be a non-empty list of distinct " \
                               f"ranks in [0, 1]"
    (folder / "comm_group.json").write_text('{"3": [0, 1]}')
    assert error_of(folder) == f"{folder / 't.0.et'}: node[id=1].pg_name = '7': process group 7 is not in " \
                               f"comm_group.json"
    (folder / "comm_group.json").write_text('{"7": [0, 1]}')
    prep = api.prepare(scenario_from_dict(scenario_dict(folder)))
    assert prep.ir.groups["pg_7"] == [(0, 1)] and prep.ir.ops_of(0)[0].group == "pg_7"
