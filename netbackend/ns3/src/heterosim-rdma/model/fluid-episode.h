// A DCQCN collision episode without packets: fluid FIFO queues, the reaction
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
//    step (per-flow composition kept), served at the port rate, so a flow's
//    share of the departures is its share of the arrivals one queueing delay
//    earlier.  A byte leaving a port reaches the next one after its packet's
//    serialization, the link's propagation and the switch pipeline latency
//    (store and forward, as scenarios.store_and_forward_ns computes).
//  * Marks are RED on the depth left at dequeue (RdmaSwitchNode marks there):
//    a flow's n packets leaving a port in a step carry at least one mark with
//    probability 1 - (1 - p)^n.  The receiver sees them one path delay later;
//    CE is echoed on the next ACK (vendor) or as a CNP at most once per
//    interval (paper), one ACK path back.  Whether a CNP arrives in a step is
//    sampled, as packet level samples each mark, so the model reproduces the
//    distribution of packet level's outcomes, not one run's coin flips.
//  * Each flow's reaction point is DcqcnRp with RdmaNic's timer rules (a cut
//    re-arms the increase timer; a vendor CNP schedules the next grid check);
//    its state enters and leaves in DcqcnRp::Save's format.
//  * A NIC serves its ready flows by round robin, each at most at its rate.
//
// Not modelled, so a caller keeps such episodes at packet level: PFC (the
// largest queue is reported for the caller to check), drops, the ACKs' load,
// step credits.
#ifndef HETEROSIM_FLUID_EPISODE_H
#define HETEROSIM_FLUID_EPISODE_H

#include "dcqcn.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace ns3
{

class FluidEpisode
{
  public:
    /// @p dtNs: the time step; @p seed: the mark sampling's generator.
    FluidEpisode(int64_t dtNs, uint64_t seed);
    ~FluidEpisode();

    /// A switch egress port; returns its index.  Marking as EcnMarkProbability.
    uint32_t AddPort(double rateBps, double kminBytes, double kmaxBytes, double pmax);
    /// A sending NIC; returns its index.
    uint32_t AddNic(double lineBps);
    /// A flow (one QP's message); returns its index.  @p hops: per link its
    /// bytes cross, flattened (port index or -1 for the NIC's own link, rate
    /// bit/s, propagation + pipeline ns).  @p cnpIntervalNs > 0: the receiver
    /// sends a CNP at most that often (paper); 0: CE on the next ACK.
    /// @p rpState: DcqcnRp::Save values relative to @p startNs (empty: a fresh QP).
    uint32_t AddFlow(uint32_t nic, int64_t startNs, double wireBytes, double pktWireBytes,
                     const std::vector<double>& hops, double ackNs, const DcqcnParams& params,
                     int64_t cnpIntervalNs, const std::vector<double>& rpState);
    /// Advances until every flow finished or @p untilNs (-1: no limit);
    /// returns the time reached.
    int64_t Run(int64_t untilNs);
    /// Per flow: the time its last byte reached the receiver (-1: not yet).
    std::vector<double> FinishNs() const;
    /// DcqcnRp::Save of flow @p flow at @p nowNs (its timers relative to then).
    std::vector<double> RpState(uint32_t flow, int64_t nowNs) const;
    /// The deepest any port got, bytes.
    double MaxQueueBytes() const;
    /// Expected marks, summed over ports.
    double Marks() const;
    /// Rate cuts, summed over flows.
    uint64_t Cuts() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace ns3

#endif
