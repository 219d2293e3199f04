"""A directory of Chakra ET files -> our per-rank IR (``workload: {chakra: DIR}``).

Files are ``<prefix>.<rank>.et`` (ASTRA-sim's naming), ranks 0..N-1, N = the cluster's GPU count. Each file
is decoded and checked (truncation, wrong message, unknown node type or collective, a dependency on a
missing node, a cycle): a problem is one line naming the file, the node id and the field.

What each node becomes:

* ``COMP_NODE``: a compute op that takes its recorded ``duration_micros`` (``timing: recorded``), or is
  re-timed by our compute model on the scenario's GPU (``timing: compute_model``) when it carries kernels
  (``kernel_*`` attributes, as HeteroSim exports) or ``num_ops``/``tensor_size`` (a roofline op of class
  ``op_class``, default ``layer``: the efficiencies fitted for a layer's mix of kernels); without either it
  keeps its recorded duration. ``is_cpu_op: true``
  nodes run on their own ``cpu`` stream (next to the GPU's, not on it);
* ``COMM_COLL_NODE``: a collective over the ranks of its ``pg_name`` (all ranks when it has none), timed by
  our comm planner and the network backend; ``REDUCE_SCATTER_BLOCK`` is a reduce-scatter (equal blocks);
  ``GATHER``, ``SCATTER`` and ``BARRIER`` are not modelled and are refused;
* ``COMM_SEND_NODE``/``COMM_RECV_NODE``: a point-to-point transfer between ``comm_src`` and ``comm_dst``;
* ``METADATA_NODE``: a zero-time marker (dependencies pass through it);
* nodes tagged ``ir_op`` (HeteroSim's export of a pipeline send between TP groups of different size): the
  pieces of one op are merged back into it, so the coordinator re-shards the message as it did originally.

Order: nodes run when their ``data_deps`` and ``ctrl_deps`` are done; ops of one stream run one at a time
in dependency order (a topological order, ties by position in the file). The stream is the node's
``stream`` attribute (HeteroSim's export) or: GPU compute on one stream, collectives on one stream per
process group (NCCL serialises a communicator's operations), sends and receives on one stream per peer.

Process groups: ``comm_group.json`` in DIR (``{pg_name: [ranks]}``, ASTRA-sim's comm-group format) when
present, else the ranks whose files name the group. Groups become IR dimensions through the ``pg_dims``
metadata HeteroSim exports (``tp``, ``dp``... so tensor-parallel ranks run as one lane again); a group of
another producer is a dimension of its own. Collectives match across ranks by their order on the group;
sends and receives by (peer, ``comm_tag``) and order.
"""
from __future__ import annotations

import heapq
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from heterosim.chakra import schema as S
from heterosim.chakra.export import COMM_GROUP_FILE
from heterosim.errors import ConfigError, UserError
from heterosim.workload.ir import IR, PHASES, Op, Program

CHAKRA_TO_COLLECTIVE = {"ALL_REDUCE": "allreduce", "REDUCE": "reduce", "ALL_GATHER": "allgather",
                        "BROADCAST": "broadcast", "ALL_TO_ALL": "alltoall", "REDUCE_SCATTER": "reducescatter",
                        "REDUCE_SCATTER_BLOCK": "reducescatter"}
_COLL_NAME = {v: k for k, v in S.COLLECTIVE_TYPES.items()}
_TYPE_NAME = {v: k for k, v in S.NODE_TYPES.items()}
_ET_NAME = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")
_KINDS = ("tp", "cp", "pp", "dp", "ep")
_NODE_FIELDS = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
"""Node field numbers of the published schema (11 = storage info of newer versions, not read)."""


class TraceError(ConfigError):
    """A Chakra ET file that cannot be replayed."""


class NodeInfo(NamedTuple):
    """What HeteroSim reads of one Node (decoded once per distinct encoding, shared by ranks)."""

    id: int
    name: str
    type: int
    ctrl_deps: tuple[int, ...]
    data_deps: tuple[int, ...]
    duration_micros: int
    attrs: dict[str, Any]


@dataclass
class RankTrace:
    rank: int
    file: str
    meta: dict[str, Any]
    nodes: list[NodeInfo]
    """In file order; ranks doing the same work repeat nodes byte for byte, and share one NodeInfo."""


@dataclass
class _Comm:
    """One communication node of a rank, before groups are resolved."""

    node_id: int
    kind: str  # coll | send | recv
    collective: str
    size: int
    pg: str | None
    peer: int = -1
    ctag: int = 0
    me: int = -1
    """For a send or receive: the end that must be this file's rank (comm_src of a send, comm_dst of a receive)."""
    lane_op: int = -1
    """kind ``lane``: the IR op this node is a piece of (``ir_op``: a pipeline send/recv between TP groups of
    different size, written by HeteroSim as one node per transfer); its pieces become that one op again."""


def _unknown_fields(msg) -> list[tuple[int, int]]:
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet

        return [(f.field_number, f.wire_type) for f in UnknownFieldSet(msg)]
    except ImportError:  # protobuf < 4.24
        return [(f.field_number, f.wire_type) for f in msg.UnknownFields()]


def _node_field(node_id, fname: str) -> str:
    return f"node[id={node_id}].{fname}"


GZIP_MAGIC = b"\x1f\x8b"
"""RFC 1952's ID1 ID2: a Chakra ET file begins with a varint length prefix, which is never 0x1f 0x8b followed by
a GlobalMetadata (field 1 tag 0x0a), so the two cannot be confused."""


def _gunzip(data: bytes, file: str) -> bytes:
    import gzip
    import zlib

    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(f"gzip data that does not decompress ({exc})", file=file) from None


def read_et_file(path: Path, rank: int, decoded: dict | None = None) -> RankTrace:
    """Decode one ET file: a GlobalMetadata, then Nodes (each length-prefixed). ``decoded`` maps node
    encodings already seen (in other ranks' files) to their NodeInfo."""
    file = str(path)
    decoded = {} if decoded is None else decoded
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read ({exc.strerror})", file=file) from None
    if data[:2] == GZIP_MAGIC:  # a gzipped trace (.et.gz, or gzipped under its .et name): read it decompressed
        data = _gunzip(data, file)
    if not data:
        raise TraceError("empty file; a Chakra ET file starts with a GlobalMetadata message", file=file)
    frames = []
    try:
        for off, payload in S.iter_frames(data):
            frames.append((off, payload))
    except S.FramingError as exc:
        if exc.index == 0:
            where = "GlobalMetadata"
        else:
            nid = S.peek_node_id(exc.partial)
            where = f"node[id={nid}]" if nid is not None else f"node[after id={_last_id(frames)}]"
        raise TraceError(f"{exc} (byte {exc.offset})", file=file, field=where) from None
    gm = S.GlobalMetadata()
    try:
        gm.ParseFromString(frames[0][1])
    except DecodeError:
        gm = None
    if gm is None or _unknown_fields(gm):
        raise TraceError("wrong message: the first message is not a Chakra GlobalMetadata", file=file,
                         field="GlobalMetadata")
    meta = {a.name: S.attr_value(a) for a in gm.attr}
    meta["version"] = gm.version
    nodes: list[NodeInfo] = []
    for i, (off, payload) in enumerate(frames[1:], start=1):
        info = decoded.get(payload)
        if info is None:
            node = S.Node()
            try:
                node.ParseFromString(payload)
            except DecodeError:
                node = None
            if node is None or any(num in _NODE_FIELDS and num != 11 for num, _ in _unknown_fields(node)):
                raise TraceError(f"wrong message at byte {off}: message {i} is not a Chakra Node", file=file,
                                 field=f"node[after id={nodes[-1].id}]" if nodes else "node[first]")
            info = decoded[payload] = NodeInfo(node.id, node.name, node.type, tuple(node.ctrl_deps),
                                               tuple(node.data_deps), node.duration_micros,
                                               {a.name: S.attr_value(a) for a in node.attr})
        nodes.append(info)
    return RankTrace(rank, file, meta, nodes)


def _last_id(frames) -> str:
    if len(frames) < 2:
        return "none"
    n = S.Node()
    try:
        n.ParseFromString(frames[-1][1])
        return str(n.id)
    except DecodeError:
        return "?"


def list_et_files(folder: Path, file: str | None, field: str) -> list[Path]:
    """``<prefix>.<rank>.et`` files of one prefix, ranks 0..N-1 (ASTRA-sim's naming rule)."""
    if not folder.is_dir():
        why = "no such folder" if not folder.exists() else "not a folder"
        raise ConfigError(f"{why} of Chakra ET files", file=file, field=field, value=str(folder))
    found: dict[str, dict[int, Path]] = {}
    for p in folder.iterdir():
        m = _ET_NAME.match(p.name)
        if m and p.is_file():
            found.setdefault(m["prefix"], {})[int(m["rank"])] = p
    if not found:
        raise ConfigError("no Chakra ET files (<prefix>.<rank>.et) in the folder", file=file, field=field,
                          value=str(folder))
    if len(found) > 1:
        raise ConfigError(f"ET files of several traces ({', '.join(sorted(found))}); one trace per folder",
                          file=file, field=field, value=str(folder))
    ranks = next(iter(found.values()))
    n = len(ranks)
    missing = [r for r in range(n) if r not in ranks]
    if missing:
        raise ConfigError(f"{n} ET files but rank {missing[0]} is missing (ranks must be 0..{n - 1})",
                          file=file, field=field, value=str(folder))
    return [ranks[r] for r in range(n)]


# --------------------------------------------------------------- per file
def _topo_order(tr: RankTrace) -> list[int]:
    """Node indices in dependency order (ties by file position); errors on duplicates, dangling deps, cycles."""
    index: dict[int, int] = {}
    for i, n in enumerate(tr.nodes):
        if n.id in index:
            raise TraceError("duplicate node id", file=tr.file, field=_node_field(n.id, "id"), value=n.id)
        index[n.id] = i
    indeg = [0] * len(tr.nodes)
    users: list[list[int]] = [[] for _ in tr.nodes]
    for i, n in enumerate(tr.nodes):
        for fname in ("data_deps", "ctrl_deps"):
            for d in set(getattr(n, fname)):
                j = index.get(d)
                if j is None:
                    raise TraceError(f"no node {d} in this file", file=tr.file, field=_node_field(n.id, fname),
                                     value=d)
                indeg[i] += 1
                users[j].append(i)
    ready = [i for i, k in enumerate(indeg) if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(tr.nodes):
        _raise_cycle(tr, index, {i for i, k in enumerate(indeg) if k > 0})
    return order


def _raise_cycle(tr: RankTrace, index: dict[int, int], left: set[int]) -> None:
    """Walk dependencies among the nodes left over until one repeats: that loop is the cycle."""
    i = min(left)
    path: list[tuple[int, str]] = []
    seen: dict[int, int] = {}
    while i not in seen:
        seen[i] = len(path)
        n = tr.nodes[i]
        nxt = None
        for fname in ("data_deps", "ctrl_deps"):
            for d in getattr(n, fname):
                if index[d] in left:
                    nxt = (index[d], fname)
                    break
            if nxt:
                break
        path.append((i, nxt[1]))
        i = nxt[0]
    loop = path[seen[i]:]
    first_i, fname = loop[0]
    ids = [tr.nodes[j].id for j, _ in loop] + [tr.nodes[first_i].id]
    raise TraceError("dependency cycle " + " -> ".join(map(str, ids)), file=tr.file,
                     field=_node_field(tr.nodes[first_i].id, fname), value=tr.nodes[loop[1 % len(loop)][0]].id)


def _int_attr(tr: RankTrace, node, attrs: dict, name: str, lo: int, hi: int, required: bool = True):
    v = attrs.get(name)
    if v is None:
        if required:
            raise TraceError("missing", file=tr.file, field=_node_field(node.id, name))
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise TraceError(f"must be an integer in [{lo}, {hi}]", file=tr.file, field=_node_field(node.id, name),
                         value=v)
    return v


@dataclass
class _Draft:
    """A rank's ops before process groups are resolved into IR dimensions."""

    ops: list[Op] = field(default_factory=list)
    comms: dict[int, _Comm] = field(default_factory=dict)  # op id -> comm
    content: list[int] = field(default_factory=list)
    """Per op: the id of its fields apart from id, deps and process group (program sharing compares these)."""


def _shape(s: str):
    if not s:
        return None
    v = json.loads(s)
    return tuple(v) if isinstance(v, list) else None


def _opt_int(a: dict, name: str, default: int) -> int:
    """A descriptive attribute HeteroSim writes (micro-batch, layer, chunk); another producer's may differ."""
    v = a.get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _draft_rank(tr: RankTrace, world: int, retime: bool, cache: dict, time_op=None) -> _Draft:
    order = _topo_order(tr)
    templates = cache.setdefault("templates", {})
    new_id = {tr.nodes[i].id: k for k, i in enumerate(order)}
    d = _Draft()
    for k, i in enumerate(order):
        n = tr.nodes[i]
        tmpl = templates.get(id(n))  # NodeInfos are shared and live as long as the decode cache
        if tmpl is None:
            tmpl = templates[id(n)] = _template(tr, n, world, retime, cache, time_op)
        kw, comm, cid = tmpl
        if comm is not None and comm.kind in ("send", "recv"):
            _check_p2p(tr, comm)
        deps = tuple(sorted({new_id[x] for x in n.data_deps + n.ctrl_deps}))
        d.ops.append(Op(id=k, deps=deps, **kw))
        d.content.append(cid)
        if comm is not None:
            d.comms[k] = comm
    if any(c.kind == "lane" for c in d.comms.values()):
        _merge_lane_pieces(d)
    return d


def _merge_lane_pieces(d: _Draft) -> None:
    """Pieces of one re-sharded pipeline send/recv (same ``ir_op``) become one op again, at the first piece;
    the others' dependents wait on it."""
    first: dict[int, int] = {}
    alias: dict[int, int] = {}
    for k, c in sorted(d.comms.items()):
        if c.kind == "lane":
            rep = first.setdefault(c.lane_op, k)
            if rep != k:
                alias[k] = rep
                d.ops[rep].deps = tuple(sorted(set(d.ops[rep].deps) | set(d.ops[k].deps)))
    keep = [k for k in range(len(d.ops)) if k not in alias]
    pos = {k: j for j, k in enumerate(keep)}
    for k, rep in alias.items():
        pos[k] = pos[rep]
    ops, content, comms = [], [], {}
    for j, k in enumerate(keep):
        op = d.ops[k]
        op.id, op.deps = j, tuple(sorted({pos[x] for x in op.deps} - {j}))
        ops.append(op)
        content.append(d.content[k])
        if k in d.comms:
            comms[j] = d.comms[k]
    d.ops, d.content, d.comms = ops, content, comms


def _template(tr: RankTrace, n: NodeInfo, world: int, retime: bool, cache: dict, time_op):
    """(Op fields but id and deps, the comm node or None, a content id): once per distinct node. The content
    id leaves out the process-group name, so ranks of parallel groups can share a program."""
    a = n.attrs
    phase = a.get("phase")
    common = dict(name=n.name or f"node{n.id}", phase=phase if phase in PHASES else "other",
                  microbatch=_opt_int(a, "microbatch", -1), layer=_opt_int(a, "layer", -1),
                  chunk=_opt_int(a, "chunk", 0))
    tname = _TYPE_NAME.get(n.type, str(n.type))
    comm = None
    if n.type == S.NODE_TYPES["COMP_NODE"]:
        op = _compute_op(tr, n, a, dict(id=0, **common), retime, cache.setdefault("kernels", {}))
        if op.duration_ns < 0 and time_op is not None:
            _check_timeable(tr, n, op, time_op, cache.setdefault("timed", {}))
        kw = {f: getattr(op, f) for f in ("kind", "stream", "op_class", "flops", "bytes", "gemm_mnk", "kernels",
                                          "duration_ns")}
    elif n.type == S.NODE_TYPES["METADATA_NODE"]:
        kw = dict(kind="compute", stream=str(a.get("stream") or "compute"), duration_ns=0)
    elif n.type == S.NODE_TYPES["COMM_COLL_NODE"]:
        ct = _int_attr(tr, n, a, "comm_type", -2**63, 2**63 - 1)
        cname = _COLL_NAME.get(ct)
        if cname not in CHAKRA_TO_COLLECTIVE:
            known = ", ".join(f"{v} ({k})" for k, v in S.COLLECTIVE_TYPES.items() if k in CHAKRA_TO_COLLECTIVE)
            why = f"{cname} is not modelled" if cname else "unknown collective"
            raise TraceError(f"{why}; supported: {known}", file=tr.file, field=_node_field(n.id, "comm_type"),
                             value=ct)
        size = _int_attr(tr, n, a, "comm_size", 0, 2**62)
        pg = a.get("pg_name")
        pg = str(pg) if pg not in (None, "") else None
        coll = CHAKRA_TO_COLLECTIVE[cname]
        comm = _Comm(n.id, "coll", coll, size, pg)
        kw = dict(kind="comm", stream=str(a.get("stream") or f"pg:{pg or 'world'}"), collective=coll,
                  size_bytes=size, comm_kind=str(a.get("comm_kind") or ""))
    elif n.type in (S.NODE_TYPES["COMM_SEND_NODE"], S.NODE_TYPES["COMM_RECV_NODE"]):
        send = n.type == S.NODE_TYPES["COMM_SEND_NODE"]
        src = _int_attr(tr, n, a, "comm_src", 0, world - 1)
        dst = _int_attr(tr, n, a, "comm_dst", 0, world - 1)
        size = _int_attr(tr, n, a, "comm_size", 0, 2**62)
        ctag = _int_attr(tr, n, a, "comm_tag", -2**31, 2**31 - 1, required=False) or 0
        pg = a.get("pg_name")
        pg = str(pg) if pg not in (None, "") else None
        kind = "send" if send else "recv"
        peer = dst if send else src
        comm = _Comm(n.id, kind, kind, size, pg, peer, ctag, src if send else dst)
        kw = dict(kind="comm", stream=str(a.get("stream") or f"{kind}:{peer}"), collective=kind, size_bytes=size,
                  comm_kind=str(a.get("comm_kind") or "pp"))
    else:
        raise TraceError(f"node type {tname} is not modelled (COMP_NODE, COMM_COLL_NODE, COMM_SEND_NODE, "
                         f"COMM_RECV_NODE and METADATA_NODE are)", file=tr.file,
                         field=_node_field(n.id, "type"), value=n.type)
    if "ir_op" in a:  # a piece of a re-sharded pipeline send/recv (HeteroSim's export): the IR op it belongs to
        lane = {f: _int_attr(tr, n, a, f, lo, 2**62) for f, lo in (("ir_op", 0), ("ir_peer_offset", -2**31),
                                                                       ("ir_size", 0))}
        coll = a.get("ir_collective")
        if coll not in ("send", "recv"):
            raise TraceError("must be send or recv", file=tr.file, field=_node_field(n.id, "ir_collective"),
                             value=coll)
        pg = a.get("pg_name")
        pg = str(pg) if pg not in (None, "") else None
        ctag = _int_attr(tr, n, a, "comm_tag", -2**31, 2**31 - 1, required=False) or 0
        comm = _Comm(n.id, "lane", coll, lane["ir_size"], pg, ctag=ctag, lane_op=lane["ir_op"])
        kw = dict(kind="comm", stream=str(a.get("stream") or f"{coll}:lane"), collective=coll,
                  size_bytes=lane["ir_size"], peer_offset=lane["ir_peer_offset"],
                  comm_kind=str(a.get("comm_kind") or "pp"))
    kw.update(common)
    content = (tuple(sorted((k, v) for k, v in kw.items() if k != "kernels")), id(kw.get("kernels")))
    cids = cache.setdefault("content", {})
    cid = cids.setdefault(content, len(cids))
    return kw, comm, cid


def _check_p2p(tr: RankTrace, c: "_Comm") -> None:
    send = c.kind == "send"
    if c.me != tr.rank:
        raise TraceError(f"this file is rank {tr.rank}'s; a {'send' if send else 'receive'} here must have it as "
                         f"{'comm_src' if send else 'comm_dst'}", file=tr.file,
                         field=_node_field(c.node_id, "comm_src" if send else "comm_dst"), value=c.me)
    if c.peer == tr.rank:
        raise TraceError("a rank cannot send to itself", file=tr.file,
                         field=_node_field(c.node_id, "comm_dst" if send else "comm_src"), value=c.peer)


def _check_timeable(tr: RankTrace, n, op: Op, time_op, memo: dict) -> None:
    """Re-timed nodes: the compute model must understand their class and shapes (checked once per kind)."""
    key = op.kernels or (op.op_class, op.flops, op.bytes, op.gemm_mnk)
    if key in memo:
        return
    try:
        time_op(op)
    except (UserError, ValueError, TypeError, IndexError, KeyError) as exc:
        cls_error = "op class" in str(exc)
        fname = ("kernel_classes" if cls_error else "kernel_shapes") if op.kernels else \
            ("op_class" if cls_error else "num_ops")
        raise TraceError(f"the compute model cannot time it ({exc})".replace("\n", " "), file=tr.file,
                         field=_node_field(n.id, fname), value=[k[0] for k in op.kernels] or op.op_class) from None
    memo[key] = True


def _compute_op(tr: RankTrace, n, a: dict, common: dict, retime: bool, kcache: dict) -> Op:
    stream = str(a.get("stream") or ("cpu" if a.get("is_cpu_op") is True else "compute"))
    recorded = int(n.duration_micros) * 1000
    classes = a.get("kernel_classes")
    op_class = str(a.get("op_class") or "")
    if classes:
        flops, nbytes, shapes = a.get("kernel_flops"), a.get("kernel_bytes"), a.get("kernel_shapes")
        lists = all(isinstance(v, list) for v in (classes, flops, nbytes, shapes))
        kkey = (tuple(classes), tuple(flops), tuple(nbytes), tuple(shapes)) if lists else None
        kernels = kcache.get(kkey)
        if kernels is None:
            kernels = _kernels(tr, n, classes, flops, nbytes, shapes)
            kcache[kkey] = kernels
        return _kernel_op(kernels, op_class, stream, recorded, retime, common)
    return _cost_op(a, op_class, stream, recorded, retime, common)


def _kernels(tr: RankTrace, n, classes, flops, nbytes, shapes) -> tuple:
    """One shared tuple per distinct kernel list (the compute model caches by identity)."""
    if not isinstance(classes, list):
        raise TraceError("must be a string list", file=tr.file, field=_node_field(n.id, "kernel_classes"),
                         value=classes)
    for fname, v in (("kernel_flops", flops), ("kernel_bytes", nbytes), ("kernel_shapes", shapes)):
        if not isinstance(v, list) or len(v) != len(classes):
            raise TraceError(f"must list one value per kernel_classes entry ({len(classes)})", file=tr.file,
                             field=_node_field(n.id, fname), value=v)
    try:
        return tuple((str(c), float(f), float(b), _shape(s)) for c, f, b, s in zip(classes, flops, nbytes, shapes))
    except (ValueError, TypeError):
        raise TraceError("not a JSON list per kernel", file=tr.file, field=_node_field(n.id, "kernel_shapes"),
                         value=shapes) from None


def _kernel_op(kernels: tuple, op_class: str, stream: str, recorded: int, retime: bool, common: dict) -> Op:
    if len(kernels) == 1 and op_class != "layer":
        c, f, b, s = kernels[0]
        fields = dict(op_class=c, flops=f, bytes=b, gemm_mnk=s)
    else:
        fields = dict(op_class=op_class or "layer", flops=sum(k[1] for k in kernels),
                      bytes=sum(k[2] for k in kernels), kernels=kernels)
    return Op(kind="compute", stream=stream, duration_ns=-1 if retime else recorded, **fields, **common)


def _cost_op(a: dict, op_class: str, stream: str, recorded: int, retime: bool, common: dict) -> Op:
    flops = a.get("num_ops")
    nbytes = a.get("tensor_size")
    has_cost = isinstance(flops, int) and not isinstance(flops, bool) and flops > 0
    if has_cost:
        # a node of unknown kind: the roofline with the efficiencies fitted for a whole layer's mix of kernels
        # (heterosim/hardware/efficiency.yaml, class ``layer``)
        fields = dict(op_class=op_class or "layer", flops=float(flops),
                      bytes=float(nbytes) if isinstance(nbytes, int) and not isinstance(nbytes, bool) else 0.0)
        return Op(kind="compute", stream=stream, duration_ns=-1 if retime else recorded, **fields, **common)
    return Op(kind="compute", stream=stream, duration_ns=recorded, op_class=op_class, **common)


# --------------------------------------------------------------- whole trace
def _read_comm_groups(folder: Path, world: int) -> dict[str, tuple[int, ...]] | None:
    path = folder / COMM_GROUP_FILE
    if not path.is_file():
        return None
    file = str(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TraceError(f"not readable JSON ({exc})", file=file) from None
    if not isinstance(data, dict):
        raise TraceError("must map process-group names to rank lists", file=file)
    out = {}
    for name, ranks in data.items():
        if (not isinstance(ranks, list) or not ranks
                or any(isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world for r in ranks)
                or len(set(ranks)) != len(ranks)):
            raise TraceError(f"must be a non-empty list of distinct ranks in [0, {world - 1}]", file=file,
                             field=name, value=ranks)
        out[str(name)] = tuple(ranks)
    return out


def _pg_dims(traces: list[RankTrace]) -> dict[str, str]:
    dims: dict[str, str] = {}
    for tr in traces:
        for item in tr.meta.get("pg_dims") or []:
            pg, _, dim = str(item).partition("=")
            if not dim or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", dim):
                raise TraceError("entries must look like <pg_name>=<dimension>", file=tr.file,
                                 field="GlobalMetadata.pg_dims", value=item)
            if dims.setdefault(pg, dim) != dim:
                raise TraceError(f"process group {pg} is dimension {dims[pg]} in another file", file=tr.file,
                                 field="GlobalMetadata.pg_dims", value=item)
    return dims


def build_ir(traces: list[RankTrace], drafts: list[_Draft], comm_groups: dict | None, node_of_rank: list) -> IR:
    world = len(traces)
    # process-group membership: declared, or the ranks that use the group
    members: dict[str, set[int]] = {}
    for tr, d in zip(traces, drafts):
        for c in d.comms.values():
            if c.kind == "coll":
                members.setdefault(c.pg or "", set()).add(tr.rank)
    if "" in members:
        members[""] = set(range(world))
    if comm_groups is not None:
        for pg in list(members):
            if pg and pg not in comm_groups:
                tr, nid = _first_use(traces, drafts, pg)
                raise TraceError(f"process group {pg} is not in {COMM_GROUP_FILE}", file=tr.file,
                                 field=_node_field(nid, "pg_name"), value=pg)
            if pg:
                members[pg] = set(comm_groups[pg])
    for tr, d in zip(traces, drafts):
        for c in d.comms.values():
            if c.kind == "coll" and tr.rank not in members[c.pg or ""]:
                raise TraceError(f"rank {tr.rank} is not a member of process group {c.pg}", file=tr.file,
                                 field=_node_field(c.node_id, "pg_name"), value=c.pg)
    pg_dim = _pg_dims(traces)
    groups: dict[str, list[tuple[int, ...]]] = {}
    dim_of: dict[str, str] = {}
    for pg, ranks in members.items():
        dim = "world" if pg == "" else pg_dim.get(pg, f"pg_{re.sub(r'[^A-Za-z0-9_]', '_', pg)}")
        dim_of[pg] = dim
        # a declared group keeps its order (ring order and pipeline offsets follow it); an inferred one is sorted
        order = comm_groups[pg] if comm_groups is not None and pg in comm_groups else tuple(sorted(ranks))
        groups.setdefault(dim, []).append(tuple(order))
    # pipeline peers: within the exported pipeline groups when the trace names them and every peer is in its
    # sender's group, else within one world-wide group (a peer offset is then the rank difference)
    p2p = [(tr.rank, c.peer, c.pg) for tr, d in zip(traces, drafts) for c in d.comms.values()
           if c.kind in ("send", "recv")]
    lane = [(tr, c) for tr, d in zip(traces, drafts) for c in d.comms.values() if c.kind == "lane"]
    if lane:  # re-sharded sends name their peer by offset in the exported pipeline groups: those are needed
        for tr, c in lane:
            if comm_groups is None or c.pg not in comm_groups or pg_dim.get(c.pg) != "pp" or \
                    tr.rank not in comm_groups[c.pg]:
                raise TraceError(f"a re-sharded pipeline transfer needs its pipeline group (pg_dims '<pg>=pp' and "
                                 f"{COMM_GROUP_FILE} listing this rank)", file=tr.file,
                                 field=_node_field(c.node_id, "pg_name"), value=c.pg)
        groups["pp"] = sorted({tuple(comm_groups[c.pg]) for _, c in lane}
                              | {tuple(comm_groups[pg]) for _, _, pg in p2p if pg in comm_groups})
    elif p2p:
        world_pp = [tuple(range(world))]
        groups["pp"] = world_pp
        if comm_groups is not None and all(pg and pg_dim.get(pg) == "pp" and pg in comm_groups and
                                           me in comm_groups[pg] and peer in comm_groups[pg] for me, peer, pg in p2p):
            pp_groups = sorted({tuple(comm_groups[pg]) for _, _, pg in p2p})
            if len({r for g in pp_groups for r in g}) == sum(len(g) for g in pp_groups):  # disjoint
                groups["pp"] = pp_groups
    for dim, gs in groups.items():
        seen: dict[int, tuple] = {}
        for g in gs:
            for r in g:
                if r in seen and seen[r] != g:
                    pgs = [pg for pg, dd in dim_of.items() if dd == dim]
                    raise TraceError(f"process groups of dimension {dim} ({', '.join(pgs)}) overlap at rank {r}",
                                     file=traces[r].file, field="GlobalMetadata.pg_dims", value=dim)
                seen[r] = g
        gs[:] = sorted(set(gs)) + [(r,) for r in range(world) if r not in seen]
    ir = IR(world_size=world, programs=[], rank_program=[], groups=groups)
    # resolve group dimension, tags and pipeline offsets per rank
    per_rank_ops: list[list[Op]] = []
    for tr, d in zip(traces, drafts):
        count: dict[tuple, int] = {}
        ops = []
        for op in d.ops:
            c = d.comms.get(op.id)
            if c is not None:
                if c.kind == "coll":
                    dim = dim_of[c.pg or ""]
                    k = count[(dim,)] = count.get((dim,), -1) + 1
                    op.group, op.tag = dim, f"{dim}#{k}"
                    if not op.comm_kind:
                        op.comm_kind = dim if dim in _KINDS else "dp"  # breakdown buckets: other groups count as DP
                elif c.kind == "lane":
                    key = ("lane", c.collective, op.peer_offset, c.ctag)
                    k = count[key] = count.get(key, -1) + 1
                    op.tag = f"p2p:{c.ctag}#{k}"
                else:
                    g = ir.group_of(tr.rank, "pp")
                    if c.peer not in g:
                        raise TraceError(f"rank {c.peer} is not in this rank's pipeline group {list(g)}",
                                         file=tr.file, field=_node_field(c.node_id, "comm_dst" if c.kind == "send"
                                                                          else "comm_src"), value=c.peer)
                    off = (g.index(c.peer) - g.index(tr.rank)) % len(g)
                    key = (c.kind, c.peer, c.ctag)
                    k = count[key] = count.get(key, -1) + 1
                    op.peer_offset, op.tag = off, f"p2p:{c.ctag}#{k}"
            ops.append(op)
        per_rank_ops.append(ops)
    _check_matching(traces, drafts, per_rank_ops, ir)
    # ranks with identical programs share one (tensor-parallel ranks must, to run as one lane)
    progs: dict[tuple, int] = {}
    for tr, d, ops in zip(traces, drafts, per_rank_ops):
        stage = tr.meta.get("pp_stage")
        stage = stage if isinstance(stage, int) and not isinstance(stage, bool) else 0
        key = (stage, tuple((c, o.deps, o.group, o.tag, o.peer_offset) for c, o in zip(d.content, ops)))
        pid = progs.get(key)
        if pid is None:
            pid = progs[key] = len(ir.programs)
            ir.programs.append(Program(id=pid, ops=ops, stage=stage, label=f"chakra rank {tr.rank}"))
        ir.rank_program.append(pid)
    if "tp" in groups and any(len({ir.rank_program[r] for r in g}) > 1 or len({node_of_rank[r] for r in g}) > 1
                              for g in groups["tp"]):
        # not runnable as lock-step lanes here (different programs, or split over nodes by this cluster):
        # keep the group as an ordinary dimension, each rank its own lane
        groups["tp_group"] = groups.pop("tp")
        for p in ir.programs:
            for op in p.ops:
                if op.group == "tp":
                    op.group = "tp_group"
    ir.reindex_groups()
    return ir


def _first_use(traces, drafts, pg):
    for tr, d in zip(traces, drafts):
        for c in d.comms.values():
            if c.pg == pg:
                return tr, c.node_id
    return traces[0], -1


def _check_matching(traces, drafts, per_rank_ops, ir: IR) -> None:
    """Every member of a collective instance posts the same collective; every send has its receive."""
    inst: dict[tuple, tuple[int, int, str, int]] = {}
    for tr, d, ops in zip(traces, drafts, per_rank_ops):
        for op in ops:
            c = d.comms.get(op.id)
            if c is None or c.kind != "coll":
                continue
            key = (op.group, ir.group_id(tr.rank, op.group), op.tag)
            first = inst.setdefault(key, (tr.rank, c.node_id, op.collective, op.size_bytes))
            if first[2] != op.collective:
                raise TraceError(f"collective number {op.tag.rpartition('#')[2]} on process group {c.pg or 'world'} "
                                 f"is {op.collective} here but {first[2]} on rank {first[0]} (node {first[1]})",
                                 file=tr.file, field=_node_field(c.node_id, "comm_type"), value=op.collective)
    posted: dict[tuple, dict[int, list]] = {}  # (dim, group) -> rank -> its collectives' (node id, pg)
    for tr, d, ops in zip(traces, drafts, per_rank_ops):
        for op in ops:
            c = d.comms.get(op.id)
            if c is not None and c.kind == "coll":
                gk = (op.group, ir.group_id(tr.rank, op.group))
                posted.setdefault(gk, {}).setdefault(tr.rank, []).append((c.node_id, c.pg))
    for (dim, gid), per in posted.items():
        most = max(per, key=lambda r: len(per[r]))
        for r in ir.groups[dim][gid]:
            n = len(per.get(r, []))
            if n < len(per[most]):
                nid, pg = per[most][n]
                raise TraceError(f"collective number {n + 1} on process group {pg or 'world'} has no counterpart on "
                                 f"rank {r} (which posts {n} there): the trace would hang", file=traces[most].file,
                                 field=_node_field(nid, "pg_name"), value=pg or "")
    p2p: dict[tuple, list] = {}
    for tr, d, ops in zip(traces, drafts, per_rank_ops):
        for op in ops:
            c = d.comms.get(op.id)
            if c is not None and c.kind in ("send", "recv"):
                a, b = (tr.rank, c.peer) if c.kind == "send" else (c.peer, tr.rank)
                p2p.setdefault((a, b, c.ctag, c.kind), []).append((tr, c))
    for (a, b, ctag, kind), items in p2p.items():
        other = "recv" if kind == "send" else "send"
        n_other = len(p2p.get((a, b, ctag, other), []))
        if len(items) > n_other:
            tr, c = items[n_other]
            fname = "comm_dst" if kind == "send" else "comm_src"
            raise TraceError(f"{'send' if kind == 'send' else 'receive'} number {n_other + 1} from rank {a} to rank "
                             f"{b} with comm_tag {ctag} has no matching {'receive' if kind == 'send' else 'send'} in "
                             f"rank {b if kind == 'send' else a}'s file", file=tr.file,
                             field=_node_field(c.node_id, fname), value=c.peer)


def import_workload(folder: Path, system, *, retime: bool, file: str | None, field: str = "workload.chakra",
                    time_op=None) -> IR:
    """The IR of a folder of ET files, for this cluster (one file per GPU). ``time_op(op)``: the compute model
    on one of the cluster's GPUs, to check re-timed nodes before simulating."""
    paths = list_et_files(folder, file, field)
    world = system.num_gpus
    if len(paths) != world:
        raise ConfigError(f"{len(paths)} ET files (ranks) but the cluster has {world} GPUs", file=file, field=field,
                          value=str(folder))
    decoded: dict = {}
    traces = [read_et_file(p, r, decoded) for r, p in enumerate(paths)]
    cache: dict = {"decoded": decoded}  # keeps the shared NodeInfos alive while templates are keyed by id
    drafts = [_draft_rank(tr, world, retime, cache, time_op) for tr in traces]
    comm_groups = _read_comm_groups(folder, world)
    ir = build_ir(traces, drafts, comm_groups, [g.node for g in system.gpus])
    flops = sum(op.flops for d in drafts for op in d.ops)
    mf = [tr.meta.get("model_flops_per_iteration") for tr in traces]
    tok = [tr.meta.get("tokens_per_iteration") for tr in traces]
    ir.meta.update({
        "model_flops_per_iteration": float(mf[0]) if isinstance(mf[0], float) and mf[0] > 0 else float(flops),
        "chakra": {"folder": str(folder), "files": len(paths), "nodes": sum(len(tr.nodes) for tr in traces),
                   "timing": "compute_model" if retime else "recorded"},
    })
    if isinstance(tok[0], int) and tok[0] > 0:
        ir.meta["tokens_per_iteration"] = tok[0]
    return ir
