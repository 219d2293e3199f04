"""Statistics of the accelerated backend (``accel.py``): ns-3's own, with what the closed form, replayed
episodes and the fluid model carried added port by port, and ``extra["acceleration"]``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from netbackend.ns3 import hot_port_samples

if TYPE_CHECKING:
    from netbackend.ns3.accel import AcceleratedNs3Backend


def _add_by_name(into: dict, per_port: dict, names: list, skip_zero: bool = False) -> None:
    """Adds each port's value, rounded to an integer, to ``into`` under the port's name (``names[port]``): how
    the closed-form, replayed and fluid shares join ns-3's own per-link and per-port counters. ``skip_zero``:
    a port whose rounded value is 0 gets no entry (the fluid model's expected marks: most ports have a few
    hundredths)."""
    for p, v in per_port.items():
        n = int(round(v))
        if n or not skip_zero:
            into[names[p]] = into.get(names[p], 0) + n


def merged_counters(b: AcceleratedNs3Backend) -> tuple[dict, dict, list[str], dict]:
    """(link bytes, extra, port names or [], the fluid model's counters or {}): ns-3's statistics with what
    the closed form, the replayed episodes and the fluid model delivered, marked and queued added."""
    fc: dict = {}
    st = b.inner.stats()
    link_bytes = dict(st.link_bytes)
    names = b.inner.port_links
    _add_by_name(link_bytes, b.ledger.link_bytes, names)
    extra = dict(st.extra)
    rp = {k: sum(v.values()) for k, v in b.memo.replayed.items()}
    _add_by_name(link_bytes, b.memo.replayed.get("tx_bytes", {}), names)
    port_names = b.inner.port_names() if rp or b.islands.side is not None else []
    if rp:
        marks = dict(extra["ecn_marks_per_port"])
        _add_by_name(marks, b.memo.replayed.get("ecn_marks", {}), port_names)
        cnp_per_mark = extra["cnps_sent"] / extra["ecn_marks"] if extra["ecn_marks"] else 1.0
        extra.update(ecn_marks_per_port=marks, ecn_marks=sum(marks.values()),
                     cnps_sent=extra["cnps_sent"] + int(round(rp.get("ecn_marks", 0.0) * cnp_per_mark)),
                     pfc_paused_ns_total=extra["pfc_paused_ns_total"] + int(round(rp.get("paused_ns", 0.0))))
    if b.islands.side is not None:
        _add_by_name(link_bytes, b.islands.side.link_tx_bytes(), names)
        fc = b.islands.side.counters()
        # per port too (network_stats.csv, the plots): each port's expected count rounded, the total their sum
        marks = dict(extra["ecn_marks_per_port"])
        _add_by_name(marks, b.islands.side.port_marks(), port_names, skip_zero=True)
        # the deepest queue per port, packet level's or the model's
        max_q = dict(extra["max_queue_bytes"])
        for p, v in b.islands.side.port_max_queue().items():
            max_q[port_names[p]] = max(max_q.get(port_names[p], 0), int(round(v)))
        extra.update(ecn_marks_per_port=marks, ecn_marks=sum(marks.values()), max_queue_bytes=max_q,
                     cnps_sent=extra["cnps_sent"] + fc["cnps"],
                     cnps_received=extra["cnps_received"] + fc["cnps"])
    return link_bytes, extra, port_names, fc


def queue_means(b: AcceleratedNs3Backend, busy_ns: int, names: list[str]) -> dict:
    """mean_queue_bytes, hot_ports and queue_samples over the whole run, as ``off`` reports them: each port's
    queue averaged over the time a message was in flight (ns-3's samples and the fluid model's integral; a
    closed-form flow queues nothing), the hottest ports' samples from both.  (ns-3's own mean is over the
    time it had packets, a part of the run here.)"""
    inner, interval = b.inner, b.config.queue_sample_interval_ns
    if busy_ns <= 0 or interval <= 0:
        return {}
    # (a sample stands for its interval: the sum of ns-3's samples x interval is its queues' integral)
    integral = {names[i]: v * interval for i, v in enumerate(inner.port_stat("queue_sample_sum")) if v}
    if b.islands.side is not None:
        _add_by_name(integral, b.islands.side.queue_integral(), names)
    mean_q = {p: v / busy_ns for p, v in integral.items() if v > 0}
    hot, samples = hot_port_samples(mean_q, names, inner.queue_samples())
    if b.islands.side is not None:
        index = {n: i for i, n in enumerate(names)}
        samples += [(t, names[p], int(round(q))) for t, p, q in b.islands.side.queue_samples([index[h] for h in hot])]
    samples.sort()
    return {"mean_queue_bytes": mean_q, "hot_ports": hot, "queue_samples": samples}


def acceleration_counts(b: AcceleratedNs3Backend, fc: dict) -> dict:
    """``extra["acceleration"]``: the backend's counts, where its bytes went (the five ``*_share``), the
    fluid model's counters (``fc``), the replayed and extrapolated counters and a note."""
    c = dict(b.counts)
    rp = {k: sum(v.values()) for k, v in b.memo.replayed.items()}
    if b.islands.side is not None:
        c["fluid_work"] = b.islands.side.work()
        c["fluid_counters"] = dict(fc, how="ECN marks: the model's expected count (RED probability x packets "
                                            "per step); CNPs: those it sampled; both included in ecn_marks and "
                                            "cnps_sent; no PFC in the model")
        c["fluid_pfc"] = b.islands.side.pfc_check()
    total = (c["bytes_closed_form"] + c["bytes_packet_level"] + c["bytes_fast_forwarded"] + c["bytes_replayed"]
             + c["bytes_fluid"])
    c["closed_form_share"] = c["bytes_closed_form"] / total if total else 0.0
    c["fast_forwarded_share"] = c["bytes_fast_forwarded"] / total if total else 0.0
    c["replayed_share"] = c["bytes_replayed"] / total if total else 0.0
    c["fluid_share"] = c["bytes_fluid"] / total if total else 0.0
    c["accelerated_share"] = (c["closed_form_share"] + c["fast_forwarded_share"] + c["replayed_share"]
                              + c["fluid_share"])
    c["memo_entries"] = len(b.memo.entries)
    c["replayed_counters"] = ({"ecn_marks": int(round(rp.get("ecn_marks", 0.0))),
                               "pfc_paused_ns": int(round(rp.get("paused_ns", 0.0))),
                               "packet_hops": int(round(rp.get("tx_packets", 0.0))),
                               "how": "the port counters ns-3 gave the recorded episode, added once per "
                                      "replay (a share for an interrupted one); CNPs at the run's CNPs per "
                                      "mark; included in ecn_marks, cnps_sent, pfc_paused_ns_total and "
                                      "link bytes, not in packet_hops"}
                              if b.memo.on else {})
    c["connections_at_packet_level"] = len(b.packet.dirty)
    c["fallback_packet_level"] = total > 0 and c["accelerated_share"] == 0
    c["note"] = ("no partition qualified for closed form: plain packet level" if c["fallback_packet_level"]
                 else "closed-form flows build no queue: no ECN/CNP/PFC counters extrapolated" + (
                     "; ECN marks of fast-forwarded intervals extrapolated (extrapolated_counters)"
                     if b.ff.on else "") + (
                     f"; fluid collisions: a PFC PAUSE could have fired at {len(c['fluid_pfc']['possible_at'])} "
                     "switches, which the fluid model does not simulate (fluid_pfc; collisions: packet does)"
                     if b.islands.side is not None and c["fluid_pfc"]["possible_at"] else ""))
    c["extrapolated_counters"] = ({"ecn_marks": int(round(b.ff.extrap_marks)),
                                   "how": "marks per ns on a partition's ports over the window before "
                                          "each fast-forward, times its length; not in ns-3's port counters"}
                                  if b.ff.on else {})
    return c
