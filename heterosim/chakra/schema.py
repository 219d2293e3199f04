"""The Chakra ET messages, built from descriptors at import time, and the file framing.

Why descriptors at import time, not a protoc-generated ``_pb2``: protoc is not needed on any machine,
and generated modules refuse protobuf runtimes older than the protoc that made them; descriptors built
here work with every protobuf release since 4.22 (``GetMessageClass``; older ones through
``MessageFactory.GetPrototype``). The table
below is the same schema as ``et_def.proto`` next to this file (the published Chakra schema's field
numbers and types, source cited there); ``tests/chakra/test_schema.py`` checks the two agree.

File framing (Chakra's protolib): each message is preceded by its byte length as a base-128 varint;
the first message is a ``GlobalMetadata``, the rest are ``Node`` messages.
"""
from __future__ import annotations

from typing import BinaryIO, Iterator

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:  # the optional extra: say how to get it, in one line
    from heterosim.errors import UserError

    raise UserError("Chakra traces need the protobuf package: pip install 'heterosim[chakra]'",
                    field="workload.chakra / export-chakra") from None

PACKAGE = "ChakraProtoMsg"
SCHEMA_VERSION = "0.0.4"
"""The ``GlobalMetadata.version`` HeteroSim writes: the version string of the Chakra examples ASTRA-sim
ships (tests/rt_template and the tutorials write ``GlobalMetadata(version="0.0.4")``)."""

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _F.TYPE_DOUBLE, "float": _F.TYPE_FLOAT, "int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32, "uint64": _F.TYPE_UINT64, "sint32": _F.TYPE_SINT32, "sint64": _F.TYPE_SINT64,
    "fixed32": _F.TYPE_FIXED32, "fixed64": _F.TYPE_FIXED64, "sfixed32": _F.TYPE_SFIXED32,
    "sfixed64": _F.TYPE_SFIXED64, "bool": _F.TYPE_BOOL, "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES,
}
_LIST_NAMES = {"double": "DoubleList", "float": "FloatList", "int32": "Int32List", "int64": "Int64List",
               "uint32": "Uint32List", "uint64": "Uint64List", "sint32": "Sint32List", "sint64": "Sint64List",
               "fixed32": "Fixed32List", "fixed64": "Fixed64List", "sfixed32": "Sfixed32List",
               "sfixed64": "Sfixed64List", "bool": "BoolList", "string": "StringList", "bytes": "BytesList"}
_ATTR_ORDER = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
               "sfixed32", "sfixed64", "bool", "string", "bytes")
"""AttributeProto's oneof: ``<type>_val`` = 3 + 2i, ``<type>_list`` = 4 + 2i, in this order."""

NODE_TYPES = {"INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3, "COMP_NODE": 4,
              "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7, "STORAGE_NODE": 8, "BATCH_NODE": 9,
              "CHECKPOINT_NODE": 10}
COLLECTIVE_TYPES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
                    "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9}

# message name -> [(field name, number, type or message name, repeated?)]
MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    "AttributeProto": [("name", 1, "string", False), ("doc_string", 2, "string", False)]
    + [f for i, t in enumerate(_ATTR_ORDER)
       for f in ((f"{t}_val", 3 + 2 * i, t, False), (f"{t}_list", 4 + 2 * i, _LIST_NAMES[t], False))],
    **{_LIST_NAMES[t]: [("values", 1, t, True)] for t in _ATTR_ORDER},
    "GlobalMetadata": [("version", 1, "string", False), ("attr", 2, "AttributeProto", True)],
    "Node": [("id", 1, "uint64", False), ("name", 2, "string", False), ("type", 3, "NodeType", False),
             ("ctrl_deps", 4, "uint64", True), ("data_deps", 5, "uint64", True),
             ("start_time_micros", 6, "uint64", False), ("duration_micros", 7, "uint64", False),
             ("inputs", 8, "IOInfo", False), ("outputs", 9, "IOInfo", False), ("attr", 10, "AttributeProto", True)],
    "IOInfo": [("values", 1, "string", False), ("shapes", 2, "string", False), ("types", 3, "string", False)],
}
ENUMS = {"NodeType": NODE_TYPES, "CollectiveCommType": COLLECTIVE_TYPES}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="heterosim/chakra/et_def.proto", package=PACKAGE, syntax="proto3")
    for name, values in ENUMS.items():
        e = fd.enum_type.add(name=name)
        for vname, num in values.items():
            e.value.add(name=vname, number=num)
    for name, fields in MESSAGES.items():
        m = fd.message_type.add(name=name)
        if name == "AttributeProto":
            m.oneof_decl.add(name="value")
        for fname, num, ftype, repeated in fields:
            f = m.field.add(name=fname, number=num,
                            label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if ftype in _SCALARS:
                f.type = _SCALARS[ftype]
            elif ftype in ENUMS:
                f.type, f.type_name = _F.TYPE_ENUM, f".{PACKAGE}.{ftype}"
            else:
                f.type, f.type_name = _F.TYPE_MESSAGE, f".{PACKAGE}.{ftype}"
            if name == "AttributeProto" and num >= 3:
                f.oneof_index = 0
    return fd


_POOL = descriptor_pool.DescriptorPool()
_FILE = _POOL.Add(_file_descriptor())
_get_class = getattr(message_factory, "GetMessageClass", None) or message_factory.MessageFactory(_POOL).GetPrototype
_classes = {name: _get_class(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}")) for name in MESSAGES}
GlobalMetadata = _classes["GlobalMetadata"]
Node = _classes["Node"]
AttributeProto = _classes["AttributeProto"]
IOInfo = _classes["IOInfo"]
LIST_CLASSES = {t: _classes[_LIST_NAMES[t]] for t in _ATTR_ORDER}


def attr(name: str, value, kind: str) -> "AttributeProto":
    """One attribute: ``kind`` is a scalar type (``int64``) or a list (``int64_list``)."""
    if kind.endswith("_list"):
        return AttributeProto(name=name, **{kind: LIST_CLASSES[kind[:-5]](values=list(value))})
    return AttributeProto(name=name, **{f"{kind}_val": value})


def attr_value(a: "AttributeProto"):
    """The attribute's value (a list for ``*_list`` kinds), or None when it holds none."""
    which = a.WhichOneof("value")
    if which is None:
        return None
    v = getattr(a, which)
    return list(v.values) if which.endswith("_list") else v


# ------------------------------------------------------------------ framing
def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def write_message(fh: BinaryIO, msg) -> None:
    data = msg.SerializeToString()
    fh.write(encode_varint(len(data)))
    fh.write(data)


class FramingError(ValueError):
    """The byte stream is not a sequence of length-prefixed messages (``offset`` = where it broke)."""

    def __init__(self, reason: str, offset: int, index: int, partial: bytes = b""):
        super().__init__(reason)
        self.offset, self.index, self.partial = offset, index, partial


def iter_frames(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of each length-prefixed message; raises FramingError on a truncated stream."""
    pos, n, index = 0, len(data), 0
    while pos < n:
        start, length, shift = pos, 0, 0
        while True:
            if pos >= n:
                raise FramingError("truncated: the file ends inside a length prefix", start, index)
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise FramingError("corrupt length prefix (varint longer than 10 bytes)", start, index)
        if pos + length > n:
            raise FramingError(f"truncated: message {index} declares {length} bytes, {n - pos} remain", start, index,
                               data[pos:])
        yield start, data[pos:pos + length]
        pos += length
        index += 1


def peek_node_id(partial: bytes) -> int | None:
    """The id of a (possibly truncated) encoded Node: field 1 is written first by every encoder we know."""
    if not partial or partial[0] != 0x08:
        return None
    val, shift = 0, 0
    for b in partial[1:11]:
        val |= (b & 0x7F) << shift
        if not b & 0x80:
            return val
        shift += 7
    return None
