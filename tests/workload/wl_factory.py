"""Scenario factories for the workload tests (models built inline, no zoo dependency)."""
from __future__ import annotations

from heterosim.config import ClusterConfig, DeviceGroup, ModelConfig, ParallelConfig, Scenario, TrainingConfig


def gpt(layers=8, hidden=256, heads=8, vocab=1024, seq=2048, **kw) -> ModelConfig:
    return ModelConfig(name="gpt-test", num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                       ffn_hidden_size=4 * hidden, vocab_size=vocab, max_seq_length=seq, **kw)


def scenario(model=None, *, gbs=32, mbs=1, seq=256, precision="bf16", split=None, **par) -> Scenario:
    return Scenario(
        model=model or gpt(),
        training=TrainingConfig(global_batch_size=gbs, micro_batch_size=mbs, seq_length=seq, precision=precision,
                                microbatch_split=split),
        parallelism=ParallelConfig(**par),
        cluster=ClusterConfig(groups=[DeviceGroup(name="g", node_type="dgx-h100", num_nodes=1)]),
    )



def compute_passes(ops, with_chunk: bool = False) -> list[tuple]:
    """Compute steps of a program in order: (F|B|W, micro-batch[, chunk]), consecutive ops of one step merged
    (W: the weight-gradient ops of a zero-bubble schedule)."""
    seq: list[tuple] = []
    for o in ops:
        if o.kind != "compute" or o.microbatch < 0:
            continue
        kind = "W" if o.name.endswith("wgrad") else ("F" if o.phase == "fwd" else "B")
        step = (kind, o.microbatch, o.chunk) if with_chunk else (kind, o.microbatch)
        if not seq or seq[-1] != step:
            seq.append(step)
    return seq
