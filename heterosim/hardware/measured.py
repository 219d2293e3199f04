"""Measured kernel tables and the shape-space predictor that interpolates them (the default on H100).

The "sampling-based" approach (operator-level decomposition, times interpolated from a set of measured
shapes): a device's table is three CSVs in one folder, the columns documented in
``measured/h100-sxm/README.md`` (the format HeteroSim ships and ``heterosim calibrate`` reads)::

    gemm.csv         dtype,pass,m,n,k,ms                 (m,n,k = the forward shape X[m,k] W[n,k]^T)
    attention.csv    kind,causal,batch,heads,seq,head_dim,fwd_ms,bwd_ms
    elementwise.csv  kind,shape,ms,bytes

(other columns are ignored). Predictors, all in shape space, not FLOPs alone:

* GEMM, per dtype, by (M, N, K) of the product that runs (dgrad of X W^T is (m, k, n), wgrad (k, n, m))
  and pass: a locally linear fit of log(time / roofline) over the 12 nearest measured shapes in
  log2(M, N, K) (+ a pass offset), so wave quantisation and tile effects between grid points follow
  their neighbours instead of a global curve;
* attention, per implementation and pass, by (waves of CTAs, sequence, head dim) for fused kernels and
  (batch x heads, sequence, head dim) for unfused ones: a local plane of log(time / baseline), the
  baseline being the kernel's critical path or total work (``AttentionPredictor``);
* memory-bound ops, per kind, by bytes: time interpolated log-log between measured sizes (constant
  achieved bandwidth beyond the ends).

An exact measured shape returns its measured time.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hscommon.errors import UserError

BUILTIN_DIR = Path(__file__).parent / "measured"
BUILTIN = {"H100-SXM": BUILTIN_DIR / "h100-sxm"}
"""Devices with a shipped table (measured on one H100 80GB HBM3 SXM, see its README)."""

GEMM_DTYPES = ("bf16", "fp16", "fp8")
PASSES = ("fwd", "dgrad", "wgrad")
ATTN_KINDS = ("flash", "cudnn", "unfused_fp16")
ATTN_IMPL = {"flash": "flash", "fused": "cudnn", "unfused": "unfused_fp16"}
"""Scenario attention implementation -> the table's kind."""
EW_KINDS = ("layernorm_fwd", "layernorm_fwdbwd", "rmsnorm_fwd", "dropout_add_fwd", "gelu_fwd", "gelu_fwdbwd",
            "swiglu_fwd", "cross_entropy_fwdbwd", "adam_fused_fp32_step")
_NEIGHBOURS_GEMM = 12
_NEIGHBOURS_ATTN = 8
_ATTN_TILE_Q = 128   # query rows per CTA of FlashAttention-2 / cuDNN fused attention at head dim 96-160
                     # (the H100 table's one-wave knee sits at batch x heads x seq / 128 = 132 SMs)
_PASS_WEIGHT = 2.0   # distance between passes, in log2 units of a shape dimension
_RIDGE = 1e-2        # keeps the local slope finite where neighbours are nearly collinear


def actual_shape(pas: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """The (M, N, K) product a pass of the linear layer X[m,k] W[n,k]^T runs (costs.gemm_bwd's convention)."""
    return {"fwd": (m, n, k), "dgrad": (m, k, n), "wgrad": (k, n, m)}[pas]


# ----------------------------------------------------------------------------- reading

def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    try:
        fh = open(path, newline="")
    except OSError as exc:
        raise UserError(f"cannot read measurements ({exc.strerror})", file=str(path)) from None
    with fh:
        reader = csv.DictReader(fh)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise UserError(f"missing CSV column (need {','.join(required)})", file=str(path), field=missing[0])
        return [(line, row) for line, row in enumerate(reader, start=2)]


def _num(path: Path, line: int, row: dict, col: str, *, positive: bool = True, integer: bool = False) -> float:
    text = (row.get(col) or "").strip()
    try:
        val = float(text)
    except ValueError:
        raise UserError("not a number", file=str(path), field=f"row {line}.{col}", value=text) from None
    if not math.isfinite(val) or (val <= 0 if positive else val < 0):
        raise UserError("must be a finite number > 0" if positive else "must be a finite number >= 0",
                        file=str(path), field=f"row {line}.{col}", value=text)
    if integer and val != int(val):
        raise UserError("must be an integer", file=str(path), field=f"row {line}.{col}", value=text)
    return val


def _choice(path: Path, line: int, row: dict, col: str, known: tuple[str, ...]) -> str:
    val = (row.get(col) or "").strip()
    if val not in known:
        raise UserError(f"unknown {col} (known: {', '.join(known)})", file=str(path), field=f"row {line}.{col}",
                        value=val)
    return val


def read_gemm(path: Path) -> list[tuple[str, str, int, int, int, float]]:
    """(dtype, pass, m, n, k, seconds) per row."""
    out = []
    for line, row in _rows(path, ("dtype", "pass", "m", "n", "k", "ms")):
        dt = _choice(path, line, row, "dtype", GEMM_DTYPES)
        ps = _choice(path, line, row, "pass", PASSES)
        m, n, k = (int(_num(path, line, row, c, integer=True)) for c in ("m", "n", "k"))
        out.append((dt, ps, m, n, k, _num(path, line, row, "ms") * 1e-3))
    return out


def read_attention(path: Path) -> list[tuple[str, int, int, int, int, int, float, float | None]]:
    """(kind, causal, batch, heads, seq, head_dim, fwd s, bwd s or None) per row."""
    out = []
    for line, row in _rows(path, ("kind", "causal", "batch", "heads", "seq", "head_dim", "fwd_ms", "bwd_ms")):
        kind = _choice(path, line, row, "kind", ATTN_KINDS)
        causal = _choice(path, line, row, "causal", ("0", "1")) == "1"
        b, h, s, d = (int(_num(path, line, row, c, integer=True)) for c in ("batch", "heads", "seq", "head_dim"))
        fwd = _num(path, line, row, "fwd_ms") * 1e-3
        bwd = _num(path, line, row, "bwd_ms") * 1e-3 if (row.get("bwd_ms") or "").strip() else None
        out.append((kind, int(causal), b, h, s, d, fwd, bwd))
    return out


def read_elementwise(path: Path) -> list[tuple[str, float, float]]:
    """(kind, bytes, seconds) per row."""
    out = []
    for line, row in _rows(path, ("kind", "ms", "bytes")):
        kind = _choice(path, line, row, "kind", EW_KINDS)
        out.append((kind, _num(path, line, row, "bytes"), _num(path, line, row, "ms") * 1e-3))
    return out


# ----------------------------------------------------------------------------- predictors

def _local_linear(X: np.ndarray, y: np.ndarray, q: np.ndarray, coords: np.ndarray, qc: np.ndarray,
                  k: int) -> float:
    """Weighted least-squares plane through the k nearest points (distance on X), evaluated at q."""
    d = np.sqrt(((X - q) ** 2).sum(axis=1))
    k = min(k, len(d))
    nn = np.argpartition(d, k - 1)[:k] if k < len(d) else np.arange(len(d))
    w = np.sqrt(1.0 / (d[nn] + 0.5) ** 2)[:, None]
    A = np.c_[np.ones(len(nn)), coords[nn] - qc]
    reg = _RIDGE * np.eye(A.shape[1])
    reg[0, 0] = 0.0
    coef = np.linalg.solve((A * w).T @ (A * w) + reg, (A * w).T @ (w[:, 0] * y[nn]))
    return float(coef[0])


class GemmPredictor:
    """GEMM time by (M, N, K) and pass, per dtype: local plane of log(time / roofline) in log2 shape space."""

    def __init__(self, rows: list[tuple[str, str, int, int, int, float]], peak_flops: dict[str, float],
                 hbm_Bps: float) -> None:
        self.peak, self.bw = peak_flops, hbm_Bps
        self.exact: dict[tuple, float] = {}
        self._data: dict[str, tuple] = {}
        by_dt: dict[str, list] = {}
        for dt, ps, m, n, k, t in rows:
            M, N, K = actual_shape(ps, m, n, k)
            by_dt.setdefault(dt, []).append((ps, M, N, K, t))
            self.exact[(dt, ps, M, N, K)] = t
        for dt, pts in by_dt.items():
            S = np.array([p[1:4] for p in pts], dtype=float)
            passes = np.array([PASSES.index(p[0]) for p in pts])
            t = np.array([p[4] for p in pts])
            floor = float(t.min())  # the smallest kernel measured: launch/ramp floor of the roofline
            base = self._base(dt, S, floor)
            coords = np.log2(S)
            X = np.c_[coords, _PASS_WEIGHT * (passes[:, None] == np.arange(3))]
            self._data[dt] = (X, coords, np.log(t) - base, floor, set(passes.tolist()))

    def _base(self, dt: str, S: np.ndarray, floor: float) -> np.ndarray:
        eb = 1 if dt == "fp8" else 2
        flops = 2.0 * S.prod(axis=1)
        nbytes = (S[:, 0] * S[:, 2] + S[:, 1] * S[:, 2]) * eb + S[:, 0] * S[:, 1] * 2
        return np.log(np.maximum(flops / self.peak[dt], nbytes / self.bw) + floor)

    def dtypes(self) -> list[str]:
        return list(self._data)

    def time_s(self, dt: str, pas: str, M: int, N: int, K: int) -> float:
        hit = self.exact.get((dt, pas, M, N, K))
        if hit is not None:
            return hit
        X, coords, y, floor, have = self._data[dt]
        pi = PASSES.index(pas) if PASSES.index(pas) in have else 0  # fp8 tables hold the forward pass only
        qc = np.log2(np.array([M, N, K], dtype=float))
        q = np.r_[qc, _PASS_WEIGHT * (np.arange(3) == pi)]
        base = float(self._base(dt, np.array([[M, N, K]], dtype=float), floor)[0])
        return math.exp(_local_linear(X, y, q, coords, qc, _NEIGHBOURS_GEMM) + base)


class AttentionPredictor:
    """Attention time per implementation and pass by (batch x heads per rank, sequence, head dim).

    Interpolates in the variables the kernels' time collapses onto (checked on the H100 table):

    * fused kernels (flash, cudnn) launch one CTA per (query tile of 128 rows, head), so the GPU fills
      in *waves* ``w = bh x ceil(seq / 128) / SMs``; below one wave the time is the longest CTA's (the
      last causal query tile reads the whole sequence: ~ seq x head dim), above it the total work
      (~ bh x seq^2 x head dim, i.e. ~ w x seq x head dim). The baseline is ``seq x head dim x max(1, w)``
      and measurements at different sequences fall on one curve of w (cuDNN forward: 0.092 ns per
      seq x dim unit up to w = 1 at 2k, 4k and 8k). Coordinates (log2 w, log2 seq, 3 log2 head dim,
      2 [w > 1]): a head dim selects another tile configuration, so other head dims are far
      neighbours, and one wave (critical-path bound) and several (throughput bound) are two regimes
      with a step between them (FlashAttention-2 forward: +55% from w = 0.97 to 1.21; FA2, two CTAs per
      SM, steps again after w = 2), so points across those boundaries are far neighbours too;
    * unfused attention is memory-bound on the s^2 score matrices, independent of head dim: baseline
      ``bh x seq^2``, coordinates (log2 bh, 2 log2 seq, log2 head dim) -- whether the scores stay in
      the 50 MB L2 depends on the sequence, so other sequences are far neighbours.

    The residual log(time / baseline) is a weighted plane through the 8 nearest measured points (as
    for GEMMs), evaluated at the query clamped to the measured range (constant efficiency beyond it)."""

    def __init__(self, rows: list[tuple], sm_count: int = 132) -> None:
        self.sm = max(int(sm_count), 1)
        self.exact: dict[tuple, float] = {}
        pts: dict[tuple[str, str], list] = {}
        for kind, causal, b, h, s, d, fwd, bwd in rows:
            for ps, t in (("fwd", fwd), ("bwd", bwd)):
                if t is None:
                    continue
                pts.setdefault((kind, ps), []).append((b * h, s, d, t))
                self.exact[(kind, ps, b * h, s, d)] = t
        self._data = {}
        for (kind, ps), p in pts.items():
            X = np.array([self._coords(kind, bh, s, d) for bh, s, d, _ in p])
            y = np.array([math.log(t) - self._log_base(kind, bh, s, d) for bh, s, d, t in p])
            self._data[(kind, ps)] = (X, y, X.min(axis=0), X.max(axis=0))

    def _waves(self, bh: int, s: int) -> float:
        return bh * -(-s // _ATTN_TILE_Q) / self.sm

    def _coords(self, kind: str, bh: int, s: int, d: int) -> list[float]:
        if kind == "unfused_fp16":
            return [math.log2(bh), 2.0 * math.log2(s), math.log2(d), 0.0, 0.0]
        w = self._waves(bh, s)
        # FlashAttention-2 keeps two CTAs per SM: its time is flat from one to two waves, steps again after
        return [math.log2(w), math.log2(s), 3.0 * math.log2(d), 2.0 * (w > 1.0), 2.0 * (kind == "flash" and w > 2.0)]

    def _log_base(self, kind: str, bh: int, s: int, d: int) -> float:
        if kind == "unfused_fp16":
            return math.log(bh * float(s) * s)
        return math.log(float(s) * d * max(1.0, self._waves(bh, s)))

    def covers(self, kind: str, ps: str) -> bool:
        return (kind, ps) in self._data

    def time_s(self, kind: str, ps: str, bh: int, seq: int, head_dim: int) -> float:
        """One call on ``bh`` (batch x heads) sequences of ``seq`` (the table's causality)."""
        hit = self.exact.get((kind, ps, bh, seq, head_dim))
        if hit is not None:
            return hit
        X, y, lo, hi = self._data[(kind, ps)]
        q = np.clip(np.array(self._coords(kind, bh, seq, head_dim)), lo, hi)
        return math.exp(_local_linear(X, y, q, X, q, _NEIGHBOURS_ATTN) + self._log_base(kind, bh, seq, head_dim))


class ElementwisePredictor:
    """Memory-bound op time by bytes, per kind: log-log interpolation, constant bandwidth beyond the ends."""

    def __init__(self, rows: list[tuple[str, float, float]]) -> None:
        acc: dict[str, dict[float, list[float]]] = {}
        for kind, nbytes, t in rows:
            acc.setdefault(kind, {}).setdefault(nbytes, []).append(t)
        self._data = {}
        for kind, by in acc.items():
            xs = sorted(by)
            self._data[kind] = (np.log(xs), np.log([sum(by[x]) / len(by[x]) for x in xs]))

    def covers(self, kind: str) -> bool:
        return kind in self._data

    def time_s(self, kind: str, nbytes: float) -> float:
        lx, ly = self._data[kind]
        x = math.log(nbytes)
        if len(lx) == 1 or x <= lx[0]:
            return math.exp(ly[0] + x - lx[0])
        if x >= lx[-1]:
            return math.exp(ly[-1] + x - lx[-1])
        return math.exp(float(np.interp(x, lx, ly)))


# ----------------------------------------------------------------------------- one device's tables

class MeasuredTables:
    """The three predictors of one device, from a folder of CSVs (``builtin`` = the shipped H100 table)."""

    def __init__(self, folder: str | Path, device) -> None:
        self.folder = Path(folder)
        self.device = device
        if not self.folder.is_dir():
            raise UserError("measurements must be a folder with gemm.csv, attention.csv, elementwise.csv",
                            file=str(self.folder))
        parts = {name: self.folder / f"{name}.csv" for name in ("gemm", "attention", "elementwise")}
        if not any(p.exists() for p in parts.values()):
            raise UserError("no gemm.csv, attention.csv or elementwise.csv in the measurements folder",
                            file=str(self.folder))
        self.gemm_rows = read_gemm(parts["gemm"]) if parts["gemm"].exists() else []
        self.attn_rows = read_attention(parts["attention"]) if parts["attention"].exists() else []
        self.ew_rows = read_elementwise(parts["elementwise"]) if parts["elementwise"].exists() else []
        self.fit(self.gemm_rows, self.attn_rows, self.ew_rows)

    def fit(self, gemm_rows, attn_rows, ew_rows) -> None:
        dev = self.device
        peaks = {dt: dev.peak_flops(dt) for dt in GEMM_DTYPES}
        self.gemm = GemmPredictor(gemm_rows, peaks, dev.hbm_Bps) if gemm_rows else None
        self.attn = AttentionPredictor(attn_rows, dev.sm_count) if attn_rows else None
        self.ew = ElementwisePredictor(ew_rows) if ew_rows else None

    def gemm_time_s(self, precision: str, pas: str, M: int, N: int, K: int) -> float | None:
        if self.gemm is None:
            return None
        dts = self.gemm.dtypes()
        dt = precision if precision in dts else ("bf16" if precision == "fp16" and "bf16" in dts else
                                                  "fp16" if precision == "bf16" and "fp16" in dts else None)
        if dt is None:
            return None
        return self.gemm.time_s(dt, pas, M, N, K)


def resolve(spec: str | Path | None, device) -> MeasuredTables | None:
    """``builtin`` (the shipped table for this device, if any) | a folder | None/``none``."""
    if spec is None or str(spec) == "none":
        return None
    if str(spec) == "builtin":
        folder = BUILTIN.get(device.name)
        return _builtin(device) if folder is not None else None
    return MeasuredTables(spec, device)


def cli_spec(value: str, flag: str = "--measurements") -> str:
    """A ``--measurements`` value as the scenario field takes it: builtin | none | an absolute folder path
    (a path on the command line is relative to the working directory, not to the scenario file)."""
    if value in ("builtin", "none"):
        return value
    p = Path(value).expanduser().resolve()
    if not p.is_dir():
        raise UserError("not a folder of measured tables (gemm.csv, attention.csv, elementwise.csv); "
                        "or builtin | none", field=flag, value=value)
    return str(p)


_BUILTIN_CACHE: dict = {}


def _builtin(device) -> MeasuredTables:
    t = _BUILTIN_CACHE.get(device)
    if t is None:
        t = _BUILTIN_CACHE[device] = MeasuredTables(BUILTIN[device.name], device)
    return t


# ----------------------------------------------------------------------------- held-out error

def held_out_error(tables: MeasuredTables, train_frac: float = 0.8, seed: int = 0) -> dict[str, dict]:
    """Fit on ``train_frac`` of each op class's rows, predict the rest: {class: {rows, mape, max}}. Each
    table gets its own random stream (seed, table), so adding rows to one table leaves the others' splits."""
    streams = iter(range(3))

    def split(rows):
        idx = np.random.default_rng([seed, next(streams)]).permutation(len(rows))
        ntr = int(round(train_frac * len(rows)))
        return [rows[i] for i in sorted(idx[:ntr])], [rows[i] for i in sorted(idx[ntr:])]

    errs: dict[str, list[float]] = {}
    dev = tables.device
    g_tr, g_te = split(tables.gemm_rows)
    a_tr, a_te = split(tables.attn_rows)
    e_tr, e_te = split(tables.ew_rows)
    peaks = {dt: dev.peak_flops(dt) for dt in GEMM_DTYPES}
    if g_tr:
        gp = GemmPredictor(g_tr, peaks, dev.hbm_Bps)
        for dt, ps, m, n, k, t in g_te:
            errs.setdefault(f"gemm {dt}", []).append(abs(gp.time_s(dt, ps, *actual_shape(ps, m, n, k)) - t) / t)
    if a_tr:
        ap = AttentionPredictor(a_tr, dev.sm_count)
        for kind, causal, b, h, s, d, fwd, bwd in a_te:
            for ps, t in (("fwd", fwd), ("bwd", bwd)):
                if t is not None and ap.covers(kind, ps):
                    errs.setdefault(f"attention {kind}", []).append(abs(ap.time_s(kind, ps, b * h, s, d) - t) / t)
    if e_tr:
        ep = ElementwisePredictor(e_tr)
        for kind, nbytes, t in e_te:
            if ep.covers(kind):
                errs.setdefault("memory-bound", []).append(abs(ep.time_s(kind, nbytes) - t) / t)
    return {c: {"rows": len(v), "mape": float(np.mean(v)), "max": float(np.max(v))} for c, v in errs.items()}
