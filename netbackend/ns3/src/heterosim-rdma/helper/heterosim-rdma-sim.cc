#include "heterosim-rdma-sim.h"

#include "rdma-network-helper.h"

#include "ns3/config.h"
#include "ns3/data-rate.h"
#include "ns3/node.h"
#include "ns3/point-to-point-helper.h"
#include "ns3/point-to-point-net-device.h"
#include "ns3/queue.h"
#include "ns3/rng-seed-manager.h"
#include "ns3/simulator.h"
#include "ns3/string.h"
#include "ns3/string.h"

#include <chrono>
#include <stdexcept>

namespace ns3
{

struct HeterosimRdmaSim::Impl
{
    Ptr<RdmaNetworkHelper> helper;
    bool destroyed{false};

    /// The built fabric; a call before Build (or after Destroy) throws, which cppyy raises in
    /// Python, instead of following a null pointer.
    RdmaNetworkHelper& Built() const
    {
        if (!helper)
        {
            throw std::logic_error("HeterosimRdmaSim: no fabric (call Build first)");
        }
        return *helper;
    }
};

HeterosimRdmaSim::HeterosimRdmaSim()
    : m_impl(std::make_unique<Impl>())
{
}

HeterosimRdmaSim::~HeterosimRdmaSim()
{
    Destroy();
}

void
HeterosimRdmaSim::SetDefault(const std::string& name, const std::string& value)
{
    if (!Config::SetDefaultFailSafe(name, StringValue(value)))
    {
        throw std::invalid_argument("cannot set ns-3 default " + name + " = " + value);
    }
}

void
HeterosimRdmaSim::SetSeed(uint32_t seed, uint64_t run)
{
    RngSeedManager::SetSeed(seed == 0 ? 1 : seed);
    RngSeedManager::SetRun(run);
}

void
HeterosimRdmaSim::Build(const FabricSpec& fabric)
{
    m_impl->helper = CreateObject<RdmaNetworkHelper>();
    m_impl->helper->Build(fabric);
}

void
HeterosimRdmaSim::SetNicAttribute(uint32_t host, const std::string& name, const std::string& value)
{
    Ptr<RdmaNic> nic = m_impl->Built().GetNic(host);
    nic->SetAttribute(name, StringValue(value));
    nic->ConfigureRxPipeline();
}

void
HeterosimRdmaSim::AddMessage(uint64_t id, uint32_t src, uint32_t dst, uint64_t bytes,
                             int64_t startNs, uint32_t flowHash,
                             int64_t connection, uint64_t stepBytes)
{
    m_impl->Built().AddMessage(id, src, dst, bytes, startNs, flowHash, connection, stepBytes);
}

int
HeterosimRdmaSim::Run(int64_t untilNs)
{
    return static_cast<int>(m_impl->Built().Run(untilNs));
}

int64_t
HeterosimRdmaSim::Now() const
{
    return Simulator::Now().GetNanoSeconds();
}

uint64_t
HeterosimRdmaSim::Pending() const
{
    return m_impl->Built().Pending();
}

std::vector<int64_t>
HeterosimRdmaSim::DrainCompletions()
{
    std::vector<int64_t> out;
    for (const auto& [id, t] : m_impl->Built().DrainCompletions())
    {
        out.push_back(static_cast<int64_t>(id));
        out.push_back(t);
    }
    return out;
}

std::string
HeterosimRdmaSim::StatusDetail() const
{
    return m_impl->Built().StatusDetail();
}

uint32_t
HeterosimRdmaSim::NumPorts() const
{
    return m_impl->Built().GetNPorts();
}

std::vector<std::string>
HeterosimRdmaSim::PortNames() const
{
    std::vector<std::string> out;
    for (uint32_t i = 0; i < NumPorts(); ++i)
    {
        out.push_back(m_impl->Built().GetPortName(i));
    }
    return out;
}

std::vector<double>
HeterosimRdmaSim::PortStat(const std::string& name) const
{
    auto& h = m_impl->Built();
    h.FlushPausedTime();
    std::vector<double> out;
    for (uint32_t i = 0; i < h.GetNPorts(); ++i)
    {
        const RdmaPortStats& s = h.GetPortStats(i);
        double v;
        if (name == "tx_bytes")
            v = h.GetPortTxBytes(i);
        else if (name == "tx_packets")
            v = h.GetPortTxPackets(i);
        else if (name == "pfc_pause_sent")
            v = s.pfcPauseSent;
        else if (name == "pfc_resume_sent")
            v = s.pfcResumeSent;
        else if (name == "pfc_pause_recv")
            v = s.pfcPauseRecv;
        else if (name == "pfc_resume_recv")
            v = s.pfcResumeRecv;
        else if (name == "paused_ns")
            v = s.pausedNs;
        else if (name == "ecn_marks")
            v = s.ecnMarks;
        else if (name == "drops")
            v = s.drops;
        else if (name == "max_queue_bytes")
            v = s.maxQueueBytes;
        else if (name == "mean_queue_bytes")
            v = s.queueSamples ? s.queueSampleSum / s.queueSamples : 0.0;
        else if (name == "queue_sample_sum")
            v = s.queueSampleSum;
        else if (name == "queue_bytes")
            v = h.GetPortQueueBytes(i);
        else
            throw std::invalid_argument("unknown port statistic " + name);
        out.push_back(v);
    }
    return out;
}

std::vector<std::string>
HeterosimRdmaSim::CounterNames() const
{
    return {"data_packets_sent", "retransmitted_packets", "acks_sent", "nacks_sent",
            "cnps_sent", "cnps_received", "ce_received", "rate_cuts", "timeouts",
            "delivered_bytes", "unroutable", "send_qps", "rx_qp_states", "connections",
            "duplicates_discarded"};
}

std::vector<double>
HeterosimRdmaSim::CounterValues() const
{
    auto& h = m_impl->Built();
    const RdmaCounters& c = h.GetCounters();
    double qps = 0, rx = 0, conns = 0;
    for (uint32_t i = 0; i < h.GetNHosts(); ++i)
    {
        qps += h.GetNic(i)->GetActiveQps();
        rx += h.GetNic(i)->GetRxQpStates();
        conns += h.GetNic(i)->GetConnections();
    }
    return {double(c.dataPacketsSent), double(c.retransmittedPackets), double(c.acksSent),
            double(c.nacksSent), double(c.cnpsSent), double(c.cnpsReceived),
            double(c.ceReceived), double(c.rateCuts), double(c.timeouts),
            double(c.deliveredBytes), double(c.unroutable), qps, rx, conns,
            double(c.duplicatesDiscarded)};
}

std::vector<int64_t>
HeterosimRdmaSim::QueueSamples() const
{
    return m_impl->Built().GetQueueSamples();
}

std::vector<double>
HeterosimRdmaSim::RateSamples() const
{
    std::vector<double> out;
    auto& h = m_impl->Built();
    for (uint32_t host = 0; host < h.GetNHosts(); ++host)
    {
        for (const auto& s : h.GetNic(host)->GetRateSamples())
        {
            out.push_back(double(s.timeNs));
            out.push_back(double(host));
            out.push_back(double(s.qp));
            out.push_back(s.rateBps);
        }
    }
    return out;
}

uint64_t
HeterosimRdmaSim::MessageRxBytes(uint32_t dstHost, uint64_t msgId) const
{
    return m_impl->Built().GetMessageRxBytes(dstHost, msgId);
}

std::vector<double>
HeterosimRdmaSim::ConnectionDcqcnState(uint32_t srcHost, uint32_t dstHost, int64_t connection,
                                       bool busyOk) const
{
    return m_impl->Built().GetNic(srcHost)->ConnectionDcqcnState(dstHost, connection, busyOk);
}

std::vector<double>
HeterosimRdmaSim::SaveConnectionCc(uint32_t srcHost, uint32_t dstHost, int64_t connection) const
{
    return m_impl->Built().GetNic(srcHost)->SaveConnectionCc(dstHost, connection);
}

bool
HeterosimRdmaSim::RestoreConnectionCc(uint32_t srcHost, uint32_t dstHost, int64_t connection,
                                      const std::vector<double>& state)
{
    return m_impl->Built().GetNic(srcHost)->RestoreConnectionCc(dstHost, connection, state);
}

std::vector<double>
HeterosimRdmaSim::TrimMessage(uint32_t srcHost, uint32_t dstHost, int64_t connection, uint64_t msgId)
{
    return m_impl->Built().TrimMessage(srcHost, dstHost, connection, msgId);
}

double
HeterosimRdmaSim::RunWallSeconds() const
{
    return m_impl->helper ? m_impl->helper->GetRunWallSeconds() : 0.0;
}

void
HeterosimRdmaSim::Destroy()
{
    if (m_impl->destroyed)
    {
        return;
    }
    m_impl->destroyed = true;
    if (m_impl->helper)
    {
        m_impl->helper->Dispose();
        m_impl->helper = nullptr;
    }
    Simulator::Destroy();
}

// ------------------------------------------------------------------ baseline

namespace
{

struct P2pFeeder
{
    Ptr<PointToPointNetDevice> tx;
    uint32_t bytes{0};
    uint64_t toSend{0};
    uint64_t received{0};

    void Fill()
    {
        Ptr<Queue<Packet>> q = tx->GetQueue();
        while (toSend > 0 && q->GetNPackets() + 1 < q->GetMaxSize().GetValue())
        {
            tx->Send(Create<Packet>(bytes), tx->GetBroadcast(), 0x0800);
            toSend--;
        }
    }

    void TxBegin(Ptr<const Packet>)
    {
        // The device is BUSY here, so Send() only enqueues behind it.
        Fill();
    }

    bool Rx(Ptr<NetDevice>, Ptr<const Packet>, uint16_t, const Address&)
    {
        received++;
        return true;
    }
};

} // namespace

std::vector<double>
HeterosimRdmaSim::RawP2pBaseline(uint64_t packets, uint32_t packetBytes, double rateBps)
{
    Ptr<Node> a = CreateObject<Node>();
    Ptr<Node> b = CreateObject<Node>();
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(rateBps))));
    p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(1000)));
    NetDeviceContainer devs = p2p.Install(a, b);
    P2pFeeder feeder;
    feeder.tx = DynamicCast<PointToPointNetDevice>(devs.Get(0));
    feeder.bytes = packetBytes;
    feeder.toSend = packets;
    feeder.tx->TraceConnectWithoutContext("PhyTxBegin", MakeCallback(&P2pFeeder::TxBegin, &feeder));
    devs.Get(1)->SetReceiveCallback(MakeCallback(&P2pFeeder::Rx, &feeder));
    Simulator::ScheduleNow(&P2pFeeder::Fill, &feeder);
    const auto t0 = std::chrono::steady_clock::now();
    Simulator::Run();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double sim = Simulator::Now().GetSeconds();
    Simulator::Destroy();
    return {wall, double(feeder.received), sim};
}

} // namespace ns3
