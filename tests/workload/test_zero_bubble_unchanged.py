"""Existing schedules (1f1b, interleaved, gpipe) compile exactly as before the zero-bubble schedule was added
(issue 38: no change for existing scenarios): the IR and memory of scenarios using each are compared op by op
with what the code before the change builds, extracted from git (the parent of the commit that added
heterosim/workload/zero_bubble.py) and run in a child process in this same test run."""
from __future__ import annotations

from pathlib import Path

from git_baseline import run_script, tree_before

ROOT = Path(__file__).parents[2]

SIGNATURE = r'''
import hashlib, json, sys
from heterosim import api
out = {}
for name, path, overrides in json.loads(sys.argv[1]):
    sc = api.load(path, overrides)
    ir = api.prepare(sc).ir
    progs = []
    for p in ir.programs:
        h = hashlib.sha256()
        for op in p.ops:
            h.update(repr((op.kind, op.name, op.phase, op.deps, op.stream, op.microbatch, op.layer, op.chunk,
                           op.flops, op.bytes, op.kernels, op.collective, op.group, op.size_bytes, op.peer_offset,
                           op.tag, op.comm_kind)).encode())
        comm = [op for op in p.ops if op.kind == "comm"]
        progs.append([len(p.ops), len(comm), sum(op.size_bytes for op in comm), h.hexdigest()])
    out[name] = {"programs": progs, "rank_program": ir.rank_program, "groups": sorted(ir.groups),
                 "memory": ir.meta["memory_bytes"], "breakdown": ir.meta["memory_breakdown"]}
print(json.dumps(out))
'''

QS = str(ROOT / "scenarios" / "quickstart.yaml")
CASES = [
    ("quickstart 1f1b", QS, []),
    ("quickstart gpipe", QS, ["parallelism.schedule=gpipe"]),
    ("quickstart interleaved", QS, ["parallelism.schedule=interleaved", "parallelism.virtual_stages=2"]),
    ("quickstart 1f1b full recompute tp overlap", QS, ["parallelism.recompute=full",
                                                       "parallelism.tp_comm_overlap=true"]),
    ("stage-tp", str(ROOT / "scenarios" / "stage-tp.yaml"), []),
    ("zero3", str(ROOT / "scenarios" / "fsdp" / "zero3.yaml"), []),
    ("zero2", str(ROOT / "scenarios" / "fsdp" / "zero2.yaml"), []),
]






def test_existing_schedules_ir_unchanged(tmp_path):
    base = tree_before("heterosim/workload/zero_bubble.py", tmp_path / "base")
    before = run_script(base, SIGNATURE, CASES)
    after = run_script(ROOT, SIGNATURE, CASES)
    assert set(before) == {c[0] for c in CASES}
    for name in before:
        assert after[name] == before[name], name
