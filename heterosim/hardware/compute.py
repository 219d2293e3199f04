"""Op-time model: how long one compute op (or fused block of kernels) takes on one device.

Three sources, per (device, op class, precision), the first that covers a kernel answering:

* measured kernel tables with a shape-space predictor (``heterosim.hardware.measured``; shipped for
  H100-SXM and the default there through ``hardware.measurements: builtin``), looked up by the
  kernel's shape tag (GEMM (M, N, K, pass), attention (seq, head dim, batch x heads, implementation,
  pass), memory-bound kind);

* analytical: a roofline, ``max(flops / (peak * eff), bytes / (hbm_bw * mem_eff))`` plus a per-kernel
  launch gap, with efficiency curves kept as data in ``efficiency.yaml`` (per architecture family): GEMMs as
  tiles in waves (``gemm_compute_s``), fused attention from its CTA schedule (``fused_attention_s``), unfused
  attention as its batched GEMMs + row softmax + dropout (``unfused_attention_s``), memory-bound kernels per
  kind with an L2-resident regime when their traffic fits the device's L2 (``mem_bound_s``);
* a generic measurement CSV (below; Python API only), interpolated in FLOPs / bytes.

Measurement CSV columns (header required, one row per timed kernel)::

    op_class,device,precision,m,n,k,flops,bytes,time_us

``device`` is a catalog name, ``precision`` one of fp32/tf32/bf16/fp16/fp8, ``m,n,k`` the GEMM shape
(blank for non-GEMMs), ``flops``/``bytes`` the work (blank for a GEMM = derived from m,n,k), ``time_us``
the measured kernel time in microseconds (back-to-back launches, so the launch gap is included and
nothing is added). GEMMs: an exact (m, n, k) match uses its time; otherwise the achieved FLOP/s is
interpolated linearly in log(flops) between the neighbouring rows (held constant beyond the ends).
Other classes: achieved bandwidth (bytes/s) interpolated in log(bytes) the same way (FLOP/s when bytes
is 0).
"""
from __future__ import annotations

import bisect
import copy
import csv
import io
import math
from pathlib import Path
from typing import Any


from heterosim.hardware import measured as _measured
from heterosim.hardware.catalog import PRECISIONS, Device, device_names, get_device
from hscommon.errors import UserError
from topologies._util import read_yaml

EFFICIENCY_FILE = Path(__file__).parent / "efficiency.yaml"
OP_CLASSES = ("gemm", "attention", "elementwise", "embedding", "optimizer", "layer")
_MEM_CLASSES = ("elementwise", "embedding", "optimizer")
# Bytes per element of GEMM inputs / outputs at each precision (fp8 GEMMs write bf16).
_IN_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
_OUT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2}


# ----------------------------------------------------------------------------- efficiency data

def _merge(base: dict, over: dict, file: str, where: str) -> dict:
    """Deep-merge a family's overrides onto the defaults; unknown keys are typos, so errors."""
    out = copy.deepcopy(base)
    for key, val in (over or {}).items():
        if key == "source":
            continue
        if key not in base:
            raise UserError("unknown efficiency key", file=file, field=f"{where}.{key}")
        if isinstance(base[key], dict):
            if key in ("kinds", "impl", "issue", "softmax_row_eff"):  # open tables (kinds, implementations, rows)
                out[key] = {**base[key], **val}
            elif key == "e_max":
                for prec in val:
                    if prec not in PRECISIONS:
                        raise UserError("unknown precision", file=file, field=f"{where}.{key}", value=prec)
                out[key].update(val)
            else:
                out[key] = _merge(base[key], val, file, f"{where}.{key}")
        else:
            out[key] = val
    return out


def load_efficiency(path: str | Path = EFFICIENCY_FILE) -> dict[str, dict]:
    """Family -> merged efficiency parameters (``default`` for devices with an unknown family)."""
    path = Path(path)
    data = read_yaml(path) or {}
    defaults = data.get("defaults")
    if not isinstance(defaults, dict):
        raise UserError("missing section", file=str(path), field="defaults")
    out = {"default": copy.deepcopy(defaults)}
    for fam, over in (data.get("families") or {}).items():
        out[fam] = _merge(defaults, over, str(path), f"families.{fam}")
    for fam, params in out.items():
        for cls in ("gemm", "attention"):
            for prec, e in params[cls]["e_max"].items():
                if not 0 < e <= 1:
                    raise UserError("efficiency must be in (0, 1]", file=str(path),
                                    field=f"{fam}.{cls}.e_max.{prec}", value=e)
    return out


class _Params:
    """Efficiency numbers resolved for one (device, precision): plain attributes, read in the hot path."""

    __slots__ = ("peak", "peak_attn", "peak_vec", "bw", "launch_s", "prec", "g_e", "g_xh", "g_xd", "g_tiles",
                 "g_k0", "g_wq", "g_split_k", "g_split_s", "g_mem", "g_blend", "ew_mem", "a_e", "a_mem", "mem", "cast_frac", "sm", "family",
                 "l2_bytes", "l2_lat", "l2_bw", "ew_issue", "sm_rows", "device", "attn_prec",
                 "ew_kinds", "a_impl", "a_bwd", "a_tile", "a_kv0", "a_wave", "a_under", "a_pad", "a_big", "a_kv0_bwd",
                 "a_soft")

    def __init__(self, eff: dict, device: Device, precision: str) -> None:
        prec = device.effective_precision(precision)
        self.prec = prec
        self.peak = device.peak_flops(prec)
        attn_prec = prec
        if prec == "fp8" and not eff.get("fp8_attention", False):
            attn_prec = device.effective_precision("bf16")
        self.peak_attn = device.peak_flops(attn_prec)
        self.device, self.attn_prec = device, attn_prec
        self.peak_vec = device.peak_flops("fp32")
        self.bw = device.hbm_Bps
        self.launch_s = device.launch_overhead_ns * 1e-9
        self.sm = max(device.sm_count, 1)
        self.family = device.family
        g, a = eff["gemm"], eff["attention"]
        self.g_e = _e_max(g["e_max"], prec)
        self.g_xh, self.g_xd = float(g["x_half"]), float(g["x_default"])
        self.g_tiles = tuple((int(t[0]), int(t[1])) for t in g["tiles"])
        self.g_k0, self.g_wq = float(g["k_overhead"]), float(g["wave_quant"])
        self.g_split_k, self.g_split_s = int(g["split_k_min"]), float(g["split_k_ns"]) * 1e-9
        self.g_mem, self.g_blend = float(g["mem_eff"]), float(g["mem_blend"])
        self.ew_mem = float(eff["elementwise"]["mem_eff"])
        self.ew_kinds = {k: float(v) for k, v in (eff["elementwise"].get("kinds") or {}).items()}
        # L2-resident regime of memory-bound kernels (see mem_bound_s)
        self.l2_bytes = float(device.l2_bytes)
        self.l2_lat, self.l2_bw = float(eff["l2"]["latency_ratio"]), float(eff["l2"]["bw_ratio"])
        self.ew_issue = {k: float(v) * self.peak_vec for k, v in (eff["elementwise"].get("issue") or {}).items()}
        rows = sorted((int(r), float(e)) for r, e in (eff["attention"].get("softmax_row_eff") or {}).items())
        self.sm_rows = (tuple(math.log(r) for r, _ in rows), tuple(e for _, e in rows))
        self.a_impl = {k: float(v) for k, v in (a.get("impl") or {}).items()}
        self.a_bwd = float(a["bwd_work"])
        self.a_tile, self.a_kv0, self.a_wave = int(a["tile_q"]), float(a["kv_overhead"]), float(a["wave_cost"])
        self.a_kv0_bwd, self.a_soft = float(a["kv_overhead_bwd"]), float(a["softmax_dim"])
        self.a_under = {k: float(v) for k, v in a["under_wave_exp"].items()}
        self.a_pad = {k: int(v) for k, v in a["head_dim_pad"].items()}
        self.a_big = {k: float(v) for k, v in a["big_head_eff"].items()}
        self.a_e, self.a_mem = _e_max(a["e_max"], attn_prec), float(a["mem_eff"])
        self.mem = {c: (float(eff[c]["compute_eff"]), float(eff[c]["mem_eff"])) for c in _MEM_CLASSES + ("layer",)}
        self.cast_frac = float(eff.get("fp8_cast_fraction", 0.0)) if prec == "fp8" else 0.0


def _e_max(table: dict, prec: str) -> float:
    for p in (prec, "bf16", "fp16", "fp32"):
        if p in table:
            return float(table[p])
    raise KeyError(prec)


def gemm_compute_s(m: int, n: int, k: int, p: _Params, batch: int = 1) -> float:
    """Tensor-core time of an (m, n, k) GEMM (``batch`` independent ones in one batched call): output tiles
    in waves over the SMs, each tile's K loop plus a fixed prologue/epilogue (``k_overhead`` K steps); the
    library picks the tile shape and split-K that finish first (a split costs one reduction,
    ``split_k_ns``); a partial last wave costs ``wave_quant`` of a full one (stream-K / persistent kernels
    spread it)."""
    rate = p.peak * p.g_e / p.sm            # FLOP/s of one SM at the family's sustained efficiency
    best = math.inf
    for tm, tn in p.g_tiles:
        tiles = batch * -(-m // tm) * -(-n // tn)
        for split in range(1, max(1, min(-(-p.sm // tiles), k // p.g_split_k)) + 1):
            waves = tiles * split / p.sm
            eff_waves = waves + p.g_wq * (math.ceil(waves) - waves)
            t = eff_waves * 2.0 * tm * tn * (k / split + p.g_k0) / rate
            if split > 1:
                t += p.g_split_s
            best = min(best, t)
    return best


def gemm_efficiency(m: int, n: int, k: int, p: _Params) -> float:
    """Fraction of the precision's peak the GEMM's tensor-core part reaches (tiles, waves, K overhead)."""
    return 2.0 * m * n * k / (p.peak * gemm_compute_s(m, n, k, p))


def gemm_s(m: int, n: int, k: int, p: _Params, batch: int = 1, elem_bytes: int | None = None) -> float:
    """A GEMM kernel's time without its launch gap: tensor-core time and operand traffic (inputs and output,
    ``elem_bytes`` each, default the precision's) blended by a soft maximum (``mem_blend``)."""
    tc = gemm_compute_s(m, n, k, p, batch)
    if elem_bytes is None:
        nbytes = batch * _gemm_bytes((m, n, k), p.prec)
    else:
        nbytes = batch * float(m * k + k * n + m * n) * elem_bytes
    tm = nbytes / (p.bw * p.g_mem)
    return (tc ** p.g_blend + tm ** p.g_blend) ** (1.0 / p.g_blend)


def mem_bound_s(nbytes: float, mem_eff: float, p: _Params, issue_Bps: float = 0.0) -> float:
    """A memory-bound kernel moving ``nbytes`` (read + written) that streams from HBM at ``mem_eff`` of its
    bandwidth, without its launch gap.

    L2-resident regime: a kernel whose traffic fits the device's L2 (``l2_bytes``, datasheets) finds its
    input there (written by the kernel just before it) and leaves its output there; one whose traffic does
    not fit streams through (an LRU cache evicts each line of a larger cyclic footprint before its reuse):
    the transition is at the L2 capacity. Such kernels keep a fixed number of bytes in flight, so their
    achieved bandwidth is bytes in flight / latency (Little's law): from L2 they run ``l2.latency_ratio``
    (HBM / L2 load latency) times faster, up to ``l2.bw_ratio`` x HBM bandwidth (the L2's own bandwidth).
    A kind limited by instruction issue rather than memory (``issue_Bps``: LayerNorm's Welford update,
    dropout's random numbers) runs no faster than that ceiling from L2 (from HBM its ``mem_eff``, measured,
    already includes it)."""
    rate = p.bw * mem_eff
    if 0.0 < nbytes <= p.l2_bytes:
        fast = min(rate * p.l2_lat, p.bw * p.l2_bw)
        rate = min(fast, max(issue_Bps, rate)) if issue_Bps > 0 else fast
    return nbytes / rate


def softmax_s(nbytes: float, row: int, pas: str, p: _Params) -> float:
    """The row softmax of unfused attention over ``row``-long rows (reads and writes the scores). Where the
    family has a measured rate per row length (``attention.softmax_row_eff``), the rate of the shortest
    listed length >= the row (the longest beyond them): the framework picks its softmax kernel by row length
    (PyTorch's register-resident warp kernel is compiled per power of two up to 2048 half-precision
    elements, a block-per-row kernel above), and none of them is bandwidth-bound, so L2 residency does not
    speed them up. Otherwise a memory-bound kernel at the elementwise efficiency."""
    xs, es = p.sm_rows
    if not xs:
        kind = "softmax_" + pas
        return mem_bound_s(nbytes, p.ew_kinds.get(kind, p.ew_mem), p, p.ew_issue.get(kind, 0.0))
    i = bisect.bisect_left(xs, math.log(max(row, 1)) - 1e-9)
    return nbytes / (p.bw * es[min(i, len(es) - 1)])


def unfused_attention_s(shape: tuple, nbytes: float, p: _Params) -> float:
    """Unfused attention as the kernels it runs, without the last kernel's launch gap: batched GEMMs over the
    batch x heads products (the GEMM model, tiles counted over the whole batch), the row softmax, and
    whatever score traffic remains in ``nbytes`` (dropout, mask) as a memory-bound dropout kernel.

    Forward: scores = Q K^T (seq_q x seq_k x head dim), softmax (reads + writes 2 B per score), context =
    P V (seq_q x head dim x seq_k); the GEMMs carry the score matrix's write and re-read (4 B per score).
    Backward: dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q, the softmax backward reading P and dP and
    writing dS (6 B per score); the GEMMs carry 8 B per score."""
    sq, sk, d, bh, _, pas = shape
    sq, sk, d, bh = int(sq), int(sk), int(d), max(int(bh), 1)
    eb = _IN_BYTES.get(p.prec if p.prec != "fp8" else "bf16", 2)
    scores = float(bh) * sq * sk
    qkvo = eb * float(bh) * d * (2 * sq + 2 * sk)
    if pas == "bwd":
        gemms = (gemm_s(sq, sk, d, p, bh, eb) + gemm_s(sk, d, sq, p, bh, eb) + gemm_s(sq, d, sk, p, bh, eb)
                 + gemm_s(sk, d, sq, p, bh, eb))
        n_kern, carried, soft, qkvo = 4, 4 * eb * scores, 3 * eb * scores, 2 * qkvo
    else:
        gemms = gemm_s(sq, sk, d, p, bh, eb) + gemm_s(sq, d, sk, p, bh, eb)
        n_kern, carried, soft = 2, 2 * eb * scores, 2 * eb * scores
    t = gemms + softmax_s(soft, sk, pas, p)
    rest = nbytes - qkvo - carried - soft
    if rest > 0.01 * scores:  # the dropout (and its mask) over the scores
        kind = "dropout_add_" + pas
        t += mem_bound_s(rest, p.ew_kinds.get(kind, p.ew_mem), p, p.ew_issue.get(kind, 0.0)) + p.launch_s
    return t + n_kern * p.launch_s


def fp8_cast_s(m: int, k: int, p: _Params) -> float:
    """fp8 GEMMs: Transformer Engine's separate cast(-transpose) of the m x k operand (read bf16, write fp8),
    paid by ``fp8_cast_fraction`` of the GEMMs (0 at other precisions)."""
    return p.cast_frac * (3.0 * m * k / (p.bw * p.ew_mem) + p.launch_s) if p.cast_frac else 0.0


def fused_attention_s(shape: tuple, impl: str, p: _Params) -> float:
    """Causal flash-style attention (one kernel) on (seq_q, seq_k, head dim, batch x heads, impl, pass).

    One CTA per (query tile of ``tile_q`` rows, head), each running its key loop: the last causal tile
    reads all seq_k keys, the average one half of them, each tile pays ``kv_overhead`` (backward:
    ``kv_overhead_bwd``) key steps of prologue/epilogue. With ``w`` = CTAs / SMs waves: up to one wave the
    longest CTA sets the time (times ``w ** under_wave_exp`` where co-resident CTAs share an SM), beyond it
    every further wave adds ``wave_cost`` average CTAs. A key step costs the padded head dim
    (``head_dim_pad``) of matmul plus ``softmax_dim`` for the per-score softmax work (exp, max, rescale:
    independent of the head dim); above head dim 128 the kernels run smaller tiles (``big_head_eff``).
    The backward does ``bwd_work`` x the forward's work."""
    sq, sk, d, bh, _, pas = shape
    d_pad = p.a_pad.get(impl, 1) * -(-int(d) // p.a_pad.get(impl, 1))
    eff = p.a_e * p.a_impl.get(impl, 1.0) * (p.a_big.get(impl, 1.0) if d > 128 else 1.0)
    step = 4.0 * p.a_tile * (d_pad + p.a_soft) * (p.a_bwd if pas == "bwd" else 1.0) / (p.peak_attn * eff / p.sm)
    kv0 = p.a_kv0_bwd if pas == "bwd" else p.a_kv0
    waves = bh * -(-int(sq) // p.a_tile) / p.sm
    if waves <= 1.0:
        return step * (sk + kv0) * waves ** p.a_under.get(impl, 0.0)
    return step * ((sk + kv0) + p.a_wave * (waves - 1.0) * (sk / 2.0 + kv0))


# ----------------------------------------------------------------------------- measurements

class _Curve:
    """Achieved rate vs log(size), linear interpolation, clamped at the ends."""

    def __init__(self, points: list[tuple[float, float]]) -> None:
        points.sort()
        self.xs = [math.log(s) for s, _ in points]
        self.rates = [r for _, r in points]

    def rate(self, size: float) -> float:
        x = math.log(size)
        i = bisect.bisect_left(self.xs, x)
        if i <= 0:
            return self.rates[0]
        if i >= len(self.xs):
            return self.rates[-1]
        x0, x1 = self.xs[i - 1], self.xs[i]
        r0, r1 = self.rates[i - 1], self.rates[i]
        if x1 == x0:
            return (r0 + r1) / 2
        w = (x - x0) / (x1 - x0)
        return r0 + w * (r1 - r0)


class Measurements:
    """Kernel timings from a CSV, indexed per (device, op class, precision)."""

    COLUMNS = ("op_class", "device", "precision", "m", "n", "k", "flops", "bytes", "time_us")

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        rows: dict[tuple[str, str, str], list[tuple[tuple | None, float, float, float]]] = {}
        from topologies._util import read_text  # one reader for every input file: size, type, UTF-8 checked

        fh = io.StringIO(read_text(path, UserError, "measurements"), newline="")
        known = set(device_names())
        with fh:
            reader = csv.DictReader(fh)
            missing = [c for c in self.COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"missing CSV column (need {','.join(self.COLUMNS)})", file=self.path,
                                field=missing[0])
            for line, row in enumerate(reader, start=2):
                where = f"line {line}"
                cls = (row["op_class"] or "").strip()
                dev = (row["device"] or "").strip()
                prec = (row["precision"] or "").strip()
                if cls not in OP_CLASSES:
                    raise UserError(f"unknown op class (known: {', '.join(OP_CLASSES)})", file=self.path,
                                    field=f"{where}.op_class", value=cls)
                if dev not in known:
                    raise UserError("unknown GPU (not in the device catalog)", file=self.path,
                                    field=f"{where}.device", value=dev)
                if prec not in PRECISIONS:
                    raise UserError(f"unknown precision (known: {', '.join(PRECISIONS)})", file=self.path,
                                    field=f"{where}.precision", value=prec)
                num = {c: self._num(row, c, where) for c in ("m", "n", "k", "flops", "bytes", "time_us")}
                shape = None
                if all(num[c] is not None for c in ("m", "n", "k")):
                    shape = (int(num["m"]), int(num["n"]), int(num["k"]))
                flops, nbytes = num["flops"], num["bytes"]
                if cls == "gemm":
                    if shape is None and flops is None:
                        raise UserError("a gemm row needs m,n,k or flops", file=self.path, field=f"{where}.flops")
                    if flops is None:
                        flops = 2.0 * shape[0] * shape[1] * shape[2]
                    if nbytes is None and shape is not None:
                        nbytes = _gemm_bytes(shape, prec)
                flops, nbytes = flops or 0.0, nbytes or 0.0
                t = num["time_us"]
                if t is None or t <= 0:
                    raise UserError("time_us must be > 0", file=self.path, field=f"{where}.time_us", value=row["time_us"])
                if flops <= 0 and nbytes <= 0:
                    raise UserError("row has neither flops nor bytes", file=self.path, field=f"{where}.flops")
                rows.setdefault((dev, cls, prec), []).append((shape, flops, nbytes, t * 1e-6))
        self._exact: dict[tuple, dict[tuple, float]] = {}
        self._curves: dict[tuple, tuple[str, _Curve]] = {}
        for key, pts in rows.items():
            if key[1] == "gemm":
                self._exact[key] = {s: t for s, _, _, t in pts if s is not None}
                self._curves[key] = ("flops", _Curve([(f, f / t) for _, f, _, t in pts]))
            elif all(b > 0 for _, _, b, _ in pts):
                self._curves[key] = ("bytes", _Curve([(b, b / t) for _, _, b, t in pts]))
            else:
                self._curves[key] = ("flops", _Curve([(f, f / t) for _, f, _, t in pts if f > 0]))

    def _num(self, row: dict, col: str, where: str) -> float | None:
        text = (row.get(col) or "").strip()
        if not text:
            return None
        try:
            val = float(text)
        except ValueError:
            raise UserError("not a number", file=self.path, field=f"{where}.{col}", value=text) from None
        if val < 0 or not math.isfinite(val):
            raise UserError("must be a finite number >= 0", file=self.path, field=f"{where}.{col}", value=text)
        return val

    def covers(self, device: str, op_class: str, precision: str) -> bool:
        return (device, op_class, precision) in self._curves

    def time_s(self, device: str, op_class: str, precision: str, flops: float, nbytes: float,
               gemm_mnk: tuple | None) -> float | None:
        key = (device, op_class, precision)
        curve = self._curves.get(key)
        if curve is None:
            return None
        if gemm_mnk is not None and key in self._exact:
            hit = self._exact[key].get(tuple(gemm_mnk[:3]))
            if hit is not None:
                return hit
        basis, c = curve
        size = flops if basis == "flops" else nbytes
        if size <= 0:
            return None  # no work on the curve's axis: let the analytical model answer
        return size / c.rate(size)


def _gemm_bytes(mnk: tuple, prec: str) -> float:
    m, n, k = mnk
    return float((m * k + k * n) * _IN_BYTES[prec] + m * n * _OUT_BYTES[prec])


# ----------------------------------------------------------------------------- the model

def attention_impl(impl: str, family: str) -> str:
    """``auto`` -> the attention kernel frameworks run by default on this generation: cuDNN fused
    attention on Hopper/Blackwell (Transformer Engine's default backend there), FlashAttention-2 on
    Ampere/Ada and AMD (ROCm flash-attention), unfused on Volta (no flash kernels for sm70)."""
    if impl != "auto":
        return impl
    if family in ("hopper", "blackwell"):
        return "fused"
    return "unfused" if family == "volta" else "flash"


# Memory-bound kinds the table holds only as forward+backward: (forward bytes/elem, fwd+bwd bytes/elem)
_FWDBWD = {"layernorm": ("layernorm", 4, 10), "rmsnorm": ("layernorm", 4, 10), "gelu": ("gelu", 4, 10)}
# Kinds without their own backward row: the backward costs `factor` x the forward kernel at half its bytes
_BWD_AS_FWD = {"dropout_add_bwd": ("dropout_add_fwd", 1.0), "swiglu_bwd": ("swiglu_fwd", 2.0)}
_ADAM_TABLE_BYTES, _ADAM_IR_BYTES = 32, 30  # table: fp32 p, g, m, v read and written; IR: bf16 param copy

class ComputeModel:
    """Times compute ops; memoized, since the simulator asks for the same op shapes millions of times."""

    def __init__(self, measurements: str | Path | None = None, efficiency: str | Path | None = None,
                 tables: str | Path | None = None, tables_device: str = "H100-SXM") -> None:
        """``measurements``: a generic CSV (see above). ``tables``: ``builtin`` | ``none`` | a folder of
        measured tables taken on ``tables_device`` (None = analytical only)."""
        self.efficiency = load_efficiency(efficiency or EFFICIENCY_FILE)
        self.measurements = Measurements(measurements) if measurements else None
        self.tables_spec = None if tables is None or str(tables) == "none" else str(tables)
        self._tables: dict[str, _measured.MeasuredTables | None] = {}
        if self.tables_spec not in (None, "builtin"):
            dev = get_device(tables_device)
            self._tables[dev.name] = _measured.MeasuredTables(self.tables_spec, dev)
        self._params: dict[tuple[Device, str], _Params] = {}
        self._cache: dict[tuple, int] = {}
        self._by_id: dict[tuple[int, int, str], tuple] = {}

    def params(self, device: Device, precision: str) -> _Params:
        key = (device, precision)
        p = self._params.get(key)
        if p is None:
            if precision not in PRECISIONS:
                raise UserError(f"unknown precision (known: {', '.join(PRECISIONS)})", field="precision",
                                value=precision)
            eff = self.efficiency.get(device.family) or self.efficiency["default"]
            p = self._params[key] = _Params(eff, device, precision)
        return p

    def op_time_ns(self, op, device: Device, precision: str) -> int:
        """Integer ns for one IR compute op (a fused op = the sum of its kernels)."""
        kernels = op.kernels
        if kernels:
            # Fast path: builders share one kernels tuple across identical layers; identity lookup avoids
            # re-hashing a long tuple. The entry holds references, so the ids cannot be recycled.
            fast = self._by_id.get((id(kernels), id(device), precision))
            if fast is not None and fast[0] is kernels and fast[1] is device:
                return fast[2]
        key = (kernels if kernels else (op.op_class, op.flops, op.bytes, op.gemm_mnk), device, precision)
        hit = self._cache.get(key)
        if hit is not None:
            if kernels:
                self._by_id[(id(kernels), id(device), precision)] = (kernels, device, hit)
            return hit
        if kernels:
            total = 0.0
            for kern in kernels:
                cls, flops, nbytes, mnk = kern
                total += self.kernel_time_ns(cls, flops, nbytes, mnk, device, precision)
        else:
            total = self.kernel_time_ns(op.op_class, op.flops, op.bytes, op.gemm_mnk, device, precision)
        ns = int(round(total))
        self._cache[key] = ns
        if kernels:
            self._by_id[(id(kernels), id(device), precision)] = (kernels, device, ns)
        return ns

    def tables_for(self, device: Device) -> "_measured.MeasuredTables | None":
        if device.name not in self._tables:
            self._tables[device.name] = (_measured.resolve("builtin", device) if self.tables_spec == "builtin"
                                         else None)
        return self._tables[device.name]

    def source(self, device: Device) -> str:
        """Where this device's kernel times come from (for summaries)."""
        t = self.tables_for(device)
        return f"measured ({t.folder.name if self.tables_spec == 'builtin' else t.folder})" if t else "analytical"

    def kernel_time_ns(self, op_class: str, flops: float, bytes: float, gemm_mnk: tuple | None,
                       device: Device, precision: str) -> float:
        """One kernel's time in ns (float): measured tables, then a generic CSV, then the roofline."""
        p = self.params(device, precision)
        if gemm_mnk is not None and (self.tables_spec is not None or self._tables):
            tab = self.tables_for(device)
            if tab is not None:
                t = self._measured_s(tab, op_class, flops, bytes, gemm_mnk, device, p)
                if t is not None:
                    return t * 1e9
        if self.measurements is not None:
            for prec in (precision, p.prec):
                if self.measurements.covers(device.name, op_class, prec):
                    t = self.measurements.time_s(device.name, op_class, prec, flops, bytes, gemm_mnk)
                    if t is not None:
                        return t * 1e9
                    break
        return self._analytic_s(op_class, flops, bytes, gemm_mnk, p) * 1e9

    def _measured_s(self, tab, cls: str, flops: float, nbytes: float, shape: tuple, device: Device,
                    p: _Params) -> float | None:
        """A tagged kernel's time from the device's measured tables, or None where they do not cover it."""
        if cls == "gemm" and len(shape) == 4:
            M, N, K, pas = shape
            t = tab.gemm_time_s(p.prec, pas, M, N, K)
            if t is None:
                return None
            t *= flops / (2.0 * M * N * K)  # a grouped GEMM (MoE experts) carries a multiple of its shape
            return t + fp8_cast_s(M, K, p)
        if cls == "attention" and len(shape) == 6 and tab.attn is not None:
            sq, sk, d, bh, impl, pas = shape
            kind = _measured.ATTN_IMPL[attention_impl(impl, device.family)]
            factor = 1.0
            if not tab.attn.covers(kind, pas):
                if pas != "bwd" or not tab.attn.covers(kind, "fwd"):
                    return None
                # unfused backward is not in the table: two bmm per forward bmm and the softmax/dropout
                # backward re-reading the s^2 matrices: twice the forward (the 2x FLOP rule of thumb)
                pas, factor = "fwd", 2.0
            return factor * tab.attn.time_s(kind, pas, int(bh), int(sk), int(d)) * sq / sk
        if cls in ("elementwise", "optimizer") and len(shape) == 1 and tab.ew is not None and nbytes > 0:
            return self._ew_measured_s(tab.ew, shape[0], nbytes)
        return None

    @staticmethod
    def _ew_measured_s(ew, kind: str, nbytes: float) -> float | None:
        if kind == "adam":
            kind, nbytes = "adam_fused_fp32_step", nbytes * _ADAM_TABLE_BYTES / _ADAM_IR_BYTES
        if kind in ("cross_entropy_fwd", "cross_entropy_bwd") and ew.covers("cross_entropy_fwdbwd"):
            # the table times forward+backward on the whole fwd+bwd bytes; split by the IR's byte shares
            total = nbytes * (3.0 if kind == "cross_entropy_fwd" else 1.5)
            return ew.time_s("cross_entropy_fwdbwd", total) * nbytes / total
        if ew.covers(kind):
            return ew.time_s(kind, nbytes)
        base, _, pas = kind.rpartition("_")
        if pas == "bwd" and base in _FWDBWD:
            src, fb, fbb = _FWDBWD[base]
            if ew.covers(src + "_fwdbwd") and ew.covers(src + "_fwd"):
                n = nbytes / (2 * fb)  # elements (the backward kernel carries twice the forward's bytes)
                return max(ew.time_s(src + "_fwdbwd", fbb * n) - ew.time_s(src + "_fwd", fb * n),
                           ew.time_s(src + "_fwd", fb * n))
        if kind in _BWD_AS_FWD and ew.covers(_BWD_AS_FWD[kind][0]):
            src, factor = _BWD_AS_FWD[kind]
            return factor * ew.time_s(src, nbytes / 2)
        return None

    def _analytic_s(self, cls: str, flops: float, nbytes: float, mnk: tuple | None, p: _Params) -> float:
        if flops <= 0 and nbytes <= 0:
            return 0.0
        if cls == "gemm":
            if mnk is not None:
                m, n, k = mnk[:3]
                mnk = (m, n, k)
                eff = gemm_efficiency(m, n, k, p)
                if nbytes <= 0:
                    nbytes = _gemm_bytes(mnk, p.prec)
            else:
                eff = p.g_e * p.g_xd / (p.g_xd + p.g_xh)
            # operand loads overlap the MMAs only partly (the output tile's store does not): a soft maximum
            tc, tm = flops / (p.peak * eff), nbytes / (p.bw * p.g_mem)
            t = (tc ** p.g_blend + tm ** p.g_blend) ** (1.0 / p.g_blend)
            if mnk is not None:
                t += fp8_cast_s(mnk[0], mnk[2], p)
        elif cls == "attention":
            impl = attention_impl(mnk[4], p.family) if mnk is not None and len(mnk) == 6 else "flash"
            if impl == "unfused":  # its GEMMs run at the attention precision (bf16 in fp8 training)
                if mnk[4] == "auto":  # chosen here (Volta), not by the compiler: add the s^2 score traffic the
                    # compiler gives an explicit 'unfused' (workload/costs.py attn_core: 13 B per score forward,
                    # twice that in backward), so that auto and unfused time the same kernels
                    nbytes += (26.0 if mnk[5] == "bwd" else 13.0) * float(mnk[3]) * float(mnk[0]) * float(mnk[1])
                q = p if p.attn_prec == p.prec else self.params(p.device, p.attn_prec)
                t = unfused_attention_s(mnk, nbytes, q)
            elif mnk is not None and len(mnk) == 6:
                t = fused_attention_s(mnk, impl, p)
            else:  # attention given only as FLOPs (Megatron's full-s^2 count): the many-wave rate at 2k tokens
                eff = p.a_e * p.a_impl.get(impl, 1.0) * 128 / (128 + p.a_soft) / (p.a_wave * (0.5 + p.a_kv0 / 2048))
                t = max(flops / (p.peak_attn * eff), nbytes / (p.bw * p.a_mem))
        elif cls == "layer":
            ce, me = p.mem["layer"]
            t = max(flops / (p.peak * ce), nbytes / (p.bw * me))
        elif cls in _MEM_CLASSES:
            ce, me = p.mem[cls]
            kind = mnk[0] if mnk is not None and len(mnk) == 1 else None
            me = p.ew_kinds.get(kind, me)
            if cls == "elementwise":  # activations flow kernel to kernel: the L2 regime applies
                tm = mem_bound_s(nbytes, me, p, p.ew_issue.get(kind, 0.0))
            else:  # optimizer state / embedding tables were last touched an iteration ago: they stream
                tm = nbytes / (p.bw * me)
            t = max(flops / (p.peak_vec * ce), tm)
        else:
            raise UserError(f"unknown op class (known: {', '.join(OP_CLASSES)})", field="op_class", value=cls)
        return t + p.launch_s

    def gemm_efficiency(self, m: int, n: int, k: int, device: Device, precision: str) -> float:
        """Fraction of the precision's peak the analytical model gives a GEMM (for reports and checks)."""
        return gemm_efficiency(m, n, k, self.params(device, precision))

    def cache_info(self) -> dict[str, Any]:
        return {"entries": len(self._cache)}
