"""The fluid DCQCN model's own speed (model/fluid-net.cc), measured apart from Python and ns-3.

An H-suite run with ``collisions: fluid`` spends most of its CPU inside ``ns3::FluidNet`` (the
GPT-3 175B plans whose data-parallel rings cross hashed uplinks: two thirds of the bytes go
through it).  This benchmark records every call such a run makes on its FluidNet, then replays
the log in a native program (benchmarks/fluid_replay.cc) built from the working tree's
fluid-net.cc and, with ``--against REV``, from that revision's: the two alternate ``--runs``
times, and the best CPU time of each, their ratio and whether every value the model returned
is the same (a hash) are printed side by side.

    .venv/bin/python benchmarks/bench_fluid_model.py --record h0-gpt3-175b --cpu-s 60 --log /tmp/h0.log
    .venv/bin/python benchmarks/bench_fluid_model.py --replay /tmp/h0.log --against ba697b7 --runs 3
    .venv/bin/python benchmarks/bench_fluid_model.py --replay /tmp/h0.log --threads 1,2

``--threads 1,2`` replays the working tree's build with ``FluidNet::SetThreads`` at each count and
prints wall and CPU time side by side (a thread's spinning counts as CPU), the wall-time speed-up
over the first count and whether every returned value is the same at every count (it must be).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODEL = "netbackend/ns3/src/heterosim-rdma/model"
SOURCES = ("fluid-net.cc", "fluid-net.h", "dcqcn.cc", "dcqcn.h")
PARAMS = ("g", "alphaIntervalNs", "rateDecreaseIntervalNs", "rateIncreaseIntervalNs", "byteCounterBytes",
          "fastRecoveryStages", "rateAiBps", "rateHaiBps", "minRateBps", "lineRateBps", "vendor", "clampTargetRate")
"""ns3::DcqcnParams in the order fluid_replay.cc reads them."""
_FLOAT_PARAMS = {"g", "rateAiBps", "rateHaiBps", "minRateBps", "lineRateBps"}
"""The double fields of ns3::DcqcnParams (the others are integers or flags, read as such)."""


class _Recorder:
    """Stands in for a FluidSide's ``net``: every call goes through and is written as a line."""

    def __init__(self, net, out, dt_ns: int, seed: int):
        self._net, self._out = net, out
        out.write(f"Init {dt_ns} {seed}\n")

    def __getattr__(self, name):
        fn = getattr(self._net, name)

        def call(*args):
            self._out.write(_line(name, args) + "\n")
            return fn(*args)

        return call


def _num(x) -> str:
    return repr(float(x)) if isinstance(x, float) else str(int(x))


def _line(name: str, args: tuple) -> str:
    if name == "AddFlow":
        nic, hops, pkt, ack, p, cnp, now = args
        par = " ".join(_num(float(getattr(p, k)) if k in _FLOAT_PARAMS else int(getattr(p, k))) for k in PARAMS)
        return f"AddFlow {nic} {_arg(hops)} {_num(pkt)} {_num(ack)} {par} {cnp} {now}"
    return " ".join([name] + [_arg(a) for a in args])


def _arg(a) -> str:
    """A number, or a vector (AddFlow's hops, RestoreState's state, QueueSamples' ports) as its length and
    items, as fluid_replay.cc's ReadVector reads."""
    if isinstance(a, (int, float)):
        return _num(a)
    items = list(a)
    return " ".join([str(len(items))] + [_num(x) for x in items])


def record(name: str, cpu_s: float, log: Path) -> None:
    """Run H-suite scenario ``name`` with fluid collisions for ``cpu_s`` CPU seconds, logging its
    FluidNet calls to ``log`` (written whole, then renamed into place)."""
    import bench_ns3_training as bt
    from netbackend.ns3 import fluid

    tmp = log.with_name(log.name + ".part")
    with open(tmp, "w") as out:
        init = fluid.FluidSide.__init__

        def recording_init(self, router, config, seed, *rest):
            init(self, router, config, seed, *rest)
            self.net = _Recorder(self.net, out, config.acceleration.fluid_dt_ns, seed)
            # (set in __init__, before the recorder: the samples are taken while stepping)
            out.write(f"SetQueueSampling {config.queue_sample_interval_ns} {fluid.MAX_QUEUE_SAMPLES}\n")

        fluid.FluidSide.__init__ = recording_init
        try:
            bt.h_suite_rows([name], 1e9, cpu_s, "fluid")
        finally:
            fluid.FluidSide.__init__ = init
    tmp.replace(log)
    print(f"recorded {sum(1 for _ in open(log)):,} calls to {log}")


def _build(model_dir: Path, out: Path) -> None:
    from netbackend.ns3.build import CXXFLAGS

    inc = out.parent / (out.name + "-include") / "ns3"
    inc.mkdir(parents=True)
    for h in ("fluid-net.h", "dcqcn.h"):
        shutil.copy(model_dir / h, inc / h)
    cxx = os.environ.get("CXX") or "g++"
    # (a revision before FluidNet::SetThreads: the replay leaves it out)
    old = "SetThreads" not in (model_dir / "fluid-net.h").read_text()
    cmd = [cxx, *CXXFLAGS, *(["-DFLUID_REPLAY_NO_THREADS"] if old else []), f"-I{inc.parent}", f"-I{model_dir}", "-o", str(out),
           str(ROOT / "benchmarks" / "fluid_replay.cc"), str(model_dir / "fluid-net.cc"), str(model_dir / "dcqcn.cc")]
    subprocess.run(cmd, check=True)


def _sources_at(rev: str, into: Path) -> Path:
    into.mkdir(parents=True)
    for f in SOURCES:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{MODEL}/{f}"], check=True,
                              capture_output=True, text=True).stdout
        (into / f).write_text(text)
    return into


def _run(binary: Path, log: Path, threads: int = 1) -> dict:
    args = [str(binary), str(log)] + ([str(threads)] if threads != 1 else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout.split()
    return {out[i]: out[i + 1] for i in range(0, len(out), 2)}


def replay_threads(log: Path, threads: list[int], runs: int) -> None:
    """The working tree's model at each thread count, alternated ``runs`` times; best wall and CPU."""
    with tempfile.TemporaryDirectory(prefix="fluid-replay-") as d:
        binary = Path(d) / "now"
        _build(ROOT / MODEL, binary)
        res: dict[int, list[dict]] = {n: [] for n in threads}
        for _ in range(runs):
            for n in threads:
                res[n].append(_run(binary, log, n))
        base = min(float(r["wall_s"]) for r in res[threads[0]])
        for n, rs in res.items():
            wall, cpu = min(float(r["wall_s"]) for r in rs), min(float(r["cpu_s"]) for r in rs)
            print(f"threads {n}: best wall {wall:7.2f} s, CPU {cpu:7.2f} s (of {[float(r['wall_s']) for r in rs]})  "
                  f"wall speed-up {base / wall:.2f}x  hash {rs[0]['hash']}  {int(float(rs[0]['qp_steps'])):,} QP-steps")
        same = len({r["hash"] for rs in res.values() for r in rs}) == 1
        print(f"results {'identical at every thread count' if same else 'DIFFER between thread counts'}")


def replay(log: Path, against: str | None, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="fluid-replay-") as d:
        builds = {"working tree": Path(d) / "now"}
        _build(ROOT / MODEL, builds["working tree"])
        if against:
            builds[against] = Path(d) / "rev"
            _build(_sources_at(against, Path(d) / "rev-src"), builds[against])
        res: dict[str, list[dict]] = {k: [] for k in builds}
        for _ in range(runs):  # alternate, so a load change on a shared machine hits both
            for k, b in builds.items():
                res[k].append(_run(b, log))
        best = {k: min(float(r["cpu_s"]) for r in rs) for k, rs in res.items()}
        for k, rs in res.items():
            r = rs[0]
            print(f"{k:<14} best CPU {best[k]:7.2f} s of {[float(x['cpu_s']) for x in rs]}  hash {r['hash']}  "
                  f"{int(r['steps']):,} steps, {int(r['qp_steps']):,} QP-steps, marks {r['marks']}, CNPs {r['cnps']}")
        if against:
            same = all(r["hash"] == res[against][0]["hash"] for rs in res.values() for r in rs)
            print(f"speed-up {best[against] / best['working tree']:.2f}x over {against}; results "
                  f"{'identical' if same else 'DIFFER'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", metavar="NAME", help="H-suite scenario to record (e.g. h0-gpt3-175b)")
    ap.add_argument("--cpu-s", type=float, default=60.0, help="record this much of the run (CPU s)")
    ap.add_argument("--log", type=Path, help="the call log to write (--record)")
    ap.add_argument("--replay", type=Path, metavar="LOG", help="replay a call log")
    ap.add_argument("--against", metavar="REV", help="also replay with fluid-net.cc of git revision REV")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", help="replay at these thread counts (e.g. 1,2) instead of --against")
    args = ap.parse_args()
    if args.record:
        if args.log is None:
            ap.error("--record needs --log PATH")
        record(args.record, args.cpu_s, args.log)
    elif args.replay and args.threads:
        replay_threads(args.replay, [int(x) for x in args.threads.split(",")], args.runs)
    elif args.replay:
        replay(args.replay, args.against, args.runs)
    else:
        ap.error("give --record NAME --log PATH or --replay LOG")


if __name__ == "__main__":
    main()
