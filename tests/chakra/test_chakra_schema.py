"""Our Chakra ET messages against the published schema, and a golden file assembled byte by byte.

The golden bytes are built here from the published ``et_def.proto`` field numbers and protobuf's wire
format (tag = field number << 3 | wire type; varints; length-delimited strings, messages and packed
repeated fields), not with our message classes, so a wrong field number or type in heterosim/chakra fails.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("google.protobuf")

from heterosim.chakra import schema as S  # noqa: E402
from heterosim.chakra.importer import read_et_file  # noqa: E402

PROTO = Path(S.__file__).with_name("et_def.proto")


# ---- an independent protobuf wire-format writer (only what the golden file needs)
def varint(n: int) -> bytes:
    out = b""
    while n > 0x7F:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def f_varint(field: int, n: int) -> bytes:
    return key(field, 0) + varint(n)


def f_bytes(field: int, payload: bytes) -> bytes:
    return key(field, 2) + varint(len(payload)) + payload


def f_str(field: int, s: str) -> bytes:
    return f_bytes(field, s.encode())


def f_packed(field: int, values) -> bytes:
    return f_bytes(field, b"".join(varint(v) for v in values))


def frame(msg: bytes) -> bytes:
    return varint(len(msg)) + msg


# published et_def.proto: AttributeProto name = 1, int32_val = 7, int64_val = 9, uint64_val = 13,
# bool_val = 27, string_val = 29; Node id = 1, name = 2, type = 3, ctrl_deps = 4, data_deps = 5,
# duration_micros = 7, attr = 10; GlobalMetadata version = 1; NodeType COMP_NODE = 4,
# COMM_SEND_NODE = 5, COMM_RECV_NODE = 6, COMM_COLL_NODE = 7; CollectiveCommType ALL_GATHER = 2.
def a_int64(name, v):
    return f_bytes(10, f_str(1, name) + f_varint(9, v))


def a_int32(name, v):
    return f_bytes(10, f_str(1, name) + f_varint(7, v))


def a_str(name, v):
    return f_bytes(10, f_str(1, name) + f_str(29, v))


def a_bool(name, v):
    return f_bytes(10, f_str(1, name) + f_varint(27, int(v)))


def golden_rank0() -> bytes:
    meta = f_str(1, "0.0.4")
    comp = (f_varint(1, 10) + f_str(2, "fwd_gemm") + f_varint(3, 4) + f_varint(7, 120)
            + a_bool("is_cpu_op", False) + a_int64("num_ops", 2 * 4096 ** 3) + f_bytes(10, f_str(1, "tensor_size")
                                                                                 + f_varint(13, 3 * 2 * 4096 ** 2)))
    send = (f_varint(1, 11) + f_str(2, "send_act") + f_varint(3, 5) + f_packed(5, [10])
            + a_int32("comm_src", 0) + a_int32("comm_dst", 1) + a_int32("comm_tag", 7) + a_int64("comm_size", 1 << 20))
    coll = (f_varint(1, 12) + f_str(2, "allgather") + f_varint(3, 7) + f_packed(4, [11])
            + a_int64("comm_type", 2) + a_int64("comm_size", 8 << 20) + a_str("pg_name", "0"))
    return frame(meta) + frame(comp) + frame(send) + frame(coll)


def golden_rank1() -> bytes:
    meta = f_str(1, "0.0.4")
    recv = (f_varint(1, 3) + f_str(2, "recv_act") + f_varint(3, 6)
            + a_int32("comm_src", 0) + a_int32("comm_dst", 1) + a_int32("comm_tag", 7) + a_int64("comm_size", 1 << 20))
    comp = f_varint(1, 4) + f_str(2, "bwd") + f_varint(3, 4) + f_packed(5, [3]) + f_varint(7, 50)
    coll = (f_varint(1, 5) + f_str(2, "allgather") + f_varint(3, 7) + f_packed(5, [4])
            + a_int64("comm_type", 2) + a_int64("comm_size", 8 << 20) + a_str("pg_name", "0"))
    return frame(meta) + frame(recv) + frame(comp) + frame(coll)


def write_golden(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "golden.0.et").write_bytes(golden_rank0())
    (folder / "golden.1.et").write_bytes(golden_rank1())
    return folder


def test_golden_file_decodes_to_the_expected_nodes(tmp_path):
    tr = read_et_file(write_golden(tmp_path) / "golden.0.et", 0)
    assert tr.meta["version"] == "0.0.4"
    got = [(n.id, n.name, n.type, list(n.ctrl_deps), list(n.data_deps), n.duration_micros, n.attrs)
           for n in tr.nodes]
    assert got == [
        (10, "fwd_gemm", 4, [], [], 120, {"is_cpu_op": False, "num_ops": 2 * 4096 ** 3,
                                          "tensor_size": 3 * 2 * 4096 ** 2}),
        (11, "send_act", 5, [], [10], 0, {"comm_src": 0, "comm_dst": 1, "comm_tag": 7, "comm_size": 1 << 20}),
        (12, "allgather", 7, [11], [], 0, {"comm_type": 2, "comm_size": 8 << 20, "pg_name": "0"}),
    ]


def test_our_encoder_writes_the_golden_bytes(tmp_path):
    """The same nodes written with our message classes give the hand-assembled bytes exactly."""
    import io

    buf = io.BytesIO()
    S.write_message(buf, S.GlobalMetadata(version="0.0.4"))
    S.write_message(buf, S.Node(id=3, name="recv_act", type=S.NODE_TYPES["COMM_RECV_NODE"], attr=[
        S.attr("comm_src", 0, "int32"), S.attr("comm_dst", 1, "int32"), S.attr("comm_tag", 7, "int32"),
        S.attr("comm_size", 1 << 20, "int64")]))
    S.write_message(buf, S.Node(id=4, name="bwd", type=S.NODE_TYPES["COMP_NODE"], data_deps=[3], duration_micros=50))
    S.write_message(buf, S.Node(id=5, name="allgather", type=S.NODE_TYPES["COMM_COLL_NODE"], data_deps=[4], attr=[
        S.attr("comm_type", S.COLLECTIVE_TYPES["ALL_GATHER"], "int64"), S.attr("comm_size", 8 << 20, "int64"),
        S.attr("pg_name", "0", "string")]))
    assert buf.getvalue() == golden_rank1()


def _proto_fields(text: str) -> dict[str, dict[str, tuple[int, str, bool]]]:
    """message -> field -> (number, type, repeated), read from the .proto text."""
    out: dict[str, dict] = {}
    for m in re.finditer(r"message (\w+) \{(.*?)\n?\}\n", text, re.S):
        body = re.sub(r"oneof \w+ \{", "", m[2])
        out[m[1]] = {f[3]: (int(f[4]), f[2], bool(f[1]))
                     for f in re.finditer(r"(repeated )?(\w+) (\w+) = (\d+);", body)}
    return out


def _proto_enums(text: str) -> dict[str, dict[str, int]]:
    return {m[1]: {v[1]: int(v[2]) for v in re.finditer(r"(\w+) = (\d+);", m[2])}
            for m in re.finditer(r"enum (\w+) \{(.*?)\}", text, re.S)}


def test_descriptors_match_the_shipped_proto():
    text = PROTO.read_text()
    fields = _proto_fields(text)
    assert set(fields) == set(S.MESSAGES)
    for msg, flist in S.MESSAGES.items():
        assert {f[0]: (f[1], f[2], f[3]) for f in flist} == fields[msg], msg
    assert _proto_enums(text) == S.ENUMS


def test_published_numbers_of_the_fields_we_rely_on():
    """Spot values from the published schema (mlcommons/chakra schema/protobuf/et_def.proto)."""
    node = S.Node.DESCRIPTOR.fields_by_name
    assert [node[n].number for n in ("id", "name", "type", "ctrl_deps", "data_deps", "start_time_micros",
                                     "duration_micros", "inputs", "outputs", "attr")] == list(range(1, 11))
    at = S.AttributeProto.DESCRIPTOR.fields_by_name
    assert (at["int64_val"].number, at["bool_val"].number, at["string_val"].number, at["bytes_list"].number) == \
        (9, 27, 29, 32)
    assert S.COLLECTIVE_TYPES["REDUCE_SCATTER"] == 7 and S.NODE_TYPES["COMM_COLL_NODE"] == 7
