"""Kernels, FLOPs, bytes and parameter counts of one transformer layer on one rank.

FLOP counts follow Narayanan et al. 2021 (SC'21, "Efficient Large-Scale Language
Model Training on GPU Clusters", Sec. 5.1): a GEMM of (m,n,k) is 2mnk, attention
scores and context are 2*b*s^2*h each (the full s^2, no causal halving, as
Megatron counts), the backward pass is two GEMMs per forward GEMM. Elementwise
kernels (layer norm, dropout, activation, softmax-like) carry small FLOP counts
but are timed by their HBM bytes.

A kernel is ``(op_class, flops, bytes, shape)`` (see ``Op.kernels``); the shape says what the kernel
is, so that a measured table can be looked up by shape rather than by FLOPs:

* gemm: ``(M, N, K, pass)``, the product that runs (pass ``fwd`` | ``dgrad`` | ``wgrad``);
* attention: ``(seq_q, seq_k, head_dim, batch x heads, implementation, pass)``, implementation
  ``auto`` (chosen per device by the compute model) | ``flash`` | ``fused`` | ``unfused``;
* memory-bound kernels: ``(kind,)``, e.g. ``("layernorm_fwd",)``; the backward of ``x_fwd`` is ``x_bwd``.

Elementwise byte counts follow the minimum-traffic convention of the measured H100 table
(``heterosim/hardware/measured/h100-sxm/README.md``): inputs read once, outputs written once.
Parameter counts per layer: GPT-style models (``activation: gelu``) have biases,
LayerNorm (2h per norm) and learned position embeddings; LLaMA-style
(``swiglu``) have no biases, RMSNorm (h) and rotary positions.
"""
from __future__ import annotations

from dataclasses import dataclass

Kernel = tuple  # (op_class, flops, bytes, mnk | None)

GEMM_ELEM_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per GEMM operand element (fp8 GEMMs read 1-byte inputs; outputs written in bf16 are ignored)."""
ACT_ELEM_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
"""Bytes per activation element moved by elementwise kernels and pipeline/TP messages."""

# Elementwise FLOPs per element (approximate; these kernels are memory-bound)
_LN_FLOPS = 8
_GELU_FLOPS = 8
_SWIGLU_FLOPS = 5
_DROPOUT_RESIDUAL_FLOPS = 3
_CE_FLOPS = 5


def gemm(m: int, n: int, k: int, eb: int, pas: str = "fwd") -> Kernel:
    return ("gemm", 2.0 * m * n * k, float(eb * (m * k + k * n + m * n)), (m, n, k, pas))


def gemm_bwd(kern: Kernel, eb: int) -> list[Kernel]:
    """Data-gradient and weight-gradient GEMMs of a forward GEMM (a grouped GEMM, whose flops are a
    multiple of its per-group shape, keeps that multiple)."""
    m, n, k = kern[3][:3]
    groups = kern[1] / (2.0 * m * n * k)
    out = [gemm(m, k, n, eb, "dgrad"), gemm(k, n, m, eb, "wgrad")]
    if groups != 1.0:
        out = [(g[0], g[1] * groups, g[2] * groups, g[3]) for g in out]
    return out


def elementwise(flops: float, nbytes: float, kind: str | None = None) -> Kernel:
    return ("elementwise", float(flops), float(nbytes), (kind,) if kind else None)


def _bwd_shape(shape):
    if not shape:
        return shape
    if len(shape) == 1 and shape[0].endswith("_fwd"):
        return (shape[0][:-4] + "_bwd",)
    if len(shape) == 6:  # attention
        return shape[:5] + ("bwd",)
    return shape


def bwd_kernels(kernels: list[Kernel], eb: int) -> list[Kernel]:
    """Backward of a kernel list, in reverse order (2x FLOPs and bytes for non-GEMMs)."""
    out: list[Kernel] = []
    for kern in reversed(kernels):
        if kern[0] == "gemm":
            out.extend(gemm_bwd(kern, eb))
        else:
            out.append((kern[0], 2.0 * kern[1], 2.0 * kern[2], _bwd_shape(kern[3])))
    return out


@dataclass(slots=True)
class LayerShapes:
    """Per-rank sizes of one micro-batch through one layer."""

    b: int
    s: int
    """Full sequence length (keys attended to)."""
    sl: int
    """Local sequence length (s / cp)."""
    h: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tp: int
    sp: bool
    swiglu: bool
    num_experts: int
    top_k: int
    moe_ffn: int
    ep: int
    gemm_eb: int
    act_eb: int
    attention: str = "auto"
    """Attention implementation (training.attention)."""
    etp: int = 0
    """Expert TP degree when folded apart from tp (parallelism.expert_tp); 0 = the experts split by ``tp``, the
    router run on the TP group's all-gathered tokens (today's MoE block)."""
    load: float = 1.0
    """Tokens this rank's experts receive over the mean (uneven routing, parallelism.moe_load_imbalance)."""

    @classmethod
    def of(cls, model, plan, precision: str, attention: str = "auto", load: float = 1.0) -> "LayerShapes":
        return cls(b=plan.micro_batch, s=plan.seq, sl=plan.seq_local, h=model.hidden_size,
                   heads=model.num_attention_heads, kv_heads=model.kv_heads, head_dim=model.head_size,
                   ffn=model.ffn_hidden_size, vocab=padded_vocab(model, plan.tp), tp=plan.tp, sp=plan.sp,
                   swiglu=model.activation == "swiglu", num_experts=model.num_experts, top_k=model.moe_top_k,
                   moe_ffn=model.moe_ffn_hidden_size or model.ffn_hidden_size, ep=plan.ep,
                   gemm_eb=GEMM_ELEM_BYTES[precision], act_eb=ACT_ELEM_BYTES[precision], attention=attention,
                   etp=plan.etp if getattr(plan, "folded", False) else 0, load=load)

    @property
    def tokens(self) -> int:
        """Tokens entering GEMMs on this rank (replicated across TP)."""
        return self.b * self.sl

    @property
    def tokens_ew(self) -> int:
        """Tokens in elementwise kernels (sharded across TP with sequence parallelism)."""
        return self.b * self.sl // self.tp if self.sp else self.b * self.sl

    @property
    def kv_dim_local(self) -> int:
        """K (or V) width on one TP rank; KV heads are replicated when tp > kv heads."""
        return max(self.kv_heads // self.tp, 1) * self.head_dim

    @property
    def q_dim_local(self) -> int:
        """Query width on one TP rank (heads x head size / tp; hidden / tp unless head_dim is set apart)."""
        return self.heads * self.head_dim // self.tp

    # ---- kernels -------------------------------------------------------------------------------------------
    def _ln(self) -> Kernel:
        n = self.tokens_ew * self.h
        return elementwise(_LN_FLOPS * n, 2 * self.act_eb * n, "rmsnorm_fwd" if self.swiglu else "layernorm_fwd")

    def _dropout_residual(self) -> Kernel:
        n = self.tokens_ew * self.h
        return elementwise(_DROPOUT_RESIDUAL_FLOPS * n, 3 * self.act_eb * n, "dropout_add_fwd")

    def attn_qkv(self) -> list[Kernel]:
        """LayerNorm + fused QKV projection (before the context-parallel KV exchange)."""
        T = self.tokens
        return [self._ln(), gemm(T, self.q_dim_local + 2 * self.kv_dim_local, self.h, self.gemm_eb)]

    def attn_core(self) -> list[Kernel]:
        """Scores, softmax and context over all s keys. Flash/fused kernels move Q, K, V and the output once;
        the unfused path (baddbmm, fused scale-mask-softmax, dropout, bmm: Megatron 2021-22) also writes
        and re-reads the b*a*s^2 score matrix: scores written (2 B), softmax read + written (4 B), dropout
        read + written + 1-byte mask (5 B), read by the second bmm (2 B) = 13 B per score element."""
        heads_l = self.q_dim_local // self.head_dim
        flops = 4.0 * self.b * self.sl * self.s * self.q_dim_local
        nbytes = self.act_eb * (2 * self.tokens * self.q_dim_local + 2 * self.b * self.s * self.kv_dim_local)
        if self.attention == "unfused":
            nbytes += 13.0 * self.b * heads_l * self.sl * self.s
        return [("attention", flops, float(nbytes),
                 (self.sl, self.s, self.head_dim, self.b * heads_l, self.attention, "fwd"))]

    def attn_out(self) -> list[Kernel]:
        return [gemm(self.tokens, self.h, self.q_dim_local, self.gemm_eb), self._dropout_residual()]

    def attn_all(self) -> list[Kernel]:
        return self.attn_qkv() + self.attn_core() + self.attn_out()

    def mlp(self) -> list[Kernel]:
        T, f = self.tokens, self.ffn // self.tp
        n_in = 2 * f if self.swiglu else f
        act = elementwise((_SWIGLU_FLOPS if self.swiglu else _GELU_FLOPS) * T * f,
                          self.act_eb * T * (n_in + f), "swiglu_fwd" if self.swiglu else "gelu_fwd")
        return [self._ln(), gemm(T, n_in, self.h, self.gemm_eb), act, gemm(T, self.h, f, self.gemm_eb),
                self._dropout_residual()]

    @property
    def moe_tokens(self) -> int:
        """Tokens entering the router: the TP group's all-gathered tokens (expert TP = tp), or, folded, this
        rank's own sequence-parallel shard (Megatron-Core's MoELayer: each TP rank routes and dispatches its
        own tokens)."""
        return self.tokens_ew if self.etp else self.tokens

    def moe_router(self) -> list[Kernel]:
        T = self.moe_tokens
        permute = elementwise(0, 2 * self.act_eb * T * self.top_k * self.h)
        return [self._ln(), gemm(T, self.num_experts, self.h, self.gemm_eb), permute]

    def expert_tokens(self) -> int:
        """Token copies this rank's local experts process together (tokens x top-k with even routing): folded,
        the dispatched tokens of the expert-TP group (all-gathered over it: tokens_ew x top-k x expert_tp);
        scaled by ``load`` (rounded to a whole token) with uneven routing."""
        T = self.tokens_ew * self.top_k * self.etp if self.etp else self.tokens * self.top_k
        return T if self.load == 1.0 else int(round(T * self.load))

    def moe_experts(self) -> list[Kernel]:
        """Local experts' grouped GEMMs (each local expert gets an equal share of the rank's tokens), split by
        the expert TP degree."""
        T, f = self.expert_tokens(), self.moe_ffn // (self.etp or self.tp)
        per_expert = max(T * self.ep // self.num_experts, 1)
        n_local = self.num_experts // self.ep
        n_in = 2 * f if self.swiglu else f
        g1 = gemm(per_expert, n_in, self.h, self.gemm_eb)
        g2 = gemm(per_expert, self.h, f, self.gemm_eb)
        act = elementwise((_SWIGLU_FLOPS if self.swiglu else _GELU_FLOPS) * T * f, self.act_eb * T * (n_in + f),
                          "swiglu_fwd" if self.swiglu else "gelu_fwd")
        # scale the per-expert GEMM to all local experts (flops/bytes) but keep its shape for efficiency
        g1 = ("gemm", g1[1] * n_local, g1[2] * n_local, g1[3])
        g2 = ("gemm", g2[1] * n_local, g2[2] * n_local, g2[3])
        Tu = self.moe_tokens * self.top_k  # unpermuted after the combine: this rank's own tokens (any load)
        unpermute = elementwise(Tu * self.h, 2 * self.act_eb * Tu * self.h)
        return [g1, act, g2, unpermute, self._dropout_residual()]

    def embedding(self) -> list[Kernel]:
        n = self.tokens * self.h
        return [("embedding", float(n), float(2 * self.act_eb * n), None), self._dropout_residual()]

    def head(self) -> list[Kernel]:
        """Final norm, vocab-parallel LM head and cross-entropy."""
        T, v = self.tokens, self.vocab // self.tp
        # fp32 cross-entropy over the vocab shard: logits read (4 B) and their gradient written (4 B) once
        # over forward + backward (the measured table's convention); split here as forward 1/3, backward 2/3
        ce = elementwise(_CE_FLOPS * T * v, 8.0 / 3.0 * T * v, "cross_entropy_fwd")
        return [self._ln(), gemm(T, v, self.h, self.gemm_eb), ce]

    # ---- message sizes -------------------------------------------------------------------------------------
    def hidden_bytes(self, full: bool = False) -> int:
        """One micro-batch's hidden state (b*s_local*h) on this rank; TP-sharded with SP unless ``full``."""
        T = self.tokens if full or not self.sp else self.tokens_ew
        return T * self.h * self.act_eb

    def kv_bytes(self) -> int:
        """Local K and V of one micro-batch (what context parallelism exchanges)."""
        return 2 * self.tokens * self.kv_dim_local * self.act_eb

    def moe_gather_bytes(self) -> int:
        """The expert-parallel group's hidden states, all-gathered by the allgather dispatcher (the all-gather's
        output, nccl-tests convention; the combine's reduce-scatter input is the same size)."""
        return self.tokens * self.h * self.act_eb * self.ep

    def a2a_bytes(self) -> int:
        """Bytes one rank sends in one MoE dispatch (or combine) all-to-all."""
        return self.tokens_ew * self.top_k * self.h * self.act_eb

    def etp_gather_bytes(self) -> int:
        """Folded expert TP: the all-gather over the expert-TP group of the tokens this rank received in the
        dispatch (nccl-tests convention: the output, expert_tp x tokens_ew x top-k x hidden; the reduce-scatter
        of the experts' output has the same input). Scaled by ``load``: the group shares one EP coordinate."""
        n = self.tokens_ew * self.top_k * self.etp
        n = n if self.load == 1.0 else int(round(n * self.load))
        return n * self.h * self.act_eb


# ---- parameters ------------------------------------------------------------------------------------------

@dataclass(slots=True)
class LayerParams:
    """Parameters of one layer on one rank: TP-sharded + replicated, dense and expert."""

    dense: float
    expert: float


def padded_vocab(model, tp: int) -> int:
    """Vocabulary padded as Megatron-LM does (``_vocab_size_with_padding``): up to a multiple of
    ``make_vocab_size_divisible_by * tp``, so every TP rank holds an equal, aligned shard."""
    mult = model.make_vocab_size_divisible_by * tp
    return -(-model.vocab_size // mult) * mult


def layer_params(model, tp: int, ep: int, etp: int = 0) -> LayerParams:
    """Parameters of one layer on one rank; the experts split by ``etp`` (expert TP) when given, else ``tp``."""
    h, f = model.hidden_size, model.ffn_hidden_size
    gpt = model.activation == "gelu"
    nmat = 3 if model.activation == "swiglu" else 2
    kv_local = max(model.kv_heads // tp, 1) * model.head_size
    norm = 2 * h if gpt else h
    qkv_cols = model.q_dim // tp + 2 * kv_local
    attn = h * qkv_cols + (model.q_dim // tp) * h + (qkv_cols + h if gpt else 0) + norm
    if not model.is_moe:
        mlp = nmat * h * (f // tp) + ((f // tp) * (nmat - 1) + h if gpt else 0) + norm
        return LayerParams(dense=float(attn + mlp), expert=0.0)
    fe = (model.moe_ffn_hidden_size or f) // (etp or tp)
    expert = nmat * h * fe + ((nmat - 1) * fe + h if gpt else 0)
    router = h * model.num_experts
    return LayerParams(dense=float(attn + router + norm), expert=float(expert * model.num_experts // ep))


def embedding_params(model, tp: int) -> float:
    """Input embedding on the first stage (vocab-parallel) plus learned positions for GPT-style."""
    pos = model.max_seq_length * model.hidden_size if model.activation == "gelu" else 0
    return float(padded_vocab(model, tp) // tp * model.hidden_size + pos)


def head_params(model, tp: int, pp: int) -> float:
    """Final norm and LM head on the last stage (a tied head is a copy when pp > 1)."""
    norm = 2 * model.hidden_size if model.activation == "gelu" else model.hidden_size
    if model.tie_embeddings and pp == 1:
        return float(norm)
    return float(norm + padded_vocab(model, tp) // tp * model.hidden_size)


def total_params(model) -> float:
    """Unique parameters of the whole model (no sharding, no tied copy)."""
    lp = layer_params(model, 1, 1)
    head = head_params(model, 1, 1)
    return model.num_layers * (lp.dense + lp.expert) + embedding_params(model, 1) + head


def model_flops_per_iteration(model, global_batch: int, seq: int) -> float:
    """Model FLOPs of one iteration as Megatron counts them: forward + backward (3 passes), no recompute.

    For a GPT-style model this equals 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) (Narayanan et al. 2021)."""
    h, q, kv = model.hidden_size, model.q_dim, model.kv_heads * model.head_size
    nmat = 3 if model.activation == "swiglu" else 2
    attn = 2 * (h * (q + 2 * kv) + q * h) + 4 * seq * q
    if model.is_moe:
        fe = model.moe_ffn_hidden_size or model.ffn_hidden_size
        mlp = 2 * h * model.num_experts + model.moe_top_k * 2 * nmat * h * fe
    else:
        mlp = 2 * nmat * h * model.ffn_hidden_size
    per_token = model.num_layers * (attn + mlp) + 2 * h * model.vocab_size
    return 3.0 * global_batch * seq * per_token
