// Unit tests of the switch state machines (suite "heterosim-rdma-switch"):
// PFC XOFF/XON with headroom (static and dynamic thresholds, tiny buffers),
// lossy per-ingress admission, pipeline latency, canonical ECMP order, a
// 2->1 incast that must not stall when the threshold is below the resume
// offset, and the wait-for-graph PFC deadlock check.  Expected values are worked out by hand in the comments from the
// MMU rules in rdma-switch.h (shared/network-reference.md).
#include "ns3/boolean.h"
#include "ns3/config.h"
#include "ns3/data-rate.h"
#include "ns3/fabric-spec.h"
#include "ns3/rdma-nic.h"
#include "ns3/string.h"
#include "ns3/node.h"
#include "ns3/nstime.h"
#include "ns3/rdma-header.h"
#include "ns3/rdma-net-device.h"
#include "ns3/rdma-network-helper.h"
#include "ns3/rdma-switch.h"
#include "ns3/simulator.h"
#include "ns3/test.h"
#include "ns3/uinteger.h"

#include <string>
#include <vector>

using namespace ns3;

namespace
{

/// The far end of a switch port: records every frame that arrives.
struct Arrival
{
    int64_t ns;
    uint8_t kind;
    uint8_t flags;
    uint32_t size;
};

class Recorder : public RdmaPortOwner
{
  public:
    std::vector<std::vector<Arrival>> rx;

    void PortReceive(uint32_t port, Ptr<Packet> p) override
    {
        RdmaHeader h;
        p->PeekHeader(h);
        rx[port].push_back(Arrival{Simulator::Now().GetNanoSeconds(), h.f.kind, h.f.flags, p->GetSize()});
    }

    void PortTxDone(uint32_t) override
    {
    }

    uint32_t Count(uint32_t port, uint8_t kind, bool pause) const
    {
        uint32_t n = 0;
        for (const Arrival& a : rx[port])
        {
            n += a.kind == kind && (kind != RdmaHeader::PFC || bool(a.flags & RdmaHeader::FLAG_PAUSE) == pause);
        }
        return n;
    }
};

constexpr double RATE_BPS = 100e9; // 1000 B in 80 ns, a 64 B PFC frame in 5.12 ns
constexpr int64_t DELAY_NS = 1000;

/// A switch with @p nPorts ports, each wired (100 Gb/s, 1 us) to a recorder
/// port; one destination host (index 0) routed to the last port.
struct Rig
{
    Ptr<RdmaSwitchNode> sw;
    Ptr<Node> peerNode;
    Recorder rec;
    std::vector<Ptr<RdmaNetDevice>> peers;

    explicit Rig(uint32_t nPorts, Ptr<RdmaSwitchNode> s)
        : sw(s)
    {
        peerNode = CreateObject<Node>();
        rec.rx.resize(nPorts);
        for (uint32_t i = 0; i < nPorts; ++i)
        {
            Ptr<RdmaChannel> ch = CreateObject<RdmaChannel>();
            ch->SetAttribute("Delay", TimeValue(NanoSeconds(DELAY_NS)));
            Ptr<RdmaNetDevice> a = CreateObject<RdmaNetDevice>();
            Ptr<RdmaNetDevice> b = CreateObject<RdmaNetDevice>();
            a->SetDataRate(DataRate(static_cast<uint64_t>(RATE_BPS)));
            b->SetDataRate(DataRate(static_cast<uint64_t>(RATE_BPS)));
            a->Attach(ch);
            b->Attach(ch);
            sw->AddPort(a);
            peerNode->AddDevice(b);
            b->SetOwner(&rec, i);
            peers.push_back(b);
        }
        sw->SetRoutes(std::vector<std::vector<uint16_t>>(1, std::vector<uint16_t>{uint16_t(nPorts - 1)}));
    }

    static Ptr<Packet> Data(uint32_t size)
    {
        RdmaHeader h;
        h.f.kind = RdmaHeader::DATA;
        h.f.priority = 1;
        h.f.dst = 0;
        Ptr<Packet> p = Create<Packet>(size - h.GetSerializedSize());
        p->AddHeader(h);
        return p;
    }

    static Ptr<Packet> Pfc(bool pause)
    {
        RdmaHeader h;
        h.f.kind = RdmaHeader::PFC;
        h.f.priority = 1;
        h.f.flags = pause ? RdmaHeader::FLAG_PAUSE : 0;
        Ptr<Packet> p = Create<Packet>(64 - h.GetSerializedSize());
        p->AddHeader(h);
        return p;
    }

    void Receive(uint32_t port, Ptr<Packet> p)
    {
        sw->PortReceive(port, p);
    }
};

Ptr<RdmaSwitchNode>
MakeSwitch(bool pfc, bool dynamic, uint64_t bufferBytes, uint64_t staticThr, uint64_t resumeOffset,
           uint64_t reserved, uint32_t shift = 3)
{
    Ptr<RdmaSwitchNode> sw = CreateObject<RdmaSwitchNode>();
    sw->SetAttribute("PfcEnabled", BooleanValue(pfc));
    sw->SetAttribute("PfcDynamic", BooleanValue(dynamic));
    sw->SetAttribute("BufferSize", UintegerValue(bufferBytes));
    sw->SetAttribute("PfcStaticThreshold", UintegerValue(staticThr));
    sw->SetAttribute("PfcResumeOffset", UintegerValue(resumeOffset));
    sw->SetAttribute("ReservedPerQueue", UintegerValue(reserved));
    sw->SetAttribute("PfcShift", UintegerValue(shift));
    sw->SetAttribute("EcnEnabled", BooleanValue(false));
    return sw;
}

// --------------------------------------------------------------------------

class PfcStaticTinyThresholdTestCase : public TestCase
{
  public:
    PfcStaticTinyThresholdTestCase()
        : TestCase("PFC static threshold 2 KB below a 3 KB resume offset: XOFF, headroom, drop, XON")
    {
    }

  private:
    void DoRun() override
    {
        // Reserved 1000 B, static threshold 2000 B, resume offset 3000 B, headroom 3000 B.
        Rig rig(3, MakeSwitch(true, false, 1000000, 2000, 3000, 1000));
        rig.sw->SetPortHeadroom(0, 3000);
        auto& sw = rig.sw;
        rig.Receive(2, Rig::Pfc(true)); // hold everything at the egress
        // 1000 B packets into ingress 0:  #1 reserved; #2 shared 1000; #3 shared 2000
        // (not above the threshold: admitted) and shared >= threshold: PAUSE.
        rig.Receive(0, Rig::Data(1000));
        rig.Receive(0, Rig::Data(1000));
        NS_TEST_ASSERT_MSG_EQ(sw->IsRxPaused(0, 1), false, "2000 B: under the threshold");
        rig.Receive(0, Rig::Data(1000));
        NS_TEST_ASSERT_MSG_EQ(sw->IsRxPaused(0, 1), true, "shared 2000 >= 2000: XOFF");
        NS_TEST_ASSERT_MSG_EQ(sw->GetPortStats(0).pfcPauseSent, 1u, "one PAUSE");
        // #4..#6 would put shared above the threshold: they go to headroom.
        for (int i = 0; i < 3; ++i)
        {
            rig.Receive(0, Rig::Data(1000));
        }
        NS_TEST_ASSERT_MSG_EQ(sw->GetIngressBytes(0, 1), 3000u, "reserved + shared unchanged");
        NS_TEST_ASSERT_MSG_EQ(sw->GetHeadroomBytes(0, 1), 3000u, "beyond the threshold: headroom");
        NS_TEST_ASSERT_MSG_EQ(sw->GetPortStats(0).drops, 0u, "no drop while headroom lasts");
        // #7 overflows the 3000 B headroom: the only drop.
        rig.Receive(0, Rig::Data(1000));
        NS_TEST_ASSERT_MSG_EQ(sw->GetPortStats(0).drops, 1u, "headroom overflow drops");
        NS_TEST_ASSERT_MSG_EQ(sw->GetHeadroomBytes(0, 1), 3000u, "dropped bytes not counted");
        NS_TEST_ASSERT_MSG_EQ(sw->GetPortStats(0).pfcPauseSent, 1u, "no second PAUSE while paused");
        // Release the egress at 10 us: 6 packets drain (headroom first).  With
        // the threshold below the offset, shared + 3000 <= 2000 never holds: the
        // RESUME comes when shared reaches 0, i.e. at the 5th dequeue
        // (ingress 4000 -> 1000 B, all reserved), t = 10 us + 4 x 80 ns.
        Simulator::Schedule(MicroSeconds(10), &Rig::Receive, &rig, 2, Rig::Pfc(false));
        Simulator::Run();
        NS_TEST_ASSERT_MSG_EQ(sw->IsRxPaused(0, 1), false, "drained ingress resumed");
        NS_TEST_ASSERT_MSG_EQ(sw->GetIngressBytes(0, 1), 0u, "all released");
        NS_TEST_ASSERT_MSG_EQ(sw->GetHeadroomBytes(0, 1), 0u, "headroom released");
        NS_TEST_ASSERT_MSG_EQ(sw->GetPortStats(0).pfcResumeSent, 1u, "one RESUME");
        NS_TEST_ASSERT_MSG_EQ(rig.rec.Count(0, RdmaHeader::PFC, true), 1u, "upstream saw the PAUSE");
        NS_TEST_ASSERT_MSG_EQ(rig.rec.Count(0, RdmaHeader::PFC, false), 1u, "upstream saw the RESUME");
        // RESUME leaves at 10000 + 320 ns, 5 ns serialization (5.12 ns, the
        // PAUSE's 0.12 ns remainder carried: 5.24 -> 5), 1000 ns propagation.
        NS_TEST_ASSERT_MSG_EQ(rig.rec.rx[0].back().ns, 10000 + 320 + 5 + DELAY_NS, "RESUME time");
        NS_TEST_ASSERT_MSG_EQ(rig.rec.Count(2, RdmaHeader::DATA, false), 6u, "6 packets forwarded");
        Simulator::Destroy();
    }
};

class PfcRefreshAfterRepauseTestCase : public TestCase
{
  public:
    PfcRefreshAfterRepauseTestCase()
        : TestCase("PFC pause quanta: a pause that ends and starts again keeps one refresh chain")
    {
    }

  private:
    void DoRun() override
    {
        // 20 us quanta: a paused ingress repeats its PAUSE every 10 us.  Ingress 0 is paused at
        // 0, resumed near 1.2 us (egress released at 1 us), paused again at 2 us, resumed near
        // 31.2 us (egress released at 31 us).  By hand: PAUSEs at 0 and 2 us, refreshes of the
        // second pause at 12 and 22 us; none at 32 us (resumed by then).  The first pause's
        // chain must end with it (without: more at 10, 20 and 30 us, 7 in all).
        Ptr<RdmaSwitchNode> s = MakeSwitch(true, false, 1000000, 2000, 3000, 1000);
        s->SetAttribute("PfcPauseQuanta", TimeValue(MicroSeconds(20)));
        Rig rig(3, s);
        auto burst = [&rig]() {
            rig.Receive(2, Rig::Pfc(true)); // hold the egress
            for (int i = 0; i < 3; ++i)
            {
                rig.Receive(0, Rig::Data(1000)); // the third reaches the 2000 B threshold
            }
        };
        burst();
        NS_TEST_ASSERT_MSG_EQ(s->IsRxPaused(0, 1), true, "XOFF at 0");
        Simulator::Schedule(MicroSeconds(1), &Rig::Receive, &rig, 2, Rig::Pfc(false));
        Simulator::Schedule(MicroSeconds(2), burst);
        Simulator::Schedule(MicroSeconds(31), &Rig::Receive, &rig, 2, Rig::Pfc(false));
        Simulator::Stop(MicroSeconds(60));
        Simulator::Run();
        NS_TEST_ASSERT_MSG_EQ(s->IsRxPaused(0, 1), false, "resumed at the end");
        NS_TEST_ASSERT_MSG_EQ(s->GetPortStats(0).pfcResumeSent, 2u, "two RESUMEs");
        NS_TEST_ASSERT_MSG_EQ(s->GetPortStats(0).pfcPauseSent, 4u, "PAUSEs at 0, 2, 12, 22 us");
        std::vector<int64_t> at;
        for (const Arrival& a : rig.rec.rx[0])
        {
            if (a.kind == RdmaHeader::PFC && (a.flags & RdmaHeader::FLAG_PAUSE))
            {
                at.push_back((a.ns - DELAY_NS) / 1000); // sent, in whole us
            }
        }
        NS_TEST_ASSERT_MSG_EQ(at.size(), 4u, "upstream saw four PAUSEs");
        if (at.size() == 4)
        {
            NS_TEST_ASSERT_MSG_EQ(at[2], 12, "first refresh of the second pause");
            NS_TEST_ASSERT_MSG_EQ(at[3], 22, "second refresh");
        }
        Simulator::Destroy();
    }
};

class PfcDynamicThresholdTestCase : public TestCase
{
  public:
    PfcDynamicThresholdTestCase()
        : TestCase("PFC dynamic threshold on a tiny buffer: XOFF and XON points")
    {
    }

  private:
    void DoRun() override
    {
        // Buffer 60000 B, 3 ports x (headroom 6000 + reserved 2000): free shared
        // = 36000 - shared, threshold = free >> 3.
        Rig rig(3, MakeSwitch(true, true, 60000, 0, 3000, 2000, 3));
        for (uint32_t i = 0; i < 3; ++i)
        {
            rig.sw->SetPortHeadroom(i, 6000);
        }
        auto& sw = rig.sw;
        NS_TEST_ASSERT_MSG_EQ(sw->GetPfcThreshold(), 4500u, "36000 >> 3");
        rig.Receive(2, Rig::Pfc(true));
        // Packet k (1000 B) -> shared (k-2) x 1000 for k >= 2; threshold after it
        // (36000 - shared) >> 3.  k = 6: shared 4000, threshold 32000 >> 3 = 4000
        // -> shared >= threshold: PAUSE.  k = 5: 3000 < 4125, no PAUSE.
        for (int k = 1; k <= 5; ++k)
        {
            rig.Receive(0, Rig::Data(1000));
        }
        NS_TEST_ASSERT_MSG_EQ(sw->IsRxPaused(0, 1), false, "shared 3000 < threshold 4125");
        NS_TEST_ASSERT_MSG_EQ(sw->GetPfcThreshold(), 4125u, "33000 >> 3");
        rig.Receive(0, Rig::Data(1000));
        NS_TEST_ASSERT_MSG_EQ(sw->IsRxPaused(0, 1), true, "shared 4000 >= threshold 4000: XOFF");
        NS_TEST_ASSERT_MSG_EQ(sw->GetSharedUsed(), 4000u, "shared bytes");
        // k = 7: shared would be 5000 > 4000: headroom.
        rig.Receive(0, Rig::Data(1000));
        NS_TEST_ASSERT_MSG_EQ(sw->GetHeadroomBytes(0, 1), 1000u, "7th packet in headroom");
        NS_TEST_ASSERT_MSG_EQ(sw->GetIngressBytes(0, 1), 6000u, "reserved 2000 + shared 4000");
        // Drain from 10 us.  Dequeue 1 empties headroom; 2: shared 3000, thr
        // 33000>>3 = 4125, 6000 > 4125; 3: shared 2000, thr 4250, 5000 > 4250;
        // 4: shared 1000, thr 4375, 4000 <= 4375 -> RESUME at 10 us + 3 x 80 ns.
        Simulator::Schedule(MicroSeconds(10), &Rig::Receive, &rig, 2, Rig::Pfc(false));
        Simulator::Run();
        NS_TEST_ASSERT_MSG_EQ(sw->GetPortStats(0).pfcResumeSent, 1u, "one RESUME");
        NS_TEST_ASSERT_MSG_EQ(rig.rec.rx[0].back().ns, 10000 + 240 + 5 + DELAY_NS, "RESUME time");
        NS_TEST_ASSERT_MSG_EQ(sw->GetSharedUsed(), 0u, "all released");
        NS_TEST_ASSERT_MSG_EQ(sw->GetPortStats(0).drops, 0u, "lossless");
        Simulator::Destroy();
    }
};

class LossyAdmissionTestCase : public TestCase
{
  public:
    LossyAdmissionTestCase()
        : TestCase("lossy mode: per-ingress admission, then the whole buffer")
    {
    }

  private:
    void DoRun() override
    {
        {
            // Static threshold 3000 B, reserved 1000 B, a large buffer: ingress 0
            // takes 1000 reserved + 3000 shared, the 5th packet is dropped (at the
            // egress port it was bound for); ingress 1 still gets its own 4.
            Rig rig(3, MakeSwitch(false, false, 1000000, 3000, 0, 1000));
            rig.Receive(2, Rig::Pfc(true));
            for (int k = 1; k <= 5; ++k)
            {
                rig.Receive(0, Rig::Data(1000));
            }
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetIngressBytes(0, 1), 4000u, "ingress 0 capped");
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetPortStats(2).drops, 1u, "one drop, at the egress");
            for (int k = 1; k <= 4; ++k)
            {
                rig.Receive(1, Rig::Data(1000));
            }
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetIngressBytes(1, 1), 4000u, "ingress 1 has its own share");
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetPortStats(2).drops, 1u, "no drop for ingress 1");
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetPortStats(0).pfcPauseSent, 0u, "lossy: no PAUSE");
            Simulator::Destroy();
        }
        {
            // Dynamic, shift 1, buffer 20000, 3 ports x reserved 1000, headroom
            // 5000 per port (not set aside in lossy mode): threshold = (17000 -
            // shared) >> 1.  Packet k: shared (k-1) x 1000 admitted while <=
            // (17000 - (k-2) x 1000) >> 1: k = 7 (6000 <= 6000) in, k = 8 (7000 >
            // 5500) dropped.
            Rig rig(3, MakeSwitch(false, true, 20000, 0, 0, 1000, 1));
            for (uint32_t i = 0; i < 3; ++i)
            {
                rig.sw->SetPortHeadroom(i, 5000);
            }
            rig.Receive(2, Rig::Pfc(true));
            for (int k = 1; k <= 8; ++k)
            {
                rig.Receive(0, Rig::Data(1000));
            }
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetIngressBytes(0, 1), 7000u, "7 admitted");
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetPortStats(2).drops, 1u, "8th dropped");
            Simulator::Destroy();
        }
        {
            // Whole-buffer check after admission: threshold huge, buffer 5500 B.
            Rig rig(3, MakeSwitch(false, false, 5500, 1000000, 0, 1000));
            rig.Receive(2, Rig::Pfc(true));
            for (int k = 1; k <= 6; ++k)
            {
                rig.Receive(0, Rig::Data(1000));
            }
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetIngressBytes(0, 1), 5000u, "5 fit in 5500 B");
            NS_TEST_ASSERT_MSG_EQ(rig.sw->GetPortStats(2).drops, 1u, "6th dropped");
            Simulator::Destroy();
        }
    }
};

class PipelineLatencyTestCase : public TestCase
{
  public:
    PipelineLatencyTestCase()
        : TestCase("pipeline latency adds to what the switch transmits, nothing else")
    {
    }

  private:
    void DoRun() override
    {
        Ptr<RdmaSwitchNode> s = MakeSwitch(true, true, 1000000, 0, 3000, 1000);
        s->SetAttribute("PipelineLatency", TimeValue(NanoSeconds(500)));
        Rig rig(3, s);
        Simulator::Schedule(MicroSeconds(1), &Rig::Receive, &rig, 0, Rig::Data(1000));
        Simulator::Run();
        // arrives at 1000 ns, 80 ns serialization, 1000 ns propagation, 500 ns latency
        NS_TEST_ASSERT_MSG_EQ(rig.rec.rx[2].size(), 1u, "forwarded");
        NS_TEST_ASSERT_MSG_EQ(rig.rec.rx[2][0].ns, 1000 + 80 + DELAY_NS + 500, "one-way time");
        Simulator::Destroy();
    }
};

class CanonicalEcmpTestCase : public TestCase
{
  public:
    CanonicalEcmpTestCase()
        : TestCase("ECMP: canonical port order and the shared index function")
    {
    }

  private:
    void DoRun() override
    {
        // MurmurHash3_x86_32 of an empty key is fmix32(seed); published test
        // vectors: ("", 1) = 0x514E28B7, ("", 0xFFFFFFFF) = 0x81F16F39.
        NS_TEST_ASSERT_MSG_EQ(RdmaMix32(0xFFFFFFFFu), 0x81f16f39u, "fmix32(~0)");
        NS_TEST_ASSERT_MSG_EQ(RdmaMix32(0), 0u, "fmix32(0)");
        NS_TEST_ASSERT_MSG_EQ(RdmaMix32(1), 0x514e28b7u, "fmix32(1)");
        NS_TEST_ASSERT_MSG_EQ(RdmaEcmpIndex(1, 0, 7), 0x514e28b7u % 7, "index = fmix32(h ^ salt) % n");
        NS_TEST_ASSERT_MSG_EQ(RdmaEcmpIndex(0x12345678, 0x12345678 ^ 1, 7), 0x514e28b7u % 7, "salt xor");
        // Host 0 under switch node 3 (index 0); switch 0 reaches host 0 through
        // two spines, nodes 5 and 4, by ports added as 2 (to 5), 1 (to 4), 0
        // (to 4, a parallel link).  Canonical order: node 4 first, then ports.
        //   nodes: host 0, hosts 1-2 unused, switches 3 (leaf), 4, 5 (spines), 6 (leaf of host 0)
        const uint32_t nH = 3, nS = 4;
        std::vector<std::vector<std::pair<uint32_t, uint16_t>>> adj(nH + nS);
        adj[3] = {{5, 2}, {4, 1}, {4, 0}};
        adj[4] = {{3, 1}, {3, 0}, {6, 2}};
        adj[5] = {{3, 0}, {6, 1}};
        adj[6] = {{0, 0}, {4, 1}, {5, 2}};
        adj[0] = {{6, 0}};
        auto routes = RdmaNetworkHelper::ComputeRoutes(nH, nS, adj);
        const std::vector<uint16_t> expect{0, 1, 2};
        NS_TEST_ASSERT_MSG_EQ((routes[0][0] == expect), true, "by neighbour index, then port");
        NS_TEST_ASSERT_MSG_EQ(routes[3][0].size(), 1u, "leaf of host 0: one port");
        NS_TEST_ASSERT_MSG_EQ(routes[3][0][0], 0u, "... the host port");
    }
};

class IncastTinyStaticThresholdTestCase : public TestCase
{
  public:
    IncastTinyStaticThresholdTestCase()
        : TestCase("2->1 incast, static threshold 2 KB < resume offset 3 KB: no deadlock")
    {
    }

  private:
    void DoRun() override
    {
        Ptr<RdmaNetworkHelper> net = CreateObject<RdmaNetworkHelper>();
        net->SetAttribute("StallLimit", TimeValue(MilliSeconds(1)));
        FabricSpec f;
        f.hosts = {"r", "a", "b"};
        f.switches = {"sw"};
        for (uint32_t h = 0; h < 3; ++h)
        {
            f.linkA.push_back(h);
            f.linkB.push_back(3);
            f.rateBps.push_back(100e9);
            f.delayNs.push_back(1000);
            f.kminBytes.push_back(400e3);
            f.kmaxBytes.push_back(1600e3);
            f.pmax.push_back(0.2);
            f.headroomBytes.push_back(3 * 12500 + 2 * 4174);
        }
        net->Build(f);
        Ptr<RdmaSwitchNode> sw = net->GetSwitch(0);
        sw->SetAttribute("PfcDynamic", BooleanValue(false));
        sw->SetAttribute("PfcStaticThreshold", UintegerValue(2000));
        sw->SetAttribute("PfcResumeOffset", UintegerValue(3000));
        net->AddMessage(1, 1, 0, 2000000, 0, 1, -1, 0);
        net->AddMessage(2, 2, 0, 2000000, 0, 2, -1, 0);
        int status = RdmaNetworkHelper::OK;
        while (net->Pending() > 0 && status == RdmaNetworkHelper::OK)
        {
            status = net->Run(-1);
        }
        NS_TEST_ASSERT_MSG_EQ(status, int(RdmaNetworkHelper::OK), net->StatusDetail());
        NS_TEST_ASSERT_MSG_EQ(net->Pending(), 0u, "both messages delivered");
        NS_TEST_ASSERT_MSG_GT(sw->GetPortStats(1).pfcPauseSent, 0u, "the incast did pause senders");
        uint64_t drops = 0;
        for (uint32_t p = 0; p < sw->GetNPorts(); ++p)
        {
            drops += sw->GetPortStats(p).drops;
        }
        NS_TEST_ASSERT_MSG_EQ(drops, 0u, "lossless");
        net->Dispose();
        Simulator::Destroy();
    }
};

/// A ring of 5 switches (host i on switch i, link 5 + i joins s_i -> s_(i+1)).
FabricSpec
Ring5()
{
    FabricSpec f;
    for (uint32_t i = 0; i < 5; ++i)
    {
        f.hosts.push_back("h" + std::to_string(i));
        f.switches.push_back("s" + std::to_string(i));
    }
    auto link = [&f](uint32_t a, uint32_t b) {
        f.linkA.push_back(a);
        f.linkB.push_back(b);
        f.rateBps.push_back(100e9);
        f.delayNs.push_back(1000);
        f.kminBytes.push_back(400e3);
        f.kmaxBytes.push_back(1600e3);
        f.pmax.push_back(0.2);
        f.headroomBytes.push_back(50000);
    };
    for (uint32_t i = 0; i < 5; ++i)
    {
        link(i, 5 + i);
    }
    for (uint32_t i = 0; i < 5; ++i)
    {
        link(5 + i, 5 + (i + 1) % 5);
    }
    return f;
}

/// Local port of switch @p sw whose link leads to node @p peer.
uint32_t
PortTo(Ptr<RdmaSwitchNode> sw, Ptr<Node> peer)
{
    for (uint32_t k = 0; k < sw->GetNPorts(); ++k)
    {
        if (sw->GetPort(k)->GetPeer()->GetNode() == peer)
        {
            return k;
        }
    }
    return UINT32_MAX;
}

class DeadlockCycleTestCase : public TestCase
{
  public:
    DeadlockCycleTestCase()
        : TestCase("PFC deadlock: a cycle in the wait-for graph of paused ports, held long enough")
    {
    }

  private:
    struct Probe
    {
        Ptr<RdmaNetworkHelper> net;
        std::vector<int> found;
        void Check() { found.push_back(net->CheckDeadlockNow()); }
    };

    /// Every ring egress s_j -> s_(j+1) paused; for each i in @p feed, s_(i+1)
    /// holds at that egress a packet that came from s_i (bound for h_(i+3)).
    std::vector<int> Run(const std::vector<uint32_t>& feed, std::vector<uint32_t>* cycle)
    {
        Probe probe;
        probe.net = CreateObject<RdmaNetworkHelper>();
        probe.net->SetAttribute("DeadlockHoldTime", TimeValue(MicroSeconds(100)));
        probe.net->Build(Ring5());
        auto sw = [&](uint32_t i) { return probe.net->GetSwitch(i % 5); };
        for (uint32_t j = 0; j < 5; ++j)
        {
            sw(j)->PortReceive(PortTo(sw(j), sw(j + 1)), Rig::Pfc(true));
        }
        for (uint32_t i : feed)
        {
            Ptr<Packet> p = Rig::Data(1000);
            RdmaHeader h;
            p->RemoveHeader(h);
            h.f.dst = (i + 3) % 5;
            p->AddHeader(h);
            sw(i + 1)->PortReceive(PortTo(sw(i + 1), sw(i)), p);
        }
        // t = 0: first sight (not yet held); 50 us: held 50 us; 101 us: held 101 us.
        for (int64_t t : {0, 50000, 101000})
        {
            Simulator::Schedule(NanoSeconds(t), &Probe::Check, &probe);
        }
        Simulator::Run();
        *cycle = probe.net->GetDeadlockCycle();
        probe.net->Dispose();
        Simulator::Destroy();
        return probe.found;
    }

    void DoRun() override
    {
        std::vector<uint32_t> cycle;
        auto found = Run({0, 1, 2, 3, 4}, &cycle);
        NS_TEST_ASSERT_MSG_EQ(found[0], 0, "a cycle just formed is not yet a deadlock");
        NS_TEST_ASSERT_MSG_EQ(found[1], 0, "held 50 us < 100 us");
        NS_TEST_ASSERT_MSG_EQ(found[2], 1, "held 101 us: deadlock");
        // Port 2(5 + j) transmits s_j -> s_(j+1); s_j's waits for s_(j+1)'s.
        const std::vector<uint32_t> ring{10, 12, 14, 16, 18};
        NS_TEST_ASSERT_MSG_EQ((cycle == ring), true, "the cycle's ports, in wait-for order");
        // One switch holds nothing from upstream: the chain is open, no cycle.
        found = Run({0, 1, 2, 3}, &cycle);
        NS_TEST_ASSERT_MSG_EQ(found[2], 0, "an open chain of paused ports is no deadlock");
    }
};

// A slow receiver pauses its switch port (RdmaNic RxDrainRate): h0 sends 1,000,000 B in 1000
// packets of 1000 B (1078 B on the wire, 86.24 ns at 100 Gb/s; CC off) through one switch to h1,
// whose NIC drains into host memory at 50 Gb/s (172.48 ns a packet) from a 130,944 B buffer.
// By hand: the first packet is in h1's buffer at 86 + 1000 + 86 + 1000 = 2172 ns; from then on the
// drain never idles (packets arrive twice as fast as they drain; a PAUSE holds the buffer at about
// 100 KB, far more than a RESUME's round trip drains), so the last packet is drained, and the
// message complete, at 2172 + 1000 x 172.48 = 174,652 ns, limited by the drain alone.
// PAUSE level: buffer - (2 x 1 us x 100 Gb/s + 2 packets) = 130,944 - 27,156 = 103,788 B
// (97 packets); RESUME 2 packets lower, 101,632 B.  The k-th arrival (at 2172 + (k-1) 86.24 ns)
// finds the packets whose drain (at 2172 + j 172.48 ns) ended strictly before it gone: for odd k
// drain (k-1)/2 ends at the same instant, and the arrival (its time floored by the links'
// nanosecond serialization) comes first.  It leaves (k+3)/2 packets for odd k, (k+2)/2 for even k:
// 97 first at k = 191, so the first PAUSE is sent at 2172 + 190 x 86.24 = 18,557.6 ns.
// Lossless: nothing dropped, the buffer never over 130,944 B.
class SlowReceiverPausesItsPortTestCase : public TestCase
{
  public:
    SlowReceiverPausesItsPortTestCase()
        : TestCase("a slow receiver (50 Gb per s drain) PAUSEs its switch port and limits the flow to its drain")
    {
    }

  private:
    void DoRun() override
    {
        Config::SetDefault("ns3::RdmaNic::RxDrainRate", DataRateValue(DataRate("50Gbps")));
        Config::SetDefault("ns3::RdmaNic::Payload", UintegerValue(1000));
        Config::SetDefault("ns3::RdmaNic::CongestionControl", StringValue("none"));
        FabricSpec f;
        f.hosts = {"h0", "h1"};
        f.switches = {"s0"};
        f.linkA = {0, 2};
        f.linkB = {2, 1};
        f.rateBps = {100e9, 100e9};
        f.delayNs = {1000, 1000};
        f.kminBytes = {400e3, 400e3};
        f.kmaxBytes = {1600e3, 1600e3};
        f.pmax = {0.2, 0.2};
        f.headroomBytes = {200000, 200000};
        f.switchBufferBytes = {32000000};
        Ptr<RdmaNetworkHelper> net = CreateObject<RdmaNetworkHelper>();
        net->Build(f);
        Config::SetDefault("ns3::RdmaNic::RxDrainRate", DataRateValue(DataRate("0bps")));
        Config::SetDefault("ns3::RdmaNic::Payload", UintegerValue(4096));
        Config::SetDefault("ns3::RdmaNic::CongestionControl", StringValue("dcqcn"));
        Ptr<RdmaNic> rx = net->GetNic(1);
        NS_TEST_ASSERT_MSG_EQ(rx->GetRxXoffBytes(), 103788u, "PAUSE level");
        NS_TEST_ASSERT_MSG_EQ(rx->GetRxXonBytes(), 101632u, "RESUME level");
        int64_t firstPause = -1;
        rx->TraceConnectWithoutContext(
            "PfcSent", MakeCallback(+[](int64_t* at, uint8_t, bool pause) {
                if (pause && *at < 0)
                {
                    *at = Simulator::Now().GetNanoSeconds();
                }
            }).Bind(&firstPause));
        net->AddMessage(1, 0, 1, 1000000, 0, 7, -1, 0);
        std::vector<std::pair<uint64_t, int64_t>> done;
        while (net->Pending() > 0 && net->Run(-1) == RdmaNetworkHelper::OK)
        {
            for (const auto& c : net->DrainCompletions())
            {
                done.push_back(c);
            }
        }
        NS_TEST_ASSERT_MSG_EQ(done.size(), 1u, "the message completes");
        NS_TEST_ASSERT_MSG_EQ_TOL(done[0].second, 174652, 1, "limited by the 50 Gb/s drain");
        NS_TEST_ASSERT_MSG_EQ_TOL(firstPause, 18558, 1, "first PAUSE when the 191st packet lands");
        NS_TEST_ASSERT_MSG_GT(rx->GetPortStats().pfcPauseSent, 0u, "the receiver sent PAUSE");
        NS_TEST_ASSERT_MSG_EQ(rx->GetPortStats().pfcResumeSent, rx->GetPortStats().pfcPauseSent,
                              "each PAUSE answered by a RESUME");
        NS_TEST_ASSERT_MSG_EQ(rx->GetPortStats().drops, 0u, "lossless");
        NS_TEST_ASSERT_MSG_LT_OR_EQ(rx->GetRxBufferMaxBytes(), 130944u, "within the buffer");
        NS_TEST_ASSERT_MSG_GT_OR_EQ(rx->GetRxBufferMaxBytes(), 103788u, "filled to the PAUSE level");
        Ptr<RdmaSwitchNode> sw = net->GetSwitch(0);
        uint64_t pausedNs = 0;
        for (uint32_t i = 0; i < sw->GetNPorts(); ++i)
        {
            if (sw->GetPort(i)->GetPeer() == rx->GetDevice())
            {
                sw->FlushPausedTime();
                pausedNs = sw->GetPortStats(i).pausedNs;
            }
        }
        NS_TEST_ASSERT_MSG_GT(pausedNs, 0u, "the switch port to the slow receiver spent time paused");
        net->Dispose();
        Simulator::Destroy();
    }
};

// The trace sources report what the counters count: a 4 -> 1 DCQCN incast of 2 MB each through one
// switch with a 300 KB buffer (the dynamic PFC threshold, free / 8, is under 40 KB: PAUSEs) and an
// ECN band of 20-100 KB at Pmax 1 (marks, hence rate cuts).  Each sink counts its callbacks; they must
// equal the port and fabric counters of the same run, and the largest QueueDepth the largest
// maxQueueBytes.
class TraceSourcesMatchCountersTestCase : public TestCase
{
  public:
    TraceSourcesMatchCountersTestCase()
        : TestCase("QueueDepth, PfcSent, PfcReceived, EcnMark and RateChange traces match the counters")
    {
    }

  private:
    struct Sinks
    {
        uint64_t marks{0}, swPfc{0}, swPfcRecv{0}, nicPfcRecv{0}, rates{0}, maxDepth{0};
    };

    void DoRun() override
    {
        FabricSpec f;
        f.hosts = {"r0", "s0", "s1", "s2", "s3"};
        f.switches = {"sw"};
        for (uint32_t h = 0; h < 5; ++h)
        {
            f.linkA.push_back(h);
            f.linkB.push_back(5);
            f.rateBps.push_back(100e9);
            f.delayNs.push_back(1000);
            f.kminBytes.push_back(20e3);
            f.kmaxBytes.push_back(100e3);
            f.pmax.push_back(1.0);
            f.headroomBytes.push_back(100000);
        }
        f.switchBufferBytes = {300000};
        Ptr<RdmaNetworkHelper> net = CreateObject<RdmaNetworkHelper>();
        net->Build(f);
        Sinks k;
        Ptr<RdmaSwitchNode> sw = net->GetSwitch(0);
        sw->TraceConnectWithoutContext("EcnMark", MakeCallback(+[](Sinks* k, uint32_t, uint64_t) {
                                           k->marks++;
                                       }).Bind(&k));
        sw->TraceConnectWithoutContext("PfcSent", MakeCallback(+[](Sinks* k, uint32_t, uint8_t, bool) {
                                           k->swPfc++;
                                       }).Bind(&k));
        sw->TraceConnectWithoutContext("PfcReceived", MakeCallback(+[](Sinks* k, uint32_t, uint8_t, bool) {
                                           k->swPfcRecv++;
                                       }).Bind(&k));
        sw->TraceConnectWithoutContext("QueueDepth", MakeCallback(+[](Sinks* k, uint32_t, uint64_t b) {
                                           k->maxDepth = std::max(k->maxDepth, b);
                                       }).Bind(&k));
        for (uint32_t h = 0; h < 5; ++h)
        {
            net->GetNic(h)->TraceConnectWithoutContext("RateChange",
                                                       MakeCallback(+[](Sinks* k, uint32_t, double) {
                                                           k->rates++;
                                                       }).Bind(&k));
            net->GetNic(h)->TraceConnectWithoutContext("PfcReceived",
                                                       MakeCallback(+[](Sinks* k, uint8_t, bool) {
                                                           k->nicPfcRecv++;
                                                       }).Bind(&k));
        }
        for (uint32_t s = 1; s <= 4; ++s)
        {
            net->AddMessage(s, s, 0, 2000000, 0, 11 * s, -1, 0);
        }
        while (net->Pending() > 0 && net->Run(-1) == RdmaNetworkHelper::OK)
        {
            net->DrainCompletions();
        }
        NS_TEST_ASSERT_MSG_EQ(net->Pending(), 0u, "the incast completes");
        uint64_t marks = 0, pfc = 0, pfcRecv = 0, maxQ = 0, nicPfcRecv = 0;
        for (uint32_t i = 0; i < sw->GetNPorts(); ++i)
        {
            const RdmaPortStats& st = sw->GetPortStats(i);
            marks += st.ecnMarks;
            pfc += st.pfcPauseSent + st.pfcResumeSent;
            pfcRecv += st.pfcPauseRecv + st.pfcResumeRecv;
            maxQ = std::max(maxQ, st.maxQueueBytes);
        }
        for (uint32_t h = 0; h < 5; ++h)
        {
            nicPfcRecv += net->GetNic(h)->GetPortStats().pfcPauseRecv + net->GetNic(h)->GetPortStats().pfcResumeRecv;
        }
        NS_TEST_ASSERT_MSG_GT(marks, 0u, "the ECN band marks");
        NS_TEST_ASSERT_MSG_GT(pfc, 0u, "the small buffer PAUSEs");
        NS_TEST_ASSERT_MSG_EQ(k.marks, marks, "one EcnMark per mark");
        NS_TEST_ASSERT_MSG_EQ(k.swPfc, pfc, "one PfcSent per PAUSE/RESUME frame");
        NS_TEST_ASSERT_MSG_EQ(k.swPfcRecv, pfcRecv, "one PfcReceived per frame received");
        NS_TEST_ASSERT_MSG_EQ(k.nicPfcRecv, nicPfcRecv, "NIC PfcReceived per frame");
        NS_TEST_ASSERT_MSG_EQ(k.maxDepth, maxQ, "largest QueueDepth = largest queue");
        NS_TEST_ASSERT_MSG_GT_OR_EQ(k.rates, net->GetCounters().rateCuts, "a RateChange per cut, at least");
        NS_TEST_ASSERT_MSG_GT(net->GetCounters().rateCuts, 0u, "marks cut rates");
        net->Dispose();
        Simulator::Destroy();
    }
};

class RdmaSwitchTestSuite : public TestSuite
{
  public:
    RdmaSwitchTestSuite()
        : TestSuite("heterosim-rdma-switch", Type::UNIT)
    {
        AddTestCase(new PfcStaticTinyThresholdTestCase, TestCase::Duration::QUICK);
        AddTestCase(new PfcDynamicThresholdTestCase, TestCase::Duration::QUICK);
        AddTestCase(new PfcRefreshAfterRepauseTestCase, TestCase::Duration::QUICK);
        AddTestCase(new LossyAdmissionTestCase, TestCase::Duration::QUICK);
        AddTestCase(new PipelineLatencyTestCase, TestCase::Duration::QUICK);
        AddTestCase(new CanonicalEcmpTestCase, TestCase::Duration::QUICK);
        AddTestCase(new IncastTinyStaticThresholdTestCase, TestCase::Duration::QUICK);
        AddTestCase(new DeadlockCycleTestCase, TestCase::Duration::QUICK);
        AddTestCase(new SlowReceiverPausesItsPortTestCase, TestCase::Duration::QUICK);
        AddTestCase(new TraceSourcesMatchCountersTestCase, TestCase::Duration::QUICK);
    }
};

RdmaSwitchTestSuite g_rdmaSwitchTestSuite;

} // namespace
