"""Packet-level acceleration: ``network.acceleration.mode`` off vs auto, side by side in one run.

For each scenario: wall time off / auto, speed-up, iteration-time difference, per-message FCT
p50 / p99 differences, ECN marks / CNPs / PFC paused time, and the share of bytes computed in
closed form.  Targets (issue 12): iteration time within 1 %, FCT p50 / p99 within 5 %,
>= 20x on the batch-64 GPT-3 175B / 128-GPU case.

    .venv/bin/python benchmarks/bench_ns3_accel.py                 # quickstart + traffic cases
    .venv/bin/python benchmarks/bench_ns3_accel.py --h4            # + H4-LLaMA-65B (minutes off)
    .venv/bin/python benchmarks/bench_ns3_accel.py --gpt3          # + GPT-3 175B b64 / 128 GPUs (~23 min off)
    .venv/bin/python benchmarks/bench_ns3_accel.py --skip-small --traffic-scenarios  # scenarios/traffic, 1 ms of arrivals
    .venv/bin/python benchmarks/bench_ns3_accel.py --skip-small --traffic-scenarios hpcc-websearch-50 --traffic-ms 5
    .venv/bin/python benchmarks/bench_ns3_accel.py --memoize       # auto with memoization (off by default)
    .venv/bin/python benchmarks/bench_ns3_accel.py --collisions fluid  # auto with the fluid model for collisions
    .venv/bin/python benchmarks/bench_ns3_accel.py --gpt3 --skip-small --off-cache .bench-cache  # reuse off runs
    .venv/bin/python benchmarks/bench_ns3_accel.py --seeds 4 --collisions fluid  # quickstart's counters over 4 seeds
    .venv/bin/python benchmarks/bench_ns3_accel.py --gpt3 --skip-small --seeds 1 --seed-from 2  # GPT-3 with seed 2 only
    .venv/bin/python benchmarks/bench_ns3_accel.py --collisions fluid --traffic-draws 16 --seed-from 1 --seeds 8
    .venv/bin/python benchmarks/bench_ns3_accel.py --gpt3 --skip-small --open-loop  # + the auto run's traffic open loop
    .venv/bin/python benchmarks/bench_ns3_accel.py --gpt3 --skip-small --sensitivity  # + off nudged 1 ns per hop
    .venv/bin/python benchmarks/bench_ns3_accel.py --gpt3 --skip-small --draws 4  # + 3 more random draws of each mode

Closed loop (the default), each mode's completions decide when the next messages go, so the two runs' schedules
drift apart by microseconds and a hashed fabric's collisions (which pairs of flows meet) differ between them;
``--open-loop`` also posts the auto run's messages at their logged times in both modes, and the off run's
in auto: no schedule drift, but a bias of its own, each way (on auto's times, where packet level is slower a
message is posted while its connection still carries the previous one and waits, and waits chain; on off's
times, the same for the model where it is slower), small for long messages (GPT-3 b64), large for short
chained ones (quickstart).

On a hashed fabric with data-parallel replicas, the pipeline fill's collisions leave the replicas either in
lockstep (their pipeline sends keep meeting on the same uplinks: many marks) or a send apart (few), at random;
one closed-loop run is one draw of that, so ``--draws`` compares the modes over several draws of their random
numbers (ECMP kept) and prints the replicas' offsets (``replica_offsets``) beside the counters.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netbackend import Message  # noqa: E402
from netbackend.config import NetworkConfig  # noqa: E402
from netbackend.topo import Link, NetTopology  # noqa: E402


def _pct(vals: list[float], q: float) -> float:
    s = sorted(vals)
    if not s:
        return 0.0
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _fct_stats(fct: dict[int, tuple[int, int]]) -> tuple[float, float]:
    d = [f - s for s, f in fct.values()]
    return _pct(d, 0.5), _pct(d, 0.99)


def _rel(a: float, b: float) -> float:
    return (b - a) / a if a else 0.0


WALL_LIMIT_S = 6 * 3600.0
"""The packet-level reference of the GPT-3 case needs over an hour on a shared 2-core machine."""

ECMP: str | None = None
"""--ecmp: override network.ecmp in every case (None: the scenario's own)."""

ACC: dict = {}
"""--memoize / --fast-forward: acceleration settings added to every auto run."""


def run_training(scenario: str | dict, mode: str, seed: int | None = None, log_messages: bool = False,
                 hop_ns_extra: int = 0, draw: int = 0) -> dict:
    """One iteration at packet level (``mode`` off or auto). ``log_messages``: also every message the
    coordinator handed the network backend, as posted, with the fabric, settings and seed (what
    :func:`replay` needs to run the same traffic open loop). ``hop_ns_extra``: that many ns more per
    switch hop (the sensitivity row: the reference itself, nudged). ``draw``: the random draws only
    (``network.rng_run`` moved by ``draw``: RED's marks, the fluid model's sampled CNPs), the ECMP hash
    kept (--draws)."""
    from heterosim import api

    sc, prep, log = prepare_training(scenario, mode, seed, log_messages, hop_ns_extra, draw)
    t0, c0 = time.perf_counter(), time.process_time()
    res = api.simulate(prep, backend="ns3", record_messages=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    st = res.sim.net_stats
    out = {"wall_s": wall, "cpu_s": cpu, "iteration_ns": res.sim.iteration_time_ns, "fct": st.fct_ns,
           "extra": st.extra}
    if log_messages:
        out["log"] = {"messages": log, "net": prep.system.net, "network": sc.network, "seed": sc.seed,
                      "roles": nic_roles(prep)}
    return out


def prepare_training(scenario: str | dict, mode: str, seed: int | None = None, log_messages: bool = False,
                     hop_ns_extra: int = 0, draw: int = 0):
    """(scenario, prepared, message log) of :func:`run_training`'s run, set up as it describes; the log fills
    as the run posts messages (``log_messages``; else it stays empty). Only in the child that runs one
    simulation: it patches classes of this process."""
    from heterosim import api
    from heterosim.config.loader import scenario_from_dict
    from netbackend.ns3 import Ns3Backend, accel

    if isinstance(scenario, dict):
        sc = scenario_from_dict(scenario)
    else:
        sc = api.load(scenario)
    if seed is not None:
        sc = sc.model_copy(update={"seed": seed})
    acc = sc.network.acceleration.model_copy(update={"mode": mode, **(ACC if mode == "auto" else {})})
    upd = {"backend": "ns3", "acceleration": acc} | ({"ecmp": ECMP} if ECMP else {})
    upd["wall_limit_s"] = WALL_LIMIT_S
    upd["rng_run"] = sc.network.rng_run + draw  # another draw of RED's and the fluid model's (ECMP kept)
    if hop_ns_extra:
        upd["per_hop_latency_ns"] = sc.network.per_hop_latency_ns + hop_ns_extra
    sc = sc.model_copy(update={"network": sc.network.model_copy(update=upd)})
    prep = api.prepare(sc)
    log: list[Message] = []
    if log_messages:
        cls = accel.AcceleratedNs3Backend if mode == "auto" else Ns3Backend  # (auto's inner is not asked)
        cls.send = _logging(cls.send, log)
    return sc, prep, log


def nic_roles(prep) -> dict[str, tuple[int, int, int]]:
    """NIC name -> (data-parallel replica, pipeline stage, position in the tensor-parallel group) of its GPU."""
    ir = prep.ir
    pos = {dim: {r: i for g in ir.groups[dim] for i, r in enumerate(g)} for dim in ("dp", "tp")}
    return {g.nic: (pos["dp"][r], ir.program_of(r).stage, pos["tp"][r]) for r, g in enumerate(prep.system.gpus)
            if g.nic is not None}


def replica_offsets(log: dict) -> list[int]:
    """How far apart the data-parallel replicas' pipeline sends start: replica d's k-th send between two
    stages (per tensor-parallel position) against replica 0's k-th, in ns (d - 0), over every such pair.
    In lockstep the replicas' sends overlap and, on a hashed fabric, meet on the same uplinks; a pipeline
    fill that puts them a send's length apart keeps them off each other for the rest of the iteration
    (benchmarks/hash_replica_offsets.py, the same at flow level)."""
    roles = log["roles"]
    sends: dict[tuple, list[int]] = {}
    for m in log["messages"]:
        a, b = roles.get(m.src), roles.get(m.dst)
        if a is None or b is None or a[0] != b[0] or a[1] == b[1]:
            continue  # not a pipeline send within one replica
        sends.setdefault((a[0], a[1], b[1], a[2]), []).append(m.start_ns)
    out = []
    for (d, s0, s1, tp), ts in sends.items():
        base = sends.get((0, s0, s1, tp)) if d else None
        if base:
            out += [t - t0 for t0, t in zip(sorted(base), sorted(ts))]
    return out


def offsets_line(name: str, off_log: dict, auto_log: dict) -> None:
    def q(v: list[int]) -> str:
        a = sorted(abs(x) for x in v)
        return f"|offset| p10/p50/p90 {_pct(a, .1) / 1e3:.1f}/{_pct(a, .5) / 1e3:.1f}/{_pct(a, .9) / 1e3:.1f} us" if a else "none"
    o, a = replica_offsets(off_log), replica_offsets(auto_log)
    print(f"{'':<28} replica offsets, {name} ({len(o)} pipeline-send pairs): off {q(o)}; auto {q(a)}", flush=True)


def _logging(send, log: list):
    def logged(self, msg):
        log.append(msg)
        return send(self, msg)

    return logged


def replay(log: dict, mode: str) -> dict:
    """The messages of ``log`` (:func:`run_training`'s) posted at their logged times, open loop: the same
    traffic for ``off`` and ``auto`` (FCTs from each message's post, as in the closed-loop rows)."""
    cfg = log["network"]
    cfg = cfg.model_copy(update={"acceleration": cfg.acceleration.model_copy(
        update={"mode": mode, **(ACC if mode == "auto" else {})})})
    return _open_loop(log["net"], cfg, log["seed"], log["messages"])


def traffic_topology(leaves: int = 4, hosts_per_leaf: int = 4, spines: int = 2) -> NetTopology:
    """Leaf-spine, 100 Gb/s hosts, 400 Gb/s uplinks, 1 us links (shared/network-reference.md)."""
    hosts = [f"h{leaf}_{i}" for leaf in range(leaves) for i in range(hosts_per_leaf)]
    sw = [f"leaf{leaf}" for leaf in range(leaves)] + [f"spine{s}" for s in range(spines)]
    links = [Link(h, f"leaf{h[1:].split('_')[0]}", 100.0, 1000) for h in hosts]
    links += [Link(f"leaf{leaf}", f"spine{s}", 400.0, 1000) for leaf in range(leaves) for s in range(spines)]
    return NetTopology(hosts=hosts, switches=sw, links=links)


def traffic_messages(topo: NetTopology, seed: int, n: int = 200, incast: int = 8) -> list[Message]:
    """Training-like traffic: ring-neighbour messages in repeated rounds plus one incast burst."""
    rng = random.Random(seed)
    hosts = topo.hosts
    msgs, mid, t = [], 0, 0
    for rnd in range(n // len(hosts)):
        for i, h in enumerate(hosts):
            size = rng.choice([256_000, 1_000_000, 4_000_000])
            msgs.append(Message(mid, h, hosts[(i + 1 + rnd % 3) % len(hosts)], size, t + rng.randrange(0, 20_000),
                                connection=rnd % 3, step_bytes=524_288))
            mid += 1
        t += 400_000
    for i in range(incast):  # an incast round in the middle
        msgs.append(Message(mid, hosts[1 + i], hosts[0], 2_000_000, t // 2, connection=7, step_bytes=524_288))
        mid += 1
    return msgs


def run_traffic(mode: str, seed: int = 1, nudge: tuple[int, int] | None = None, draw: int = 0) -> dict:
    """``nudge`` (message id, ns): start that message later (the sensitivity row); ``draw``: another draw of
    RED's marks and the fluid model's (``network.rng_run``; traffic and ECMP kept)."""
    topo = traffic_topology()
    cfg = NetworkConfig(backend="ns3", cc="dcqcn", acceleration={"mode": mode, **(ACC if mode == "auto" else {})},
                        ecmp=ECMP or "hash", rng_run=1 + draw)
    msgs = traffic_messages(topo, seed)
    if nudge:
        msgs = [Message(m.id, m.src, m.dst, m.size_bytes, m.start_ns + (nudge[1] if m.id == nudge[0] else 0),
                        m.flow_key, m.connection, m.step_bytes) for m in msgs]
    return _open_loop(topo, cfg, seed, msgs)


TRAFFIC_ARRIVALS_NS = 1_000_000
"""--traffic-scenarios: flows arrive for this long (the HPCC-paper scenarios' 10 ms would keep packet level
busy for about an hour each; 1 ms of WebSearch at 50% load is ~1,150 flows and ~70 s of it)."""


def run_traffic_scenario(path: str, mode: str, arrivals_ns: int = TRAFFIC_ARRIVALS_NS, draw: int = 0) -> dict:
    """A ``scenarios/traffic`` YAML as ``heterosim traffic`` runs it (its own fabric, CC and flows), with
    arrivals cut to ``arrivals_ns``, no warm-up and every flow run to its end (each one counted):
    the result as :func:`run_training`'s (``iteration_ns``: the last delivery), plus the FCT
    slowdowns of ``heterosim traffic`` (``slowdown``). ``draw``: RED's and the fluid model's random
    draws moved (``network.rng_run``; flows and ECMP kept)."""
    from heterosim.traffic.build import load_traffic, plan
    from heterosim.traffic.run import run_flows, summarize

    sc = load_traffic(path, {"duration_ns": arrivals_ns, "warmup_ns": 0, "drain_ns": None})
    acc = sc.network.acceleration.model_copy(update={"mode": mode, **(ACC if mode == "auto" else {})})
    net = sc.network.model_copy(update={"backend": "ns3", "acceleration": acc, "rng_run": sc.network.rng_run + draw})
    p = plan(sc.model_copy(update={"network": net}))
    cfg = p.scenario.network
    c0 = time.process_time()
    finish, st, sim_ns, wall, setup = run_flows(p, cfg)
    cpu = time.process_time() - c0
    start = {m.id: m.start_ns for m in p.flows}
    slow = summarize(p, cfg, "ns3", finish, st, sim_ns, wall, setup)["summary"]["slowdown"]["all"]
    return {"wall_s": wall, "cpu_s": cpu, "iteration_ns": max(finish.values(), default=0),
            "fct": {i: (start[i], f) for i, f in finish.items()}, "extra": st.extra, "slowdown": slow,
            "flows": len(p.flows), "unfinished": len(p.flows) - len(finish)}


def _open_loop(topo: NetTopology, cfg: NetworkConfig, seed: int, msgs: list[Message]) -> dict:
    """Post ``msgs`` at their start times on a fresh ns-3 backend and run until all are delivered: the
    result as :func:`run_training`'s (``iteration_ns``: the last delivery)."""
    from netbackend.registry import create_backend  # picks the accelerated backend for mode auto

    t0, c0 = time.perf_counter(), time.process_time()
    with create_backend("ns3", topo, cfg, seed) as b:
        for m in msgs:
            b.send(m)
        end = 0
        while b.pending():
            for c in b.advance():
                end = max(end, c.finish_ns)
        st = b.stats()
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "iteration_ns": end,
            "fct": st.fct_ns, "extra": st.extra}


def _isolated(fn, arg, mode: str, **kw) -> dict:
    """``fn`` in a child process (netbackend.ns3.run_isolated), with the globals set here."""
    from netbackend.ns3 import run_isolated

    return run_isolated(_call, fn.__name__, arg, mode, ECMP, ACC, kw)


def _call(name: str, arg, mode: str, ecmp: str | None, acc: dict, kw: dict) -> dict:
    global ECMP, ACC
    ECMP, ACC = ecmp, acc
    fn = globals()[name]
    return fn(mode, **kw) if arg is None else fn(arg, mode, **kw)


OFF_ONLY_EXCLUDED = ("netbackend/ns3/accel.py", "netbackend/ns3/accel_stats.py", "netbackend/ns3/closed_form.py",
                     "netbackend/ns3/fastforward.py", "netbackend/ns3/handback.py", "netbackend/ns3/islands.py",
                     "netbackend/ns3/memo.py", "netbackend/ns3/packet.py", "netbackend/ns3/partitions.py",
                     "netbackend/ns3/paths.py", "netbackend/ns3/ports.py", "netbackend/ns3/fluid.py", "fluid-net.h",
                     "fluid-net.cc")
"""Sources only ``mode: auto`` runs: a change there leaves a cached ``off`` reference valid."""


def _off_key(name: str, arg) -> str:
    """What an ``off`` reference depends on: the case, the scenario, ECMP and every source of the
    simulator but the accelerated path's own (OFF_ONLY_EXCLUDED)."""
    import hashlib

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha1(repr((name, ECMP)).encode())
    if isinstance(arg, str) and Path(arg).is_file():
        h.update(Path(arg).read_bytes())
    else:
        h.update(repr(arg).encode())
    for pkg in ("heterosim", "netbackend"):
        for f in sorted((root / pkg).rglob("*")):
            if f.suffix in (".py", ".cc", ".h", ".txt", ".yaml") and not any(str(f).endswith(x) for x in OFF_ONLY_EXCLUDED):
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _off(name: str, fn, arg, cache: Path | None, **kw) -> dict:
    """The ``off`` reference, from ``cache`` when this code already ran it there (the GPT-3 case
    takes 20-25 CPU minutes), else run and stored (written whole, then renamed)."""
    import pickle

    if cache is None:
        return _isolated(fn, arg, "off", **kw)
    f = cache / f"off-{_off_key(name + (repr(sorted(kw.items())) if kw else ''), arg)}.pkl"
    if f.is_file():
        print(f"{'':<28} off reference from {f}", flush=True)
        return pickle.loads(f.read_bytes())
    off = _isolated(fn, arg, "off", **kw)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(off))
    tmp.replace(f)
    return off


def row(name: str, off: dict, auto: dict) -> None:
    p50o, p99o = _fct_stats(off["fct"])
    p50a, p99a = _fct_stats(auto["fct"])
    ea, eo = auto["extra"], off["extra"]
    acc = ea.get("acceleration", {})
    print(f"{name:<28} {off['wall_s']:8.1f} {auto['wall_s']:8.1f} {off['wall_s'] / max(auto['wall_s'], 1e-9):7.1f}x "
          f"{_rel(off['iteration_ns'], auto['iteration_ns']):+8.3%} {_rel(p50o, p50a):+8.3%} {_rel(p99o, p99a):+8.3%} "
          f"{acc.get('closed_form_share', 0.0):7.1%} {acc.get('fluid_share', 0.0):6.1%}  "
          f"ECN {eo['ecn_marks']}/{ea['ecn_marks']} CNP {eo['cnps_sent']}/{ea['cnps_sent']} "
          f"PFC ns {eo['pfc_paused_ns_total']}/{ea['pfc_paused_ns_total']} "
          f"hops {eo['packet_hops']:,}/{ea['packet_hops']:,}", flush=True)
    print(f"{'':<28} CPU s off {off['cpu_s']:.1f} auto {auto['cpu_s']:.1f} (speed-up {off['cpu_s'] / max(auto['cpu_s'], 1e-9):.1f}x; "
          f"wall/CPU > 1.1 means the machine was shared)", flush=True)
    print(f"{'':<28} auto: {acc.get('messages_closed_form')} msgs closed form, {acc.get('messages_packet_level')} "
          f"packet level, {acc.get('messages_fluid')} fluid, {acc.get('partitions_closed_form')} partitions, {acc.get('handbacks')} hand-backs, "
          f"{acc.get('memo_hits')} memo hits ({acc.get('replayed_share', 0.0):.1%} of bytes replayed, "
          f"{acc.get('memo_interrupts')} interrupted), {acc.get('fast_forwards')} fast-forwards "
          f"({acc.get('fast_forwarded_share', 0.0):.1%}), not qualified {acc.get('not_qualified')}", flush=True)


def draws_rows(name: str, fn, arg, cache, kw: dict, n: int, off0: dict, auto0: dict) -> None:
    """Draws 1..n-1 of both modes (draw 0: the runs above), each with its replica offsets, then the means."""
    runs = [(off0, auto0)]
    for k in range(1, n):
        o = _off(name, fn, arg, cache, **kw, draw=k, log_messages=True)
        a = _isolated(fn, arg, "auto", **kw, draw=k, log_messages=True)
        runs.append((o, a))
    print(f"{'':<28} draws of {name} (RED / fluid-model draws moved, ECMP kept):", flush=True)
    sums = {"off": [0, 0, 0.0, 0.0, 0], "auto": [0, 0, 0.0, 0.0, 0]}
    for k, (o, a) in enumerate(runs):
        cells = []
        for mode, r in (("off", o), ("auto", a)):
            e, c = r["extra"]["ecn_marks"], r["extra"]["cnps_sent"]
            p50, p99 = _fct_stats(r["fct"])
            offs = sorted(abs(x) for x in replica_offsets(r["log"])) if "log" in r else []
            for i, v in enumerate((e, c, p99, p50, r["iteration_ns"])):
                sums[mode][i] += v
            cells.append(f"{mode} ECN {e} CNP {c} p50 {p50 / 1e3:.1f} us p99 {p99 / 1e3:.1f} us "
                         f"iteration {r['iteration_ns'] / 1e9:.6f} s"
                         + (f" offset p50 {_pct(offs, .5) / 1e3:.1f} us" if offs else ""))
        print(f"{'':<30} draw {k}: " + "; ".join(cells), flush=True)
    (eo, co, po, qo, io), (ea, ca, pa, qa, ia) = sums["off"], sums["auto"]
    print(f"{'':<28} mean over {n} draws: ECN {eo / n:.0f} / {ea / n:.0f} ({_rel(eo, ea):+.1%}), CNP {co / n:.0f} / "
          f"{ca / n:.0f} ({_rel(co, ca):+.1%}), FCT p50 {qo / n / 1e3:.1f} / {qa / n / 1e3:.1f} us ({_rel(qo, qa):+.1%}), "
          f"FCT p99 {po / n / 1e3:.1f} / {pa / n / 1e3:.1f} us ({_rel(po, pa):+.1%}), iteration "
          f"{_rel(io, ia):+.3%}", flush=True)


def traffic_draws_rows(seeds: range, n: int) -> None:
    """Rings + incast per scenario seed, each mode's last delivery and marks as means over draws 0..n-1
    (``network.rng_run`` 1..n: RED's and the model's random draws; traffic and ECMP kept), then the
    mean of the per-seed differences. One run's last delivery is one draw of the DCQCN sawtooth (with
    the 300 us increase timer a flow's last cut decides when it comes back: sd 1-6% between draws), so
    issue 12's 1% is judged on these means (docs/packet-level-acceleration.md, "Pacing after a rate
    change")."""
    import statistics

    print(f"{'':<28} rings + incast over draws 0-{n - 1} (last delivery, ms: mean (sd us); ECN mean):", flush=True)
    diffs, ecn = [], {"off": 0.0, "auto": 0.0}
    for seed in seeds:
        cells, means = [], {}
        for mode in ("off", "auto"):
            runs = [_isolated(run_traffic, None, mode, seed=seed, draw=k) for k in range(n)]
            ends = [r["iteration_ns"] for r in runs]
            marks = statistics.mean(r["extra"]["ecn_marks"] for r in runs)
            means[mode] = statistics.mean(ends)
            ecn[mode] += marks
            cells.append(f"{mode} {means[mode] / 1e6:.3f} ({statistics.pstdev(ends) / 1e3:.0f}) ECN {marks:.0f}")
        diffs.append(_rel(means["off"], means["auto"]))
        print(f"{'':<30} seed {seed}: " + "; ".join(cells) + f"; auto vs off {diffs[-1]:+.1%}", flush=True)
    print(f"{'':<28} mean over seeds {seeds.start}-{seeds.stop - 1}: last delivery {sum(diffs) / len(diffs):+.2%} "
          f"(per seed {min(diffs):+.1%} to {max(diffs):+.1%}), ECN {_rel(ecn['off'], ecn['auto']):+.1%}", flush=True)


def traffic_scenario_lines(name: str, path: str, cache, off: dict, auto: dict, n: int, kw: dict) -> None:
    """A traffic scenario's FCT slowdowns off / auto; with ``n`` > 1 draws (``--draws``), each mode's
    means over draws 0..n-1 too (an incast's last delivery and marks are a draw of the DCQCN sawtooth and
    RED: the shipped 4 -> 1 DCQCN incast's last delivery spans 9.3-11.5 ms over 8 packet-level draws)."""
    def line(label: str, o: dict, a: dict) -> None:
        print(f"{'':<28} {label}FCT slowdown p50 {o['p50']:.3f} / {a['p50']:.3f} ({_rel(o['p50'], a['p50']):+.1%}), "
              f"p95 {o['p95']:.3f} / {a['p95']:.3f} ({_rel(o['p95'], a['p95']):+.1%}), p99 {o['p99']:.3f} / "
              f"{a['p99']:.3f} ({_rel(o['p99'], a['p99']):+.1%})", flush=True)

    print(f"{'':<28} {off['flows']:,} flows ({off['unfinished']} / {auto['unfinished']} unfinished)", flush=True)
    line("", off["slowdown"], auto["slowdown"])
    if n <= 1:
        return
    runs = {"off": [off], "auto": [auto]}
    for k in range(1, n):
        runs["off"].append(_off(name, run_traffic_scenario, path, cache, **kw, draw=k))
        runs["auto"].append(_isolated(run_traffic_scenario, path, "auto", **kw, draw=k))
    mean = {m: {"last": sum(r["iteration_ns"] for r in rs) / n, "ecn": sum(r["extra"]["ecn_marks"] for r in rs) / n,
                "slow": {q: sum(r["slowdown"][q] for r in rs) / n for q in ("p50", "p95", "p99")}}
            for m, rs in runs.items()}
    o, a = mean["off"], mean["auto"]
    print(f"{'':<28} means over draws 0-{n - 1}: last delivery {o['last'] / 1e6:.3f} / {a['last'] / 1e6:.3f} ms "
          f"({_rel(o['last'], a['last']):+.2%}; off per draw {min(r['iteration_ns'] for r in runs['off']) / 1e6:.3f}-"
          f"{max(r['iteration_ns'] for r in runs['off']) / 1e6:.3f}), ECN {o['ecn']:.0f} / {a['ecn']:.0f} "
          f"({_rel(o['ecn'], a['ecn']):+.1%})", flush=True)
    line(f"means over draws 0-{n - 1}: ", o["slow"], a["slow"])


def sensitivity_row(name: str, off: dict, nudged: dict) -> None:
    """The reference against itself nudged: the differences auto's are to be read beside."""
    p50o, p99o = _fct_stats(off["fct"])
    p50n, p99n = _fct_stats(nudged["fct"])
    eo, en = off["extra"], nudged["extra"]
    print(f"{'':<28} sensitivity, {name}: off with 1 ns more per switch hop against off: iteration "
          f"{_rel(off['iteration_ns'], nudged['iteration_ns']):+.3%}, FCT p50/p99 {_rel(p50o, p50n):+.3%}/"
          f"{_rel(p99o, p99n):+.3%}, ECN {eo['ecn_marks']}/{en['ecn_marks']} "
          f"({_rel(eo['ecn_marks'], en['ecn_marks']):+.1%}), CNP {eo['cnps_sent']}/{en['cnps_sent']} "
          f"({_rel(eo['cnps_sent'], en['cnps_sent']):+.1%}), PFC ns {eo['pfc_paused_ns_total']}/"
          f"{en['pfc_paused_ns_total']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--h4", action="store_true", help="add H4-LLaMA-65B (128 GPUs, full batch)")
    ap.add_argument("--gpt3", action="store_true", help="add GPT-3 175B batch 64 on 128 GPUs")
    ap.add_argument("--skip-small", action="store_true")
    ap.add_argument("--ecmp", choices=["hash", "rail"], help="override network.ecmp (the partitions need the "
                    "ns-3 switches to choose the paths netbackend.routing.Router does)")
    ap.add_argument("--memoize", action="store_true", help="auto runs with acceleration.memoize")
    ap.add_argument("--fast-forward", action="store_true", help="auto runs with acceleration.fast_forward "
                    "(theta 0.02, 512-packet windows)")
    ap.add_argument("--collisions", choices=["packet", "fluid"], default="packet",
                    help="auto runs with acceleration.collisions (fluid: the fluid DCQCN model)")
    ap.add_argument("--seeds", type=int, default=1, metavar="N",
                    help="every scenario with seeds K..K+N-1 (K: --seed-from; each moves the ECMP hash, the "
                         "RED draws and the fluid model's draws, both ways), and the counters summed over "
                         "them: one run's marks hang on which flows collide and on early marks (4 "
                         "quickstart seeds gave 2,712 to 17,989 marks off)")
    ap.add_argument("--seed-from", type=int, default=0, metavar="K",
                    help="first seed (e.g. to run further seeds of a long case in another process)")
    ap.add_argument("--open-loop", action="store_true",
                    help="training scenarios: also replay the auto run's messages at their posting times, off and "
                         "auto (the same traffic for both: no schedule drift, but auto's times; see above)")
    ap.add_argument("--sensitivity", action="store_true",
                    help="training scenarios: also the off reference with 1 ns more per switch hop (500 -> 501 "
                         "ns), against the off run: how far the reference itself moves under a nudge no model "
                         "claims to resolve (closed loop, a hashed fabric's collisions hang on microseconds)")
    ap.add_argument("--draws", type=int, default=1, metavar="N",
                    help="training and traffic scenarios: also draws 1..N-1 of each mode (the RED and fluid-model random draws "
                         "moved, the ECMP hash kept; off: ns-3's run number), with the replica offsets and the "
                         "counters' means over the N draws: on a hashed fabric one run's marks hang on a few "
                         "random collision outcomes in the pipeline fill")
    ap.add_argument("--traffic-scenarios", nargs="*", metavar="NAME",
                    help="add scenarios/traffic YAMLs by name (none given: all; the DCQCN incast, the HPCC paper's "
                         "WebSearch and FB_Hadoop loads), arrivals cut to --traffic-ms, every flow counted")
    ap.add_argument("--traffic-ms", type=float, default=TRAFFIC_ARRIVALS_NS / 1e6,
                    help="--traffic-scenarios: how long flows arrive, ms (default %(default)g)")
    ap.add_argument("--traffic-draws", type=int, default=0, metavar="N",
                    help="rings + incast over scenario seeds K..K+S-1 (--seed-from, at least 1 as the rings + "
                         "incast row's seed; --seeds), each mode N times "
                         "(network.rng_run 1..N), compared as means per seed (8 seeds x 16 draws: ~6 min, a fresh process per run)")
    ap.add_argument("--off-cache", type=Path, metavar="DIR",
                    help="keep each off reference in DIR and reuse it while the simulator's sources "
                         "(but the accelerated path's) are unchanged")
    args = ap.parse_args()
    if args.traffic_draws < 0:
        ap.error(f"--traffic-draws = {args.traffic_draws}: a number of draws must be >= 0")
    global ECMP
    ECMP = args.ecmp
    ACC.update({"memoize": True} if args.memoize else {})
    ACC.update({"fast_forward": True, "theta": 0.02, "window_packets": 512} if args.fast_forward else {})
    ACC.update({"collisions": args.collisions})
    root = Path(__file__).resolve().parents[1]
    print(f"{'scenario':<28} {'off s':>8} {'auto s':>8} {'speedup':>8} {'iter':>9} {'FCT p50':>9} {'FCT p99':>9} "
          f"{'closed':>7} {'fluid':>6}  counters off/auto")
    cases = []
    seeds = range(args.seed_from, args.seed_from + args.seeds)

    def seeded_cases(name: str, fn, arg) -> list:
        return [(f"{name}, seed {k}" if k or args.seeds > 1 else name, fn, arg, {} if k == 0 else {"seed": k})
                for k in seeds]

    if args.traffic_draws:
        traffic_draws_rows(range(max(1, args.seed_from), max(1, args.seed_from) + args.seeds), args.traffic_draws)
        return
    if not args.skip_small:
        cases += seeded_cases("quickstart (16 GPUs)", run_training, str(root / "scenarios/quickstart.yaml"))
        cases.append(("traffic: rings+incast", run_traffic, None, {}))
    if args.traffic_scenarios is not None:
        if args.traffic_ms <= 0:
            ap.error(f"--traffic-ms = {args.traffic_ms:g}: must be > 0")
        tdir = root / "scenarios" / "traffic"
        known = sorted(y.stem for y in tdir.glob("*.yaml"))
        for bad in set(args.traffic_scenarios) - set(known):
            ap.error(f"--traffic-scenarios {bad}: no scenarios/traffic/{bad}.yaml (there: {', '.join(known)})")
        arrivals = {} if args.traffic_ms * 1e6 == TRAFFIC_ARRIVALS_NS else {"arrivals_ns": round(args.traffic_ms * 1e6)}
        cases += [(f"traffic: {n}" + (f" ({args.traffic_ms:g} ms)" if arrivals else ""), run_traffic_scenario,
                   str(tdir / f"{n}.yaml"), arrivals) for n in (args.traffic_scenarios or known)]
    if args.h4:
        cases += seeded_cases("H4-LLaMA-65B (128 GPUs)", run_training,
                              str(root / "scenarios/suites/h-suite/h4-llama1-65b.yaml"))
    if args.gpt3:
        from bench_ns3_training import scenario

        cases += seeded_cases("GPT-3 175B b64 (128 GPUs)", run_training, scenario(64))
    seeded: dict[str, list[tuple[dict, dict]]] = {}
    for name, fn, arg, kw in cases:
        # Each run in its own fresh process: neither inherits the other's heap, caches or ns-3 state.
        logged = args.open_loop and fn is run_training
        lk = {"log_messages": True} if logged else {}
        off = _off(name, fn, arg, args.off_cache, **kw, **lk)
        auto = _isolated(fn, arg, "auto", **kw, **lk)
        row(name, off, auto)
        if logged:
            # each mode's schedule in turn: auto's posting times (off replayed), then off's (auto replayed;
            # the off run itself is its own replay: same messages at the same times, same seed)
            log = auto.pop("log")
            offsets_line(name, off["log"], log)
            ol_off = _off(f"{name}, open loop", replay, log, args.off_cache)
            row(f"{name}, open loop on auto's schedule", ol_off, _isolated(replay, log, "auto"))
            off_log = off.pop("log")
            row(f"{name}, open loop on off's schedule", off, _isolated(replay, off_log, "auto"))
        if fn is run_training and args.sensitivity:
            nudged = _off(name, fn, arg, args.off_cache, **kw, hop_ns_extra=1)
            sensitivity_row(name, off, nudged)
        if fn is run_training and args.draws > 1:
            draws_rows(name, fn, arg, args.off_cache, kw, args.draws, off, auto)
        if fn is run_training and args.seeds > 1:
            family = name.rsplit(", seed", 1)[0]
            runs = seeded.setdefault(family, [])
            runs.append((off, auto))
            if len(runs) == args.seeds:
                tot = {k: [sum(r[i]["extra"][k] for r in runs) for i in (0, 1)] for k in ("ecn_marks", "cnps_sent")}
                its = [_rel(o["iteration_ns"], a["iteration_ns"]) for o, a in runs]
                print(f"{'':<28} {family} over seeds {seeds.start}-{seeds.stop - 1}: ECN "
                      f"{tot['ecn_marks'][0]}/{tot['ecn_marks'][1]} ({_rel(*tot['ecn_marks']):+.1%}), CNP "
                      f"{tot['cnps_sent'][0]}/{tot['cnps_sent'][1]} ({_rel(*tot['cnps_sent']):+.1%}), "
                      f"iteration {', '.join(f'{x:+.2%}' for x in its)}", flush=True)
        if fn is run_traffic_scenario:
            traffic_scenario_lines(name, arg, args.off_cache, off, auto, args.draws, kw)
        if fn is run_traffic:
            # The incast's outcome hangs on microseconds: the reference itself, with one 256 KB
            # message that starts as the incast does moved by 1 us, is what auto is compared with.
            nudged = _isolated(run_traffic, None, "off", nudge=(97, 1000))
            print(f"{'':<28} sensitivity: off with message 97 started 1 us later: last completion "
                  f"{_rel(off['iteration_ns'], nudged['iteration_ns']):+.3%}, FCT p50/p99 "
                  f"{_rel(_fct_stats(off['fct'])[0], _fct_stats(nudged['fct'])[0]):+.3%}/"
                  f"{_rel(_fct_stats(off['fct'])[1], _fct_stats(nudged['fct'])[1]):+.3%}", flush=True)


if __name__ == "__main__":
    main()
