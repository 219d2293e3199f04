"""Scenario -> IR: one program per distinct (pipeline stage, micro-batch count).

Per micro-batch, layer and pass the program holds fused compute ops (op_class
``layer``, the real kernels in ``Op.kernels``) cut at communication points:
forward ``[attention] -> TP -> [MLP] -> TP``, backward mirrored. Pipeline
send/recv, DP gradient buckets, the optimizer step and ZeRO-1 parameter
all-gathers complete the iteration.

Communication patterns (Megatron-LM, Shoeybi et al. 2019; Korthikanti et al. 2022):
TP all-reduce after attention and MLP in forward and before them in backward;
with sequence parallelism each becomes all-gather (before the block) and
reduce-scatter (after), same bytes. The vocab-parallel embedding ends with an
all-reduce (reduce-scatter with SP), the vocab-parallel loss all-reduces
max/sum/target logit (3 * b*s fp32). Context parallelism all-gathers K,V before
attention and reduce-scatters their gradients. MoE routes with two all-to-alls
over the ``ep`` group per pass. Pipeline receives carry no dependencies (posted
early, like Megatron's overlapped p2p); a stage's compute waits for the receive.

``parallelism.tp_comm_overlap`` (Megatron-LM ``--tp-comm-overlap``, Transformer Engine userbuffers; needs
sequence parallelism, as there) splits each dense block around its TP collectives: the all-gather of the
block input runs as a ring exchange of tp chunks overlapped with the first GEMM computed chunk by chunk,
and the closing GEMM is computed in tp chunks whose reduce-scatters are pipelined behind it (see
``_Emitter.block_ub``). With context parallelism the attention block is cut at its K/V exchange: the QKV
projection keeps its overlapped all-gather and the output projection its pipelined reduce-scatter, as
Transformer Engine's userbuffers overlap the linear layers whatever runs between them
(``_Emitter.attn_fwd_ub_cp``). MoE blocks, and context-parallel attention under zero-bubble schedules, keep
blocking TP collectives.
"""
from __future__ import annotations

from heterosim.errors import PlanError
from heterosim.workload.costs import (LayerShapes, embedding_params, head_params, layer_params,
                                      model_flops_per_iteration, padded_vocab, total_params, bwd_kernels)
from heterosim.workload.groups import hybrid_shard_groups
from heterosim.workload.ir import IR, Op, Program
from heterosim.workload.memory import memory_for_plan
from heterosim.workload.plan import Plan, resolve_plan
from heterosim.workload.schedules import schedule_for
from heterosim.workload.sharding import FsdpEmitter, Sharding, sharding_of
from heterosim.workload.stage_dp import ReplicaRoute
from heterosim.workload.zero_bubble import V_SCHEDULES, split_kernels, splits_w

GRAD_BYTES = 4
"""Gradients are accumulated and reduced in fp32 (Megatron's default for bf16 training); see
``training.grad_reduce_dtype`` and :func:`grad_bytes`."""


def grad_bytes(training) -> int:
    """Bytes per gradient element in the grad buffer and its DP reduction (training.grad_reduce_dtype)."""
    return 2 if training.grad_reduce_dtype == "bf16" and training.precision != "fp32" else 4
OPTIMIZER_BYTES_PER_PARAM = 30
"""Adam step HBM traffic: read fp32 master, m, v, grad (16 B); write master, m, v (12 B) and the bf16 param (2 B)."""
OPTIMIZER_FLOPS_PER_PARAM = 12


class _Prog:
    """Op builder for one program (ids are list positions). Data dependencies travel as
    tuples of op ids ("handles")."""

    __slots__ = ("ops", "plan", "shapes", "kern", "plan_precision")

    def __init__(self, plan: Plan, shapes: LayerShapes, kern: dict) -> None:
        self.ops: list[Op] = []
        self.plan, self.shapes, self.kern = plan, shapes, kern

    def compute(self, name: str, key: str, deps: tuple, phase: str, mb: int, layer: int, chunk: int) -> tuple:
        flops, nbytes, kernels = self.kern[key]
        i = len(self.ops)
        self.ops.append(Op(id=i, kind="compute", name=name, phase=phase, deps=deps, stream="compute",
                           microbatch=mb, layer=layer, chunk=chunk, op_class="layer",
                           flops=flops, bytes=nbytes, kernels=kernels))
        return (i,)

    def comm(self, name: str, collective: str, group: str, size: int, tag: str, deps: tuple, phase: str,
             mb: int = -1, layer: int = -1, chunk: int = 0, stream: str | None = None, kind: str | None = None,
             peer: int = 0, peer_bytes: tuple[int, ...] | None = None) -> tuple:
        i = len(self.ops)
        self.ops.append(Op(id=i, kind="comm", name=name, phase=phase, deps=deps, stream=stream or group,
                           microbatch=mb, layer=layer, chunk=chunk, collective=collective,
                           group="" if peer else group, size_bytes=int(size), peer_offset=peer, tag=tag,
                           comm_kind=kind or group, peer_bytes=peer_bytes))
        return (i,)

    def zip_halves(self, start: int, mid: int) -> dict[int, int]:
        """DualPipe's F&B chunk (DeepSeek-V3 report, Fig. 4): interleave the forward half (ops start..mid-1) with
        the backward half (mid..end) on the compute stream, segment by segment (each compute op with the
        communication ops issued before it), so that one half's TP / EP collectives run while the other half
        computes. Each half keeps its own order (its deps still point backwards). Returns old id -> new id."""
        def segments(lo: int, hi: int) -> list[list[int]]:
            segs, cur = [], []
            for i in range(lo, hi):
                cur.append(i)
                if self.ops[i].kind == "compute":
                    segs.append(cur)
                    cur = []
            return segs + [cur] if cur else segs

        a, b = segments(start, mid), segments(mid, len(self.ops))
        order = [i for k in range(max(len(a), len(b))) for seg in (a[k:k + 1] + b[k:k + 1]) for i in seg]
        remap = {old: start + j for j, old in enumerate(order)}
        moved = [self.ops[i] for i in order]
        for op in moved:
            op.id = remap[op.id]
            op.deps = tuple(remap.get(d, d) for d in op.deps)
        self.ops[start:] = moved
        return remap

    def last_compute(self) -> int:
        for op in reversed(self.ops):
            if op.kind == "compute":
                return op.id
        return -1

    def tp(self, name: str, collective: str, size: int, tag: str, deps: tuple, phase: str, mb: int,
           layer: int, chunk: int) -> tuple:
        """A blocking TP collective on ``deps``' output: the next compute waits for it."""
        return self.comm(name, collective, "tp", size, tag, deps, phase, mb, layer, chunk)


def _fused(kernels: list) -> tuple:
    """(total flops, total bytes, kernels tuple) of a fused op, computed once and shared."""
    return (sum(k[1] for k in kernels), sum(k[2] for k in kernels), tuple(kernels))


def _gemm_chunk(kern: tuple, n: int) -> tuple:
    """One of n row chunks of a GEMM kernel (its first dimension, the tokens in fwd and dgrad, split)."""
    M, N, K, pas = kern[3]
    m = max(M // n, 1)
    return ("gemm", kern[1] * m / M, kern[2] * m / M, (m, N, K, pas))


def ub_split(kernels: list, n: int, bwd: bool) -> tuple:
    """A dense block's kernels as userbuffers runs them with n = tp chunks: (head, first GEMM's n-1 local
    chunks, its last chunk + middle + the closing GEMM's first chunk, the closing GEMM's other chunks +
    tail), each a fused (flops, bytes, kernels). The first GEMM consumes the all-gathered input; the
    closing GEMM (the last forward GEMM; in backward the last dgrad) produces what is reduce-scattered."""
    gemms = [i for i, k in enumerate(kernels) if k[0] == "gemm"]
    i1 = gemms[0]
    i2 = [i for i in gemms if not bwd or kernels[i][3][3] == "dgrad"][-1]
    g1 = _gemm_chunk(kernels[i1], n)
    g2 = _gemm_chunk(kernels[i2], n)
    return (_fused(kernels[:i1]), _fused([g1] * (n - 1)), _fused([g1] + kernels[i1 + 1:i2] + [g2]),
            _fused([g2] * (n - 1) + kernels[i2 + 1:]))


def ub_split_ag(kernels: list, n: int) -> tuple:
    """Pieces of a block part whose first GEMM consumes a userbuffers all-gather (n = tp chunks): (the
    kernels before it, its n-1 chunks on local data, its last chunk + the kernels after it)."""
    i1 = next(i for i, k in enumerate(kernels) if k[0] == "gemm")
    g1 = _gemm_chunk(kernels[i1], n)
    return _fused(kernels[:i1]), _fused([g1] * (n - 1)), _fused([g1] + kernels[i1 + 1:])


def ub_split_rs(kernels: list, n: int, bwd: bool) -> tuple:
    """Pieces of a block part whose closing GEMM (the last one; in backward the last dgrad) feeds a pipelined
    userbuffers reduce-scatter: (the kernels before it + its first chunk, its other n-1 chunks + the rest)."""
    i2 = [i for i, k in enumerate(kernels) if k[0] == "gemm" and (not bwd or k[3][3] == "dgrad")][-1]
    g2 = _gemm_chunk(kernels[i2], n)
    return _fused(kernels[:i2] + [g2]), _fused([g2] * (n - 1) + kernels[i2 + 1:])


def _ub_cp_pieces(t: dict, sh: LayerShapes, recompute: str) -> None:
    """Userbuffers pieces of a context-parallel attention block, cut at its K/V exchange (forward: QKV with
    the all-gather, the attention core, the output projection with the reduce-scatter; backward mirrored)."""
    eb = sh.gemm_eb
    core_b = bwd_kernels(sh.attn_core(), eb)
    if recompute == "selective":  # the attention core is recomputed just before its backward
        core_b = sh.attn_core() + core_b
    t["attncore_fwd"], t["attncore_bwd"] = _fused(sh.attn_core()), _fused(core_b)
    for key, pieces in (("qkv_fwd", ub_split_ag(sh.attn_qkv(), sh.tp)),
                        ("out_bwd", ub_split_ag(bwd_kernels(sh.attn_out(), eb), sh.tp))):
        for j, piece in enumerate(pieces):
            t[f"{key}:ag{j}"] = piece
    for key, pieces in (("out_fwd", ub_split_rs(sh.attn_out(), sh.tp, False)),
                        ("qkv_bwd", ub_split_rs(bwd_kernels(sh.attn_qkv(), eb), sh.tp, True))):
        for j, piece in enumerate(pieces):
            t[f"{key}:rs{j}"] = piece


def ub_reducescatter_bytes(hid: int, n: int) -> tuple[int, int]:
    """The two reduce-scatters of a userbuffers block (nccl-tests sizes): the first n-1 chunks' output,
    pipelined behind the closing GEMM, then the last chunk's."""
    first = hid * (n - 1) // n
    return first, hid - first


def ub_block_ns(pieces_ns: tuple, allgather_ns: float, reducescatter_ns: tuple, bwd: bool) -> float:
    """How long a userbuffers block takes: the critical path of the ops ``_Emitter.block_ub`` emits, each
    starting when its dependencies end (the analytic planner's estimate of what the simulator runs).

    ``pieces_ns`` = the times of ``ub_split``'s four pieces (head, first GEMM's n-1 local chunks, its last
    chunk + middle + the closing GEMM's first chunk, the closing GEMM's other chunks + tail); the all-gather
    starts after the head in forward, beside it in backward; the middle waits for the local chunks and the
    all-gather; the first reduce-scatter runs beside the closing GEMM's other chunks; the last follows both."""
    head, local, mid, rest = pieces_ns
    rs_first, rs_last = reducescatter_ns
    return max(head + local, (0.0 if bwd else head) + allgather_ns) + mid + max(rest, rs_first) + rs_last


def _kernel_table(sh: LayerShapes, moe: bool, recompute: str, ub: bool = False, split_w: bool = False) -> dict:
    """Fused kernels of every compute op, by key. ``split_w`` (zero-bubble schedules): the ``*_bwd`` entries
    keep only B (input-gradient) kernels and ``layer_wgrad`` / ``head_wgrad`` hold the W (wgrad GEMMs)."""
    t = _kernel_table_1(sh, moe, recompute, ub and not split_w)
    if split_w:
        _split_w_table(t, sh, moe, ub)
    return t


def _split_w_table(t: dict, sh: LayerShapes, moe: bool, ub: bool) -> None:
    """Zero-bubble split of a kernel table (see :mod:`heterosim.workload.zero_bubble`): every backward entry
    loses its wgrad GEMMs, which move to one W op per layer (``layer_wgrad``) and one for the LM head
    (``head_wgrad``); userbuffers pieces are cut from the B kernels."""
    layer_w: list = []
    for key in ("mlp_bwd", "router_bwd", "experts_bwd", "attn_bwd", "core_bwd", "qkv_bwd", "head_bwd"):
        if key not in t:
            continue
        b, w = split_kernels(t[key][2])
        t[key] = _fused(b)
        if key == "head_bwd":
            t["head_wgrad"] = _fused(w)
        elif key not in ("core_bwd", "qkv_bwd"):  # attn_bwd holds the same wgrads as core_bwd + qkv_bwd
            layer_w += w
    t["layer_wgrad"] = _fused(layer_w)
    if ub:
        for key in ("attn_bwd", "mlp_bwd"):
            if moe and key == "mlp_bwd":
                continue
            for j, piece in enumerate(ub_split(list(t[key][2]), sh.tp, True)):
                t[f"{key}:ub{j}"] = piece
        for key, kernels in (("attn_fwd", sh.attn_all()), ("mlp_fwd", sh.mlp())):
            if moe and key == "mlp_fwd":
                continue
            for j, piece in enumerate(ub_split(kernels, sh.tp, False)):
                t[f"{key}:ub{j}"] = piece


def _kernel_table_1(sh: LayerShapes, moe: bool, recompute: str, ub: bool = False) -> dict:
    eb = sh.gemm_eb
    attn_fwd = sh.attn_all()
    core = sh.attn_core() + sh.attn_out()
    t: dict[str, tuple] = {
        "attn_fwd": _fused(attn_fwd),
        "qkv_fwd": _fused(sh.attn_qkv()),
        "core_fwd": _fused(core),
        "attn_bwd": _fused(bwd_kernels(attn_fwd, eb)),
        "core_bwd": _fused(bwd_kernels(core, eb)),
        "qkv_bwd": _fused(bwd_kernels(sh.attn_qkv(), eb)),
        "embed_fwd": _fused(sh.embedding()),
        "embed_bwd": _fused(bwd_kernels(sh.embedding(), eb)),
        "head_fwd": _fused(sh.head()),
        "head_bwd": _fused(bwd_kernels(sh.head(), eb)),
    }
    if recompute == "selective":
        # Korthikanti et al. 2022: the attention core is recomputed just before its backward
        t["attn_bwd"] = _fused(sh.attn_core() + bwd_kernels(attn_fwd, eb))
        t["core_bwd"] = _fused(sh.attn_core() + bwd_kernels(core, eb))
    if moe:
        t["router_fwd"] = _fused(sh.moe_router())
        t["experts_fwd"] = _fused(sh.moe_experts())
        t["router_bwd"] = _fused(bwd_kernels(sh.moe_router(), eb))
        t["experts_bwd"] = _fused(bwd_kernels(sh.moe_experts(), eb))
    else:
        t["mlp_fwd"] = _fused(sh.mlp())
        t["mlp_bwd"] = _fused(bwd_kernels(sh.mlp(), eb))
    if ub:  # userbuffers pieces of the dense blocks (tp_comm_overlap)
        for key, kernels, bwd in (("attn_fwd", attn_fwd, False), ("mlp_fwd", sh.mlp(), False),
                                  ("attn_bwd", list(t["attn_bwd"][2]), True), ("mlp_bwd", bwd_kernels(sh.mlp(), eb), True)):
            if moe and key.startswith("mlp"):
                continue
            for j, piece in enumerate(ub_split(kernels, sh.tp, bwd)):
                t[f"{key}:ub{j}"] = piece
        if sh.sl < sh.s:  # context parallelism
            _ub_cp_pieces(t, sh, recompute)
    return t


class _Emitter:
    """Emits the ops of one layer / embedding / head pass into a _Prog."""

    def __init__(self, prog: _Prog, moe: bool, ub: bool = False, dispatcher: str = "alltoall",
                 a2a_rows: tuple | None = None) -> None:
        """``a2a_rows``: uneven routing, (dispatch row, combine row) of this rank's all-to-allv (:func:`_a2a_rows`)."""
        self.p = prog
        self.moe = moe
        pl, sh = prog.plan, prog.shapes
        self.has_tp = pl.tp > 1
        self.has_cp = pl.cp > 1
        self.sp = pl.sp
        self.hid = sh.hidden_bytes(full=True)  # all-reduce buffer = all-gather output = reduce-scatter input
        self.ub = ub and self.has_tp and self.sp
        self.ub_cp = self.ub and self.has_cp and "qkv_fwd:ag0" in prog.kern
        """Userbuffers around a context-parallel attention block (its pieces exist: not under zero-bubble)."""
        self.kv = sh.kv_bytes() * pl.cp  # all-gather output
        self.a2a = sh.a2a_bytes()
        if pl.expert_load is not None:  # an all-to-allv: size_bytes its largest receiver, per-pair sizes its rows
            self.a2a = int(round(self.a2a * max(pl.expert_load)))
        # per-pair rows of the uneven all-to-allv: the combine is the dispatch's transpose, each backward the
        # transpose of its forward (combine_bwd moves as the dispatch, dispatch_bwd as the combine)
        d, c = a2a_rows or (None, None)
        self.rows = {"dispatch": d, "combine": c, "combine_bwd": d, "dispatch_bwd": c}
        self.folded = pl.folded
        self.etp_bytes = sh.etp_gather_bytes() if pl.folded and pl.etp > 1 else 0
        # (collective, bytes) of the MoE dispatch and combine in forward (backward: each one's transpose)
        if dispatcher == "allgather":
            g = sh.moe_gather_bytes()
            self.moe_comm = {"dispatch": ("allgather", g), "combine": ("reducescatter", g),
                             "combine_bwd": ("allgather", g), "dispatch_bwd": ("reducescatter", g)}
        else:
            self.moe_comm = dict.fromkeys(("dispatch", "combine", "combine_bwd", "dispatch_bwd"), ("alltoall", self.a2a))

    def _rows(self, which: str) -> tuple[int, ...] | None:
        """The per-pair row of an all-to-allv dispatch / combine (None: a plain collective, or the allgather
        dispatcher's gather / scatter, which moves every token whatever the routing)."""
        return self.rows[which] if self.moe_comm[which][0] == "alltoall" else None

    def pre_tp(self, tag, deps, phase, mb, layer, chunk) -> tuple:
        """SP: all-gather of the sharded hidden state before a block (nothing otherwise)."""
        if self.has_tp and self.sp:
            return self.p.tp("tp_allgather", "allgather", self.hid, tag, deps, phase, mb, layer, chunk)
        return deps

    def post_tp(self, tag, deps, phase, mb, layer, chunk) -> tuple:
        """All-reduce (reduce-scatter with SP) of a block's output."""
        if not self.has_tp:
            return deps
        coll = "reducescatter" if self.sp else "allreduce"
        return self.p.tp(f"tp_{coll}", coll, self.hid, tag, deps, phase, mb, layer, chunk)

    def block_ub(self, name: str, key: str, tag: str, deps: tuple, phase: str, mb: int, layer: int,
                 chunk: int) -> tuple:
        """A dense block with its sequence-parallel all-gather and reduce-scatter overlapped as Transformer
        Engine's userbuffers do it (n = tp chunks). Ring-exchange all-gather + GEMM: chunk i of the first
        GEMM needs the i-th received chunk, so with g = GEMM / n and a = all-gather time the GEMM ends at
        max(g (n-1), a) + g -- emitted as the n-1 local chunks beside the all-gather, then the last chunk.
        GEMM + pipelined reduce-scatter (the time-reverse): the closing GEMM's first chunk, then its n-1
        other chunks beside the reduce-scatter of the first n-1 chunks' output, then the last chunk's
        reduce-scatter: the block ends at max(g + r (n-1), g n) + r with r = reduce-scatter / n.
        ``ub_block_ns`` is this graph's critical path (what the planner estimates)."""
        mid = self._ub_ag(name, key, tag, deps, phase, mb, layer, chunk, pieces=("ub0", "ub1", "ub2"))
        return self._ub_rs_tail(name, key + ":ub3", tag, mid, phase, mb, layer, chunk)

    def _ub_ag(self, name: str, key: str, tag: str, deps: tuple, phase: str, mb: int, layer: int,
               chunk: int, pieces: tuple = ("ag0", "ag1", "ag2")) -> tuple:
        """A block part opened by a userbuffers all-gather (``ub_split_ag`` pieces, or ``ub_split``'s first
        three): the first GEMM's n-1 local chunks beside the ring-exchange all-gather, then its last chunk and
        what follows it."""
        p = self.p
        k0, k1, k2 = (f"{key}:{x}" for x in pieces)
        head = p.compute(name + "_head", k0, deps, phase, mb, layer, chunk) if p.kern[k0][2] else deps
        ag = p.comm("tp_allgather_ub", "allgather", "tp", self.hid, tag + ":ag", head if phase == "fwd" else deps,
                    phase, mb, layer, chunk)
        g1 = p.compute(name + "_gemm_chunks", k1, head, phase, mb, layer, chunk)
        return p.compute(name + "_last_chunk", k2, g1 + ag, phase, mb, layer, chunk)

    def _ub_rs(self, name: str, key: str, tag: str, deps: tuple, phase: str, mb: int, layer: int,
               chunk: int) -> tuple:
        """A block part closed by a pipelined userbuffers reduce-scatter (``ub_split_rs`` pieces)."""
        first = self.p.compute(name + "_first_chunk", key + ":rs0", deps, phase, mb, layer, chunk)
        return self._ub_rs_tail(name, key + ":rs1", tag, first, phase, mb, layer, chunk)

    def _ub_rs_tail(self, name: str, rest_key: str, tag: str, first: tuple, phase: str, mb: int, layer: int,
                    chunk: int) -> tuple:
        """After the op that computed the closing GEMM's first chunk: the reduce-scatter of the first n-1
        chunks' output beside the GEMM's other chunks (``rest_key``), then the last chunk's reduce-scatter."""
        p = self.p
        rs_first, rs_last = ub_reducescatter_bytes(self.hid, p.plan.tp)
        rs1 = p.comm("tp_reducescatter_ub", "reducescatter", "tp", rs_first, tag + ":rs0", first,
                     phase, mb, layer, chunk)
        g2 = p.compute(name + "_gemm_chunks_rs", rest_key, first, phase, mb, layer, chunk)
        return p.comm("tp_reducescatter_ub", "reducescatter", "tp", rs_last, tag + ":rs1", g2 + rs1, phase, mb,
                      layer, chunk)

    def attn_fwd_ub_cp(self, pre: str, tg: str, t: str, deps: tuple, ph: str, mb: int, layer: int,
                       chunk: int) -> tuple:
        """Context-parallel attention under userbuffers: QKV with its overlapped all-gather, the K/V
        all-gather over the cp group, the attention core, the output projection with its pipelined
        reduce-scatter (Megatron-Core + Transformer Engine: the userbuffers overlap belongs to the QKV and
        output linear layers, context parallelism to the core attention between them)."""
        p = self.p
        q = self._ub_ag(pre + "attn_qkv", "qkv_fwd", tg + ":0", deps, ph, mb, layer, chunk)
        c = p.comm("cp_allgather_kv", "allgather", "cp", self.kv, f"cp:{t}:mb{mb}:L{layer}", q, ph, mb, layer, chunk)
        a = p.compute(pre + "attn_core", "attncore_fwd", c + q, ph, mb, layer, chunk)
        return self._ub_rs(pre + "attn_out", "out_fwd", tg + ":1", a, ph, mb, layer, chunk)

    def layer_fwd(self, deps: tuple, mb: int, layer: int, chunk: int, recompute: bool = False) -> tuple:
        p = self.p
        ph, pre, t = ("bwd", "recompute_", "rc") if recompute else ("fwd", "", "f")
        tg = f"tp:{t}:mb{mb}:L{layer}"
        if self.ub and (not self.has_cp or self.ub_cp):
            if self.has_cp:
                h = self.attn_fwd_ub_cp(pre, tg, t, deps, ph, mb, layer, chunk)
            else:
                h = self.block_ub(pre + "attn", "attn_fwd", tg + ":0", deps, ph, mb, layer, chunk)
            if not self.moe:
                return self.block_ub(pre + "mlp", "mlp_fwd", tg + ":2", h, ph, mb, layer, chunk)
            return self._moe_fwd(h, tg, pre, t, ph, mb, layer, chunk)
        h = self.pre_tp(tg + ":0", deps, ph, mb, layer, chunk)
        if self.has_cp:
            a = p.compute(pre + "attn_qkv", "qkv_fwd", h, ph, mb, layer, chunk)
            c = p.comm("cp_allgather_kv", "allgather", "cp", self.kv, f"cp:{t}:mb{mb}:L{layer}", a, ph, mb,
                       layer, chunk)
            a = p.compute(pre + "attn_core", "core_fwd", c + a, ph, mb, layer, chunk)
        else:
            a = p.compute(pre + "attn", "attn_fwd", h, ph, mb, layer, chunk)
        h = self.post_tp(tg + ":1", a, ph, mb, layer, chunk)
        if self.moe:
            return self._moe_fwd(h, tg, pre, t, ph, mb, layer, chunk)
        h = self.pre_tp(tg + ":2", h, ph, mb, layer, chunk)
        m = p.compute(pre + "mlp", "mlp_fwd", h, ph, mb, layer, chunk)
        return self.post_tp(tg + ":3", m, ph, mb, layer, chunk)

    def _etp(self, name: str, collective: str, tag: str, deps: tuple, ph: str, mb: int, layer: int,
             chunk: int) -> tuple:
        """Folded expert TP: a blocking collective over the expert-TP group (reported as TP)."""
        if not self.etp_bytes:
            return deps
        return self.p.comm(name, collective, "etp", self.etp_bytes, tag, deps, ph, mb, layer, chunk, stream="tp",
                           kind="tp")

    def _moe_fwd_folded(self, h, pre, t, ph, mb, layer, chunk) -> tuple:
        """Megatron-Core's MoE layer with an expert TP degree apart from tp (MoEAlltoAllTokenDispatcher): the
        router and the dispatch on this rank's own sequence-parallel tokens, the tokens received all-gathered
        over the expert-TP group, the experts, their output reduce-scattered over it, the combine; no TP
        collective around the block (its output stays sequence-parallel)."""
        p = self.p
        r = p.compute(pre + "moe_router", "router_fwd", h, ph, mb, layer, chunk)
        d = p.comm("ep_dispatch", "alltoall", "ep", self.a2a, f"ep:{t}:mb{mb}:L{layer}:0", r, ph, mb, layer, chunk,
                   peer_bytes=self.rows["dispatch"])
        d = self._etp("etp_allgather", "allgather", f"etp:{t}:mb{mb}:L{layer}:0", d, ph, mb, layer, chunk)
        e = p.compute(pre + "moe_experts", "experts_fwd", d, ph, mb, layer, chunk)
        e = self._etp("etp_reducescatter", "reducescatter", f"etp:{t}:mb{mb}:L{layer}:1", e, ph, mb, layer, chunk)
        return p.comm("ep_combine", "alltoall", "ep", self.a2a, f"ep:{t}:mb{mb}:L{layer}:1", e, ph, mb, layer,
                      chunk, peer_bytes=self.rows["combine"])

    def _moe_bwd_folded(self, deps, mb, layer, chunk) -> tuple:
        """The transposes of :meth:`_moe_fwd_folded` in reverse order."""
        p, ph = self.p, "bwd"
        d = p.comm("ep_combine_bwd", "alltoall", "ep", self.a2a, f"ep:b:mb{mb}:L{layer}:0", deps, ph, mb, layer,
                   chunk, peer_bytes=self.rows["combine_bwd"])
        d = self._etp("etp_allgather", "allgather", f"etp:b:mb{mb}:L{layer}:0", d, ph, mb, layer, chunk)
        e = p.compute("moe_experts_bwd", "experts_bwd", d, ph, mb, layer, chunk)
        e = self._etp("etp_reducescatter", "reducescatter", f"etp:b:mb{mb}:L{layer}:1", e, ph, mb, layer, chunk)
        c = p.comm("ep_dispatch_bwd", "alltoall", "ep", self.a2a, f"ep:b:mb{mb}:L{layer}:1", e, ph, mb, layer,
                   chunk, peer_bytes=self.rows["dispatch_bwd"])
        return p.compute("moe_router_bwd", "router_bwd", c, ph, mb, layer, chunk)

    def _moe_fwd(self, h, tg, pre, t, ph, mb, layer, chunk) -> tuple:
        if self.folded:
            return self._moe_fwd_folded(h, pre, t, ph, mb, layer, chunk)
        p = self.p
        h = self.pre_tp(tg + ":2", h, ph, mb, layer, chunk)
        r = p.compute(pre + "moe_router", "router_fwd", h, ph, mb, layer, chunk)
        d = p.comm("ep_dispatch", self.moe_comm["dispatch"][0], "ep", self.moe_comm["dispatch"][1],
                   f"ep:{t}:mb{mb}:L{layer}:0", r, ph, mb, layer, chunk, peer_bytes=self._rows("dispatch"))
        e = p.compute(pre + "moe_experts", "experts_fwd", d, ph, mb, layer, chunk)
        m = p.comm("ep_combine", self.moe_comm["combine"][0], "ep", self.moe_comm["combine"][1],
                   f"ep:{t}:mb{mb}:L{layer}:1", e, ph, mb, layer, chunk, peer_bytes=self._rows("combine"))
        return self.post_tp(tg + ":3", m, ph, mb, layer, chunk)

    def layer_bwd(self, deps: tuple, mb: int, layer: int, chunk: int) -> tuple:
        p = self.p
        tg = f"tp:b:mb{mb}:L{layer}"
        ph = "bwd"
        if self.ub and not self.moe:
            h = self.block_ub("mlp_bwd", "mlp_bwd", tg + ":0", deps, ph, mb, layer, chunk)
        else:
            h = self._mlp_bwd(deps, tg, mb, layer, chunk)
        if self.ub and not self.has_cp:
            return self.block_ub("attn_bwd", "attn_bwd", tg + ":2", h, ph, mb, layer, chunk)
        if self.ub_cp:  # attn_fwd_ub_cp mirrored: the reduce-scatter of dK/dV between the two parts
            a = self._ub_ag("attn_out_bwd", "out_bwd", tg + ":2", h, ph, mb, layer, chunk)
            a = p.compute("attn_core_bwd", "attncore_bwd", a, ph, mb, layer, chunk)
            c = p.comm("cp_reducescatter_dkv", "reducescatter", "cp", self.kv, f"cp:b:mb{mb}:L{layer}", a, ph, mb,
                       layer, chunk)
            return self._ub_rs("attn_qkv_bwd", "qkv_bwd", tg + ":3", c + a, ph, mb, layer, chunk)
        h = self.pre_tp(tg + ":2", h, ph, mb, layer, chunk)
        if self.has_cp:
            a = p.compute("attn_core_bwd", "core_bwd", h, ph, mb, layer, chunk)
            c = p.comm("cp_reducescatter_dkv", "reducescatter", "cp", self.kv, f"cp:b:mb{mb}:L{layer}", a, ph, mb,
                       layer, chunk)
            a = p.compute("attn_qkv_bwd", "qkv_bwd", c + a, ph, mb, layer, chunk)
        else:
            a = p.compute("attn_bwd", "attn_bwd", h, ph, mb, layer, chunk)
        return self.post_tp(tg + ":3", a, ph, mb, layer, chunk)

    def _mlp_bwd(self, deps, tg, mb, layer, chunk) -> tuple:
        p, ph = self.p, "bwd"
        if self.moe and self.folded:
            return self._moe_bwd_folded(deps, mb, layer, chunk)
        # backward of the MLP's closing reduce-scatter is an all-gather (identity for all-reduce)
        h = self.pre_tp(tg + ":0", deps, ph, mb, layer, chunk)
        if self.moe:
            d = p.comm("ep_combine_bwd", self.moe_comm["combine_bwd"][0], "ep", self.moe_comm["combine_bwd"][1],
                       f"ep:b:mb{mb}:L{layer}:0", h, ph, mb, layer, chunk, peer_bytes=self._rows("combine_bwd"))
            e = p.compute("moe_experts_bwd", "experts_bwd", d, ph, mb, layer, chunk)
            c = p.comm("ep_dispatch_bwd", self.moe_comm["dispatch_bwd"][0], "ep", self.moe_comm["dispatch_bwd"][1],
                       f"ep:b:mb{mb}:L{layer}:1", e, ph, mb, layer, chunk, peer_bytes=self._rows("dispatch_bwd"))
            m = p.compute("moe_router_bwd", "router_bwd", c, ph, mb, layer, chunk)
        else:
            m = p.compute("mlp_bwd", "mlp_bwd", h, ph, mb, layer, chunk)
        return self.post_tp(tg + ":1", m, ph, mb, layer, chunk)


def _build_program(pid: int, stage: int, m: int, plan: Plan, shapes: LayerShapes, kern: dict, scenario,
                   loss_bytes: int, pp_bytes: int, grad_items: dict, sh: Sharding | None = None,
                   route: ReplicaRoute | None = None, a2a_rows: tuple | None = None) -> Program:
    """The ops of one (stage, micro-batch count) program. Beyond a plain forward/backward schedule:
    ZeRO-1/2's parameter all-gathers (``gate``), ZeRO-2's per-micro-batch gradient reduce-scatters after
    each backward step, ZeRO-3's per-unit all-gathers and reduce-scatters (``FsdpEmitter``: ``pre`` before
    every unit's forward and backward, ``post_bwd`` after its backward). ``route`` (parallelism.stage_dp): one
    replica's own steps, global micro-batch ids and the peer of each pipeline message. ZB-V / DualPipe: peers
    by virtual stage and chunk (``owner``), the V's local turn (``handoff``), DualPipe's F&B pairs (``pair_*``,
    ``_Prog.zip_halves``) and the copies' gradient sum (``_emit_copy_sum``); ``a2a_rows``: uneven MoE
    routing's per-pair rows (:func:`_a2a_rows`). Walks the schedule once; long
    because each phase's emission is spelled out in order (the order is the stream order)."""
    moe = scenario.model.is_moe
    prog = _Prog(plan, shapes, kern)
    em = _Emitter(prog, moe, ub=_ub(scenario, plan), dispatcher=scenario.parallelism.moe_dispatcher,
                  a2a_rows=a2a_rows)
    pp, last_vs = plan.pp, plan.num_vstages - 1
    steps = schedule_for(plan.schedule, pp, m, stage, plan.chunks) if route is None else route.steps
    prev_peer = (lambda mb, vs, c: -1) if route is None else (lambda mb, vs, c: route.offset(mb, stage - 1))
    next_peer = (lambda mb, vs, c: +1) if route is None else (lambda mb, vs, c: route.offset(mb, stage + 1))
    grad_ready: dict = {}  # layer / "head" / "embed" -> op producing its grads (last micro-batch wins)
    loss_op: dict[int, tuple] = {}
    full_rc = plan.recompute == "full"
    has_tp = plan.tp > 1
    overlap_gather = plan.zero_stage in (1, 2) and scenario.parallelism.overlap_param_gather
    need: dict = {}
    dense = (sh.dense_group, sh.dense_n) if sh is not None else None
    if overlap_gather:
        prog.plan_precision = scenario.training.precision
        need = _emit_param_gathers(prog, _bucket_plan(plan, scenario, stage, grad_items, dense))
    fsdp = FsdpEmitter(prog, sh, [s for s in steps if s[0] != "w"], plan, stage, grad_items,
                       scenario.training.precision, grad_bytes(scenario.training)) if plan.zero_stage == 3 else None
    zero2_reduce: list[int] = []
    split_w = splits_w(plan.schedule)
    b_done: dict = {}  # zero-bubble: (mb, layer / "head") -> the B op its W waits for
    v_streams = plan.schedule in V_SCHEDULES or plan.schedule == "dualpipe"
    if v_streams:  # ZB-V: peers follow the V (its turn on the last rank a local hand-off); DualPipe: chunk 1 runs
        # the reverse direction
        owner = {(plan.vstage(s, c), c): s for s in range(pp) for c in range(plan.chunks)}
        if plan.schedule in V_SCHEDULES:
            owner = {(vs, c): s for (vs, _), s in owner.items() for c in range(plan.chunks)}
        prev_peer = lambda mb, vs, c: owner[(vs - 1, c)] - stage  # noqa: E731
        next_peer = lambda mb, vs, c: owner[(vs + 1, c)] - stage  # noqa: E731
    handoff: dict = {}  # ("f" | "b", mb) -> output handle passed to this rank's other chunk (V turn)
    pair_recv: dict = {}  # DualPipe F&B chunk: (mb, chunk) of its backward half -> that half's receive
    pair_send: list = []  # DualPipe: [send, deps] of a full backward (and its F&B chunk's forward half), after its W
    pair_at: list = []  # DualPipe F&B chunk: first op of its forward half, first op of its backward half

    def p2p_stream(side: str, kind: str, chunk: int) -> str:
        """The stream of a pipeline message. ZB-V: one per (direction, chunk) (``pp_send:f0`` ...), so that
        each stream carries one neighbour's messages of one kind in micro-batch order on both ends, as
        receives posted ahead of need deliver them (one stream per side would make the V's chunk-0
        activations wait behind chunk-1 gradients the peer sends later: a rendezvous deadlock)."""
        return f"{side}:{kind}{chunk}" if v_streams else side

    def recv_grad(mb: int, vs: int, chunk: int) -> tuple:
        return prog.comm("pp_recv_grad", "recv", "pp", pp_bytes, f"pp:b:mb{mb}:vs{vs}", (), "bwd", mb, -1, chunk,
                         stream=p2p_stream("pp_recv", "b", chunk), kind="pp", peer=next_peer(mb, vs, chunk))

    def gate(deps: tuple, chunk: int, key, mb: int = -1) -> tuple:
        """The first forward use of a parameter waits for its bucket's all-gather (ZeRO-1/2), or each
        forward use of a unit for its all-gather (ZeRO-3)."""
        if fsdp is not None:
            return fsdp.pre(deps, "fwd", mb, chunk, key)
        g = need.pop((chunk, key), None)
        return deps + g if g else deps

    def bgate(deps: tuple, mb: int, chunk: int, key) -> tuple:
        """ZeRO-3: a unit's backward waits for its parameters (re-gathered unless still there)."""
        return fsdp.pre(deps, "bwd", mb, chunk, key) if fsdp is not None else deps

    def reduced(prod: tuple | int, mb: int, chunk: int, key) -> None:
        """ZeRO-3: the unit's gradients are reduce-scattered once its backward is done."""
        if fsdp is not None:
            fsdp.post_bwd(prod[0] if isinstance(prod, tuple) else prod, mb, chunk, key)

    for i, (phase, mb, chunk) in enumerate(steps):
        vs = plan.vstage(stage, chunk)
        layers = plan.vstage_layers[vs]
        pre: tuple = ()  # DualPipe F&B chunk: its forward half waits for both halves' inputs
        if phase == "fb":
            _, bmb, bchunk = steps[i + 1]
            if plan.vstage(stage, bchunk) != last_vs:
                pre = pair_recv[(bmb, bchunk)] = recv_grad(bmb, plan.vstage(stage, bchunk), bchunk)
            pair_at[:] = [len(prog.ops)]
        elif phase == "bwd_full" and steps[i - 1][0] == "fb":
            pair_at.append(len(prog.ops))
        if phase == "w":
            if steps[i - 2][0] == "fb":  # the F&B chunk's two halves, interleaved; handles follow their ops
                remap = prog.zip_halves(*pair_at)
                for d in (grad_ready, b_done):
                    d.update({k: remap.get(v, v) for k, v in d.items()})
                loss_op.update({k: tuple(remap.get(x, x) for x in v) for k, v in loss_op.items()})
                for entry in pair_send:
                    entry[1] = tuple(remap.get(x, x) for x in entry[1])
            _emit_w(prog, b_done, grad_ready, reduced, mb, chunk, layers, vs == last_vs)
            if steps[i - 1][0] == "bwd_full":  # a full backward (DualPipe): its sends go once W is done
                for send_fn, deps in pair_send:
                    send_fn(deps, (prog.last_compute(),))
                pair_send.clear()
            if plan.zero_stage == 2:
                zero2_reduce += _emit_step_buckets(prog, plan, scenario, stage, chunk, mb, grad_items, grad_ready, sh)
            continue
        if phase in ("fwd", "fb"):
            if vs > 0 and prev_peer(mb, vs, chunk) == 0:
                dep = handoff.pop(("f", mb))
            elif vs > 0:
                dep = prog.comm("pp_recv_act", "recv", "pp", pp_bytes, f"pp:f:mb{mb}:vs{vs - 1}", (), "fwd",
                                mb, -1, chunk, stream=p2p_stream("pp_recv", "f", chunk), kind="pp",
                                peer=prev_peer(mb, vs, chunk)) + pre
            else:
                e = prog.compute("embedding", "embed_fwd", gate(pre, chunk, "embed", mb), "fwd", mb, -1, chunk)
                dep = em.post_tp(f"tp:f:mb{mb}:embed", e, "fwd", mb, -1, chunk)
            for layer in layers:
                dep = em.layer_fwd(gate(dep, chunk, layer, mb), mb, layer, chunk)
            if vs == last_vs:
                hd = em.pre_tp(f"tp:f:mb{mb}:head", gate(dep, chunk, "head", mb), "fwd", mb, -1, chunk)
                hd = prog.compute("lm_head_loss", "head_fwd", hd, "fwd", mb, -1, chunk)
                if has_tp:
                    hd = prog.comm("tp_loss_allreduce", "allreduce", "tp", loss_bytes, f"tp:f:mb{mb}:loss", hd,
                                   "fwd", mb, -1, chunk)
                loss_op[mb] = hd
            elif next_peer(mb, vs, chunk) == 0:
                handoff[("f", mb)] = dep
            else:
                def send(dep, after=(), mb=mb, vs=vs, chunk=chunk):
                    prog.comm("pp_send_act", "send", "pp", pp_bytes, f"pp:f:mb{mb}:vs{vs}", dep + after, "fwd", mb,
                              -1, chunk, stream=p2p_stream("pp_send", "f", chunk), kind="pp",
                              peer=next_peer(mb, vs, chunk))
                if phase == "fb":  # issued with the backward half's send, once the pair is done
                    pair_send.append([send, dep])
                else:
                    send(dep)
        else:
            if vs == last_vs:
                hb = prog.compute("lm_head_loss_bwd", "head_bwd", bgate(loss_op.pop(mb), mb, chunk, "head"), "bwd",
                                  mb, -1, chunk)
                if split_w:
                    b_done[(mb, "head")] = hb[0]
                else:
                    grad_ready["head"] = hb[0]
                    reduced(hb, mb, chunk, "head")
                # the head's input was all-gathered (SP) or copied (no SP) into the TP region
                dep = em.post_tp(f"tp:b:mb{mb}:head", hb, "bwd", mb, -1, chunk)
            elif next_peer(mb, vs, chunk) == 0:
                dep = handoff.pop(("b", mb))
            else:
                dep = pair_recv.pop((mb, chunk), None) or recv_grad(mb, vs, chunk)
            for layer in reversed(layers):
                dep = bgate(dep, mb, chunk, layer)
                if full_rc:
                    # Megatron's full recompute: re-run this layer's forward from its checkpointed input when
                    # its gradient arrives, then run its backward
                    dep = em.layer_fwd(dep, mb, layer, chunk, recompute=True)
                dep = em.layer_bwd(dep, mb, layer, chunk)
                if split_w:
                    b_done[(mb, layer)] = prog.last_compute()
                else:
                    grad_ready[layer] = prog.last_compute()
                    reduced(grad_ready[layer], mb, chunk, layer)
            if vs == 0:
                e = prog.compute("embedding_bwd", "embed_bwd", bgate(dep, mb, chunk, "embed"), "bwd", mb, -1, chunk)
                grad_ready["embed"] = e[0]
                reduced(e, mb, chunk, "embed")
            elif prev_peer(mb, vs, chunk) == 0:
                handoff[("b", mb)] = dep
            else:
                def send_grad(dep, after=(), mb=mb, vs=vs, chunk=chunk):
                    prog.comm("pp_send_grad", "send", "pp", pp_bytes, f"pp:b:mb{mb}:vs{vs - 1}", dep + after,
                              "bwd", mb, -1, chunk, stream=p2p_stream("pp_send", "b", chunk), kind="pp",
                              peer=prev_peer(mb, vs, chunk))
                if phase == "bwd_full":  # a full backward (alone or an F&B chunk's half): sent after its W
                    pair_send.append([send_grad, dep])
                else:
                    send_grad(dep)
            if plan.zero_stage == 2 and not split_w:
                zero2_reduce += _emit_step_buckets(prog, plan, scenario, stage, chunk, mb, grad_items, grad_ready, sh)
    if plan.schedule == "dualpipe":
        _emit_copy_sum(prog, plan, scenario, stage, grad_items, grad_ready)
    if sh is None:
        _emit_grad_sync(prog, plan, scenario, stage, grad_items, grad_ready, gathered=overlap_gather)
    else:
        if fsdp is not None:
            fsdp.finished()
        _emit_sharded_sync(prog, plan, scenario, stage, grad_items, fsdp.reduce_ops if fsdp else zero2_reduce,
                           overlap_gather, sh)
    label = f"stage{stage}/mb{m}" + (f"/load{shapes.load:g}" if shapes.load != 1.0 else "")
    return Program(id=pid, ops=prog.ops, stage=stage, label=label)


def _emit_copy_sum(prog: _Prog, plan: Plan, scenario, stage: int, grad_items: dict, grad_ready: dict) -> None:
    """DualPipe: each stage's weights are held twice (chunk 0 of rank s, chunk 1 of rank pp - 1 - s); once a
    chunk's last W is done its gradients are all-reduced with the other copy's over the ``dual`` pair (DeepSeek-V3
    Table 2: parameters 2x), in stage order on both ranks, before the DP reduction, which then waits for it.
    HeteroSim's assumption: DualPipe's reference code leaves the copies' synchronisation to the caller."""
    gb = grad_bytes(scenario.training)
    for chunk in sorted(range(plan.chunks), key=lambda c: plan.vstage(stage, c)):
        items = grad_items[(stage, chunk)]
        vs = plan.vstage(stage, chunk)
        n = sum(it[1] + it[2] for it in items)
        op = prog.comm("dualpipe_copy_allreduce", "allreduce", "dual", int(n * gb), f"dual:vs{vs}",
                       tuple(grad_ready[it[0]] for it in items), "bwd", chunk=chunk, stream="dp", kind="dp")[0]
        for it in items:
            grad_ready[it[0]] = op


def _emit_w(prog: _Prog, b_done: dict, grad_ready: dict, reduced, mb: int, chunk: int, layers: list,
            head: bool) -> None:
    """A zero-bubble W step: the weight-gradient GEMMs of one micro-batch on one chunk, one op per layer in
    the order backward reached them (the head first), each after its own B; the layer's gradients are
    final (DP bucket / ZeRO reduce-scatter may start) once its W is done."""
    items = (["head"] if head else []) + list(reversed(layers))
    for key in items:
        b = b_done.pop((mb, key))
        if key == "head":
            w = prog.compute("lm_head_wgrad", "head_wgrad", (b,), "bwd", mb, -1, chunk)
        else:
            w = prog.compute("layer_wgrad", "layer_wgrad", (b,), "bwd", mb, key, chunk)
        grad_ready[key] = w[0]
        reduced(w, mb, chunk, key)


def _ub(scenario, plan: Plan) -> bool:
    """Userbuffers TP overlap applies: tp_comm_overlap with sequence parallelism and TP > 1."""
    return bool(scenario.parallelism.tp_comm_overlap and plan.sp and plan.tp > 1)


def _bucket_plan(plan: Plan, scenario, stage: int, grad_items: dict,
                 dense: tuple[str, int] | None = None) -> list[tuple[str, int, int, float, tuple]]:
    """DP buckets of one stage as Megatron-Core's DDP forms them: per chunk, parameters in the order
    backward finalises their grads (head, layers last to first, embedding), cut when a bucket reaches
    grad_bucket_bytes. Returns (group, chunk, k, params, item keys) in production order. ``dense`` =
    (group, size) the dense buckets are reduced over when not the whole DP group (HSDP's shard group)."""
    dp_dense = plan.dp * plan.cp
    dp_expert = plan.edp
    dense_group = "dp_cp" if plan.cp > 1 else "dp"
    if dense is not None:
        dense_group, dp_dense = dense
    bucket_bytes = scenario.parallelism.grad_bucket_bytes
    gb = grad_bytes(scenario.training)
    out = []
    for chunk in range(plan.chunks):
        items = grad_items[(stage, chunk)]
        for kind_idx, (group, size) in enumerate(((dense_group, dp_dense), ("edp", dp_expert))):
            if size <= 1:
                continue
            acc, keys, k = 0.0, [], 0
            for it in items:
                n = it[1 + kind_idx]
                if n <= 0:
                    continue
                acc += n
                keys.append(it[0])
                if acc * gb >= bucket_bytes:
                    out.append((group, chunk, k, acc, tuple(keys)))
                    acc, keys, k = 0.0, [], k + 1
            if acc > 0:
                out.append((group, chunk, k, acc, tuple(keys)))
    return out


def _emit_param_gathers(prog: _Prog, buckets: list) -> dict:
    """Megatron-Core's overlapped parameter all-gather (distributed optimizer, overlap_param_gather): the
    updated parameters of each bucket are all-gathered at the start of the (next) iteration, in forward
    order, and a layer's first forward waits only for its own bucket. Returns item key -> gather op."""
    pbytes = 4 if prog.plan_precision == "fp32" else 2
    need: dict = {}
    for chunk in range(prog.plan.chunks):
        for group, c, k, acc, keys in reversed([b for b in buckets if b[1] == chunk]):
            g = prog.comm("zero_param_allgather", "allgather", group, int(acc * pbytes), f"{group}:c{c}:params{k}",
                          (), "fwd", chunk=c, stream="dp", kind="dp")[0]
            for key in keys:
                need[(c, key)] = need.get((c, key), ()) + (g,)
    return need


def _emit_grad_sync(prog: _Prog, plan: Plan, scenario, stage: int, grad_items: dict, grad_ready: dict,
                    gathered: bool = False) -> None:
    """Bucketed DP gradient reduction, tied-embedding sync, optimizer, ZeRO-1 all-gather (at the end
    unless already emitted, overlapped, at the start: ``gathered``)."""
    par = scenario.parallelism
    ops = prog.ops
    last_op = len(ops) - 1
    pbytes = 4 if scenario.training.precision == "fp32" else 2
    zero = plan.zero_stage == 1
    dp_dense = plan.dp * plan.cp
    dp_expert = plan.edp
    gb = grad_bytes(scenario.training)
    buckets = []  # (producer, order, group, params, chunk, k)
    for group, chunk, k, acc, keys in _bucket_plan(plan, scenario, stage, grad_items):
        # Megatron-Core DDP: a bucket is reduced as soon as the last micro-batch's backward finalised all
        # of its grads (grad_ready holds the last producer of each item)
        prod = max(grad_ready[key] for key in keys) if par.overlap_grad_reduce else last_op
        buckets.append((prod, len(buckets), group, acc, chunk, k))
    # the dp stream runs buckets in the order their gradients become ready (interleaving: last chunk first)
    buckets.sort()
    reduce_ops = [_bucket(prog, group, zero, acc, chunk, k, prod, gb) for prod, _, group, acc, chunk, k in buckets]
    gathers = [] if gathered else [(group, f"{group}:c{chunk}:params{k}", int(acc * pbytes), chunk)
                                   for prod, _, group, acc, chunk, k in buckets]
    deps = tuple(reduce_ops) if reduce_ops else (last_op,)
    model = scenario.model
    if plan.pp > 1 and model.tie_embeddings and stage in (0, plan.pp - 1) and plan.schedule not in V_SCHEDULES:
        # uneven TP: the (first, last) pairs of the embd groups each carry 1/min(tp) of the tied table
        emb_tp = min(plan.stage_tp[0], plan.stage_tp[-1]) if plan.stage_tp is not None else plan.tp
        n = padded_vocab(model, emb_tp) // emb_tp * model.hidden_size
        deps = prog.comm("embedding_grad_allreduce", "allreduce", "embd", n * gb, "embd:grad", deps, "opt",
                         stream="dp", kind="dp")
    # optimizer over this rank's (sharded, with ZeRO-1) parameters
    dense = sum(x[1] for c in range(plan.chunks) for x in grad_items[(stage, c)])
    expert = sum(x[2] for c in range(plan.chunks) for x in grad_items[(stage, c)])
    shard = dense / (dp_dense if zero else 1) + expert / (dp_expert if zero else 1)
    opt = _optimizer(ops, deps, shard)
    if zero:
        for group, tag, nbytes, chunk in gathers:
            prog.comm("zero_param_allgather", "allgather", group, nbytes, tag, (opt,), "opt", chunk=chunk,
                      stream="dp", kind="dp")


def _optimizer(ops: list, deps: tuple, shard: float) -> int:
    """The Adam step over ``shard`` parameters (this rank's share with ZeRO), after ``deps``."""
    opt = len(ops)
    ops.append(Op(id=opt, kind="compute", name="optimizer_step", phase="opt", deps=deps, stream="compute",
                  op_class="optimizer", flops=OPTIMIZER_FLOPS_PER_PARAM * shard,
                  bytes=OPTIMIZER_BYTES_PER_PARAM * shard,
                  kernels=(("optimizer", OPTIMIZER_FLOPS_PER_PARAM * shard, OPTIMIZER_BYTES_PER_PARAM * shard,
                            ("adam",)),)))
    return opt


def _emit_step_buckets(prog: _Prog, plan: Plan, scenario, stage: int, chunk: int, mb: int, grad_items: dict,
                       grad_ready: dict, sh: Sharding) -> list[int]:
    """ZeRO-2 after one backward step: each bucket of ``chunk`` reduce-scattered as soon as this micro-batch's
    backward produced its gradients (DeepSpeed ZeRO-2 ``overlap_comm`` / FSDP SHARD_GRAD_OP reduce every
    micro-batch: only the rank's gradient shard is kept); with HSDP the shard is then all-reduced over the
    replicate group. Returns the op ids."""
    gb = grad_bytes(scenario.training)
    last = len(prog.ops) - 1
    out = []
    for group, c, k, acc, keys in _bucket_plan(plan, scenario, stage, grad_items, (sh.dense_group, sh.dense_n)):
        if c != chunk:
            continue
        prod = max(grad_ready[key] for key in keys) if scenario.parallelism.overlap_grad_reduce else last
        rs = prog.comm("grad_reducescatter", "reducescatter", group, int(acc * gb), f"{group}:c{c}:mb{mb}:bucket{k}",
                       (prod,), "bwd", mb, chunk=c, stream="dp", kind="dp")
        out.append(rs[0])
        if sh.hybrid and group == "shard":
            ar = prog.comm("grad_replicate_allreduce", "allreduce", "replicate", int(acc * gb / sh.dense_n),
                           f"replicate:c{c}:mb{mb}:bucket{k}", rs, "bwd", mb, chunk=c, stream="dp_replicate",
                           kind="dp")
            out.append(ar[0])
    return out


def _emit_sharded_sync(prog: _Prog, plan: Plan, scenario, stage: int, grad_items: dict, reduce_ops: list[int],
                       gathered: bool, sh: Sharding) -> None:
    """ZeRO-2/3 end of iteration: tied-embedding gradient shards synced between the first and last stage,
    the optimizer step over this rank's shard, and (ZeRO-2 only, unless already overlapped with the next
    forward: ``gathered``) the updated parameters all-gathered per bucket. ZeRO-3 keeps parameters sharded:
    the next forward's all-gathers fetch them."""
    ops = prog.ops
    gb = grad_bytes(scenario.training)
    deps = tuple(reduce_ops) if reduce_ops else (len(ops) - 1,)
    model = scenario.model
    if plan.pp > 1 and model.tie_embeddings and stage in (0, plan.pp - 1) and plan.schedule not in V_SCHEDULES:
        emb_tp = min(plan.stage_tp[0], plan.stage_tp[-1]) if plan.stage_tp is not None else plan.tp
        n = padded_vocab(model, emb_tp) // emb_tp * model.hidden_size
        deps = prog.comm("embedding_grad_allreduce", "allreduce", "embd", n * gb // sh.dense_n, "embd:grad", deps,
                         "opt", stream="dp", kind="dp")
    dense = sum(x[1] for c in range(plan.chunks) for x in grad_items[(stage, c)])
    expert = sum(x[2] for c in range(plan.chunks) for x in grad_items[(stage, c)])
    opt = _optimizer(ops, deps, dense / sh.dense_n + expert / sh.expert_n)
    if sh.stage == 2 and not gathered:
        pbytes = 4 if scenario.training.precision == "fp32" else 2
        for group, c, k, acc, _keys in _bucket_plan(plan, scenario, stage, grad_items, (sh.dense_group, sh.dense_n)):
            prog.comm("zero_param_allgather", "allgather", group, int(acc * pbytes), f"{group}:c{c}:params{k}",
                      (opt,), "opt", chunk=c, stream="dp", kind="dp")


def _bucket(prog: _Prog, group: str, zero: bool, params: float, chunk: int, k: int, prod: int, gb: int) -> int:
    coll = "reducescatter" if zero else "allreduce"
    return prog.comm(f"grad_{coll}", coll, group, int(params * gb), f"{group}:c{chunk}:bucket{k}",
                     (prod,) if prod >= 0 else (), "bwd", chunk=chunk, stream="dp", kind="dp")[0]


def head_pp(plan: Plan) -> int:
    """The ``pp`` that decides whether a tied LM head is a copy of the embedding: 1 under ZB-V, whose V puts
    the embedding and the head on rank 0 (one shared weight, no tied-embedding gradient all-reduce)."""
    return 1 if plan.schedule in V_SCHEDULES else plan.pp


def _grad_items(plan: Plan, model) -> dict:
    """Per (stage, chunk): [(key, dense params, expert params)] in the order backward produces them."""
    lp = layer_params(model, plan.tp, plan.ep, plan.etp)
    out = {}
    last_vs = plan.num_vstages - 1
    for stage in range(plan.pp):
        for chunk in range(plan.chunks):
            vs = plan.vstage(stage, chunk)
            items = []
            if vs == last_vs:
                hp = head_params(model, plan.tp, head_pp(plan))
                items.append(("head", hp, 0.0))
            for layer in reversed(plan.vstage_layers[vs]):
                items.append((layer, lp.dense, lp.expert))
            if vs == 0:
                items.append(("embed", embedding_params(model, plan.tp), 0.0))
            out[(stage, chunk)] = items
    return out


def _a2a_rows(plan: Plan, layout, groups: dict, rank: int, send_bytes: int, matrices: dict) -> tuple:
    """(dispatch row, combine row) of ``rank``'s all-to-allv under uneven routing: bytes it sends to each member
    of its ``ep`` group, in the group's order, from ``routing_matrix`` over EP coordinates (each rank sends
    ``send_bytes``; the combine sends back what the dispatch brought, the transpose). ``matrices``: memo by
    ``send_bytes``."""
    from heterosim.comm.alltoallv import routing_matrix

    m = matrices.get(send_bytes)
    if m is None:
        m = matrices[send_bytes] = routing_matrix(send_bytes, plan.expert_load)
    group = next(g for g in groups["ep"] if rank in g)
    coords = [layout.coords(q)["ep"] for q in group]
    own = layout.coords(rank)["ep"]
    return tuple(m[own][c] for c in coords), tuple(m[c][own] for c in coords)


def compile_workload(scenario, world_size: int, rank_devices: list[str] | None = None,
                     file: str | None = None) -> IR:
    """Build the IR of one training iteration for ``world_size`` GPUs.

    ``rank_devices`` (device catalog names per rank) only labels the memory
    breakdown; the plan's memory fit is checked by :func:`heterosim.workload.memory.check_plan`."""
    plan = resolve_plan(scenario, world_size, file)
    if rank_devices is not None and len(rank_devices) != world_size:
        raise PlanError(f"{len(rank_devices)} device names for {world_size} ranks", field="cluster",
                        value=len(rank_devices))
    model, tr = scenario.model, scenario.training
    try:
        sh = sharding_of(scenario, plan)
    except PlanError as err:
        f = file if file is not None else getattr(scenario, "_source_file", None)
        raise err.with_file(f) if f else err
    stage_ctx: dict[int, tuple] = {}

    def ctx(stage: int, load: float = 1.0) -> tuple:
        """(stage plan, shapes, kernels, loss bytes, pipeline message bytes, grad items) with the stage's own
        TP degree and, with uneven routing, the rank's expert load; one shared context when TP is uniform."""
        key = stage if plan.stage_tp is not None or plan.stage_dp is not None else 0
        if load != 1.0:
            key = (key, load)
        c = stage_ctx.get(key)
        if c is None:
            sp = plan.for_stage(stage)
            shapes = LayerShapes.of(model, sp, tr.precision, tr.attention, load)
            # pipeline messages: this rank's shard of the activation (b*s*h/tp with SP, else b*s*h)
            c = (sp, shapes, _kernel_table(shapes, model.is_moe, sp.recompute, _ub(scenario, sp), splits_w(sp.schedule)),
                 3 * shapes.tokens * 4,
                 shapes.hidden_bytes(), _grad_items(sp, model))
            stage_ctx[key] = c
        return c

    layout = plan.layout
    groups = layout.groups()
    programs: list[Program] = []
    key_to_pid: dict[tuple[int, int], int] = {}
    rank_program = [0] * world_size
    matrices: dict[int, list[list[int]]] = {}
    for r in range(world_size):
        c = layout.coords(r)
        key = (c["pp"], plan.mb_count(c))
        route = None
        if plan.stage_dp is not None:  # one program per replica: its own micro-batches and peers
            key += (c["dp"],)
            route = ReplicaRoute(plan.schedule, plan.stage_dp, plan.global_microbatches, c["pp"], c["dp"])
        load = plan.load_of(c["ep"])
        if load != 1.0:  # uneven routing: one program per expert load (its experts' share of the tokens)
            key += ("load", load)
        rows = None
        if plan.expert_load is not None and model.is_moe and scenario.parallelism.moe_dispatcher == "alltoall":
            # and one per all-to-allv row (its own share's place; the allgather dispatcher moves every token)
            rows = _a2a_rows(plan, layout, groups, r, ctx(key[0], load)[1].a2a_bytes(), matrices)
            key += ("a2a", rows)
        pid = key_to_pid.get(key)
        if pid is None:
            pid = len(programs)
            key_to_pid[key] = pid
            cx = ctx(key[0], load)
            programs.append(_build_program(pid, key[0], key[1], *cx[:3], scenario, *cx[3:], sh=sh, route=route,
                                           a2a_rows=rows))
        rank_program[r] = pid
    if plan.schedule == "dualpipe":  # the two copies of each stage: ranks s and pp - 1 - s of a pipeline
        groups["dual"] = [(g[s], g[plan.pp - 1 - s]) for g in groups["pp"] for s in range(plan.pp // 2)]
    if sh is not None and sh.hybrid:
        def dp_cp(r: int) -> tuple[int, int]:
            c = layout.coords(r)
            return c["dp"], c["cp"]
        groups["shard"], groups["replicate"] = hybrid_shard_groups(groups["dp_cp" if plan.cp > 1 else "dp"], dp_cp,
                                                                   scenario.parallelism.shard_size)
    ir = IR(world_size=world_size, programs=programs, rank_program=rank_program, groups=groups)
    ir.meta = _ir_meta(scenario, plan, ir, world_size, rank_devices)
    return ir


def _ir_meta(scenario, plan: Plan, ir: IR, world_size: int, rank_devices: list[str] | None) -> dict:
    """The IR's ``meta``: model and hardware FLOPs, the plan's shape, memory per rank and per program."""
    model, tr = scenario.model, scenario.training
    layout = plan.layout
    mem = memory_for_plan(scenario, plan)
    per_rank_mem = [0] * world_size
    for r in range(world_size):
        c = layout.coords(r)
        per_rank_mem[r] = int(mem[(c["pp"], plan.mb_count(c))]["total"])
    mbs = plan.microbatches
    meta = {
        "model_flops_per_iteration": model_flops_per_iteration(model, tr.global_batch_size, tr.seq_length),
        "hardware_flops": ir.total_flops(),
        "tokens_per_iteration": tr.global_batch_size * tr.seq_length,
        "microbatches": max(mbs),
        "microbatches_per_replica": list(mbs),
        "layers_per_stage": [plan.stage_layer_count(s) for s in range(plan.pp)],
        "layers_per_virtual_stage": [len(x) for x in plan.vstage_layers],
        "schedule": plan.schedule,
        "virtual_stages": plan.chunks,
        "memory_bytes": per_rank_mem,
        "memory_breakdown": {f"stage{s}/mb{m}": {k: int(v) for k, v in d.items()} for (s, m), d in mem.items()},
        "dp": plan.dp, "tp": plan.tp, "pp": plan.pp, **({"stage_tp": list(plan.stage_tp)} if plan.stage_tp else {}),
        **({"stage_dp": list(plan.stage_dp)} if plan.stage_dp else {}), "cp": plan.cp, "ep": plan.ep,
        "sequence_parallel": plan.sp, "recompute": plan.recompute, "zero_stage": plan.zero_stage,
        "precision": tr.precision,
        "attention": tr.attention, "grad_reduce_dtype": tr.grad_reduce_dtype,
        "vocab_size": model.vocab_size, "padded_vocab_size": padded_vocab(model, plan.tp),
        "total_params": total_params(model),
        "global_batch_size": tr.global_batch_size, "micro_batch_size": tr.micro_batch_size,
        "seq_length": tr.seq_length,
    }
    if plan.folded:
        meta["expert_tp"] = plan.etp
    if plan.expert_load is not None:
        meta["moe_expert_load"] = list(plan.expert_load)
    if rank_devices is not None:
        meta["rank_devices"] = list(rank_devices)
    return meta
