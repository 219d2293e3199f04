#include "rdma-int-tag.h"

namespace ns3
{

NS_OBJECT_ENSURE_REGISTERED(RdmaIntTag);

TypeId
RdmaIntTag::GetTypeId()
{
    static TypeId tid = TypeId("ns3::RdmaIntTag")
                            .SetParent<Tag>()
                            .SetGroupName("HeterosimRdma")
                            .AddConstructor<RdmaIntTag>();
    return tid;
}

TypeId
RdmaIntTag::GetInstanceTypeId() const
{
    return GetTypeId();
}

uint32_t
RdmaIntTag::GetSerializedSize() const
{
    return 1 + nHops * sizeof(RdmaIntHop);
}

void
RdmaIntTag::Serialize(TagBuffer i) const
{
    i.WriteU8(static_cast<uint8_t>(nHops));
    i.Write(reinterpret_cast<const uint8_t*>(hops), nHops * sizeof(RdmaIntHop));
}

void
RdmaIntTag::Deserialize(TagBuffer i)
{
    nHops = i.ReadU8();
    if (nHops > kMaxHops)
    {
        nHops = kMaxHops;
    }
    i.Read(reinterpret_cast<uint8_t*>(hops), nHops * sizeof(RdmaIntHop));
}

void
RdmaIntTag::Print(std::ostream& os) const
{
    os << "int hops=" << nHops;
    for (uint32_t k = 0; k < nHops; ++k)
    {
        os << " [q=" << hops[k].qlenBytes << " tx=" << hops[k].txBytes << " t=" << hops[k].tsNs
           << "]";
    }
}

bool
RdmaIntTag::Push(const RdmaIntHop& hop)
{
    if (nHops >= kMaxHops)
    {
        return false;
    }
    hops[nHops++] = hop;
    return true;
}

} // namespace ns3
