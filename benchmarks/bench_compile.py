"""Workload-compiler speed: GPT-3 175B on 1024 GPUs (TP8 PP16 DP8, global batch 1536, micro-batch 1).

Target: < 10 s on 2 cores. Prints wall time, the ratio to the target, programs and ops.
Run: .venv/bin/python benchmarks/bench_compile.py [--repeat N]
"""
from __future__ import annotations

import argparse
import time

from heterosim.config import ClusterConfig, DeviceGroup, ModelConfig, ParallelConfig, Scenario, TrainingConfig
from heterosim.workload.compiler import compile_workload

TARGET_S = 10.0


def gpt3_175b_scenario() -> Scenario:
    # Brown et al. 2020 / Narayanan et al. 2021 Table 1: 96 layers, h = 12288, 96 heads, V = 51200, s = 2048
    model = ModelConfig(name="gpt3-175b", num_layers=96, hidden_size=12288, num_attention_heads=96,
                        ffn_hidden_size=4 * 12288, vocab_size=51200, max_seq_length=2048)
    return Scenario(
        model=model,
        training=TrainingConfig(global_batch_size=1536, micro_batch_size=1, seq_length=2048),
        parallelism=ParallelConfig(tp=8, pp=16, sequence_parallel=True, recompute="selective"),
        cluster=ClusterConfig(groups=[DeviceGroup(name="dgx", node_type="dgx-h100", num_nodes=128)]),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sc = gpt3_175b_scenario()
    times = []
    ir = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ir = compile_workload(sc, 1024)
        times.append(time.perf_counter() - t0)
    best = min(times)
    n_ops = sum(len(p.ops) for p in ir.programs)
    rank_ops = sum(len(ir.ops_of(r)) for r in range(ir.world_size))
    print(f"compile GPT-3 175B, 1024 GPUs (TP8 PP16 DP8, gbs 1536, mb 1): best {best:.3f} s of {len(times)} "
          f"(all: {', '.join(f'{t:.3f}' for t in times)})")
    print(f"ratio to {TARGET_S:.0f} s target: {best / TARGET_S:.3f}  ({'PASS' if best < TARGET_S else 'FAIL'})")
    print(f"programs: {len(ir.programs)}  ops in programs: {n_ops}  ops over all ranks: {rank_ops}")
    print(f"model FLOPs/iter: {ir.meta['model_flops_per_iteration']:.4e}  hardware FLOPs/iter: "
          f"{ir.meta['hardware_flops']:.4e}  max memory/rank: {max(ir.meta['memory_bytes']) / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
