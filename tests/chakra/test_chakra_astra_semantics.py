"""Our export, read the way ASTRA-sim reads it, names the groups and sizes our simulator used.

The files are decoded here by a protobuf wire-format reader of its own, keyed to the field numbers of the
published schema (github.com/mlcommons/chakra schema/protobuf/et_def.proto, commit 21585d8f: Node id = 1,
type = 3, attr = 10; AttributeProto name = 1, int32_val = 7, int64_val = 9, string_val = 29; GlobalMetadata
attr = 2; NodeType COMM_SEND_NODE = 5, COMM_RECV_NODE = 6, COMM_COLL_NODE = 7; CollectiveCommType
ALL_GATHER = 2), not by heterosim/chakra/schema.py. Then ASTRA-sim's rules (github.com/astra-sim/astra-sim
commit 518bd513) are applied by hand:

* Workload.cc extract_comm_group: ``pg_name`` "" or "0" = every rank, else the group whose id is
  ``std::stoi(pg_name)`` in the --comm-group-configuration file (keys read with ``std::stoi``);
* Ring.cc: ALL_GATHER ``comm_size`` is each rank's input, the output is comm_size x group size; the other
  collectives' comm_size is the buffer HeteroSim's IR holds (all-reduce, reduce-scatter input, all-to-all);
* Workload.cc issue_send_comm / issue_recv_comm: a send's comm_src (default: own rank) must be the file's
  rank, a receive's comm_dst too.
"""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("google.protobuf")

from heterosim import api  # noqa: E402
from heterosim.chakra import export_chakra  # noqa: E402

from test_chakra_roundtrip import QUICKSTART  # noqa: E402


# ---- an independent reader of the wire format (varints and length-delimited fields only)
def varint(buf: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, i
        shift += 7


def fields(msg: bytes):
    """(field number, wire type, value) of each field: ints for varints, bytes for length-delimited."""
    i = 0
    while i < len(msg):
        key, i = varint(msg, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(msg, i)
        elif wire == 2:
            n, i = varint(msg, i)
            v, i = msg[i:i + n], i + n
        elif wire == 1:
            v, i = msg[i:i + 8], i + 8
        elif wire == 5:
            v, i = msg[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, v


def frames(data: bytes):
    i = 0
    while i < len(data):
        n, i = varint(data, i)
        yield data[i:i + n]
        i += n


def attribute(msg: bytes):
    name, val = None, None
    for num, wire, v in fields(msg):
        if num == 1:
            name = v.decode()
        elif num in (7, 9) and wire == 0:  # int32_val, int64_val (non-negative here)
            val = v
        elif num == 29:  # string_val
            val = v.decode()
    return name, val


def decode(path):
    """(GlobalMetadata attrs, [(node id, node type, {attr: value})])."""
    it = frames(path.read_bytes())
    meta = dict(attribute(v) for num, _, v in fields(next(it)) if num == 2)
    nodes = []
    for payload in it:
        nid, ntype, attrs = 0, 0, {}
        for num, _, v in fields(payload):
            if num == 1:
                nid = v
            elif num == 3:
                ntype = v
            elif num == 10:
                k, val = attribute(v)
                attrs[k] = val
        nodes.append((nid, ntype, attrs))
    return meta, nodes


def stoi(s: str) -> int:
    return int(re.match(r"\s*([+-]?\d+)", s).group(1))


def astra_group(pg: str | None, groups: dict[int, list[int]], world: int) -> list[int]:
    if pg in (None, "", "0"):
        return list(range(world))
    return groups[stoi(pg)]


@pytest.fixture(scope="module")
def quickstart_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("qs") / "et"
    sc = api.load(QUICKSTART)
    prep = api.prepare(sc)
    export_chakra(sc, out)
    return sc, prep, out


def test_quickstart_export_read_by_astra_sim_rules_names_our_groups_and_sizes(quickstart_export):
    sc, prep, out = quickstart_export
    ir, world = prep.ir, prep.system.num_gpus
    groups = {stoi(k): v for k, v in json.loads((out / "comm_group.json").read_text()).items()}
    assert 0 not in groups  # "0" would be every rank to ASTRA-sim
    checked = {"coll": 0, "allgather": 0, "send": 0, "recv": 0}
    ag_factor = set()
    for r in range(world):
        meta, nodes = decode(out / f"{sc.name}.{r}.et")
        assert meta["comm_size_convention"] == "astra-sim" and meta["rank"] == r
        ops = ir.ops_of(r)
        for nid, ntype, a in nodes:
            op = ops[nid]  # quickstart has no re-sharded transfers: node id = IR op id
            if ntype == 7:  # COMM_COLL_NODE
                members = astra_group(a.get("pg_name"), groups, world)
                assert tuple(members) == ir.group_of(r, op.group) and r in members
                n = len(members)
                if a["comm_type"] == 2:  # ALL_GATHER: each rank's input
                    assert a["comm_size"] * n == op.size_bytes
                    ag_factor.add((op.group, n))
                    checked["allgather"] += 1
                else:
                    assert a["comm_size"] == op.size_bytes
                checked["coll"] += 1
            elif ntype in (5, 6):
                own, peer = ("comm_src", "comm_dst") if ntype == 5 else ("comm_dst", "comm_src")
                assert a.get(own, r) == r and a[peer] == ir.peer_of(r, op.peer_offset)
                assert a["comm_size"] == op.size_bytes
                checked["send" if ntype == 5 else "recv"] += 1
    assert all(checked.values()), checked
    # the quickstart's all-gathers: over TP (2 ranks) and DP (4 ranks): 2x and 4x smaller than the IR's
    assert ag_factor == {("tp", 2), ("dp", 4)}, ag_factor


def test_our_reading_of_our_export_keeps_the_sizes(quickstart_export):
    """HeteroSim's importer reads the same files back to the IR's sizes and groups (the round trip tests
    time it; here the all-gather sizes and group sizes only)."""
    sc, prep, out = quickstart_export
    from heterosim.config.loader import scenario_from_dict

    data = {k: v for k, v in sc.model_dump().items() if k not in ("model", "parallelism")}
    data["workload"] = {"chakra": str(out)}
    back = api.prepare(scenario_from_dict(data)).ir
    for r in (0, 5, 15):
        a = [(o.collective, o.size_bytes, len(prep.ir.group_of(r, o.group))) for o in prep.ir.ops_of(r)
             if o.kind == "comm" and o.collective not in ("send", "recv")]
        b = [(o.collective, o.size_bytes, len(back.group_of(r, o.group))) for o in back.ops_of(r)
             if o.kind == "comm" and o.collective not in ("send", "recv")]
        assert a == b
