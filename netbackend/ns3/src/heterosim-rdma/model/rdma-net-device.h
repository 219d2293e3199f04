// A lean point-to-point port for RDMA hosts and switches.
//
// The device only serializes packets onto its channel at line rate; queueing,
// priorities and PFC live in the owner (RdmaNic or RdmaSwitchNode), which is
// told when a transmission finishes and pulls the next packet.  This keeps the
// per-hop cost to one transmit-complete and one receive event.
#ifndef HETEROSIM_RDMA_NET_DEVICE_H
#define HETEROSIM_RDMA_NET_DEVICE_H

#include "ns3/channel.h"
#include "ns3/data-rate.h"
#include "ns3/error-model.h"
#include "ns3/mac48-address.h"
#include "ns3/net-device.h"
#include "ns3/nstime.h"
#include "ns3/packet.h"

#include <cstdint>

namespace ns3
{

class RdmaChannel;


/// What a port reports to the node that owns it.
class RdmaPortOwner
{
  public:
    virtual ~RdmaPortOwner() = default;
    /// A packet arrived on port @p port.
    virtual void PortReceive(uint32_t port, Ptr<Packet> p) = 0;
    /// Port @p port finished serializing a packet and is idle.
    virtual void PortTxDone(uint32_t port) = 0;
};

class RdmaNetDevice : public NetDevice
{
  public:
    static TypeId GetTypeId();
    RdmaNetDevice();
    ~RdmaNetDevice() override;

    void SetOwner(RdmaPortOwner* owner, uint32_t portIndex);
    bool Attach(Ptr<RdmaChannel> ch);

    /// Start serializing @p p; the port must be idle.
    void Transmit(Ptr<Packet> p);
    bool IsBusy() const { return m_busy; }
    /// Packets the ReceiveErrorModel dropped.
    uint64_t GetRxDrops() const { return m_rxDrops; }
    /// Called by the channel when a packet has fully arrived.
    void Receive(Ptr<Packet> p);

    DataRate GetDataRate() const { return m_rate; }
    void SetDataRate(DataRate r);
    uint64_t GetTxBytes() const { return m_txBytes; }
    uint64_t GetTxPackets() const { return m_txPackets; }
    uint32_t GetPortIndex() const { return m_port; }
    Ptr<RdmaNetDevice> GetPeer() const;
    /// Extra one-way delay of everything this port transmits, on top of the
    /// channel's propagation (a switch's pipeline latency, see RdmaSwitchNode).
    void SetTxExtraDelay(Time d) { m_txExtraDelay = d; }
    Time GetTxExtraDelay() const { return m_txExtraDelay; }

    // NetDevice interface (mostly inert: RDMA ports carry no L3 traffic).
    void SetIfIndex(const uint32_t index) override;
    uint32_t GetIfIndex() const override;
    Ptr<Channel> GetChannel() const override;
    void SetAddress(Address address) override;
    Address GetAddress() const override;
    bool SetMtu(const uint16_t mtu) override;
    uint16_t GetMtu() const override;
    bool IsLinkUp() const override;
    void AddLinkChangeCallback(Callback<void> callback) override;
    bool IsBroadcast() const override;
    Address GetBroadcast() const override;
    bool IsMulticast() const override;
    Address GetMulticast(Ipv4Address multicastGroup) const override;
    Address GetMulticast(Ipv6Address addr) const override;
    bool IsBridge() const override;
    bool IsPointToPoint() const override;
    bool Send(Ptr<Packet> packet, const Address& dest, uint16_t protocolNumber) override;
    bool SendFrom(Ptr<Packet> packet,
                  const Address& source,
                  const Address& dest,
                  uint16_t protocolNumber) override;
    Ptr<Node> GetNode() const override;
    void SetNode(Ptr<Node> node) override;
    bool NeedsArp() const override;
    void SetReceiveCallback(ReceiveCallback cb) override;
    void SetPromiscReceiveCallback(PromiscReceiveCallback cb) override;
    bool SupportsSendFrom() const override;

  protected:
    void DoDispose() override;

  private:
    void TransmitComplete();

    DataRate m_rate;
    Ptr<RdmaChannel> m_channel;
    Ptr<Node> m_node;
    RdmaPortOwner* m_owner{nullptr};
    uint32_t m_port{0};
    uint32_t m_ifIndex{0};
    uint16_t m_mtu{9216};
    Mac48Address m_address;
    bool m_busy{false};
    Ptr<ErrorModel> m_rxErrorModel;
    uint64_t m_rxDrops{0};
    uint64_t m_txBytes{0};
    uint64_t m_txPackets{0};
    uint64_t m_carryFs{0}; //!< sub-ns remainder of serialization times (femtoseconds)
    double m_fsPerByte{0};
    Time m_txExtraDelay{0};
};

class RdmaChannel : public Channel
{
  public:
    static TypeId GetTypeId();
    RdmaChannel();

    void Attach(Ptr<RdmaNetDevice> dev);
    /// Deliver @p p to the other end after @p txTime + the propagation delay.
    void Transmit(Ptr<Packet> p, const RdmaNetDevice* src, Time txTime);
    Ptr<RdmaNetDevice> GetPeer(const RdmaNetDevice* dev) const;
    Time GetDelay() const { return m_delay; }

    std::size_t GetNDevices() const override;
    Ptr<NetDevice> GetDevice(std::size_t i) const override;

  private:
    Time m_delay;
    Ptr<RdmaNetDevice> m_dev[2];
    std::size_t m_n{0};
};

} // namespace ns3

#endif
