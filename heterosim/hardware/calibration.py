"""Reference kernel lists of one dense transformer layer, to sanity-check the compute model.

Megatron-style layer with tensor parallelism ``tp`` and sequence parallelism (norms and dropout run on
``s/tp`` tokens). Not the workload builder (``heterosim.workload`` owns the real IR); this is the yard
stick that the calibration tests and reports use to turn kernel times into layer-level MFU.
"""
from __future__ import annotations

from dataclasses import dataclass

from heterosim.hardware.catalog import Device
from heterosim.hardware.compute import ComputeModel

Kernel = tuple[str, float, float, "tuple[int, int, int] | None"]
ACT_BYTES = 2  # bf16/fp16 activations (fp8 runs keep activations in bf16 between GEMMs)


@dataclass(frozen=True)
class LayerShape:
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    swiglu: bool = False

    @classmethod
    def of(cls, model) -> "LayerShape":
        """From a ModelConfig (or anything with its fields)."""
        return cls(model.hidden_size, model.num_attention_heads, model.num_kv_heads or model.num_attention_heads,
                   model.ffn_hidden_size, model.activation == "swiglu")


def _gemm(m: int, n: int, k: int, batch: int = 1) -> Kernel:
    return ("gemm", 2.0 * batch * m * n * k, 0.0 if batch == 1 else float(batch * (m * k + k * n + m * n) * ACT_BYTES),
            (m, n, k))


def _ew(nbytes: float, flops: float = 0.0) -> Kernel:
    return ("elementwise", flops, float(nbytes), None)


def layer_kernels(L: LayerShape, mb: int, seq: int, tp: int, *, flash: bool = True, causal: bool = True,
                  phase: str = "fwd") -> list[Kernel]:
    """Kernels of one layer's forward (``phase='fwd'``), backward (``'bwd'``) or attention core
    (``'attn_core'``, what selective recomputation re-runs) on one TP rank."""
    h, d = L.hidden, L.hidden // L.heads
    heads_l, kv_l = L.heads // tp, max(L.kv_heads // tp, 1)
    tok, tok_sp = mb * seq, mb * seq // tp
    qkv_n = (heads_l + 2 * kv_l) * d
    ffn_n = L.ffn // tp
    fc1_n = 2 * ffn_n if L.swiglu else ffn_n
    norm = _ew(2 * tok_sp * h * ACT_BYTES, 5 * tok_sp * h)
    resid = _ew(3 * tok_sp * h * ACT_BYTES, 2 * tok_sp * h)
    act = _ew((fc1_n + ffn_n) * tok * ACT_BYTES, 8 * tok * ffn_n)
    rope = [_ew(2 * tok * (heads_l + kv_l) * d * ACT_BYTES, 4 * tok * (heads_l + kv_l) * d)] if L.swiglu else []
    gemms = [(tok, qkv_n, h), (tok, h, heads_l * d), (tok, fc1_n, h), (tok, h, ffn_n)]
    # full s^2 counted and the backward as 2x (the workload compiler's convention, costs.attn_core); the
    # compute model's attention efficiencies are fitted against that count (efficiency.yaml, hopper)
    attn_flops = 4.0 * mb * heads_l * seq * seq * d
    attn_shape = lambda ps: (seq, seq, d, mb * heads_l, "flash", ps)
    attn_io = float(tok * (qkv_n + heads_l * d) * ACT_BYTES)
    score_bytes = float(mb * heads_l * seq * seq * ACT_BYTES)
    if phase == "attn_core":  # what selective recomputation re-runs in backward
        if flash:
            return [("attention", attn_flops, attn_io, attn_shape("fwd"))]
        return [_gemm(seq, seq, d, mb * heads_l), _ew(2 * score_bytes, 5 * score_bytes / ACT_BYTES),
                _ew(2.5 * score_bytes), _gemm(seq, d, seq, mb * heads_l)]
    if phase == "fwd":
        if flash:
            attn = [("attention", attn_flops, attn_io, attn_shape("fwd"))]
        else:  # bmm, fused scale-mask-softmax, dropout, bmm (Megatron 2022)
            attn = [_gemm(seq, seq, d, mb * heads_l), _ew(2 * score_bytes, 5 * score_bytes / ACT_BYTES),
                    _ew(2.5 * score_bytes), _gemm(seq, d, seq, mb * heads_l)]
        return [norm, _gemm(*gemms[0]), *rope, *attn, _gemm(*gemms[1]), resid, norm, _gemm(*gemms[2]), act,
                _gemm(*gemms[3]), resid]
    if phase != "bwd":
        raise ValueError(phase)
    out: list[Kernel] = []
    for m, n, k in reversed(gemms):  # dgrad (m x k from m x n) and wgrad (k x n from m)
        out += [_gemm(m, k, n), _gemm(k, n, m)]
    if flash:  # FlashAttention backward (2x counted; its 2.5x real work is in the fitted bwd efficiency)
        out.append(("attention", 2.0 * attn_flops, 2.0 * attn_io, attn_shape("bwd")))
    else:
        b = mb * heads_l
        out += [_gemm(seq, seq, d, b), _gemm(seq, d, seq, b), _gemm(seq, d, seq, b), _gemm(seq, seq, d, b),
                _ew(3.5 * score_bytes), _ew(3 * score_bytes)]
    out += [_ew(2 * b_) for b_ in (norm[2], norm[2], resid[2], resid[2], act[2])] + [_ew(r[2] * 2) for r in rope]
    return out


def layer_model_flops(L: LayerShape, mb: int, seq: int) -> float:
    """Forward+backward model FLOPs of one layer, whole layer (all TP ranks), Megatron's convention
    (full, non-causal attention; no recomputation)."""
    h, d = L.hidden, L.hidden // L.heads
    kv_dim = L.kv_heads * d
    ffn_mats = 3 if L.swiglu else 2
    matmul_params = h * (h + 2 * kv_dim) + h * h + ffn_mats * h * L.ffn
    fwd = 2.0 * mb * seq * matmul_params + 4.0 * mb * seq * seq * h
    return 3.0 * fwd


def layer_time_ns(cm: ComputeModel, dev: Device, precision: str, L: LayerShape, mb: int, seq: int, tp: int,
                  *, flash: bool = True, phase: str = "fwd") -> float:
    return sum(cm.kernel_time_ns(c, f, b, s, dev, precision)
               for c, f, b, s in layer_kernels(L, mb, seq, tp, flash=flash, phase=phase))


def layer_mfu(cm: ComputeModel, dev: Device, precision: str, L: LayerShape, mb: int, seq: int, tp: int,
              *, flash: bool = True, peak_precision: str = "bf16") -> float:
    """Layer-level MFU (compute only, no communication): model FLOPs / (time x peak at peak_precision)."""
    t_ns = (layer_time_ns(cm, dev, precision, L, mb, seq, tp, flash=flash, phase="fwd")
            + layer_time_ns(cm, dev, precision, L, mb, seq, tp, flash=flash, phase="bwd"))
    return layer_model_flops(L, mb, seq) / tp / (t_ns * 1e-9) / dev.peak_flops(peak_precision)
