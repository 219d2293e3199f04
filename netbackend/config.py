"""Network and congestion-control settings (one small model per concept).

Defaults follow ../shared/network-reference.md; each congestion-control preset takes every value
from one named source (:data:`CC_SOURCES`, :data:`DCQCN_PRESETS`).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from hscommon.bounds import (PFC_PAUSE_NS_MAX, RETRANSMIT_TIMEOUT_NS_MAX, RETRANSMIT_TIMEOUT_NS_MIN, Bounded,
                             BoundedModel)
from hscommon.strict import StrictModel

__all__ = ["StrictModel", "NetworkConfig"]

_Strict = BoundedModel  # finite numbers, no booleans as numbers (netbackend/bounds.py)


class DcqcnConfig(_Strict):
    """DCQCN reaction/notification point parameters (per QP).

    Every field left at None takes its value from the preset that ``network.cc``
    names (:data:`DCQCN_PRESETS`): ``dcqcn`` is the HPCC simulator's ``dcqcn`` (Mellanox)
    model (no byte counter, no minimum decrease factor, CE echoed on every ACK); ``dcqcn_cx``
    is that model with those three at NVIDIA ConnectX defaults; ``dcqcn_paper`` is
    Zhu et al., SIGCOMM 2015.  A value set here overrides the preset's.
    """

    g: float | None = Field(None, gt=0, le=1)
    """Alpha EWMA gain (both presets: 1/256)."""
    alpha_update_interval_ns: int | None = Field(None, gt=0)
    """Alpha timer (vendor: 1 us, applied every period with +g when a CNP arrived in it; paper: 55 us)."""
    rate_decrease_interval_ns: int | None = Field(None, ge=0)
    """Vendor: a cut is checked every interval (4 us); paper: 0 = every CNP cuts (the NP spaces CNPs)."""
    rate_increase_interval_ns: int | None = Field(None, gt=0)
    """Rate-increase timer (vendor: 300 us; paper: 55 us)."""
    byte_counter_bytes: int | None = Field(None, ge=0)
    """Rate-increase byte counter; 0 disables it (vendor: off; paper: 10 MB)."""
    fast_recovery_stages: int | None = Field(None, ge=0)
    """F: fast-recovery stages before additive increase (vendor: 1; paper: 5)."""
    rate_ai_mbps: float | None = Field(None, gt=0)
    """Additive increase step (vendor: 5 Mb/s per 25 Gb/s of line rate, 20 Mb/s at 100G; paper: 40 Mb/s)."""
    rate_hai_mbps: float | None = Field(None, gt=0)
    """Hyper-additive step (vendor: 50 Mb/s per 25 Gb/s; paper: 10 x R_AI)."""
    min_rate_mbps: float | None = Field(None, gt=0)
    """Floor of the current rate (vendor: 1000 Mb/s, the HPCC simulator's run.py; paper: 100 Mb/s)."""
    clamp_target_rate: bool | None = None
    """RT <- RC on every cut (paper), or only on cuts after an increase event (vendor: CLAMP_TARGET_RATE 0)."""
    cnp_interval_ns: int | None = Field(None, ge=0)
    """Notification point, ``interval`` mode: at most one CNP per QP per interval (paper: 50 us)."""
    cnp_mode: Literal["interval", "ack_piggyback"] | None = None
    """``ack_piggyback``: the receiver flags the ACK of every CE-marked packet (vendor, ACK per
    packet); ``interval``: separate CNP packets at most once per ``cnp_interval_ns`` (paper)."""
    reaction: Literal["vendor", "paper"] | None = None
    """Reaction-point state machine: ``vendor`` (alpha and cut checks on fixed periods, HPCC
    simulator's Mellanox model) or ``paper`` (cut on each CNP, alpha timer restarted by CNPs)."""
    min_decrease_factor: float | None = Field(None, ge=0, le=1)
    """One cut keeps at least this fraction of the current rate: RC <- RC max(1 - alpha/2, f)
    (NVIDIA ``rpg_min_dec_fac`` / 100; ``dcqcn_cx``: 0.5).  0 = no floor (``dcqcn``, ``dcqcn_paper``:
    neither source has one).  With alpha <= 1 a factor up to 0.5 never binds."""


DCQCN_PRESETS: dict[str, dict] = {
    # DCQCN as the HPCC simulator's dcqcn (Mellanox) preset models deployed NICs:
    # shared/network-reference.md, column "HPCC simulator dcqcn preset" and the text above it
    # (ECN echoed on every ACK, alpha every 1 us, cut check every 4 us, no target clamping,
    # min rate 1000 Mb/s from its run.py).  R_AI/R_HAI scale with line rate (None here).
    "dcqcn": dict(g=1 / 256, alpha_update_interval_ns=1_000, rate_decrease_interval_ns=4_000,
                  rate_increase_interval_ns=300_000, byte_counter_bytes=0, fast_recovery_stages=1,
                  rate_ai_mbps=None, rate_hai_mbps=None, min_rate_mbps=1000.0, clamp_target_rate=False,
                  cnp_interval_ns=0, cnp_mode="ack_piggyback", reaction="vendor", min_decrease_factor=0.0),
    # The same vendor reaction point with the three settings the HPCC simulator's model leaves out, at
    # NVIDIA ConnectX defaults (docs/congestion-control.md, "DCQCN presets", has the sources):
    # rpg_min_dec_fac 50 % (NVIDIA DOCA "DCQCN CC Parameters", Rate Decrease table), CNP packets paced
    # at min_time_between_cnps = 4 us per QP, and the rate-increase byte counter rpg_byte_reset = 32767
    # (both as an `mlxconfig -q` of a ConnectX reports them, MIN_TIME_BETWEEN_CNPS 4 and
    # RPG_BYTE_RESET 32767; the byte counter's unit read as bytes, not confirmed from NVIDIA's own
    # page here).  Everything else as "dcqcn".
    "dcqcn_cx": dict(g=1 / 256, alpha_update_interval_ns=1_000, rate_decrease_interval_ns=4_000,
                     rate_increase_interval_ns=300_000, byte_counter_bytes=32_767, fast_recovery_stages=1,
                     rate_ai_mbps=None, rate_hai_mbps=None, min_rate_mbps=1000.0, clamp_target_rate=False,
                     cnp_interval_ns=4_000, cnp_mode="interval", reaction="vendor", min_decrease_factor=0.5),
    # Zhu et al., SIGCOMM 2015 (network-reference.md, column "DCQCN paper"): 50 us CNP interval,
    # 55 us alpha and increase timers, 10 MB byte counter, F = 5, R_AI = 40 Mb/s.  The paper
    # gives no R_HAI or floor: R_HAI = 10 x R_AI and 100 Mb/s are the HPCC simulator's
    # RdmaHw defaults' ratio (5/50 Mb/s) and MinRate.
    "dcqcn_paper": dict(g=1 / 256, alpha_update_interval_ns=55_000, rate_decrease_interval_ns=0,
                        rate_increase_interval_ns=55_000, byte_counter_bytes=10_000_000,
                        fast_recovery_stages=5, rate_ai_mbps=40.0, rate_hai_mbps=400.0,
                        min_rate_mbps=100.0, clamp_target_rate=True, cnp_interval_ns=50_000,
                        cnp_mode="interval", reaction="paper", min_decrease_factor=0.0),
}
"""Each preset is one coherent column of shared/network-reference.md; never mixed."""


class EcnConfig(_Strict):
    """RED-style marking on egress queue depth (congestion point)."""

    enabled: bool = True
    kmin_kb: float | None = Field(None, ge=0)
    """Marking starts here; None = by link rate and CC (:func:`ecn_defaults`)."""
    kmax_kb: float | None = Field(None, ge=0)
    """Always mark above; None = by link rate and CC."""
    pmax: float | None = Field(None, ge=0, le=1)
    """Marking probability at Kmax; None = by link rate and CC."""

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
    pause_quanta_ns: Bounded(int, 0, PFC_PAUSE_NS_MAX, unit="ns") = 0
    """0: a PAUSE lasts until RESUME (XON/XOFF); otherwise pause duration. At most what one 802.1Qbb frame
    can ask for at the slowest port (hscommon/bounds.py, PFC_PAUSE_NS_MAX: 65535 x 512 bit times at 1 Gb/s)."""

    @model_validator(mode="after")
    def _can_resume(self):
        if self.enabled and self.threshold == "static" and self.static_threshold_kb <= self.resume_offset_kb:
            raise ValueError(f"static_threshold_kb ({self.static_threshold_kb}) must exceed resume_offset_kb "
                             f"({self.resume_offset_kb}), or a paused ingress could never resume")
        return self


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
    """Additive-increase stages before a multiplicative update (Algorithm 1's maxStage).  0: the authors'
    simulations (shared/network-reference.md: the paper's printed 5 is a typo, per the authors' site); 5: the
    paper as printed.  Neither gives Jain >= 0.99 in a 4- or 8-flow incast (docs/congestion-control.md)."""
    w_ai_bytes: float = Field(80.0, gt=0)
    """Additive increase W_AI per update (paper, SIGCOMM 2019 section 5: 80 B, i.e. B T (1 - eta) / N
    for N = 100 flows at 100G, T = 13 us)."""
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


class DctcpConfig(_Strict):
    """DCTCP (Alizadeh et al., SIGCOMM 2010; RFC 8257) in the NIC: a window, not a rate.

    Switches mark at one threshold K (Kmin = Kmax); the receiver echoes CE on ACKs;
    once per window of data the sender sets alpha <- (1 - g) alpha + g M (M = share of
    acknowledged bytes that were marked) and, at most once per window when marks
    were echoed, W <- W (1 - alpha/2); otherwise W grows by one MTU per window.
    """

    g: float = Field(1 / 16, gt=0, le=1)
    """Alpha gain (paper and RFC 8257: 1/16)."""
    k_kb: float | None = Field(None, gt=0)
    """Marking threshold; None = 30 KB x (link rate / 10G) (HPCC paper's DCTCP setting)."""


class SwiftConfig(_Strict):
    """Swift (Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
    Datacenter", SIGCOMM 2020) in the NIC: a window driven by the RTT against a target delay.

    target = base_target + hops x h + max(0, min(alpha / sqrt(cwnd) + beta, fs_range)) (section 3.5,
    alpha and beta fixed by fs_min_cwnd / fs_max_cwnd); below target cwnd += ai / cwnd per acked
    packet, above it at most once per RTT cwnd *= max(1 - beta (delay - target) / delay, 1 - max_mdf)
    (Algorithm 1); below one packet the NIC paces one packet per rtt / cwnd.  The paper publishes
    the formulas and min_cwnd; every other default is chosen here with its reason
    (docs/congestion-control.md, "Swift").
    """

    ai_packets: float = Field(1.0, gt=0)
    """ai: additive increase per RTT, packets (TCP's congestion avoidance, RFC 5681; no value in the paper)."""
    beta: float = Field(0.8, gt=0, le=1)
    """Multiplicative decrease constant (TIMELY's beta, Mittal et al. 2015; no value in the paper)."""
    max_mdf: float = Field(0.5, gt=0, lt=1)
    """Largest decrease per RTT (TCP's halving, RFC 5681; no value in the paper)."""
    min_cwnd_packets: float = Field(0.001, gt=0)
    """Smallest window (paper, section 3.3: 0.001 packets, paced below one packet)."""
    max_cwnd_packets: float | None = Field(None, gt=0)
    """Largest window, where a QP starts; None = one BDP (line rate x base RTT), as DCTCP's ceiling here."""
    base_target_ns: int | None = Field(None, gt=0)
    """base_target; None = the fabric's unloaded RTT from the host (as HPCC's T), so the rest is queueing."""
    hop_scale_ns: int = Field(1_000, ge=0)
    """h: target per switch on the path (1 us: 12.5 KB, 3 MTU packets, at 100 Gb/s; no value in the paper)."""
    fs_range_ns: int = Field(5_000, ge=0)
    """fs_range: the largest flow-based scaling, 0 = off (five hops' worth; no value in the paper)."""
    fs_min_cwnd_packets: float = Field(0.1, gt=0)
    """Window that gets all of fs_range (no value in the paper)."""
    fs_max_cwnd_packets: float = Field(100.0, gt=0)
    """Window that gets no flow-based scaling (no value in the paper)."""
    retx_reset_threshold: int = Field(5, ge=1)
    """Timeouts in a row after which cwnd = min_cwnd (RETX_RESET_THRESHOLD of Algorithm 1; no value in the paper)."""

    @model_validator(mode="after")
    def _order(self):
        if self.fs_min_cwnd_packets >= self.fs_max_cwnd_packets:
            raise ValueError(f"fs_min_cwnd_packets ({self.fs_min_cwnd_packets}) must be below "
                             f"fs_max_cwnd_packets ({self.fs_max_cwnd_packets})")
        if self.max_cwnd_packets is not None and self.max_cwnd_packets < self.min_cwnd_packets:
            raise ValueError(f"max_cwnd_packets ({self.max_cwnd_packets}) must not be below "
                             f"min_cwnd_packets ({self.min_cwnd_packets})")
        return self


class TransportConfig(_Strict):
    """How the NIC carries messages: NCCL-like long-lived queue pairs, or one QP per message."""

    qp_mode: Literal["per_connection", "per_message"] = "per_connection"
    """``per_connection``: messages of one (peer, connection) share long-lived QPs whose congestion
    state persists across operations, as NCCL keeps QPs per channel and peer; ``per_message``: a
    fresh QP at line rate per message (what RDMA benchmarks with one QP per transfer do)."""
    qps_per_connection: int = Field(1, ge=1, le=16)
    """QPs per connection; whole messages round-robin over them (NCCL_IB_QPS_PER_CONNECTION = 1,
    NCCL_IB_SPLIT_DATA_ON_QPS = 0: NCCL environment-variable docs)."""
    max_outstanding_steps: int = Field(8, ge=1, le=64)
    """Steps in flight per connection before the receiver's clear-to-send (NCCL_STEPS = 8 slots of
    NCCL_BUFFSIZE = 4 MiB)."""
    retransmit_timeout_ns: Bounded(int, RETRANSMIT_TIMEOUT_NS_MIN, RETRANSMIT_TIMEOUT_NS_MAX, unit="ns") = 4096 << 20
    """Go back to the last acknowledged byte after this long without progress: the InfiniBand Local ACK
    Timeout 4.096 us x 2^n with NCCL's NCCL_IB_TIMEOUT = 20 (4,294,967,296 ns; NCCL environment-variable
    docs), what deployed NICs run.  A NIC cannot see a PAUSE further upstream, so a shorter timer (the
    earlier 4 ms) went back N during long pauses and injected copies into a paused fabric (issue 41).  On a
    lossy fabric (pfc.enabled false) a lost last packet then waits this long: set a shorter one there
    (e.g. 4_194_304, n = 10).  Within 4.096 us x 2^n for n = 1..31 (hscommon/bounds.py)."""
    retry_count: int = Field(7, ge=0, le=7)
    """Timeouts in a row without progress a QP retries before it fails; one more ends the run with an
    error naming the message (NCCL_IB_RETRY_CNT = 7, NCCL docs; the largest the 3-bit IB retry_cnt holds)."""
    ack_class: Literal["data", "control"] = "data"
    """Traffic class of ACK/NAK: ``data`` (the QP's lossless class: switches buffer it with data and PFC
    pauses it, as an RC responder answers on the QP's own traffic class) or ``control`` (strict priority,
    never paused: the HPCC simulator's choice)."""
    rx_drain_gbps: float | None = Field(None, gt=0)
    """Receive pipeline: the rate at which a NIC moves received data into host memory (PCIe, memory
    bandwidth); None = it absorbs at line rate.  Set below the link rate, a receiver buffers what it
    cannot drain and PAUSEs its switch port when the buffer fills (slow-receiver PFC storms)."""
    rx_drain_gbps_per_host: dict[str, float] = {}
    """Hosts whose NIC drains at another rate than ``rx_drain_gbps`` (e.g. ``{h7: 40}``: one slow
    receiver, the classic source of a PFC storm), by host name."""
    rx_buffer_bytes: int = Field(130_944, gt=0)
    """The NIC receive buffer used with ``rx_drain_gbps`` (ConnectX-5 as mlnx_qos prints its port
    buffer: 130,944 B); PAUSE at the buffer less 2 x link rate x delay + 2 packets, RESUME 2 packets lower."""
    cnp_class: Literal["control", "data"] = "control"
    """Traffic class of CNPs: ``control`` (strict priority, never paused: ConnectX's CNP_802P_PRIO 6 /
    CNP_DSCP 48 firmware defaults, a class vendor guides keep apart from RoCE's lossless one) or ``data``."""
    nack_interval_ns: int = Field(500_000, gt=0)
    """A receiver repeats a NACK for the same gap after this long (HPCC simulator, RdmaHw
    "NACK Generation Interval": 500 us)."""


MIGRATE_DEFAULT = True
"""Measured (benchmarks/bench_ns3_accel.py's GPT-3 case, 128 H100, hash ECMP): at batch 8 with shared
ports 75 s -> 55 s CPU and packet hops 26 M -> 18 M; at batch 64 CPU unchanged (93.9 s vs 93.1 s)
with every accuracy figure inside issue 12's targets either way."""


class AccelerationConfig(_Strict):
    """Packet-level acceleration (ns3 backend): simulate fewer packets where the answer is known.

    ``off`` is plain packet level and stays the reference every accelerated result is measured
    against (benchmarks/bench_ns3_accel.py).
    """

    mode: Literal["off", "auto"] = "off"
    """``auto``: flows alone on their path are computed in closed form (and handed back to packet
    level the moment another flow shares a port); ``off``: every packet is simulated."""
    share_ports: bool = False
    """Let the closed-form partitions of several NICs share a port while the sum of their rates
    fits it.  Off by default: on GPT-3 175B batch 64 / 128 H100 with hash ECMP it saved no CPU
    time (92.7 s vs 93.1 s) and moved FCT p99 by +8 % and ECN marks by +41 % against ``off``
    (benchmarks/bench_ns3_accel.py --gpt3), beyond issue 12's 5 % and 10 %."""
    migrate: bool = MIGRATE_DEFAULT
    """Move the unsent steps of packet-level messages back to closed form once their ports carry
    nothing else (RdmaNic::TrimMessage); see MIGRATE_DEFAULT for the measurement."""
    fast_forward: bool = False
    """Steady-state fast-forward of congested packet-level partitions (accel.py, _ff_check): once
    every flow of a partition delivers at a rate that stayed within ``theta`` over two windows,
    their unsent steps leave ns-3 and finish at those rates until a flow ends or another joins.
    Experimental and off: ECN marks outside issue 12's 10 % (a 3-flow incast: 176 vs 300, the
    marks come in the transients it skips) and no CPU saved on GPT-3 175B b64 (docs/packet-level-acceleration.md)."""
    memoize: bool = False
    """Replay congested partitions that repeat (accel.py, _memo_batch): messages that start together,
    share a port and find their ports idle, with every connection fresh or settled, take the
    completion offsets and port counters ns-3 gave the same set (hosts, ECMP keys, sizes, steps,
    connection states) the first time.  Training repeats such sets every micro-batch (the same
    pipeline sends).  Off by default: within issue 12's accuracy targets but little saved where
    measured (GPT-3 175B b64 / 128 H100: packet hops -11 %; H4-LLaMA-65B: none;
    docs/packet-level-acceleration.md)."""
    collisions: Literal["packet", "fluid"] = "packet"
    """What computes the traffic closed form cannot (flows that share a port with another NIC's, or
    whose connection DCQCN slowed): ``packet``, ns-3 packet by packet (the reference); ``fluid``,
    the fluid model of model/fluid-net.h (fluid FIFO ports, DCQCN's own reaction point, sampled
    marks; no PFC), measured against ``packet`` by benchmarks/bench_fluid_collisions.py per
    episode and benchmarks/bench_ns3_accel.py --collisions fluid per training scenario."""
    fluid_dt_ns: int = Field(250, gt=0, le=10_000)
    """The fluid model's time step.  250 ns (3 packets of 4 KB at 400 Gb/s): per-episode FCTs within
    0.5 % of packet level where no mark decides the outcome; 1 us and 2 us moved them by 4-8 %
    (bench_fluid_collisions.py, --dt-ns)."""
    fluid_threads: int | None = Field(None, ge=1, le=64)
    """Threads the fluid model steps its islands on (flows that share no port or NIC: a step of one
    touches nothing of another's).  Speed only: every result is identical for any count (each QP
    draws its marks from its own stream; tests/netbackend/test_fluid.py).  None: 2 where this
    process may run on 2 CPUs or more, else 1 (more threads than CPUs spin against each other).
    H0-GPT-3 175B: 301 -> 243 s wall, 470 s CPU, with 2 (the model alone 1.86x:
    benchmarks/bench_fluid_model.py --replay LOG --threads 1,2); set 1 to run one simulation per
    core side by side (the second thread looks for work while Python runs)."""
    theta: float = Field(0.05, gt=0, lt=1)
    """Steady-state band: |r1 - r2| / mean of a flow's delivery rates over two consecutive windows."""
    window_packets: int = Field(64, gt=0)
    """One window: this many MTU packets at the fastest NIC's line rate."""

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, v):
        return "off" if v is False else v  # YAML 1.1 reads a bare `off` as false


class BackgroundConfig(_Strict):
    """``network.background``: other tenants' traffic sharing the fabric."""

    cdf: str = "websearch"
    """Flow-size distribution: ``websearch``, ``fb-hadoop`` or a path to a ``size_bytes cdf_percent`` file."""
    load: float = Field(gt=0, lt=1)
    """Offered payload load per host, as a fraction of its NIC line rate (< 1: a queue that never drains)."""
    hosts: list[str] | None = None
    """NIC names that send and receive background flows; None = every host of the fabric."""
    start_ns: int = Field(0, ge=0)
    """First arrival no earlier than this."""
    end_ns: int | None = Field(None, gt=0)
    """No arrivals after this; None = until the iteration ends."""
    seed_offset: Bounded(int, 0, 2**32 - 1) = 0
    """Added to the scenario seed, so background and training randomness can be varied separately."""

    @model_validator(mode="after")
    def _window(self):
        if self.end_ns is not None and self.end_ns <= self.start_ns:
            raise ValueError(f"end_ns ({self.end_ns}) must be after start_ns ({self.start_ns})")
        return self


CcKind = Literal["dcqcn", "dcqcn_cx", "dcqcn_paper", "hpcc", "timely", "dctcp", "swift", "none"]
"""Congestion-control presets, each coherent with one named source (see :data:`CC_SOURCES`)."""

CC_SOURCES: dict[str, str] = {
    "dcqcn": "DCQCN, the HPCC simulator's dcqcn (Mellanox) model: no byte counter, no minimum decrease factor, "
             "CE echoed on every ACK",
    "dcqcn_cx": "DCQCN as ConnectX NICs default it: dcqcn plus minimum decrease factor, CNP pacing, byte counter",
    "dcqcn_paper": "DCQCN as in Zhu et al., SIGCOMM 2015",
    "hpcc": "HPCC, Li et al., SIGCOMM 2019 (paper's W_AI and eta; maxStage 0 as the authors' simulator)",
    "timely": "TIMELY, Mittal et al., SIGCOMM 2015 (HPCC simulator's settings)",
    "dctcp": "DCTCP, Alizadeh et al., SIGCOMM 2010 / RFC 8257 (window; K as in the HPCC paper)",
    "swift": "Swift, Kumar et al., SIGCOMM 2020 (delay target; paper's formulas, chosen constants)",
    "none": "no end-to-end CC: line rate, PFC only",
}


class NetworkConfig(_Strict):
    """Everything a network backend needs besides the topology."""

    backend: str = "flow"
    """Registered backend name: ``flow`` (fast, flow-level) or ``ns3`` (packet-level)."""
    cc: CcKind = "dcqcn"
    """Congestion-control preset (:data:`CC_SOURCES`); ``none`` = PFC only.  Only the ns3 backend
    models it; the flow backend ignores it (max-min fair sharing) and says so when it is set
    (``FlowBackend.config_warnings``, as for every packet-level field)."""
    cc_window: bool = False
    """DCQCN/TIMELY "+window": also cap bytes in flight per QP at one BDP (line rate x base RTT),
    as the HPCC simulator's window option does.  HPCC and DCTCP are window-based anyway."""
    mtu_bytes: int = Field(4096, ge=256, le=9000)
    """Payload per data packet (RoCE's largest MTU on real NICs is 4096 B)."""
    header_bytes: int = Field(78, ge=0, le=256)
    """Per packet on the wire: Eth 14 + FCS 4 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + preamble/IFG 20 - ... (RoCEv2)."""
    ack_interval_packets: int = Field(1, ge=1)
    """Receiver ACKs every N data packets (coalescing)."""
    transport: TransportConfig = TransportConfig()
    ecmp: Literal["hash", "rail", "adaptive"] = "hash"
    """Path choice among equal-cost paths: ``hash`` (5-tuple hash with a per-switch seed: one QP per connection
    on a static-ECMP RoCE fabric), ``rail`` (rail-pinned), or ``adaptive`` (flow backend only: adaptive routing /
    per-packet spraying as its ideal, every flow spread evenly over interchangeable next hops, as InfiniBand
    adaptive routing and RoCE fabrics with packet spraying do; ``netbackend.routing.sprayed``)."""
    rng_run: int = Field(1, ge=1, le=2**31 - 1)
    """Which independent replication of the run's random draws, as ns-3's RngRun (the ns-3 manual,
    "Random Variables": same seed, another run number, independent streams): the switches' RED marks
    and the fluid model's sampled CNPs move; the scenario seed's ECMP hash and background flows stay.
    On a hashed fabric counters can hang on these draws (GPT-3 175B b64 on 128 H100: 10,034 to
    31,800 ECN marks over four runs;
    docs/packet-level-acceleration.md, "regime"), so compare settings over several
    (``heterosim compare --draws``)."""
    per_hop_latency_ns: int = Field(500, ge=0)
    """Switch pipeline latency, added per switch traversed by both backends."""
    dcqcn: DcqcnConfig = DcqcnConfig()
    ecn: EcnConfig = EcnConfig()
    pfc: PfcConfig = PfcConfig()
    buffer: BufferConfig = BufferConfig()
    hpcc: HpccConfig = HpccConfig()
    timely: TimelyConfig = TimelyConfig()
    dctcp: DctcpConfig = DctcpConfig()
    swift: SwiftConfig = SwiftConfig()
    acceleration: AccelerationConfig = AccelerationConfig()
    background: BackgroundConfig | None = None
    """Other tenants' traffic sharing the fabric (Poisson flows from a size CDF); None = none."""
    queue_sample_interval_ns: int = Field(10_000, gt=0)
    """ns-3: sample every egress queue this often."""
    wall_limit_s: float = Field(3600.0, gt=0)
    """Stop with an error if the network run takes longer (wall clock)."""
    deadlock_hold_ns: int | None = Field(None, gt=0)
    """A cycle of PFC-paused ports that dequeues nothing this long is a deadlock; None = stall_limit_ns."""
    stall_limit_ns: int = Field(50_000_000, gt=0)
    """Stop with a deadlock error if no byte is delivered for this long while paused."""

    @model_validator(mode="after")
    def _headers_fit(self):
        if self.header_bytes >= self.mtu_bytes:
            raise ValueError(f"header_bytes ({self.header_bytes}) must be below mtu_bytes ({self.mtu_bytes})")
        return self


ECN_RATE_TABLE_KB: tuple[tuple[float, float, float, float], ...] = (
    (25, 100, 400, 0.2), (50, 200, 800, 0.2), (100, 400, 1600, 0.2), (200, 800, 3200, 0.2),
    (400, 1600, 6400, 0.2), (800, 3200, 12800, 0.2),
)
"""(link Gb/s, Kmin KB, Kmax KB, Pmax) for DCQCN: the HPCC simulator's setting, Kmin/Kmax =
100/400 KB x (rate / 25G), Pmax 0.2 (shared/network-reference.md, "Published evaluation setups";
SimAI.conf's table agrees up to 100G and differs at 200/400G)."""

DCQCN_PAPER_ECN_KB = (5.0, 200.0, 0.01)
"""Kmin/Kmax/Pmax of Zhu et al., SIGCOMM 2015 (5 KB / 200 KB / 1%)."""


def ecn_defaults_for_rate(rate_gbps: float) -> tuple[float, float, float]:
    """(Kmin KB, Kmax KB, Pmax) for DCQCN at a link rate: :data:`ECN_RATE_TABLE_KB`, linear in the
    rate between and beyond its rows (it is 4 KB and 16 KB per Gb/s throughout)."""
    return 4.0 * rate_gbps, 16.0 * rate_gbps, 0.2


def ecn_defaults(rate_gbps: float, cc: str, dctcp_k_kb: float | None = None) -> tuple[float, float, float]:
    """(Kmin KB, Kmax KB, Pmax) a switch port uses by default for ``cc`` at ``rate_gbps``."""
    if cc == "dctcp":
        k = dctcp_k_kb if dctcp_k_kb is not None else 30.0 * rate_gbps / 10.0  # HPCC paper's DCTCP
        return k, k, 1.0
    if cc == "dcqcn_paper":
        return DCQCN_PAPER_ECN_KB
    return ecn_defaults_for_rate(rate_gbps)


def port_ecn_bytes(rate_gbps: float, cfg: "NetworkConfig") -> tuple[float, float, float]:
    """(Kmin bytes, Kmax bytes, Pmax) of a switch port at ``rate_gbps``: ``network.ecn``'s values
    where set, else :func:`ecn_defaults` for the CC."""
    dk = ecn_defaults(rate_gbps, cfg.cc, cfg.dctcp.k_kb)
    e = cfg.ecn
    return ((e.kmin_kb if e.kmin_kb is not None else dk[0]) * 1000.0,
            (e.kmax_kb if e.kmax_kb is not None else dk[1]) * 1000.0,
            e.pmax if e.pmax is not None else dk[2])


def resolved_dcqcn(cfg: "NetworkConfig") -> dict:
    """The DCQCN parameters in force: the preset's column, overridden by fields set explicitly."""
    preset = dict(DCQCN_PRESETS[cfg.cc if cfg.cc in DCQCN_PRESETS else "dcqcn"])
    for name, value in cfg.dcqcn.model_dump().items():
        if value is not None:
            preset[name] = value
    return preset
