"""End-to-end check against published, measured training runs (../shared/reference).

Runs the full simulator (compiler -> coordinator -> flow backend) on the
configurations of Korthikanti et al. 2022, Table 5 (A100, sequence parallel +
selective recompute, and full recompute) and prints simulated vs measured
seconds per iteration. Nothing here was tuned to these rows: the compute model's
per-family efficiency curves are fitted once (heterosim/hardware/efficiency.yaml).

    .venv/bin/python benchmarks/validate_published.py [--rows 22B,175B]
"""
from __future__ import annotations

import argparse
import time

from heterosim import api
from heterosim.config.loader import scenario_from_dict

# model, TP, PP, interleave, GPUs, global batch, micro-batch, full-recompute s, SP+selective s
ROWS = {
    "22B": ("gpt3-22b", 8, 1, 1, 8, 4, 4, 1.42, 1.10),
    "175B": ("gpt3-175b", 8, 8, 3, 64, 64, 1, 18.13, 13.75),
    "530B": ("gpt3-530b", 8, 35, 3, 280, 280, 1, 49.05, 37.83),
}


def scenario(model, tp, pp, v, gpus, gbs, mbs, mode):
    sp = mode == "selective"
    return {
        "name": f"korthikanti-{model}-{mode}",
        "model": model,
        "parallelism": {"tp": tp, "pp": pp, "dp": 1, "schedule": "interleaved" if v > 1 else "1f1b",
                        "virtual_stages": v, "sequence_parallel": sp, "recompute": mode},
        "training": {"global_batch_size": gbs, "micro_batch_size": mbs, "seq_length": 2048, "precision": "fp16"},
        # DGX A100: 8 GPUs on NVSwitch, 8x HDR 200 Gb/s per node (the paper's Selene)
        "cluster": {"groups": [{"name": "a100", "node_type": "dgx-a100", "num_nodes": gpus // 8}]},
        "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 32, "uplink_gbps": 400},
    }


# NVIDIA NeMo 24.07 performance summary (DGX H100, FP8): model, GPUs, global batch, micro-batch, seq,
# TP, PP, virtual stages, published model TFLOP/s per GPU
NEMO = {
    "nemo-llama2-7b": ("llama2-7b", 8, 128, 1, 4096, 1, 1, 1, 776),
    "nemo-llama2-70b": ("llama2-70b", 64, 128, 1, 4096, 4, 4, 20, 759),
    "nemo-gpt3-175b": ("gpt3-175b", 128, 256, 1, 2048, 4, 8, 6, 782),
}


def nemo_scenario(model, gpus, gbs, mbs, seq, tp, pp, v):
    return {
        "name": f"nemo-{model}",
        "model": model,
        "parallelism": {"tp": tp, "pp": pp, "schedule": "interleaved" if v > 1 else "1f1b", "virtual_stages": v,
                        "sequence_parallel": tp > 1, "recompute": "selective", "zero_stage": 1},
        "training": {"global_batch_size": gbs, "micro_batch_size": mbs, "seq_length": seq, "precision": "fp8"},
        "cluster": {"groups": [{"name": "h100", "node_type": "dgx-h100", "num_nodes": gpus // 8}]},
        "fabric": {"kind": "leaf_spine", "hosts_per_leaf": 32, "uplink_gbps": 400},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="22B,175B,nemo-llama2-7b,nemo-llama2-70b,nemo-gpt3-175b")
    args = ap.parse_args()
    print(f"{'row':16} {'mode':10} {'simulated':>10} {'published':>10} {'ratio':>6} {'wall s':>7}")
    for key in args.rows.split(","):
        if key in NEMO:
            *shape, published = NEMO[key]
            t0 = time.perf_counter()
            res = api.simulate(api.prepare(scenario_from_dict(nemo_scenario(*shape))), record_messages=False)
            t = res.summary["model_tflops_per_gpu"]
            print(f"{key:16} {'TFLOP/s':10} {t:10.0f} {published:10.0f} {t / published:6.2f} "
                  f"{time.perf_counter() - t0:7.1f}")
            continue
        model, tp, pp, v, gpus, gbs, mbs, full_s, sel_s = ROWS[key]
        for mode, published in (("full", full_s), ("selective", sel_s)):
            t0 = time.perf_counter()
            sc = scenario_from_dict(scenario(model, tp, pp, v, gpus, gbs, mbs, mode))
            res = api.simulate(api.prepare(sc), record_messages=False)
            t = res.summary["iteration_time_s"]
            print(f"{key:16} {mode + ' s':10} {t:10.2f} {published:10.2f} {t / published:6.2f} "
                  f"{time.perf_counter() - t0:7.1f}")


if __name__ == "__main__":
    main()
