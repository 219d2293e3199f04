// In-band network telemetry (INT) for HPCC (Li et al., SIGCOMM 2019, §3.2):
// each switch appends, at dequeue, one record per hop with the egress queue
// length, the egress port's cumulative transmitted bytes, a timestamp and the
// link rate.  The receiver copies the stack onto its ACK.
//
// The stack travels as an ns-3 packet tag (no serialization per hop); its
// size on the wire is accounted for by the NIC (RdmaNic::IntHeaderBytes,
// 42 B = 2 B header + 5 hops x 8 B in the paper's encoding).
#ifndef HETEROSIM_RDMA_INT_TAG_H
#define HETEROSIM_RDMA_INT_TAG_H

#include "ns3/tag.h"

#include <cstdint>

namespace ns3
{

/// One hop's telemetry, recorded when the packet leaves the egress port.
struct RdmaIntHop
{
    int64_t tsNs{0};       //!< dequeue time
    uint64_t txBytes{0};   //!< bytes the egress port has transmitted, this packet included
    uint64_t qlenBytes{0}; //!< data bytes left in the egress queue
    double rateBps{0};     //!< egress link rate
};

class RdmaIntTag : public Tag
{
  public:
    /// Longest path recorded; further hops are not appended (format limit,
    /// the paper's encoding carries 5).
    static constexpr uint32_t kMaxHops = 8;

    static TypeId GetTypeId();
    TypeId GetInstanceTypeId() const override;
    uint32_t GetSerializedSize() const override;
    void Serialize(TagBuffer i) const override;
    void Deserialize(TagBuffer i) override;
    void Print(std::ostream& os) const override;

    /// Append a hop; returns false when the stack is full.
    bool Push(const RdmaIntHop& hop);

    uint32_t nHops{0};
    RdmaIntHop hops[kMaxHops];
};

} // namespace ns3

#endif
