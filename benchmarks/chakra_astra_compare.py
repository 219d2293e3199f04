"""ASTRA-sim (analytical, congestion-unaware) and HeteroSim on the same Chakra traces, side by side. Not CI.

    .venv/bin/python benchmarks/chakra_astra_compare.py [--mirrors /work/.mirror] [--build /tmp/heterosim-astra]

What it needs: local git mirrors (bare repositories) of astra-sim/astra-sim and of the submodules of the
commit below (astra-sim/chakra, astra-sim/astra-network-analytical, astra-sim/astra-memory-analytical,
fmtlib/fmt, gabime/spdlog, jbeder/yaml-cpp), cmake, a C++17 compiler, protoc and libprotobuf (Debian:
protobuf-compiler, libprotobuf-dev). It assembles the source tree from the mirrors (``git archive``; no
network), builds ``AstraSim_Analytical_Congestion_Unaware`` outside the repository, runs it on the traces
vendored in tests/chakra/data, and prints one row per trace: ASTRA-sim's time, HeteroSim's time, their ratio.
Where something is missing it says what and stops (exit 1).

ASTRA-sim commit: c459ab61 (2025-08-11, the Chakra feeder before feeder_v3), the newest one whose
submodule commits are all in the mirrors this was written with and that builds (the newest, 518bd513,
points at a Chakra commit the mirror of astra-sim/chakra lacks; 4b6e0279 mixes feeder_v3 with the old
feeder's class name and does not compile). Its Workload.cc reads the microbenchmarks as 518bd513 does
(one collective, no process group).

The two simulators model different things, so the table is a comparison, not a check:

* network, both: one switch, 25e9 B/s per NPU link (ASTRA-sim: ``bandwidth`` in GB/s of 2^30 bytes,
  astra-network-analytical common/NetworkFunction.cpp, so 23.283 GB/s), 1.5 us from NPU to NPU (ASTRA-sim's
  Switch is 2 hops: 750 ns per link); HeteroSim: one GH200 per node, one 200 Gb/s NIC, one leaf switch (2 x
  500 ns links + 500 ns switch), as in tests/chakra/test_chakra_third_party.py;
* collectives: ASTRA-sim's ring (1 chunk, 1 ns endpoint delay) moves the same bytes per step as NCCL's ring but
  charges only the links' latency per step: steps x (1.5 us + step bytes / B); HeteroSim adds NCCL's
  per-operation and per-step latencies (8.4 us + 14 us per step, Simple protocol) and 78 header bytes per
  4096-byte packet (tests/chakra/test_chakra_third_party.py). All-to-all: ASTRA-sim's congestion-unaware
  backend gives every pair of NPUs a link of its own, so a rank's n-1 messages of S/n move at once at full
  rate (1.5 us + S/n / B) where HeteroSim's NIC carries them one after another in effect ((n-1)/n x S / B).
  Both hand formulas are printed next to the measured times.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "chakra" / "data"
ASTRA_COMMIT = "c459ab61193bdb5b663ab61d2e923314dae8a77f"
SUBMODULES = {  # path in astra-sim -> (mirror owner+name, commit pinned by ASTRA_COMMIT's tree)
    "extern/graph_frontend/chakra": ("astra-sim+chakra", "214f2c559c10f897bcc395f8e1502d80d14f1541"),
    "extern/network_backend/analytical": ("astra-sim+astra-network-analytical",
                                          "599a0473a9a74f5383f73b3cea5a12b9bc5ebaef"),
    "extern/network_backend/analytical/extern/yaml-cpp": ("jbeder+yaml-cpp",
                                                          "3d2888cc8a45da2f420454ad728cdfad01a3d54f"),
    "extern/remote_memory_backend/analytical": ("astra-sim+astra-memory-analytical",
                                                "641cce854d256bfd288b1de9607b6757313363f9"),
    "extern/helper/fmt": ("fmtlib+fmt", "7e73566ce7bd3617cd4b14a2e3a19a2a30b524c7"),
    "extern/helper/spdlog": ("gabime+spdlog", "63f0875000bf90867aa7c76a831bd834cb7d4b5e"),
}
SUBSTITUTABLE = {"gabime+spdlog", "fmtlib+fmt"}
"""Logging libraries: another release builds the same simulator (used only when the pinned one is missing)."""
BINARY = "AstraSim_Analytical_Congestion_Unaware"
LINK_GBPS_ASTRA = 25e9 / 2**30  # GB/s of 2^30 bytes
LINK_LATENCY_NS = 750  # x 2 hops = 1.5 us
ENDPOINT_DELAY = 1
"""ns per message end in ASTRA-sim's system layer; 0 trips an assertion of the analytical event queue (two
events at one tick, EventQueue.cpp:33), so the smallest value that runs."""
TRACES = [(f"astra_microbench/{c}/{n}npus_1MB", c, n) for c in ("all_reduce", "all_gather", "reduce_scatter",
                                                                "all_to_all") for n in (4, 8, 16)]


def fail(msg: str) -> None:
    print(f"cannot compare: {msg}", file=sys.stderr)
    sys.exit(1)


def archive(mirror: Path, commit: str, dest: Path) -> None:
    """The commit's files into ``dest``; test data left out (mirrors may hold large files as absent blobs)."""
    dest.mkdir(parents=True, exist_ok=True)
    listed = subprocess.run(["git", "--git-dir", str(mirror), "ls-tree", "--name-only", commit], capture_output=True,
                            text=True)
    paths = [x for x in listed.stdout.split() if x not in ("tests", "test", "docs", "doc", "examples")]
    if commit == ASTRA_COMMIT:
        paths.append("examples")
    git = subprocess.run(["git", "--git-dir", str(mirror), "archive", commit, "--", *paths], capture_output=True)
    if git.returncode != 0:
        fail(f"{mirror}: commit {commit[:8]} not there ({git.stderr.decode().strip()[:200]})")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=git.stdout, check=True)


def build(mirrors: Path, work: Path, jobs: int) -> Path:
    binary = work / "src" / "build" / "astra_analytical" / "build" / "bin" / BINARY
    if binary.exists():
        return binary
    for tool in ("cmake", "protoc", "c++"):
        if shutil.which(tool) is None:
            fail(f"{tool} not found (Debian: cmake, protobuf-compiler libprotobuf-dev, g++)")
    src = work / "src"
    shutil.rmtree(src, ignore_errors=True)
    archive(mirrors / "astra-sim+astra-sim" / "repo", ASTRA_COMMIT, src)
    for path, (name, commit) in SUBMODULES.items():
        mirror = mirrors / name / "repo"
        if subprocess.run(["git", "--git-dir", str(mirror), "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode != 0:
            if name not in SUBSTITUTABLE:
                fail(f"{mirror}: commit {commit[:8]} not there")
            head = subprocess.run(["git", "--git-dir", str(mirror), "rev-parse", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()
            print(f"note: {name} {commit[:8]} is not in the mirror; using its HEAD {head[:8]}", file=sys.stderr)
            commit = head
        archive(mirror, commit, src / path)
    et = src / "extern" / "graph_frontend" / "chakra" / "schema" / "protobuf"
    subprocess.run(["protoc", "et_def.proto", f"--proto_path={et}", f"--cpp_out={et}"], check=True)
    bdir = src / "build" / "astra_analytical" / "build"
    bdir.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    with open(log, "w") as fh:
        for cmd in (["cmake", "..", "-DBUILDTARGET=congestion_unaware", "-DCMAKE_BUILD_TYPE=Release"],
                    ["cmake", "--build", ".", "-j", str(jobs)]):
            if subprocess.run(cmd, cwd=bdir, stdout=fh, stderr=subprocess.STDOUT).returncode != 0:
                tail = log.read_text().strip().splitlines()[-5:]
                fail(f"build failed ({' '.join(cmd)}); last lines of {log}: " + " | ".join(tail))
    found = list(bdir.rglob(BINARY))
    if not found:
        fail(f"built, but no {BINARY} under {bdir}")
    return found[0]


def astra_time_ns(binary: Path, folder: Path, prefix: str, n: int, work: Path, groups: Path | None = None) -> int:
    cfg = work / "cfg"
    cfg.mkdir(exist_ok=True)
    (cfg / f"net{n}.yml").write_text(f"topology: [ Switch ]\nnpus_count: [ {n} ]\n"
                                     f"bandwidth: [ {LINK_GBPS_ASTRA} ]\nlatency: [ {LINK_LATENCY_NS}.0 ]\n")
    (cfg / "system.json").write_text(json.dumps({
        "scheduling-policy": "LIFO", "endpoint-delay": ENDPOINT_DELAY, "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"],
        "all-gather-implementation": ["ring"], "reduce-scatter-implementation": ["ring"],
        "all-to-all-implementation": ["direct"], "collective-optimization": "baseline",
        "local-mem-bw": 1600, "boost-mode": 0, "roofline-enabled": 0, "peak-perf": 900}))
    (cfg / "memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    p = subprocess.run([str(binary), f"--workload-configuration={folder / prefix}",
                        f"--system-configuration={cfg / 'system.json'}",
                        f"--remote-memory-configuration={cfg / 'memory.json'}",
                        f"--network-configuration={cfg / f'net{n}.yml'}",
                        f"--comm-group-configuration={groups or 'empty'}"],
                       capture_output=True, text=True, cwd=work, timeout=600)
    times = [int(x) for x in re.findall(r"sys\[\d+\] finished, (\d+) cycles", p.stdout + p.stderr)]
    if p.returncode != 0 or len(times) != n:
        fail(f"ASTRA-sim on {folder.name}: exit {p.returncode}, {len(times)} of {n} ranks finished; "
             f"{(p.stdout + p.stderr).strip().splitlines()[-1:]}")
    return max(times)


def msccl_rows(binary: Path, work: Path) -> None:
    """ASTRA-sim's MSCCL ring all-reduce run as a workload: 14 sends of 131072 B (eager), 7 reduces of 7 us."""
    sys.path.insert(0, str(ROOT / "tests" / "chakra"))
    from test_chakra_third_party import msccl_send_ns

    folder = DATA / "msccl_ring_allreduce_8npus_1MB"
    a = astra_time_ns(binary, folder, "custom_allreduce", 8, work)
    h = heterosim_time_ns(folder, 8)
    a_hand = 14 * (2 * LINK_LATENCY_NS + 131072 / 25e9 * 1e9) + 7 * 7_000
    h_hand = 14 * msccl_send_ns(131072) + 7 * 7_000
    print(f"| {folder.name} | {a:,} | {a_hand:,.0f} | {h:,} | {h_hand:,.0f} | {h / a:.2f} |", flush=True)


def stg_row(binary: Path, work: Path) -> None:
    """symbolic_tensor_graph's 4-rank transformer: 26 collectives per rank, compute without durations (ASTRA-sim
    replays 1 ns each, Workload.cc issue_replay; HeteroSim 0 ns with ``timing: recorded``)."""
    sys.path.insert(0, str(ROOT / "tests" / "chakra"))
    from test_chakra_astra_semantics import decode
    from test_chakra_third_party import expected_ns, run_ns, scenario

    folder = DATA / "stg_llama_dp2_tp2"
    groups = {int(k): v for k, v in json.loads((folder / "workload.json").read_text()).items()}
    names = {0: "all_reduce", 2: "all_gather", 7: "reduce_scatter", 6: "all_to_all"}
    _, nodes = decode(folder / "workload.0.et")
    colls = [(names[a["comm_type"]], len(groups[int(a["pg_name"])]), a["comm_size"]) for _, t, a in nodes if t == 7]
    a = astra_time_ns(binary, folder, "workload", 4, work, groups=folder / "workload.json")
    h = run_ns(scenario(folder, 4))
    print(f"| {folder.name} | {a:,} | {sum(astra_expected_ns(*c) for c in colls):,.0f} | {h:,} | "
          f"{sum(expected_ns(*c) for c in colls):,.0f} | {h / a:.2f} |", flush=True)


def tutorial_rows(binary: Path, work: Path) -> None:
    """ASTRA-sim's MICRO 2024 tutorial traces: demo 1's all-reduce (8 NPUs) and demo 2's MLP (32 NPUs; by
    hand as in tests/chakra/test_chakra_third_party.py test_tutorial_mlp_model_parallel_32_npus)."""
    sys.path.insert(0, str(ROOT / "tests" / "chakra"))
    from test_chakra_astra_semantics import decode
    from test_chakra_third_party import expected_ns, run_ns, scenario

    folder = DATA / "tutorial_micro2024_allreduce_8npus"
    a = astra_time_ns(binary, folder, "allreduce", 8, work)
    h = run_ns(scenario(folder, 8))
    print(f"| {folder.name} | {a:,} | {astra_expected_ns('all_reduce', 8):,.0f} | {h:,} | "
          f"{expected_ns('all_reduce', 8, 1 << 20):,.0f} | {h / a:.2f} |", flush=True)
    folder = DATA / "tutorial_micro2024_mlp_model_parallel_32npus"
    _, nodes = decode(folder / "MLP_ModelParallel.0.et")
    colls = [a for _, t, a in nodes if t == 7]
    fwd = [32291, 7488, 7488, 14144, 7488, 9984]
    wg = [12864, 3648, 3456, 10368, 3648, 3456]

    def by_hand(f) -> float:
        ag = [f("all_gather", 32, c["comm_size"]) for c in colls if c["comm_type"] == 2]
        ar = dict(zip(range(5, 0, -1), [f("all_reduce", 32, c["comm_size"]) for c in colls if c["comm_type"] == 0]))
        return 2 * sum(fwd) * 1000 + sum(ag) + sum(max(wg[i] * 1000, ar.get(i, 0)) for i in range(6))

    a = astra_time_ns(binary, folder, "MLP_ModelParallel", 32, work)
    d = scenario(folder, 32)
    d["fabric"] = {"kind": "leaf_spine", "hosts_per_leaf": 32}
    h = run_ns(d)
    print(f"| {folder.name} | {a:,} | {by_hand(astra_expected_ns):,.0f} | {h:,} | {by_hand(expected_ns):,.0f} | "
          f"{h / a:.2f} |", flush=True)


def quickstart_row(binary: Path, work: Path) -> None:
    """Our quickstart export (16 ranks, 28 process groups, stream order as data_deps for the older feeder of
    this ASTRA-sim commit) run by ASTRA-sim: does every rank finish? (Its network here is one 25 GB/s switch
    for tensor parallelism too, where the quickstart has NVLink: times are not comparable.)"""
    from heterosim import api
    from heterosim.chakra import export_chakra

    out = work / "quickstart_et"
    shutil.rmtree(out, ignore_errors=True)
    sc = api.load(ROOT / "scenarios" / "quickstart.yaml")
    export_chakra(sc, out, stream_deps="data")
    h = api.simulate(api.prepare(sc), record_messages=False).summary["iteration_time_ns"]
    a = astra_time_ns(binary, out, "quickstart", 16, work, groups=out / "comm_group.json")
    print(f"| quickstart export (16 ranks, 28 groups) | {a:,} (every rank finished) | - | {h:,} | - | "
          f"{h / a:.2f} |", flush=True)


def heterosim_time_ns(folder: Path, n: int) -> int:
    sys.path.insert(0, str(ROOT / "tests" / "chakra"))
    from test_chakra_third_party import run_ns, scenario

    return run_ns(scenario(folder, n))


def astra_expected_ns(collective: str, n: int, size: int = 1 << 20) -> float:
    """ASTRA-sim's analytical model by hand: steps x (2 hops x 750 ns + step bytes / B)."""
    steps = {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1, "all_to_all": 1}[collective]
    step_bytes = size if collective == "all_gather" else size / n
    return steps * (2 * LINK_LATENCY_NS + step_bytes / 25e9 * 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--build", type=Path, default=Path(tempfile.gettempdir()) / "heterosim-astra")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    binary = build(args.mirrors, args.build, args.jobs)
    sys.path.insert(0, str(ROOT / "tests" / "chakra"))
    from test_chakra_third_party import expected_ns

    print("| trace | ASTRA-sim ns | ASTRA-sim by hand | HeteroSim ns | HeteroSim by hand | HeteroSim / ASTRA-sim |")
    print("|---|---|---|---|---|---|")
    for rel, coll, n in TRACES:
        folder = DATA / rel
        a = astra_time_ns(binary, folder, coll, n, args.build)
        h = heterosim_time_ns(folder, n)
        print(f"| {rel} | {a:,} | {astra_expected_ns(coll, n):,.0f} | {h:,} | {expected_ns(coll, n, 1 << 20):,.0f} | "
              f"{h / a:.2f} |", flush=True)
    msccl_rows(binary, args.build)
    stg_row(binary, args.build)
    tutorial_rows(binary, args.build)
    quickstart_row(binary, args.build)


if __name__ == "__main__":
    main()
