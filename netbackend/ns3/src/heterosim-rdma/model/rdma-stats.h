// Plain counters recorded in C++ during a run and read afterwards (Python
// trace callbacks are not supported by the cppyy bindings, and would be slow).
#ifndef HETEROSIM_RDMA_STATS_H
#define HETEROSIM_RDMA_STATS_H

#include <cstdint>
#include <vector>

namespace ns3
{

/// Per port (one direction of a link, at its transmitting end).
struct RdmaPortStats
{
    uint64_t pfcPauseSent{0};   //!< PAUSE frames sent upstream from this port
    uint64_t pfcResumeSent{0};
    uint64_t pfcPauseRecv{0};   //!< PAUSE frames that stopped this port's egress
    uint64_t pfcResumeRecv{0};
    uint64_t pausedNs{0};       //!< time the egress data class spent paused
    uint64_t ecnMarks{0};       //!< CE marks applied at this egress
    uint64_t drops{0};          //!< packets dropped at ingress from this port / egress
    uint64_t maxQueueBytes{0};  //!< largest egress data queue seen
    double queueSampleSum{0};   //!< sum of sampled egress queue depths
    uint64_t queueSamples{0};
};

/// Fabric-wide counters shared by every NIC and switch of one simulation.
struct RdmaCounters
{
    uint64_t dataPacketsSent{0};
    uint64_t retransmittedPackets{0};
    uint64_t acksSent{0};
    uint64_t nacksSent{0};
    uint64_t cnpsSent{0};
    uint64_t cnpsReceived{0};
    uint64_t ceReceived{0};     //!< CE-marked data packets seen by receivers
    uint64_t rateCuts{0};
    uint64_t timeouts{0};
    uint64_t deliveredBytes{0}; //!< in-order payload bytes accepted by receivers
    uint64_t unroutable{0};
    uint64_t duplicatesDiscarded{0}; //!< data packets a receiver had already accepted (re-ACKed)
};

/// Told by a NIC when the last byte of a message was accepted in order.
class RdmaDeliverySink
{
  public:
    virtual ~RdmaDeliverySink() = default;
    virtual void MessageDelivered(uint64_t msgId) = 0;

    /// A QP of host @p src towards @p dst timed out more than its retry count allows (after
    /// @p retries retransmissions without progress); @p msgId is its oldest unacknowledged message.
    virtual void TransportFailed(uint32_t src, uint32_t dst, uint64_t msgId, uint32_t retries)
    {
    }
};

} // namespace ns3

#endif
