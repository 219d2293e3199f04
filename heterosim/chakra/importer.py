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
* ``METADATA_NODE`` and ``INVALID_NODE``: a zero-time marker (dependencies pass through it; ASTRA-sim skips
  invalid nodes the same way, Workload.cc skip_invalid);
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


_STOI = re.compile(r"^[ \t\n\v\f\r]*([+-]?[0-9]+)")
"""What C++ ``std::stoi`` reads of a string: leading whitespace, a sign, digits (the rest is ignored)."""


@dataclass(frozen=True)
class Conventions:
    """How a trace's implicit meanings are read (``workload.chakra_convention`` / ``chakra_sends``).

    ASTRA-sim's, cited from github.com/astra-sim/astra-sim at commit 518bd513 (2026-03-25):

    * ``pg_name`` "" or "0" is the default communicator of every rank (workload/Workload.cc
      extract_comm_group; "0" since commit 8817510, 2025-11-12: before, group 0 of the file); any other
      name is the group whose id is ``std::stoi(name)`` in the group file,
      whose keys are read with ``std::stoi`` too (initialize_comm_groups): "0.0" is group 0 of the file;
    * ALL_GATHER ``comm_size`` is each rank's input: the ring all-gather sends ``data_size`` per step and
      ends with ``data_size * nodes_in_ring`` (system/astraccl/native_collectives/collective_algorithm/
      Ring.cc); REDUCE_SCATTER and ALL_REDUCE give the whole buffer, ALL_TO_ALL each rank's send buffer,
      which is what HeteroSim's IR means by them already;
    * one communication node in flight per rank (collectives and sends share it; receives do not), one
      GPU compute node, one CPU node (workload/HardwareResource.cc): streams ``comm``, ``compute``, ``cpu``
      (ASTRA-sim gives the slot to whichever ready node has the lowest id, a stream runs in dependency
      order: where that order would hang, a stream per group and per peer, ``serial_comm``);
    * a send does not wait for its receive (analytical backend, network_frontend/analytical/
      congestion_unaware/CongestionUnawareNetworkApi.cc sim_send schedules the arrival at once;
      common/CommonNetworkApi.cc: the send's callback runs at arrival, a receive posted later completes
      at once): ``eager``; its analytical frontend's ``--rendezvous-protocol`` switch defaults to false
      (network_frontend/analytical/common/CmdLineParser.cc), and the ns-3 frontend sends at once too and
      keeps bytes that arrive before their receive (network_frontend/ns3/AstraSimNetwork.cc sim_send /
      sim_recv, received_msg_standby_hash).

    The nccl-tests reading (HeteroSim's exports before issue 39, its IR): ALL_GATHER ``comm_size`` is the
    gathered output, "0" is an ordinary group name, collectives of each group on their own stream."""

    name: str
    allgather_input: bool
    """ALL_GATHER ``comm_size`` is each rank's input (IR size = comm_size x group size)."""
    pg0_world: bool
    """``pg_name`` "0" is every rank; other names resolve by their leading integer."""
    astra_streams: bool
    """Streams of nodes without a ``stream`` attribute as ASTRA-sim's HardwareResource (else per group/peer)."""
    eager: bool
    """Sends complete when their message arrives, receive posted or not."""
    serial_comm: bool = True
    """With ``astra_streams``: collectives and sends on one ``comm`` stream, in the file's dependency order.
    ASTRA-sim's single communication slot takes whichever node is ready first; where the fixed order would
    hang and that choice would not, :func:`import_workload` falls back to a stream per group and per peer."""

    @classmethod
    def legacy(cls) -> "Conventions":
        return cls("nccl-tests", False, False, False, False)

    @classmethod
    def resolve(cls, traces: list["RankTrace"], options=None) -> "Conventions":
        """The trace's declared convention (GlobalMetadata ``comm_size_convention``, ``p2p_semantics``:
        HeteroSim's exports), else HeteroSim's older exports' (producer heterosim), else the options'."""
        meta, file = traces[0].meta, traces[0].file
        ours = meta.get("producer") == "heterosim"
        declared = meta.get("comm_size_convention")
        if declared is not None and declared not in ("astra-sim", "nccl-tests"):
            raise TraceError("must be astra-sim or nccl-tests", file=file,
                             field="GlobalMetadata.comm_size_convention", value=declared)
        name = declared or ("nccl-tests" if ours else getattr(options, "chakra_convention", "astra-sim"))
        sends = getattr(options, "chakra_sends", None)
        if sends is None:
            sends = meta.get("p2p_semantics") or ("rendezvous" if ours else "eager")
            if sends not in ("eager", "rendezvous"):
                raise TraceError("must be eager or rendezvous", file=file, field="GlobalMetadata.p2p_semantics",
                                 value=sends)
        astra = name == "astra-sim"
        return cls(name, astra, astra, astra, sends == "eager")

    def pg(self, raw: str | None) -> str | None:
        """The process group a ``pg_name`` names: None = every rank."""
        if raw is None or raw == "":
            return None
        if not self.pg0_world:
            return raw
        if raw == "0":
            return None
        m = _STOI.match(raw)
        return str(int(m.group(1))) if m else raw


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
    """For a send or receive: the end that must be this file's rank (comm_src of a send, comm_dst of a receive);
    -1 when the node leaves it out: ASTRA-sim then takes the file's own rank (Workload.cc issue_send_comm /
    issue_recv_comm read it as ``comm_src<uint32_t>(sys->id)`` / ``comm_dst<uint32_t>(sys->id)``, astra-sim
    commit 518bd513), and so do we."""
    exact: int = -1
    """An ALL_GATHER's gathered size when HeteroSim wrote it (``ir_size``: not a whole share per rank)."""
    pg_raw: str | None = None
    """The ``pg_name`` as written (``pg`` is the name it resolves to under the trace's convention)."""
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
    node_ids: list[int] = field(default_factory=list)
    """Per op: the id of the node it comes from (messages name it)."""


def _shape(s: str):
    if not s:
        return None
    v = json.loads(s)
    return tuple(v) if isinstance(v, list) else None


def _opt_int(a: dict, name: str, default: int) -> int:
    """A descriptive attribute HeteroSim writes (micro-batch, layer, chunk); another producer's may differ."""
    v = a.get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _draft_rank(tr: RankTrace, world: int, retime: bool, cache: dict, time_op=None,
                conv: "Conventions | None" = None) -> _Draft:
    conv = conv or Conventions.legacy()
    order = _topo_order(tr)
    templates = cache.setdefault("templates", {})
    new_id = {tr.nodes[i].id: k for k, i in enumerate(order)}
    d = _Draft()
    for k, i in enumerate(order):
        n = tr.nodes[i]
        tmpl = templates.get(id(n))  # NodeInfos are shared and live as long as the decode cache
        if tmpl is None:
            tmpl = templates[id(n)] = _template(tr, n, world, retime, cache, time_op, conv)
        kw, comm, cid = tmpl
        if comm is not None and comm.kind in ("send", "recv"):
            _check_p2p(tr, comm)
        deps = tuple(sorted({new_id[x] for x in n.data_deps + n.ctrl_deps}))
        d.ops.append(Op(id=k, deps=deps, **kw))
        d.content.append(cid)
        d.node_ids.append(n.id)
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
    d.node_ids = [d.node_ids[k] for k in keep]
    d.ops, d.content, d.comms = ops, content, comms


def _template(tr: RankTrace, n: NodeInfo, world: int, retime: bool, cache: dict, time_op, conv: "Conventions"):
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
    elif n.type in (S.NODE_TYPES["METADATA_NODE"], S.NODE_TYPES["INVALID_NODE"]):
        # ASTRA-sim issues a metadata (or invalid) node as soon as its dependencies are done and finishes it at
        # once (Workload.cc issue_metadata / skip_invalid): it holds up no other node, hence a stream of its own
        own = f"meta:{n.id}" if conv.astra_streams else "compute"
        kw = dict(kind="compute", stream=str(a.get("stream") or own), duration_ns=0)
    elif n.type == S.NODE_TYPES["COMM_COLL_NODE"]:
        ct = _int_attr(tr, n, a, "comm_type", -2**63, 2**63 - 1)
        cname = _COLL_NAME.get(ct)
        if cname not in CHAKRA_TO_COLLECTIVE:
            known = ", ".join(f"{v} ({k})" for k, v in S.COLLECTIVE_TYPES.items() if k in CHAKRA_TO_COLLECTIVE)
            why = f"{cname} is not modelled" if cname else "unknown collective"
            raise TraceError(f"{why}; supported: {known}", file=tr.file, field=_node_field(n.id, "comm_type"),
                             value=ct)
        size = _int_attr(tr, n, a, "comm_size", 0, 2**62)
        raw = a.get("pg_name")
        raw = str(raw) if raw is not None else None
        pg = conv.pg(raw)
        coll = CHAKRA_TO_COLLECTIVE[cname]
        exact = _int_attr(tr, n, a, "ir_size", 0, 2**62, required=False) if coll == "allgather" else None
        comm = _Comm(n.id, "coll", coll, size, pg, pg_raw=raw, exact=-1 if exact is None else exact)
        # ASTRA-sim runs one communication node (collective or send) at a time per rank
        # (workload/HardwareResource.cc, num_in_flight_gpu_comm_ops); NCCL serialises a communicator's ops
        own = "comm" if conv.astra_streams and conv.serial_comm else f"pg:{pg or 'world'}"
        kw = dict(kind="comm", stream=str(a.get("stream") or own), collective=coll,
                  size_bytes=size, comm_kind=str(a.get("comm_kind") or ""))
    elif n.type in (S.NODE_TYPES["COMM_SEND_NODE"], S.NODE_TYPES["COMM_RECV_NODE"]):
        send = n.type == S.NODE_TYPES["COMM_SEND_NODE"]
        # the peer's end is required; the own end may be left out (= this file's rank, as in ASTRA-sim and
        # the MSCCL-derived traces it ships, which write only comm_dst on a send and comm_src on a receive)
        src = _int_attr(tr, n, a, "comm_src", 0, world - 1, required=not send)
        dst = _int_attr(tr, n, a, "comm_dst", 0, world - 1, required=send)
        size = _int_attr(tr, n, a, "comm_size", 0, 2**62)
        ctag = _int_attr(tr, n, a, "comm_tag", -2**31, 2**31 - 1, required=False) or 0
        pg = a.get("pg_name")
        pg = str(pg) if pg not in (None, "") else None
        kind = "send" if send else "recv"
        peer = dst if send else src
        me = src if send else dst
        comm = _Comm(n.id, kind, kind, size, pg, peer, ctag, -1 if me is None else me)
        own = "comm" if conv.astra_streams and conv.serial_comm and send else f"{kind}:{peer}"
        kw = dict(kind="comm", stream=str(a.get("stream") or own), collective=kind, size_bytes=size,
                  comm_kind=str(a.get("comm_kind") or "pp"))
    else:
        raise TraceError(f"node type {tname} is not modelled (COMP_NODE, COMM_COLL_NODE, COMM_SEND_NODE, "
                         f"COMM_RECV_NODE, METADATA_NODE and INVALID_NODE are)", file=tr.file,
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
    if c.me >= 0 and c.me != tr.rank:
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
    flops = flops if isinstance(flops, int) and not isinstance(flops, bool) and flops > 0 else 0
    nbytes = nbytes if isinstance(nbytes, int) and not isinstance(nbytes, bool) and nbytes > 0 else 0
    if flops or nbytes:
        # a node of unknown kind: the roofline with the efficiencies fitted for a whole layer's mix of kernels
        # (heterosim/hardware/efficiency.yaml, class ``layer``)
        fields = dict(op_class=op_class or "layer", flops=float(flops), bytes=float(nbytes))
        return Op(kind="compute", stream=stream, duration_ns=-1 if retime else recorded, **fields, **common)
    return Op(kind="compute", stream=stream, duration_ns=recorded, op_class=op_class, **common)


# --------------------------------------------------------------- whole trace
def comm_group_file(folder: Path, prefix: str, given: str | None, scenario_file: str | None,
                    field: str = "workload.chakra_comm_groups") -> Path | None:
    """The process-group file: the one the scenario names (relative to it), else ``comm_group.json`` in the
    trace folder (HeteroSim's exports), else ``<prefix>.json`` there (symbolic_tensor_graph's main.py names
    it after the ET files: ``<name>.%d.et`` -> ``<name>.json``), else None."""
    if given is not None:
        path = Path(given).expanduser()
        if not path.is_absolute() and scenario_file and not scenario_file.startswith("<"):
            path = Path(scenario_file).parent / path
        if not path.is_file():
            raise ConfigError("no such process-group file" if not path.exists() else "not a file",
                              file=scenario_file, field=field, value=given)
        return path
    for name in (COMM_GROUP_FILE, f"{prefix}.json"):
        if (folder / name).is_file():
            return folder / name
    return None


def _read_comm_groups(path: Path | None, world: int, conv: Conventions) -> dict[str, tuple[int, ...]] | None:
    if path is None:
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
        # ASTRA-sim keys its groups by std::stoi of the name (Workload.cc initialize_comm_groups)
        key = conv.pg(str(name)) if conv.pg0_world and str(name) != "0" else str(name)
        if key is None:
            continue
        if key in out:
            raise TraceError(f"names the same process group as another entry (ASTRA-sim reads group ids as "
                             f"integers: both are {key})", file=file, field=name, value=ranks)
        out[key] = tuple(ranks)
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


def build_ir(traces: list[RankTrace], drafts: list[_Draft], comm_groups: dict | None, node_of_rank: list,
             conv: Conventions | None = None, group_file: str = COMM_GROUP_FILE) -> IR:
    conv = conv or Conventions.legacy()
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
                raise TraceError(f"process group {pg} is not in {group_file}", file=tr.file,
                                 field=_node_field(nid, "pg_name"), value=_first_raw(drafts, pg))
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
    per_rank_ops = [_resolve_ops(tr, d, ir, dim_of, conv) for tr, d in zip(traces, drafts)]
    _check_matching(traces, drafts, per_rank_ops, ir, conv)
    if conv.eager:
        for i, d in enumerate(drafts):
            per_rank_ops[i] = _eager_receives(d, per_rank_ops[i])
    # ranks with identical programs share one (tensor-parallel ranks must, to run as one lane)
    progs: dict[tuple, int] = {}
    for tr, d, ops in zip(traces, drafts, per_rank_ops):
        stage = tr.meta.get("pp_stage")
        stage = stage if isinstance(stage, int) and not isinstance(stage, bool) else 0
        key = (stage, tuple((c, o.deps, o.group, o.tag, o.peer_offset, o.size_bytes)
                            for c, o in zip(d.content, ops)))
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


def _resolve_ops(tr: RankTrace, d: _Draft, ir: IR, dim_of: dict[str, str], conv: Conventions) -> list[Op]:
    """One rank's ops with their group dimension, matching tag and pipeline offset resolved (and all-gather
    sizes turned into the IR's gathered output)."""
    count: dict[tuple, int] = {}
    ops = []
    for op in d.ops:
        c = d.comms.get(op.id)
        if c is not None:
            if c.kind == "coll":
                dim = dim_of[c.pg or ""]
                k = count[(dim,)] = count.get((dim,), -1) + 1
                op.group, op.tag = dim, f"{dim}#{k}"
                if c.collective == "allgather" and conv.allgather_input:  # IR: the gathered output
                    op.size_bytes = c.exact if c.exact >= 0 else c.size * len(ir.group_of(tr.rank, dim))
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
                # ASTRA-sim pairs a send with a receive by (tag, src, dst, size), in issue order
                # (network_frontend/analytical/common/ChunkIdGenerator.cc)
                key = (c.kind, c.peer, c.ctag) + ((c.size,) if conv.astra_streams else ())
                k = count[key] = count.get(key, -1) + 1
                op.peer_offset, op.tag = off, f"p2p:{c.ctag}#{k}"
        ops.append(op)
    return ops


def check_no_deadlock(ir: IR, traces: list[RankTrace], drafts: list[_Draft]) -> None:
    """Replay the IR with zero-time ops (heterosim/workload/verify.py find_deadlock, the coordinator's
    semantics: streams in order, collectives and rendezvous sends wait for every partner) and refuse a trace
    that would hang, naming the node a stuck rank waits at and the partner it waits for."""
    from heterosim.workload.verify import find_deadlock

    _, stuck = find_deadlock(ir)
    if not stuck:
        return
    where = {r: ops for r, ops in stuck}
    r, ops = stuck[0]
    op = ops[0]
    tr, d = traces[r], drafts[r]
    nid = d.node_ids[op.id]
    if op.kind != "comm":
        raise TraceError(f"the trace would deadlock: rank {r} never gets past this node ({len(stuck)} rank(s) stuck)",
                         file=tr.file, field=_node_field(nid, "data_deps"), value=list(ops[0].deps))
    if op.collective in ("send", "recv") and op.peer_offset:
        partners = [ir.peer_of(r, op.peer_offset)]
        what, fname = ("send" if op.collective == "send" else "receive"), \
            ("comm_dst" if op.collective == "send" else "comm_src")
    else:
        partners = [m for m in ir.group_of(r, op.group) if m != r]
        what, fname = f"{op.collective} (number {int(op.tag.rpartition('#')[2]) + 1} on its process group)", \
            "pg_name"
    other = next((m for m in partners if m in where), partners[0] if partners else r)
    if other in where:
        o = where[other][0]
        theirs = f"rank {other}, which waits at node[id={drafts[other].node_ids[o.id]}] of {traces[other].file}"
    else:
        theirs = f"rank {other}, which finished without it"
    raise TraceError(f"the trace would deadlock: this {what} waits for {theirs} ({len(stuck)} rank(s) stuck)",
                     file=tr.file, field=_node_field(nid, fname))


def _first_raw(drafts, pg):
    for d in drafts:
        for c in d.comms.values():
            if c.pg == pg:
                return c.pg_raw if c.pg_raw is not None else pg
    return pg


def _eager_receives(d: _Draft, ops: list[Op]) -> list[Op]:
    """Receives posted ahead, so a send never waits for one (``eager``): each receive goes on a stream of its
    own with no dependencies (the coordinator starts a transfer once both sides posted: now as soon as the
    send is), followed there by a zero-time op that waits for the receive and for the receive's own
    dependencies; what depended on the receive depends on that op. So the receive completes at the later of
    the message's arrival and its own posting, as ASTRA-sim's analytical backend completes it
    (CommonNetworkApi.cc sim_recv: a message already arrived completes a receive at once)."""
    is_recv = {k for k, op in enumerate(ops) if op.collective == "recv" and k in d.comms and d.comms[k].kind == "recv"}
    if not is_recv:
        return ops
    new_id: dict[int, int] = {}
    done_id: dict[int, int] = {}  # receive -> its completion op
    pos = 0
    for k in range(len(ops)):
        new_id[k] = pos
        pos += 1
        if k in is_recv:
            done_id[k] = pos
            pos += 1
    out: list[Op] = []
    content: list[int] = []
    nodes: list[int] = []
    comms: dict[int, _Comm] = {}
    for k, op in enumerate(ops):
        deps = tuple(sorted({done_id.get(x, new_id[x]) for x in op.deps}))
        if k in is_recv:
            stream = f"recv:{d.node_ids[k]}"
            op.id, op.deps, op.stream = new_id[k], (), stream
            out.append(op)
            done = Op(id=done_id[k], deps=tuple(sorted(set(deps) | {new_id[k]})), kind="compute", stream=stream,
                      duration_ns=0, name=f"{op.name}:received", phase=op.phase, microbatch=op.microbatch,
                      layer=op.layer, chunk=op.chunk)
            out.append(done)
            content += [d.content[k], -1]
            nodes += [d.node_ids[k], d.node_ids[k]]
            comms[new_id[k]] = d.comms[k]
        else:
            op.id, op.deps = new_id[k], deps
            out.append(op)
            content.append(d.content[k])
            nodes.append(d.node_ids[k])
            if k in d.comms:
                comms[new_id[k]] = d.comms[k]
    d.content, d.node_ids, d.comms = content, nodes, comms
    return out


def _first_use(traces, drafts, pg):
    for tr, d in zip(traces, drafts):
        for c in d.comms.values():
            if c.pg == pg:
                return tr, c.node_id
    return traces[0], -1


def _check_matching(traces, drafts, per_rank_ops, ir: IR, conv: Conventions) -> None:
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
                size = c.size if conv.astra_streams else -1  # ASTRA-sim matches the size too
                p2p.setdefault((a, b, (c.ctag, size), c.kind), []).append((tr, c))
    for (a, b, (ctag, size), kind), items in p2p.items():
        other = "recv" if kind == "send" else "send"
        n_other = len(p2p.get((a, b, (ctag, size), other), []))
        if len(items) > n_other:
            tr, c = items[n_other]
            fname = "comm_dst" if kind == "send" else "comm_src"
            sz = f" and comm_size {size}" if size >= 0 else ""
            raise TraceError(f"{'send' if kind == 'send' else 'receive'} number {n_other + 1} from rank {a} to rank "
                             f"{b} with comm_tag {ctag}{sz} has no matching {'receive' if kind == 'send' else 'send'} "
                             f"in rank {b if kind == 'send' else a}'s file", file=tr.file,
                             field=_node_field(c.node_id, fname), value=c.peer)


def import_workload(folder: Path, system, *, retime: bool, file: str | None, field: str = "workload.chakra",
                    time_op=None, options=None) -> IR:
    """The IR of a folder of ET files, for this cluster (one file per GPU). ``time_op(op)``: the compute model
    on one of the cluster's GPUs, to check re-timed nodes before simulating. ``options``: the scenario's
    ``workload`` (``chakra_convention``, ``chakra_sends``, ``chakra_comm_groups``; defaults without).

    A trace that would hang (a collective some member never reaches, a receive whose send waits on it...)
    is refused here, before simulating, in one line naming the node (``validate`` says so too)."""
    paths = list_et_files(folder, file, field)
    world = system.num_gpus
    if len(paths) != world:
        raise ConfigError(f"{len(paths)} ET files (ranks) but the cluster has {world} GPUs", file=file, field=field,
                          value=str(folder))
    decoded: dict = {}
    traces = [read_et_file(p, r, decoded) for r, p in enumerate(paths)]
    cache: dict = {"decoded": decoded}  # keeps the shared NodeInfos alive while templates are keyed by id
    conv = Conventions.resolve(traces, options)
    prefix = _ET_NAME.match(paths[0].name)["prefix"]
    gpath = comm_group_file(folder, prefix, getattr(options, "chakra_comm_groups", None), file)
    comm_groups = _read_comm_groups(gpath, world, conv)
    nodes = [g.node for g in system.gpus]
    gname = gpath.name if gpath is not None else COMM_GROUP_FILE
    drafts = [_draft_rank(tr, world, retime, cache, time_op, conv) for tr in traces]
    untimed = sum(1 for d in drafts for op in d.ops if op.kind == "compute" and op.duration_ns == 0
                  and (op.flops > 0 or op.bytes > 0))
    ir = build_ir(traces, drafts, comm_groups, nodes, conv, gname)
    import warnings

    try:
        check_no_deadlock(ir, traces, drafts)
    except TraceError:
        if not (conv.astra_streams and conv.serial_comm):
            raise
        # one comm stream in file order hangs; ASTRA-sim's slot takes whichever node is ready: try a stream
        # per process group and per peer (the order within each kept), and refuse only if that hangs too
        from dataclasses import replace

        conv2 = replace(conv, serial_comm=False)
        cache2: dict = {"decoded": decoded}
        drafts2 = [_draft_rank(tr, world, retime, cache2, time_op, conv2) for tr in traces]
        ir2 = build_ir(traces, drafts2, comm_groups, nodes, conv2, gname)
        try:
            check_no_deadlock(ir2, traces, drafts2)
        except TraceError:
            check_no_deadlock(ir, traces, drafts)  # the first reading's message
        ir, drafts, conv = ir2, drafts2, conv2
        warnings.warn(f"{folder}: communication nodes in one queue per rank (ASTRA-sim's one at a time) would hang "
                      f"in the files' dependency order; they run in one queue per process group and peer instead",
                      stacklevel=2)
    if untimed:
        warnings.warn(f"{untimed} compute node(s) in {folder} have no duration_micros but carry num_ops/tensor_size: "
                      f"timing: recorded runs them in 0 ns (workload.timing: compute_model re-times them)",
                      stacklevel=2)
    flops = sum(op.flops for d in drafts for op in d.ops)
    mf = [tr.meta.get("model_flops_per_iteration") for tr in traces]
    tok = [tr.meta.get("tokens_per_iteration") for tr in traces]
    ir.meta.update({
        "model_flops_per_iteration": float(mf[0]) if isinstance(mf[0], float) and mf[0] > 0 else float(flops),
        "chakra": {"folder": str(folder), "files": len(paths), "nodes": sum(len(tr.nodes) for tr in traces),
                   "timing": "compute_model" if retime else "recorded", "convention": conv.name,
                   "comm_queues": "one per rank" if conv.astra_streams and conv.serial_comm else
                   "per process group and peer",
                   "sends": "eager" if conv.eager else "rendezvous",
                   "comm_groups": str(gpath) if gpath is not None else None,
                   "untimed_compute_nodes": untimed if not retime else 0},
    })
    if isinstance(tok[0], int) and tok[0] > 0:
        ir.meta["tokens_per_iteration"] = tok[0]
    return ir
