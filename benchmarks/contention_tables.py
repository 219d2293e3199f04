"""Compute contention's effect on the validation corpus: two ``validate_published.py --json`` files side by side.

    .venv/bin/python benchmarks/validate_published.py --compute-contention none --json corpus-none.json
    .venv/bin/python benchmarks/validate_published.py --compute-contention sm_share --json corpus-sm.json
    .venv/bin/python benchmarks/contention_tables.py corpus-none.json corpus-sm.json

Prints MAPE and mean signed error per source and overall (held out = every source but the calibration one),
then the representative rows' breakdown in seconds (fractions x predicted time) and the seconds contention
added to the mean TP group's compute. Error = predicted / measured - 1. Not a test: nothing is asserted.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

CALIBRATION = {"korthikanti-2022"}
REPRESENTATIVE = ["nemo-24.07-gpt3-5b-64", "nemo-24.07-llama2-7b-8", "nemo-24.07-llama2-13b-16",
                  "mbridge-25.11-b200-llama3-8b-8-fp8-cs", "mlperf-v3.1-nvidia-gpt3-175b-512",
                  "mlperf-v3.1-nvidia-gpt3-175b-4096", "mlperf-v3.1-nvidia-gpt3-175b-10752",
                  "mlperf-v4.0-nvidia-gpt3-175b-10752", "korthikanti-2022-175b-full",
                  "korthikanti-2022-175b-selective"]
"""The rows docs/validation-corpus.md ("Biases") breaks down."""


def _rows(path: str) -> dict[str, dict]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"error: {path}: cannot read a results JSON ({e})")
    if not isinstance(doc, dict) or doc.get("written_by") != "benchmarks/validate_published.py":
        sys.exit(f"error: {path}: written_by: not a results file of benchmarks/validate_published.py")
    return {r["id"]: r for r in doc["rows"]}


def _err(r: dict) -> float | None:
    if r.get("status") != "ok" or not r.get("measured_s") or r.get("predicted_s") is None:
        return None
    return r["predicted_s"] / r["measured_s"] - 1.0


def _stats(rows: list[dict]) -> str:
    e = [x for x in map(_err, rows) if x is not None]
    if not e:
        return f"{0:>6} {'-':>7} {'-':>7} {'-':>7}"
    return (f"{len(e):>6} {100 * sum(map(abs, e)) / len(e):>6.1f}% {100 * sum(e) / len(e):>+6.1f}% "
            f"{100 * max(e, key=abs):>+6.1f}%")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: contention_tables.py NONE.json SM_SHARE.json", file=sys.stderr)
        return 2
    a, b = _rows(argv[0]), _rows(argv[1])
    ids = [i for i in a if i in b]
    groups: dict[str, list[str]] = {}
    for i in ids:
        groups.setdefault(a[i]["source"], []).append(i)
    head = f"{'set':28} {'scored':>6} {'MAPE':>7} {'mean':>7} {'worst':>7}"
    print(f"{head}   | {'scored':>6} {'MAPE':>7} {'mean':>7} {'worst':>7}")
    print(f"{'':28} {'--- compute_contention: none ---':>30}   | {'--- sm_share ---':>30}")
    sets = {**{s: v for s, v in sorted(groups.items())},
            "held out": [i for i in ids if a[i]["source"] not in CALIBRATION],
            "in-sample (calibration)": [i for i in ids if a[i]["source"] in CALIBRATION], "all rows": ids}
    for name, members in sets.items():
        print(f"{name:28} {_stats([a[i] for i in members])}   | {_stats([b[i] for i in members])}")
    print()
    print("Representative rows (seconds; none -> sm_share; contention = compute stretch of the mean TP group)")
    print(f"{'row':40} {'measured':>8} {'predicted':>17} {'error':>15} {'compute':>15} {'exp dp':>13} "
          f"{'exp tp':>13} {'exp pp':>13} {'bubble':>13} {'contention':>10}")
    for i in REPRESENTATIVE:
        if i not in a or i not in b or _err(a[i]) is None or _err(b[i]) is None:
            continue
        x, y = a[i], b[i]

        def sec(r, k):
            return r["breakdown"].get(k, 0.0) * r["predicted_s"]

        cols = [f"{x['predicted_s']:.3f}->{y['predicted_s']:.3f}", f"{100 * _err(x):+.1f}->{100 * _err(y):+.1f}%"]
        cols += [f"{sec(x, k):.3f}->{sec(y, k):.3f}" for k in ("compute", "exposed_dp", "exposed_tp", "exposed_pp",
                                                                "bubble")]
        print(f"{i:40} {x['measured_s']:>8.3f} {cols[0]:>17} {cols[1]:>15} {cols[2]:>15} {cols[3]:>13} "
              f"{cols[4]:>13} {cols[5]:>13} {cols[6]:>13} {y.get('contention_s', 0.0):>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
