"""Our per-rank IR -> Chakra ET files (one per rank), so the workload runs in ASTRA-sim and other consumers.

What each IR op becomes (attribute names and types as Chakra's feeder reads them: ``num_ops`` int64,
``tensor_size`` uint64, ``comm_type``/``comm_size`` int64, ``comm_src``/``comm_dst``/``comm_tag`` int32,
``pg_name`` string, ``is_cpu_op`` bool):

* compute op -> ``COMP_NODE`` with ``duration_micros`` from our compute model on the rank's GPU (times its
  slowdown, as the coordinator times it), ``num_ops`` = FLOPs, ``tensor_size`` = HBM bytes, and the kernels
  the op stands for (``kernel_classes``/``kernel_flops``/``kernel_bytes``/``kernel_shapes``) so an importer
  can re-time it on another device;
* collective -> ``COMM_COLL_NODE`` (``comm_type``, ``comm_size``, ``pg_name``) with ASTRA-sim's meanings
  (heterosim/chakra/importer.py ``Conventions``): ALL_GATHER ``comm_size`` is each rank's input (the IR's
  output size / group size; HeteroSim's IR and nccl-tests give the output), the others as in the IR;
* pipeline send/recv -> ``COMM_SEND_NODE``/``COMM_RECV_NODE`` with absolute ``comm_src``/``comm_dst`` ranks,
  ``comm_tag`` (CRC-32 of the IR tag, so both ends carry the same number) and the pipeline group's ``pg_name``;
  between TP groups of different size (``stage_tp``), one node per re-shard transfer (see rank_messages);
* ``data_deps`` = the IR's deps; ``ctrl_deps`` = the previous op of the same stream (the IR runs a stream's
  ops in order; Chakra has no streams, so the order travels as control dependencies, which ASTRA-sim's
  feeder resolves like data dependencies: astra-sim/chakra src/feeder_v3/common.h RESOLVE_CTRL_DEPS = true;
  ``stream_deps="data"`` writes them as data dependencies for consumers that read only those, as the older
  feeder src/feeder/et_feeder_node.cpp did);
* HeteroSim extras a consumer may ignore: ``stream``, ``phase``, ``microbatch``, ``layer``, ``chunk``,
  ``comm_kind``, ``op_class``; in the GlobalMetadata ``rank``, ``world_size``, ``pp_stage``, ``pg_dims``
  (``"<pg>=<dimension>"``), ``model_flops_per_iteration``, ``tokens_per_iteration``, and the conventions
  the file follows: ``comm_size_convention: astra-sim`` and ``p2p_semantics: rendezvous`` (the sends were
  simulated waiting for their receive; HeteroSim's importer replays them so, ASTRA-sim ignores it).

Process groups are numbered ``"1"``, ``"2"``... (ASTRA-sim reads ``pg_name`` "0" as every rank:
astra-sim workload/Workload.cc extract_comm_group, commit 518bd513) and listed in ``comm_group.json``
(``{pg_name: [ranks]}``, the format of ASTRA-sim's ``--comm-group-configuration``).
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

from heterosim.chakra import schema as S

COLLECTIVE_TO_CHAKRA = {"allreduce": "ALL_REDUCE", "reduce": "REDUCE", "allgather": "ALL_GATHER",
                        "broadcast": "BROADCAST", "alltoall": "ALL_TO_ALL", "reducescatter": "REDUCE_SCATTER"}
COMM_GROUP_FILE = "comm_group.json"
ET_SUFFIX = ".et"


def p2p_tag(tag: str) -> int:
    """The int32 ``comm_tag`` of an IR tag: the same on both ends of a send/recv."""
    return zlib.crc32(tag.encode()) & 0x7FFFFFFF


def _stream_preds(ops) -> list[int]:
    last: dict[str, int] = {}
    out = []
    for op in ops:
        out.append(last.get(op.stream, -1))
        last[op.stream] = op.id
    return out


def _lane_durations(ir, system, compute, precision: str) -> dict[int, list[int]]:
    """Per rank: each compute op's ns as the coordinator times it (device of the rank, slowdown of its TP
    group, since TP ranks run in lock-step)."""
    from heterosim.hardware import get_device

    tp = ir.groups.get("tp") or [(r,) for r in range(ir.world_size)]
    out: dict[int, list[int]] = {}
    memo: dict[tuple, list[int]] = {}
    for g in tp:
        for r in g:
            slow = max(system.gpus[x].slowdown for x in g)
            key = (ir.rank_program[r], system.gpus[r].device, slow)
            table = memo.get(key)
            if table is None:
                dev = get_device(system.gpus[r].device)
                table = [-1 if op.kind != "compute" else op.duration_ns if op.duration_ns >= 0
                         else int(round(compute.op_time_ns(op, dev, precision) * slow)) for op in ir.ops_of(r)]
                memo[key] = table
            out[r] = table
    return out


def _kernels(op) -> list[tuple]:
    if op.kernels:
        return list(op.kernels)
    return [(op.op_class, op.flops, op.bytes, op.gemm_mnk)]


def _process_groups(ir) -> tuple[dict[tuple[str, int], str], dict[str, list[int]], dict[str, str]]:
    """(dim, group index) -> pg name for every group some op uses; pg name -> ranks; pg name -> dimension."""
    used: list[tuple[str, int]] = []
    seen = set()
    for r in range(ir.world_size):
        for op in ir.ops_of(r):
            if op.kind != "comm":
                continue
            dim = "pp" if op.collective in ("send", "recv") else op.group
            key = (dim, ir.group_id(r, dim))
            if key not in seen:
                seen.add(key)
                used.append(key)
    names = {key: str(i + 1) for i, key in enumerate(used)}  # "0" would be every rank to ASTRA-sim
    members = {names[k]: list(ir.groups[k[0]][k[1]]) for k in used}
    dims = {names[k]: k[0] for k in used}
    return names, members, dims


def _lane_p2p(ir, rank: int, op, tp_of: dict, tag_size: dict) -> list[tuple[int, int, int]] | None:
    """The transfers of a pipeline send/recv that involve ``rank`` when the two TP groups differ in size
    (``parallelism.stage_tp``: the coordinator re-shards, heterosim/sim/coordinator.py reshard_transfers);
    None when the groups are alike (rank i sends to rank i of the peer group)."""
    me = tp_of.get(rank, (rank,))
    other = tp_of.get(ir.peer_of(me[0], op.peer_offset))
    other = other if other is not None else (ir.peer_of(me[0], op.peer_offset),)
    if len(me) == len(other):
        return None
    from heterosim.sim.coordinator import reshard_transfers

    peer_kind = "recv" if op.collective == "send" else "send"
    peer_size = tag_size.get((ir.rank_program[other[0]], peer_kind, op.tag), op.size_bytes)
    if op.collective == "send":
        return [x for x in reshard_transfers(me, op.size_bytes, other, peer_size) if x[0] == rank]
    return [x for x in reshard_transfers(other, peer_size, me, op.size_bytes) if x[1] == rank]


def rank_messages(ir, rank: int, durations: list[int], pg_names: dict, pg_dims: dict[str, str],
                  cache: dict | None = None, stream_deps: str = "ctrl", tp_of: dict | None = None,
                  tag_size: dict | None = None):
    """The GlobalMetadata and the encoded Nodes of one rank's ET file. ``cache`` shares the bytes of nodes
    that come out the same on several ranks (same program, duration, group and peers).

    A pipeline send/recv between TP groups of different size becomes one node per transfer this rank
    takes part in (or a zero-time METADATA_NODE when it takes part in none); all of them carry ``ir_op``,
    ``ir_collective``, ``ir_peer_offset`` and ``ir_size`` so HeteroSim's importer merges them back."""
    prog = ir.program_of(rank)
    meta = ir.meta
    gm = S.GlobalMetadata(version=S.SCHEMA_VERSION, attr=[
        S.attr("producer", "heterosim", "string"),
        S.attr("rank", rank, "int64"),
        S.attr("world_size", ir.world_size, "int64"),
        S.attr("pp_stage", prog.stage, "int64"),
        S.attr("pg_dims", [f"{pg}={dim}" for pg, dim in pg_dims.items()], "string_list"),
        S.attr("model_flops_per_iteration", float(meta.get("model_flops_per_iteration", 0.0)), "double"),
        S.attr("tokens_per_iteration", int(meta.get("tokens_per_iteration", 0)), "int64"),
        S.attr("comm_size_convention", "astra-sim", "string"),
        S.attr("p2p_semantics", "rendezvous", "string"),
    ])
    cache = {} if cache is None else cache
    tp_of = tp_of or {}
    tag_size = tag_size or {}
    # node ids of every op: its own id, plus new ids for the extra transfers of a re-sharded send/recv
    lane_xfers: dict[int, list] = {}
    ids: list[tuple[int, ...]] = []
    next_id = len(prog.ops)
    for op in prog.ops:
        x = _lane_p2p(ir, rank, op, tp_of, tag_size) if op.collective in ("send", "recv") and tp_of else None
        if x is not None:
            lane_xfers[op.id] = x
            ids.append((op.id,) + tuple(range(next_id, next_id + max(0, len(x) - 1))))
            next_id += max(0, len(x) - 1)
        else:
            ids.append((op.id,))
    nodes = []
    preds = _stream_preds(prog.ops)
    for op in prog.ops:
        data = tuple(i for d in op.deps for i in ids[d])
        ctrl = ids[preds[op.id]] if preds[op.id] >= 0 and preds[op.id] not in op.deps else ()
        if stream_deps != "ctrl":
            data, ctrl = data + ctrl, ()
        pg = None
        if op.kind == "comm":
            dim = "pp" if op.collective in ("send", "recv") else op.group
            pg = pg_names[(dim, ir.group_id(rank, dim))]
        if op.id in lane_xfers:
            xs = lane_xfers[op.id] or [None]
            for nid, x in zip(ids[op.id], xs):
                node = _node(op, durations[op.id], pg, x[0] if x else -1, x[1] if x else -1, data, ctrl,
                             size=x[2] if x else None, node_id=nid)
                node.attr.extend([S.attr("ir_op", op.id, "int64"), S.attr("ir_collective", op.collective, "string"),
                                  S.attr("ir_peer_offset", op.peer_offset, "int64"),
                                  S.attr("ir_size", op.size_bytes, "int64")])
                nodes.append(node.SerializeToString())
            continue
        src = dst = -1
        if op.collective in ("send", "recv"):
            peer = ir.peer_of(rank, op.peer_offset)
            src, dst = (rank, peer) if op.collective == "send" else (peer, rank)
        gsize = len(ir.group_of(rank, op.group)) if op.collective == "allgather" else 1
        key = (ir.rank_program[rank], op.id, durations[op.id], pg, src, dst, data, ctrl, gsize)
        enc = cache.get(key)
        if enc is None:
            enc = cache[key] = _node(op, durations[op.id], pg, src, dst, data, ctrl,
                                     group_size=gsize).SerializeToString()
        nodes.append(enc)
    return gm, nodes


def _node(op, duration_ns: int, pg: str | None, src: int, dst: int, data_deps: tuple, ctrl_deps: tuple,
          size: int | None = None, node_id: int | None = None, group_size: int = 1):
    """One Node; ``src < 0`` on a send/recv: this rank moves none of a re-sharded message (METADATA_NODE)."""
    node = S.Node(id=op.id if node_id is None else node_id, name=op.name, data_deps=list(data_deps),
                  ctrl_deps=list(ctrl_deps))
    attrs = [S.attr("is_cpu_op", False, "bool"), S.attr("stream", op.stream, "string"),
             S.attr("phase", op.phase, "string"), S.attr("microbatch", op.microbatch, "int64"),
             S.attr("layer", op.layer, "int64"), S.attr("chunk", op.chunk, "int64")]
    if op.kind == "compute":
        node.type = S.NODE_TYPES["COMP_NODE"]
        node.duration_micros = int(round(duration_ns / 1000))
        ks = _kernels(op)
        attrs += [S.attr("num_ops", int(round(op.flops)), "int64"),
                  S.attr("tensor_size", int(round(op.bytes)), "uint64"),
                  S.attr("op_class", op.op_class, "string"),
                  S.attr("kernel_classes", [k[0] for k in ks], "string_list"),
                  S.attr("kernel_flops", [float(k[1]) for k in ks], "double_list"),
                  S.attr("kernel_bytes", [float(k[2]) for k in ks], "double_list"),
                  S.attr("kernel_shapes", ["" if k[3] is None else json.dumps(list(k[3])) for k in ks],
                         "string_list")]
    else:
        nbytes = int(op.size_bytes if size is None else size)
        if op.collective == "allgather" and group_size > 1:
            # ASTRA-sim's ALL_GATHER comm_size is each rank's input (the ring's Ring.cc msg_size)
            nbytes = -(-nbytes // group_size)
            if nbytes * group_size != op.size_bytes:  # not a whole share per rank: the exact output for us
                attrs.append(S.attr("ir_size", int(op.size_bytes), "int64"))
        attrs += [S.attr("comm_size", nbytes, "int64"),
                  S.attr("comm_kind", op.comm_kind, "string"), S.attr("pg_name", pg, "string")]
        if op.collective in ("send", "recv") and src < 0:
            node.type = S.NODE_TYPES["METADATA_NODE"]
            attrs.append(S.attr("comm_tag", p2p_tag(op.tag), "int32"))
        elif op.collective in ("send", "recv"):
            node.type = S.NODE_TYPES["COMM_SEND_NODE" if op.collective == "send" else "COMM_RECV_NODE"]
            attrs += [S.attr("comm_src", src, "int32"), S.attr("comm_dst", dst, "int32"),
                      S.attr("comm_tag", p2p_tag(op.tag), "int32")]
        else:
            node.type = S.NODE_TYPES["COMM_COLL_NODE"]
            attrs.append(S.attr("comm_type", S.COLLECTIVE_TYPES[COLLECTIVE_TO_CHAKRA[op.collective]], "int64"))
    node.attr.extend(attrs)
    return node


def write_et_dir(ir, system, compute, precision: str, tmp: Path, prefix: str,
                 stream_deps: str = "ctrl") -> dict[str, Any]:
    """Write ``<prefix>.<rank>.et`` for every rank and ``comm_group.json`` into ``tmp``; returns counts.
    ``stream_deps``: the order of a stream as ``ctrl`` dependencies (the schema's meaning) or ``data``
    dependencies (for consumers that read only those, as Chakra's reference feeder does)."""
    durations = _lane_durations(ir, system, compute, precision)
    pg_names, members, pg_dims = _process_groups(ir)
    nodes_total = 0
    cache: dict = {}
    tp_of = {r: g for g in ir.groups.get("tp", []) for r in g}
    uneven = len({len(g) for g in ir.groups.get("tp", [])}) > 1
    tag_size = {(p.id, op.collective, op.tag): op.size_bytes for p in ir.programs for op in p.ops
                if op.collective in ("send", "recv")} if uneven else {}
    for r in range(ir.world_size):
        gm, nodes = rank_messages(ir, r, durations[r], pg_names, pg_dims, cache, stream_deps,
                                  tp_of if uneven else None, tag_size)
        with open(tmp / f"{prefix}.{r}{ET_SUFFIX}", "wb") as fh:
            S.write_message(fh, gm)
            for data in nodes:
                fh.write(S.encode_varint(len(data)))
                fh.write(data)
        nodes_total += len(nodes)
    with open(tmp / COMM_GROUP_FILE, "w") as fh:
        json.dump(members, fh, indent=1)
    return {"ranks": ir.world_size, "nodes": nodes_total, "process_groups": len(members)}
