"""Pipeline bubble fractions measured by HeteroSim against the papers' formulas (docs/pipeline-schedules.md).

    .venv/bin/python benchmarks/schedule_bubbles.py            # prints the markdown tables of the page

Table 1 isolates the schedule: p equal stages of one layer each, every forward / B / W op given a fixed
duration (F, B, W ns per stage and micro-batch; embedding, head and optimizer 0 ns) and every message
0 bytes, simulated end to end by the coordinator. Bubble fraction = (iteration - m (F + B + W)) / iteration.
Formulas (Qi et al. ICLR 2024, Sec. 3.1; B = input-gradient pass only): 1F1B (p - 1)(F + B + W), ZB-H1
(p - 1)(F + B - W). ZB-V (Sec. 6) holds 2p virtual stages of one layer, two per rank, each taking half a stage's
F, B, W: zero bubble inside its parallelogram when F = B = W, so a synchronous iteration keeps only the last
rank's start skew, (p - 1) F / 2 (the paper states no formula for F != B or W; measured only). DualPipe (DeepSeek-V3
report, Table 2): (p/2 - 1)(F&B + B' - 3W) with B' = B + W the full backward and F&B = F + B' (the pair run one
after the other); HeteroSim's timeline of DeepSeek's order gives (p/2 - 1)(2F + B - W), equal when F = B (the
150 : 100 : 50 rows show the difference). Table 2 runs the shipped scenarios with the real compute model and network.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heterosim import api  # noqa: E402
from heterosim.config import (ClusterConfig, DeviceGroup, ModelConfig, ParallelConfig, Scenario,  # noqa: E402
                              TrainingConfig)

ROOT = Path(__file__).resolve().parents[1]
FORMULA = {"1f1b": lambda p, F, B, W: (p - 1) * (F + B + W), "zb-h1": lambda p, F, B, W: (p - 1) * (F + B - W),
           "zb-v": lambda p, F, B, W: (p - 1) * F // 2 if F == B == W else None,
           "dualpipe": lambda p, F, B, W: (p // 2 - 1) * ((F + B + W) + (B + W) - 3 * W)}
CHUNKS = {"zb-v": 2}
"""Layers (one per virtual stage) per pipeline rank; the stage's F, B, W are split evenly over them."""


def uniform_iteration_ns(schedule: str, p: int, m: int, F: int, B: int, W: int) -> int:
    c = CHUNKS.get(schedule, 1)
    F, B, W = F // c, B // c, W // c
    model = ModelConfig(name="uniform", num_layers=c * p, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                        vocab_size=128, max_seq_length=128, tie_embeddings=False)
    sc = Scenario(model=model, training=TrainingConfig(global_batch_size=m, micro_batch_size=1, seq_length=128),
                  parallelism=ParallelConfig(pp=p, schedule=schedule),
                  cluster=ClusterConfig(groups=[DeviceGroup(name="g", node_type="dgx-h100", num_nodes=1,
                                                            overrides={"gpus_per_node": p})]))
    dur = {"attn": F // 2, "mlp": F - F // 2, "attn_bwd": B // 2, "mlp_bwd": B - B // 2, "layer_wgrad": W}
    if schedule not in ("zb-h1", "zb-v", "dualpipe"):
        dur.update(attn_bwd=(B + W) // 2, mlp_bwd=B + W - (B + W) // 2)
    return iteration_with_pass_times(api.prepare(sc), lambda stage: dur)


def iteration_with_pass_times(prep, durations_of_stage) -> int:
    """Iteration time (ns) of a prepared scenario whose layer ops take the given times (``durations_of_stage(stage)``:
    op name -> ns), every other compute op 0 ns and every message 0 bytes: only the schedule decides."""
    for prog in prep.ir.programs:
        dur = durations_of_stage(prog.stage)
        for op in prog.ops:
            if op.kind == "comm":
                op.size_bytes = 0
            else:
                op.duration_ns = dur[op.name] if op.layer >= 0 else 0
    return api.simulate(prep, record_messages=False).summary["iteration_time_ns"]


def main() -> None:
    print("| schedule | p | m | F : B : W (us) | iteration (ns) | bubble measured | bubble formula |")
    print("|---|---|---|---|---|---|---|")
    for F, B, W in ((100_000, 100_000, 100_000), (100_000, 100_000, 50_000), (150_000, 100_000, 50_000)):
        for p, m in ((2, 4), (4, 8), (4, 16), (8, 16), (8, 32)):
            for sched in ("1f1b", "zb-h1", "zb-v", "dualpipe"):
                t = uniform_iteration_ns(sched, p, m, F, B, W)
                busy = m * (F + B + W)
                bub = FORMULA[sched](p, F, B, W)
                formula = "n/a" if bub is None else f"{bub / (busy + bub):.4f}"
                print(f"| {sched} | {p} | {m} | {F // 1000} : {B // 1000} : {W // 1000} | {t:,} | "
                      f"{(t - busy) / t:.4f} | {formula} |")
    print()
    print("| scenario | schedule | iteration (ms) | pipeline bubble (summary) | peak memory, max over GPUs (GiB) |")
    print("|---|---|---|---|---|")
    for name, scheds in (("zb-h1", ("1f1b", "zb-h1")), ("zb-v", ("1f1b", "zb-h1", "zb-v")),
                         ("dualpipe", ("1f1b", "zb-h1", "zb-v", "dualpipe"))):
        path = ROOT / "scenarios" / "schedules" / f"{name}.yaml"
        for sched in scheds:
            s = api.run(api.load(path, [f"parallelism.schedule={sched}"])).summary
            prep = api.prepare(api.load(path, [f"parallelism.schedule={sched}"]))
            mem = max(prep.ir.meta["memory_bytes"]) / 2 ** 30
            print(f"| scenarios/schedules/{name}.yaml | {sched} | {s['iteration_time_ns'] / 1e6:.2f} | "
                  f"{s['breakdown']['bubble']:.1%} | {mem:.2f} |")


if __name__ == "__main__":
    main()
