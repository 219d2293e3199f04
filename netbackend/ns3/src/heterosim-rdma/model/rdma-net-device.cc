#include "rdma-net-device.h"

#include "ns3/error-model.h"
#include "ns3/pointer.h"

#include "ns3/log.h"
#include "ns3/node.h"
#include "ns3/simulator.h"
#include "ns3/uinteger.h"

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaNetDevice");
NS_OBJECT_ENSURE_REGISTERED(RdmaNetDevice);
NS_OBJECT_ENSURE_REGISTERED(RdmaChannel);

TypeId
RdmaNetDevice::GetTypeId()
{
    static TypeId tid =
        TypeId("ns3::RdmaNetDevice")
            .SetParent<NetDevice>()
            .SetGroupName("HeterosimRdma")
            .AddConstructor<RdmaNetDevice>()
            .AddAttribute("DataRate",
                          "Line rate of the port.",
                          DataRateValue(DataRate("100Gbps")),
                          MakeDataRateAccessor(&RdmaNetDevice::SetDataRate, &RdmaNetDevice::GetDataRate),
                          MakeDataRateChecker())
            .AddAttribute("ReceiveErrorModel",
                          "Drops received packets it marks corrupt (loss experiments and tests).",
                          PointerValue(),
                          MakePointerAccessor(&RdmaNetDevice::m_rxErrorModel),
                          MakePointerChecker<ErrorModel>());
    return tid;
}

RdmaNetDevice::RdmaNetDevice()
{
    m_address = Mac48Address::Allocate();
}

RdmaNetDevice::~RdmaNetDevice() = default;

void
RdmaNetDevice::SetDataRate(DataRate r)
{
    m_rate = r;
    // 8e15 fs per byte-second / bit rate.
    m_fsPerByte = r.GetBitRate() > 0 ? 8e15 / static_cast<double>(r.GetBitRate()) : 0;
}

void
RdmaNetDevice::SetOwner(RdmaPortOwner* owner, uint32_t portIndex)
{
    m_owner = owner;
    m_port = portIndex;
}

bool
RdmaNetDevice::Attach(Ptr<RdmaChannel> ch)
{
    m_channel = ch;
    ch->Attach(this);
    return true;
}

Ptr<RdmaNetDevice>
RdmaNetDevice::GetPeer() const
{
    return m_channel ? m_channel->GetPeer(this) : nullptr;
}

void
RdmaNetDevice::Transmit(Ptr<Packet> p)
{
    NS_ASSERT(!m_busy);
    m_busy = true;
    const uint32_t size = p->GetSize();
    // Exact serialization time: carry the sub-nanosecond remainder forward so
    // that long trains run at exactly the line rate.
    uint64_t fs = static_cast<uint64_t>(m_fsPerByte * size + 0.5) + m_carryFs;
    const uint64_t ns = fs / 1000000;
    m_carryFs = fs - ns * 1000000;
    const Time txTime = NanoSeconds(static_cast<int64_t>(ns));
    m_txBytes += size;
    m_txPackets++;
    Simulator::Schedule(txTime, &RdmaNetDevice::TransmitComplete, this);
    m_channel->Transmit(p, this, txTime);
}

void
RdmaNetDevice::TransmitComplete()
{
    m_busy = false;
    m_owner->PortTxDone(m_port);
}

void
RdmaNetDevice::Receive(Ptr<Packet> p)
{
    if (m_rxErrorModel && m_rxErrorModel->IsCorrupt(p))
    {
        m_rxDrops++;
        return;
    }
    m_owner->PortReceive(m_port, p);
}

void
RdmaNetDevice::DoDispose()
{
    m_channel = nullptr;
    m_rxErrorModel = nullptr;
    m_node = nullptr;
    m_owner = nullptr;
    NetDevice::DoDispose();
}

void
RdmaNetDevice::SetIfIndex(const uint32_t index)
{
    m_ifIndex = index;
}

uint32_t
RdmaNetDevice::GetIfIndex() const
{
    return m_ifIndex;
}

Ptr<Channel>
RdmaNetDevice::GetChannel() const
{
    return m_channel;
}

void
RdmaNetDevice::SetAddress(Address address)
{
    m_address = Mac48Address::ConvertFrom(address);
}

Address
RdmaNetDevice::GetAddress() const
{
    return m_address;
}

bool
RdmaNetDevice::SetMtu(const uint16_t mtu)
{
    m_mtu = mtu;
    return true;
}

uint16_t
RdmaNetDevice::GetMtu() const
{
    return m_mtu;
}

bool
RdmaNetDevice::IsLinkUp() const
{
    return m_channel != nullptr;
}

void
RdmaNetDevice::AddLinkChangeCallback(Callback<void>)
{
}

bool
RdmaNetDevice::IsBroadcast() const
{
    return false;
}

Address
RdmaNetDevice::GetBroadcast() const
{
    return Mac48Address::GetBroadcast();
}

bool
RdmaNetDevice::IsMulticast() const
{
    return false;
}

Address
RdmaNetDevice::GetMulticast(Ipv4Address) const
{
    return Mac48Address::GetBroadcast();
}

Address
RdmaNetDevice::GetMulticast(Ipv6Address) const
{
    return Mac48Address::GetBroadcast();
}

bool
RdmaNetDevice::IsBridge() const
{
    return false;
}

bool
RdmaNetDevice::IsPointToPoint() const
{
    return true;
}

bool
RdmaNetDevice::Send(Ptr<Packet>, const Address&, uint16_t)
{
    return false; // RDMA ports are driven by their owner, not by an L3 stack
}

bool
RdmaNetDevice::SendFrom(Ptr<Packet>, const Address&, const Address&, uint16_t)
{
    return false;
}

Ptr<Node>
RdmaNetDevice::GetNode() const
{
    return m_node;
}

void
RdmaNetDevice::SetNode(Ptr<Node> node)
{
    m_node = node;
}

bool
RdmaNetDevice::NeedsArp() const
{
    return false;
}

void
RdmaNetDevice::SetReceiveCallback(ReceiveCallback)
{
}

void
RdmaNetDevice::SetPromiscReceiveCallback(PromiscReceiveCallback)
{
}

bool
RdmaNetDevice::SupportsSendFrom() const
{
    return false;
}

// ---------------------------------------------------------------- channel

TypeId
RdmaChannel::GetTypeId()
{
    static TypeId tid = TypeId("ns3::RdmaChannel")
                            .SetParent<Channel>()
                            .SetGroupName("HeterosimRdma")
                            .AddConstructor<RdmaChannel>()
                            .AddAttribute("Delay",
                                          "One-way propagation delay.",
                                          TimeValue(NanoSeconds(1000)),
                                          MakeTimeAccessor(&RdmaChannel::m_delay),
                                          MakeTimeChecker());
    return tid;
}

RdmaChannel::RdmaChannel() = default;

void
RdmaChannel::Attach(Ptr<RdmaNetDevice> dev)
{
    NS_ASSERT(m_n < 2);
    m_dev[m_n++] = dev;
}

Ptr<RdmaNetDevice>
RdmaChannel::GetPeer(const RdmaNetDevice* dev) const
{
    return PeekPointer(m_dev[0]) == dev ? m_dev[1] : m_dev[0];
}

void
RdmaChannel::Transmit(Ptr<Packet> p, const RdmaNetDevice* src, Time txTime)
{
    RdmaNetDevice* dst = PeekPointer(m_dev[0]) == src ? PeekPointer(m_dev[1]) : PeekPointer(m_dev[0]);
    Simulator::ScheduleWithContext(dst->GetNode()->GetId(),
                                   txTime + m_delay + src->GetTxExtraDelay(),
                                   &RdmaNetDevice::Receive,
                                   dst,
                                   p);
}

std::size_t
RdmaChannel::GetNDevices() const
{
    return m_n;
}

Ptr<NetDevice>
RdmaChannel::GetDevice(std::size_t i) const
{
    return m_dev[i];
}

} // namespace ns3
