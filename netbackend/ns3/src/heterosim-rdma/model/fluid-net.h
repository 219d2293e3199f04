// Congested RoCE traffic without packets: fluid FIFO queues, the reaction
// point's own state machine (DcqcnRp).
//
// Issue 12's collision floor (benchmarks/ns3_collision_floor.py) showed that on
// the H-suite 20-60 % of the inter-node bytes collide on a port with another
// NIC's message, and that their packets alone cost more CPU time than the
// 10-minute target.  A collision is short (a 3.7 MB ring step sharing a 400 G
// port lasts ~150 us): a transient, set by when DCQCN cuts, by how much, and
// how long the queue takes to drain.  This class computes it a time step at a
// time instead of a packet at a time:
//
//  * Each switch egress port is a fluid FIFO of the bytes that arrived in each
//    step (per-flow composition kept), served at the port rate in FIFO order,
//    so a flow's share of the departures is its share of the arrivals one
//    queueing delay earlier.  A byte a switch starts sending at t is at the
//    next node one packet time plus the link's propagation (and the switch's
//    pipeline latency) later: store and forward, as
//    scenarios.store_and_forward_ns computes for one flow.
//  * Marks are RED on the depth left at dequeue (RdmaSwitchNode marks there):
//    a flow's n packets leaving a port in a step are expected to carry n p
//    marks (n may be a fraction of a packet at low rates; the ports of a path
//    add their p).  The receiver sees them one path delay later, a packet at a
//    time: its packets arrive evenly spaced, so those completed in a step are
//    each CE with the mean p since the previous one (every packet under
//    saturated marking, as at packet level);
//    CE is echoed on the next ACK (cnp_mode ack_piggyback, as the dcqcn
//    preset has it) or as a CNP at most once per interval (cnp_mode interval,
//    dcqcn_paper), one ACK path back.  Whether a CNP arrives in a step is
//    sampled, as packet level samples each mark, so the model reproduces the
//    distribution of packet level's outcomes, not one run's coin flips.
//  * A flow is one QP: messages posted on it are sent in order, its reaction
//    point is DcqcnRp with RdmaNic's timer rules (a cut re-arms the increase
//    timer; a vendor CNP schedules the next grid check), and its state enters
//    and leaves in DcqcnRp::Save's format.
//  * A NIC serves its ready QPs by round robin, each at most at its rate.
//  * NCCL's clear-to-send, as RdmaNic applies it: a connection has at most
//    MaxOutstandingSteps steps sent and not acknowledged; a step's slot frees
//    one ACK path after its last byte reaches the receiver.  Without it a flow
//    into a slower port queues more than packet level lets it (H4-LLaMA at
//    batch 64: ECN marks +25 % of packet level without, +6 % with).
//  * Flows that share no port or NIC form islands: a step of one reads and
//    writes nothing of another's, so islands are stepped apart, on up to
//    SetThreads threads, with the same results (each flow draws its marks from
//    its own counter-driven stream; what islands hand back is summed in
//    integers or sorted).  Islands are regrouped when Post wakes a flow; on
//    H0-GPT-3 a step has ~18 islands, the largest ~16 of ~100 flows.
//
// Not modelled, so a caller keeps such traffic at packet level or accepts the
// approximation: PFC (the largest queue is reported for the caller to check),
// drops, the ACKs' load.
#ifndef HETEROSIM_FLUID_NET_H
#define HETEROSIM_FLUID_NET_H

#include "dcqcn.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace ns3
{

class FluidNet
{
  public:
    /// @p dtNs: the time step; @p seed: the mark sampling's generator.
    FluidNet(int64_t dtNs, uint64_t seed);
    ~FluidNet();

    /// A switch egress port; returns its index.  Marking as EcnMarkProbability.
    uint32_t AddPort(double rateBps, double kminBytes, double kmaxBytes, double pmax);
    /// Which switch @p port is on (for the PFC check: IngressMaxQueue, SwitchMaxQueue).
    void SetPortSwitch(uint32_t port, uint32_t switchId);
    /// A sending NIC; returns its index.
    uint32_t AddNic(double lineBps);
    /// A QP; returns its index.  @p hops: per link its bytes cross, flattened
    /// (port index or -1 for the NIC's own link, rate bit/s, propagation +
    /// pipeline ns).  @p pktWireBytes: a full packet.  @p ackNs: an ACK's way back.  @p cnpIntervalNs > 0: the
    /// receiver sends a CNP at most that often (paper); 0: CE on the next ACK.
    uint32_t AddFlow(uint32_t nic, const std::vector<double>& hops, double pktWireBytes, double ackNs,
                     const DcqcnParams& params, int64_t cnpIntervalNs, int64_t nowNs);
    /// Queue message @p msgId of @p wireBytes on @p flow, sent from @p startNs
    /// (not before the flow's earlier messages), in steps of @p stepWireBytes (0: one step)
    /// when the flow has step credits.
    void Post(uint32_t flow, int64_t msgId, int64_t startNs, double wireBytes, double stepWireBytes = 0);
    /// NCCL's clear-to-send, as RdmaNic applies it to a connection: at most @p maxSteps steps
    /// sent and not yet acknowledged (a step's slot frees when the ACK of its last byte is back).
    /// 0: no limit.
    void SetStepCredits(uint32_t flow, uint32_t maxSteps);
    /// Step independent islands (flows sharing no port or NIC) on up to @p threads threads (1: this
    /// one only).  Speed only: every result is the same for any count (each flow draws its marks
    /// from its own stream, and what the islands hand back is summed and ordered independently of
    /// the split).
    void SetThreads(uint32_t threads);
    /// Advance until @p untilNs, or to the end of the first step in which a
    /// message is delivered; returns the time reached.  Jumps over idle time.
    int64_t Run(int64_t untilNs);
    int64_t Now() const;
    /// Flattened (message id, finish ns) delivered since the last call.
    std::vector<double> DrainCompletions();
    /// Flows with bytes or reaction-point work (CNPs, a cut check) pending.
    uint32_t Active() const;
    /// True when @p flow has nothing pending (its state is then only timers).
    bool Idle(uint32_t flow) const;
    /// {bytes posted, sent, delivered, CNPs in flight, steps with marks in flight, cut check at}
    /// of @p flow (wire bytes; -1: no check pending).
    std::vector<double> FlowProgress(uint32_t flow) const;
    /// DcqcnRp::Save of @p flow at @p nowNs (its timers relative to then).
    std::vector<double> SaveState(uint32_t flow, int64_t nowNs) const;
    /// DcqcnRp::Restore of @p flow at @p nowNs (it must be idle).
    bool RestoreState(uint32_t flow, const std::vector<double>& state, int64_t nowNs);
    /// Take the unsent bytes of @p flow out of the model: the message being sent keeps its
    /// packets started by now (rounded up to a whole packet, so packets are never split) and
    /// the rest of it and of every later message leave.  Flattened (message id, wire bytes
    /// kept, wire bytes removed, wire bytes sent) per message touched; a message that keeps 0
    /// bytes will not be delivered by the model.
    std::vector<double> Trim(uint32_t flow);
    /// Per port: bytes queued now.
    std::vector<double> PortQueue() const;
    /// Steps taken, flows advanced summed over steps (the model's work), and the steps split among threads.
    std::vector<double> Work() const;
    /// Per port: expected ECN marks so far.
    std::vector<double> PortMarks() const;
    /// Per port: the deepest its queue got, bytes.
    std::vector<double> PortMaxQueue() const;
    /// Per port: its queue's integral over time, bytes x ns (the depth a step leaves, held for the step),
    /// for a time average as the ns-3 switches' sampled mean.
    std::vector<double> PortQueueIntegral() const;
    /// Sample the ports' queues at the multiples of @p intervalNs, as RdmaNetworkHelper does its switches'
    /// (a port whose depth or previous sample is above 0), keeping at most @p maxSamples.
    void SetQueueSampling(int64_t intervalNs, uint64_t maxSamples);
    /// Flattened (ns, port, bytes) of the samples taken of @p ports (a run's few hottest: every port's
    /// would be millions of values to hand over).
    std::vector<double> QueueSamples(const std::vector<uint32_t>& ports) const;
    /// Per switch ingress (the link a flow's bytes entered a switch by), flattened (switch id,
    /// the most bytes queued at that switch that came in by it): PFC's per-ingress count.
    std::vector<double> IngressMaxQueue() const;
    /// Per switch id, the most bytes queued in all its ports at once (the shared buffer used).
    std::vector<double> SwitchMaxQueue() const;
    /// Per port: wire bytes it sent.
    std::vector<double> PortTxBytes() const;
    /// CNPs that reached senders; rate cuts.
    uint64_t Cnps() const;
    uint64_t Cuts() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace ns3

#endif
