"""Network and congestion-control settings (one small model per concept).

Defaults follow ../shared/network-reference.md: the HPCC simulator's ``dcqcn``
preset and SimAI.conf (Li et al., SIGCOMM 2019; SimAI, NSDI 2025), which are
what published LLM-network simulations use; the DCQCN paper's own values
(Zhu et al., SIGCOMM 2015) are noted where they differ.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StrictModel(BaseModel):
    """Base of every config model in every layer: unknown fields are errors, assignments re-validate."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


_Strict = StrictModel


class DcqcnConfig(_Strict):
    """DCQCN reaction/notification point parameters (per QP)."""

    g: float = Field(1 / 256, gt=0, le=1)
    """Alpha EWMA gain (paper, HPCC preset and SimAI: 1/256)."""
    alpha_update_interval_ns: int = Field(1_000, gt=0)
    """Alpha decay timer (HPCC preset/SimAI: 1 us; paper: 55 us)."""
    rate_decrease_interval_ns: int = Field(4_000, gt=0)
    """At most one rate cut per interval (HPCC preset/SimAI: 4 us; paper: 50 us)."""
    rate_increase_interval_ns: int = Field(300_000, gt=0)
    """Rate-increase timer (HPCC preset: 300 us; SimAI: 900 us; paper: 55 us)."""
    byte_counter_bytes: int = Field(0, ge=0)
    """Rate-increase byte counter; 0 disables it (HPCC preset/SimAI; paper: 10 MB)."""
    fast_recovery_stages: int = Field(1, ge=0)
    """F: fast-recovery stages before additive increase (HPCC preset: 1; paper: 5)."""
    rate_ai_mbps: float | None = Field(None, gt=0)
    """Additive increase step; None = 5*bw/25 Mb/s (HPCC preset, 20 Mb/s at 100G)."""
    rate_hai_mbps: float | None = Field(None, gt=0)
    """Hyper-additive step; None = 50*bw/25 Mb/s (HPCC preset, 200 Mb/s at 100G)."""
    min_rate_mbps: float = Field(100.0, gt=0)
    """Floor of the current rate (HPCC preset/SimAI: 100 Mb/s)."""
    cnp_interval_ns: int = Field(50_000, ge=0)
    """Notification point: at most one CNP per QP per interval (paper: 50 us)."""
    cnp_mode: Literal["interval", "ack_piggyback"] = "interval"
    """Send CNPs as separate packets, or as a flag on the next ACK."""


class EcnConfig(_Strict):
    """RED-style marking on egress queue depth (congestion point)."""

    enabled: bool = True
    kmin_kb: float | None = Field(None, ge=0)
    """Marking starts here; None = by link rate (SimAI.conf table, e.g. 400 KB at 100G)."""
    kmax_kb: float | None = Field(None, ge=0)
    """Always mark above; None = by link rate (1600 KB at 100G)."""
    pmax: float | None = Field(None, ge=0, le=1)
    """Marking probability at Kmax; None = by link rate (0.2 at 100G)."""

    @model_validator(mode="after")
    def _order(self):
        if self.kmin_kb is not None and self.kmax_kb is not None and self.kmin_kb > self.kmax_kb:
            raise ValueError(f"kmin_kb ({self.kmin_kb}) must not exceed kmax_kb ({self.kmax_kb})")
        return self


class PfcConfig(_Strict):
    """Priority flow control on switch ingress."""

    enabled: bool = True
    threshold: Literal["dynamic", "static"] = "dynamic"
    """Dynamic: PAUSE above free_buffer/ (2**dynamic_shift) (HPCC simulator: /8)."""
    dynamic_shift: int = Field(3, ge=0, le=10)
    static_threshold_kb: float = Field(256.0, gt=0)
    resume_offset_kb: float = Field(3.0, ge=0)
    """RESUME when the ingress queue drops this far below the threshold (HPCC sim: 3 KB)."""
    pause_quanta_ns: int = Field(0, ge=0)
    """0: a PAUSE lasts until RESUME (XON/XOFF); otherwise pause duration."""


class BufferConfig(_Strict):
    """Switch shared-buffer MMU."""

    shared_buffer_mb: float | None = Field(None, gt=0)
    """Per switch; None = 16 MB x (max port rate / 50G) (HPCC study: 32 MB at 100G)."""
    reserved_per_queue_kb: float = Field(4.0, ge=0)
    """Guaranteed per ingress port/priority (HPCC simulator: 4 KB)."""
    headroom_factor: float = Field(3.0, gt=0)
    """Headroom = factor x rate x propagation delay (HPCC simulator: ~3x)."""


class HpccConfig(_Strict):
    """HPCC (Li et al., SIGCOMM 2019) window-based CC using in-band telemetry.

    Switches append per-hop INT (queue length, tx bytes, timestamp, link
    rate); the sender computes the bottleneck utilisation U and sets its window
    W = Wc/(U/eta) + W_AI (or Wc + W_AI during additive stages), paced at W/T.
    """

    eta: float = Field(0.95, gt=0, le=1)
    """Target utilisation (paper and simulator: 0.95)."""
    max_stage: int = Field(0, ge=0)
    """Additive-increase stages before a multiplicative update (simulator: 0; paper: 5)."""
    w_ai_mbps: float | None = Field(None, gt=0)
    """W_AI as a rate (W_AI = rate x T); None = 10*bw/25 Mb/s (HPCC simulator; 40 Mb/s at 100G)."""
    base_rtt_ns: int | None = Field(None, gt=0)
    """T; None = per host, the largest unloaded RTT to any host in the fabric (computed)."""
    int_bytes: int = Field(42, ge=0, le=1024)
    """Wire bytes INT adds to data packets and ACKs (paper: 2 B + 5 hops x 8 B = 42 B)."""
    min_rate_mbps: float = Field(100.0, gt=0)
    """Floor of the window as a rate (HPCC simulator's min rate: 100 Mb/s)."""


class TimelyConfig(_Strict):
    """TIMELY (Mittal et al., SIGCOMM 2015): rate control on the RTT gradient.

    RTTs come from NIC send timestamps echoed in ACKs, one sample per
    completion event (``segment_bytes`` of ACKed data).  Defaults: the paper's
    thresholds and the HPCC simulator's TIMELY settings (alpha, beta, Tlow,
    Thigh, minRTT; delta 10 Mb/s per 10 Gb/s of line rate).
    """

    alpha: float = Field(0.875, gt=0, le=1)
    """EWMA weight of the newest RTT difference (HPCC simulator: 0.875)."""
    beta: float = Field(0.8, gt=0, le=1)
    """Multiplicative decrease factor (paper and simulator: 0.8)."""
    t_low_ns: int = Field(50_000, ge=0)
    """Below this RTT always increase additively (paper and simulator: 50 us)."""
    t_high_ns: int = Field(500_000, gt=0)
    """Above this RTT decrease by beta(1 - Thigh/RTT) (paper and simulator: 500 us)."""
    min_rtt_ns: int = Field(20_000, gt=0)
    """Normalises the RTT gradient (simulator: 20 us)."""
    delta_mbps: float | None = Field(None, gt=0)
    """Additive step; None = line rate / 1000 (paper: 10 Mb/s at 10G; 100 Mb/s at 100G)."""
    hai_threshold: int = Field(5, ge=1)
    """Negative gradients in a row before hyper-active increase by 5 delta (paper: 5)."""
    segment_bytes: int = Field(65_536, gt=0)
    """ACKed bytes per completion event, i.e. per rate update (paper: 16-64 KB)."""
    min_rate_mbps: float = Field(100.0, gt=0)
    """Floor of the rate."""

    @model_validator(mode="after")
    def _order(self):
        if self.t_low_ns > self.t_high_ns:
            raise ValueError(f"t_low_ns ({self.t_low_ns}) must not exceed t_high_ns ({self.t_high_ns})")
        return self


class BackgroundConfig(_Strict):
    """``network.background``: other tenants' traffic sharing the fabric."""

    cdf: str = "websearch"
    """Flow-size distribution: ``websearch``, ``fb-hadoop`` or a path to a ``size_bytes cdf_percent`` file."""
    load: float = Field(gt=0, le=1)
    """Offered payload load per host, as a fraction of its NIC line rate."""
    hosts: list[str] | None = None
    """NIC names that send and receive background flows; None = every host of the fabric."""
    start_ns: int = Field(0, ge=0)
    """First arrival no earlier than this."""
    end_ns: int | None = Field(None, gt=0)
    """No arrivals after this; None = until the iteration ends."""
    seed_offset: int = 0
    """Added to the scenario seed, so background and training randomness can be varied separately."""

    @model_validator(mode="after")
    def _window(self):
        if self.end_ns is not None and self.end_ns <= self.start_ns:
            raise ValueError(f"end_ns ({self.end_ns}) must be after start_ns ({self.start_ns})")
        return self


CcKind = Literal["dcqcn", "none", "hpcc", "timely"]


class NetworkConfig(_Strict):
    """Everything a network backend needs besides the topology."""

    backend: str = "flow"
    """Registered backend name: ``flow`` (fast, flow-level) or ``ns3`` (packet-level)."""
    cc: CcKind = "dcqcn"
    """Congestion control; ``none`` = PFC only.  Only the ns3 backend models it
    (dcqcn, hpcc, timely, none); the flow backend ignores it (max-min fair sharing)."""
    mtu_bytes: int = Field(4096, ge=1024, le=9000)
    """Payload per data packet (RoCE's largest MTU on real NICs is 4096 B)."""
    header_bytes: int = Field(78, ge=0)
    """Per packet on the wire: Eth 14 + FCS 4 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + preamble/IFG 20 - ... (RoCEv2)."""
    ack_interval_packets: int = Field(1, ge=1)
    """Receiver ACKs every N data packets (coalescing)."""
    qp_mode: Literal["per_message", "per_pair"] = "per_message"
    """One QP per message, or one reused QP per (src, dst) pair."""
    ecmp: Literal["hash", "rail"] = "hash"
    """Path choice among equal-cost paths: 5-tuple hash with per-switch seed, or rail-pinned."""
    per_hop_latency_ns: int = Field(500, ge=0)
    """Switch pipeline latency (flow backend adds it per hop)."""
    dcqcn: DcqcnConfig = DcqcnConfig()
    ecn: EcnConfig = EcnConfig()
    pfc: PfcConfig = PfcConfig()
    buffer: BufferConfig = BufferConfig()
    hpcc: HpccConfig = HpccConfig()
    timely: TimelyConfig = TimelyConfig()
    background: BackgroundConfig | None = None
    """Other tenants' traffic sharing the fabric (Poisson flows from a size CDF); None = none."""
    queue_sample_interval_ns: int = Field(10_000, gt=0)
    """ns-3: sample every egress queue this often."""
    wall_limit_s: float = Field(3600.0, gt=0)
    """Stop with an error if the network run takes longer (wall clock)."""
    stall_limit_ns: int = Field(50_000_000, gt=0)
    """Stop with a deadlock error if no byte is delivered for this long while paused."""


def ecn_defaults_for_rate(rate_gbps: float) -> tuple[float, float, float]:
    """(Kmin KB, Kmax KB, Pmax) by link rate, from SimAI.conf (../shared/network-reference.md)."""
    table = [(25, 100, 400, 0.2), (50, 200, 800, 0.2), (100, 400, 1600, 0.2),
             (200, 300, 1200, 0.8), (400, 800, 3200, 0.2)]
    best = min(table, key=lambda row: abs(row[0] - rate_gbps))
    if rate_gbps > 400:
        scale = rate_gbps / 400
        return 800 * scale, 3200 * scale, 0.2
    return float(best[1]), float(best[2]), float(best[3])
