// RoCE-like transport header for the heterosim-rdma module.
//
// One fixed-layout header carries every packet kind (data, ACK, NACK, CNP,
// PFC).  In-band telemetry (HPCC) rides in a packet tag (rdma-int-tag.h)
// whose on-wire bytes are added to the packet size by the sender.  The
// header is serialized as a packed struct so that a switch hop costs one
// memcpy; the on-wire size of a packet is set by the sender (payload plus the
// configured RoCEv2 header bytes), not by this struct.
#ifndef HETEROSIM_RDMA_HEADER_H
#define HETEROSIM_RDMA_HEADER_H

#include "ns3/header.h"

#include <cstdint>

namespace ns3
{

class RdmaHeader : public Header
{
  public:
    enum Kind : uint8_t
    {
        DATA = 0,
        ACK = 1,
        NACK = 2,
        CNP = 3,
        PFC = 4,
    };

    enum Flag : uint8_t
    {
        FLAG_ECT = 1,       //!< ECN-capable transport
        FLAG_CE = 2,        //!< congestion experienced (set by a switch)
        FLAG_LAST = 4,      //!< last packet of a message
        FLAG_CNP = 8,       //!< ACK carries a congestion notification
        FLAG_PAUSE = 16,    //!< PFC: pause (set) or resume (clear)
        FLAG_INT = 32,      //!< data: switches append INT (RdmaIntTag); ACK: echoes it
        FLAG_ECE = 64,      //!< ACK: the acknowledged data packet was CE-marked (DCTCP)
    };

    enum Flag2 : uint8_t
    {
        FLAG2_WR_END = 1,   //!< data: last packet of a work request (acknowledge it now)
        FLAG2_QP_END = 2,   //!< data: last packet of a per-message QP (receiver frees its state)
    };

#pragma pack(push, 1)
    struct Fields
    {
        uint8_t kind;
        uint8_t flags;
        uint8_t priority;   //!< data/control class; for PFC the paused class
        uint8_t flags2;     //!< Flag2 bits
        uint32_t src;       //!< source host index
        uint32_t dst;       //!< destination host index
        uint32_t qp;        //!< sender QP id (unique per sender NIC)
        uint32_t flowHash;  //!< ECMP entropy
        uint32_t payload;   //!< payload bytes (data) / pause quanta in ns (PFC)
        uint64_t seq;       //!< first payload byte (data) / next expected byte (ACK, NACK)
        uint64_t msgId;     //!< message id (data packets with FLAG_LAST)
        int64_t ts;         //!< data: NIC send time (ns); ACK: echo of it (RTT for TIMELY)
    };
#pragma pack(pop)

    Fields f{};

    static TypeId GetTypeId();
    TypeId GetInstanceTypeId() const override;
    uint32_t GetSerializedSize() const override;
    void Serialize(Buffer::Iterator start) const override;
    uint32_t Deserialize(Buffer::Iterator start) override;
    void Print(std::ostream& os) const override;
};

} // namespace ns3

#endif
