"""Collision episodes: the fluid DCQCN model (model/fluid-net.h, netbackend/ns3/fluid.py) against packet-level ns-3.

k senders under one leaf send to k receivers under another through one 400 G uplink (the hashed
uplink a ring step or pipeline send collides on in the H-suite), each message on a fresh QP.
Packet level (acceleration off) is the reference.  For every case: each message's FCT from
ns-3 and from the model (mean over ``--seeds`` model seeds, since both sample the ECN marks),
the largest error, ns-3's CPU time and the model's.  Issue 12's accuracy target for anything that
replaces packets: FCT p50 and p99 within 5 %.

    .venv/bin/python benchmarks/bench_fluid_collisions.py [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netbackend import Message  # noqa: E402
from netbackend.config import NetworkConfig, port_ecn_bytes, resolved_dcqcn  # noqa: E402
from netbackend.ns3.scenarios import wire_bytes  # noqa: E402
from netbackend.topo import Link, NetTopology  # noqa: E402

DELAY_NS = 500
"""topologies/config.py's fabric link_delay_ns default (the H-suite fabrics)."""


def topology(k: int, rate_gbps: float, uplink_gbps: float) -> NetTopology:
    hosts = [f"s{i}" for i in range(k)] + [f"r{i}" for i in range(k)]
    links = [Link(f"s{i}", "leaf1", rate_gbps, DELAY_NS) for i in range(k)]
    links += [Link(f"r{i}", "leaf0", rate_gbps, DELAY_NS) for i in range(k)]
    links += [Link("leaf1", "spine0", uplink_gbps, DELAY_NS), Link("spine0", "leaf0", uplink_gbps, DELAY_NS)]
    return NetTopology(hosts=hosts, switches=["leaf0", "leaf1", "spine0"], links=links)


def packet_level(k, sizes, starts, cfg, rate, up, seed) -> tuple[dict[int, int], float, dict]:
    from netbackend.registry import create_backend  # picks the accelerated backend for mode auto

    topo = topology(k, rate, up)
    c0 = time.perf_counter()
    out = {}
    with create_backend("ns3", topo, cfg, seed) as b:
        for i in range(k):
            b.send(Message(i, f"s{i}", f"r{i}", sizes[i], starts[i]))
        while b.pending():
            for c in b.advance():
                out[c.id] = c.finish_ns - starts[c.id]
        extra = b.stats().extra
    return out, time.perf_counter() - c0, extra


def fluid(k, sizes, starts, cfg, rate, up, seed, dt_ns) -> tuple[dict[int, float], float, float, float]:
    from netbackend.ns3.fluid import dcqcn_params, episode_class

    c0 = time.perf_counter()
    lat = cfg.per_hop_latency_ns
    pkt = float(wire_bytes(cfg.mtu_bytes, cfg)[0])  # a full packet on the wire
    ep = episode_class()(dt_ns, seed)

    def port(r):
        return ep.AddPort(r * 1e9, *port_ecn_bytes(r, cfg))

    upp, spine = port(up), port(up)
    params, cnp = dcqcn_params(resolved_dcqcn(cfg), rate * 1e9)
    for i in range(k):
        wire = float(sum(wire_bytes(sizes[i], cfg)))
        hops = [(-1, rate * 1e9, DELAY_NS), (upp, up * 1e9, DELAY_NS + lat),
                (spine, up * 1e9, DELAY_NS + lat), (port(rate), rate * 1e9, DELAY_NS + lat)]
        ack = sum(64 * 8e9 / r + x for _, r, x in hops)
        fid = ep.AddFlow(ep.AddNic(rate * 1e9), [float(v) for h in hops for v in h], pkt, ack, params, cnp, 0)
        ep.Post(fid, i, starts[i], wire)
    fin = {}
    while len(fin) < k:
        ep.Run(-1)
        d = list(ep.DrainCompletions())
        fin.update({int(d[j]): d[j + 1] for j in range(0, len(d), 2)})
    return ({i: fin[i] - starts[i] for i in range(k)}, time.perf_counter() - c0, max(ep.PortMaxQueue()),
            sum(ep.PortMarks()))


def cases(quick: bool):
    MB = 1_000_000
    out = [(2, [3_700_000] * 2, [0, 0]), (2, [3_700_000] * 2, [0, 20_000]),
           (3, [3_700_000] * 3, [0, 5_000, 10_000]), (2, [1 * MB] * 2, [0, 0]),
           (2, [16 * MB] * 2, [0, 0]), (4, [2 * MB] * 4, [0, 0, 30_000, 60_000])]
    return out[:3] if quick else out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--dt-ns", type=int, default=250)
    ap.add_argument("--cc", default="dcqcn")
    ap.add_argument("--uplink-gbps", type=float, default=400.0, help="the shared uplink (H4's 3:1 spine: 200)")
    args = ap.parse_args()
    cfg = NetworkConfig(backend="ns3", cc=args.cc)
    rate, up = 400.0, args.uplink_gbps
    print(f"cc={args.cc}, dt={args.dt_ns} ns, {args.seeds} model seeds, hosts {rate:g} G, uplink {up:g} G")
    print("| k | sizes MB | starts us | ns-3 FCT us (mean) | model FCT us (mean) | worst err | ns-3 wall s | model wall s |"
          " ns-3 max q KB | model max q KB | ECN marks ns-3 / model |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    errs = []
    for k, sizes, starts in cases(args.quick):
        # Both sides sample marks: compare per-message means over seeds.  Messages that start
        # together with the same size are exchangeable, so each seed's FCTs are sorted first.
        def ordered(f):
            return [f[i] for i in range(k)] if len(set(starts)) == k else sorted(f.values())
        ref_runs, mod_runs = [], []
        cpu_ref = cpu_m = qref = qmax = mref = mmod = 0.0
        for s in range(args.seeds):
            r, c, extra = packet_level(k, sizes, starts, cfg, rate, up, s)
            ref_runs.append(ordered(r))
            cpu_ref += c
            qref = max(qref, max(extra["max_queue_bytes"].values()))
            mref += extra["ecn_marks"] / args.seeds
            f, c, q, mk = fluid(k, sizes, starts, cfg, rate, up, s, args.dt_ns)
            mmod += mk / args.seeds
            mod_runs.append(ordered(f))
            cpu_m += c
            qmax = max(qmax, q)
        ref = [statistics.fmean(v) for v in zip(*ref_runs)]
        mean = [statistics.fmean(v) for v in zip(*mod_runs)]
        e = [(mean[i] - ref[i]) / ref[i] for i in range(k)]
        errs += e
        print(f"| {k} | {'/'.join(f'{x / 1e6:g}' for x in sizes)} | {'/'.join(f'{x / 1e3:g}' for x in starts)} | "
              f"{'/'.join(f'{x / 1e3:.1f}' for x in ref)} | {'/'.join(f'{x / 1e3:.1f}' for x in mean)} | "
              f"{max(e, key=abs):+.1%} | {cpu_ref / args.seeds:.2f} | {cpu_m / args.seeds:.3f} | {qref / 1e3:.0f} | {qmax / 1e3:.0f} | {mref:.0f} / {mmod:.0f} |")
    print(f"all messages: mean |err| {statistics.fmean(abs(x) for x in errs):.2%}, worst {max(errs, key=abs):+.2%}")


if __name__ == "__main__":
    main()
