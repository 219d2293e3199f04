#include "rdma-header.h"

namespace ns3
{

NS_OBJECT_ENSURE_REGISTERED(RdmaHeader);

TypeId
RdmaHeader::GetTypeId()
{
    static TypeId tid = TypeId("ns3::RdmaHeader")
                            .SetParent<Header>()
                            .SetGroupName("HeterosimRdma")
                            .AddConstructor<RdmaHeader>();
    return tid;
}

TypeId
RdmaHeader::GetInstanceTypeId() const
{
    return GetTypeId();
}

uint32_t
RdmaHeader::GetSerializedSize() const
{
    return sizeof(Fields);
}

void
RdmaHeader::Serialize(Buffer::Iterator start) const
{
    start.Write(reinterpret_cast<const uint8_t*>(&f), sizeof(Fields));
}

uint32_t
RdmaHeader::Deserialize(Buffer::Iterator start)
{
    start.Read(reinterpret_cast<uint8_t*>(&f), sizeof(Fields));
    return sizeof(Fields);
}

void
RdmaHeader::Print(std::ostream& os) const
{
    os << "kind=" << unsigned(f.kind) << " flags=" << unsigned(f.flags) << " prio="
       << unsigned(f.priority) << " src=" << f.src << " dst=" << f.dst << " qp=" << f.qp
       << " seq=" << f.seq << " len=" << f.payload;
}

} // namespace ns3
