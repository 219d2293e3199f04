// Congestion control behind RdmaCongestionOps: the registry of names, and Swift's window arithmetic
// against hand calculations (Kumar et al., SIGCOMM 2020, Algorithm 1 and section 3.5).
#include "ns3/config.h"
#include "ns3/dcqcn.h"
#include "ns3/double.h"
#include "ns3/nstime.h"
#include "ns3/rdma-cc-dcqcn.h"
#include "ns3/rdma-cc-ops.h"
#include "ns3/rdma-cc-swift.h"
#include "ns3/rdma-network-helper.h"
#include "ns3/simulator.h"
#include "ns3/string.h"
#include "ns3/swift.h"
#include "ns3/test.h"
#include "ns3/uinteger.h"

#include <cmath>
#include <string>

using namespace ns3;

namespace
{

class CcRegistryTestCase : public TestCase
{
  public:
    CcRegistryTestCase()
        : TestCase("every cc name maps to its RdmaCongestionOps TypeId")
    {
    }

  private:
    void DoRun() override
    {
        const char* names[][2] = {{"none", "ns3::RdmaCcNone"},         {"dcqcn", "ns3::RdmaCcDcqcn"},
                                  {"dcqcn_paper", "ns3::RdmaCcDcqcnPaper"}, {"hpcc", "ns3::RdmaCcHpcc"},
                                  {"timely", "ns3::RdmaCcTimely"},     {"dctcp", "ns3::RdmaCcDctcp"},
                                  {"swift", "ns3::RdmaCcSwift"}};
        for (const auto& n : names)
        {
            TypeId tid;
            NS_TEST_ASSERT_MSG_EQ(RdmaCongestionOps::Lookup(n[0], tid), true, n[0]);
            NS_TEST_ASSERT_MSG_EQ(tid.GetName(), std::string(n[1]), n[0]);
            NS_TEST_ASSERT_MSG_EQ(tid.IsChildOf(RdmaCongestionOps::GetTypeId()), true, n[1]);
        }
        TypeId tid;
        NS_TEST_ASSERT_MSG_EQ(RdmaCongestionOps::Lookup("ns3::RdmaCcSwift", tid), true, "a TypeId name");
        NS_TEST_ASSERT_MSG_EQ(RdmaCongestionOps::Lookup("bogus", tid), false, "unknown name");
        NS_TEST_ASSERT_MSG_EQ(RdmaCongestionOps::Lookup("ns3::RdmaNic", tid), false, "not a CC");
    }
};

SwiftParams
PaperShapedParams()
{
    SwiftParams p; // base 10 us, h 1 us, fs_range 5 us, fs 0.1 .. 100 packets, ai 1, beta 0.8, max_mdf 0.5
    p.baseTargetNs = 10000;
    p.hopScaleNs = 1000;
    p.fsRangeNs = 5000;
    p.fsMinCwnd = 0.1;
    p.fsMaxCwnd = 100;
    p.aiPackets = 1.0;
    p.betaMd = 0.8;
    p.maxMdf = 0.5;
    p.minCwnd = 0.001;
    p.maxCwnd = 1000;
    return p;
}

class SwiftTargetTestCase : public TestCase
{
  public:
    SwiftTargetTestCase()
        : TestCase("Swift target delay: hop and flow scaling by hand")
    {
    }

  private:
    void DoRun() override
    {
        // By hand: alpha = 5000 / (1/sqrt(0.1) - 1/sqrt(100)) = 5000 / 3.0622777 = 1632.7716 ns,
        // beta = -alpha / 10 = -163.27716 ns.
        const SwiftParams p = PaperShapedParams();
        // cwnd 4, 1 hop: 10000 + 1000 + 1632.7716/2 - 163.27716 = 11653.1086
        NS_TEST_ASSERT_MSG_EQ_TOL(p.TargetDelay(4, 1), 11653.1086, 1e-3, "cwnd 4, one hop");
        // cwnd 10: 11000 + 1632.7716 x 0.3162278 - 163.27716 = 11353.0506
        NS_TEST_ASSERT_MSG_EQ_TOL(p.TargetDelay(10, 1), 11353.0506, 1e-3, "cwnd 10, one hop");
        // fs_max_cwnd: no flow scaling; 3 hops: 10000 + 3000
        NS_TEST_ASSERT_MSG_EQ_TOL(p.TargetDelay(100, 3), 13000.0, 1e-6, "cwnd fs_max_cwnd");
        // fs_min_cwnd and below: all of fs_range
        NS_TEST_ASSERT_MSG_EQ_TOL(p.TargetDelay(0.1, 1), 16000.0, 1e-6, "cwnd fs_min_cwnd");
        NS_TEST_ASSERT_MSG_EQ_TOL(p.TargetDelay(0.01, 1), 16000.0, 1e-6, "capped at fs_range");
        // above fs_max_cwnd the term would be negative: 0
        NS_TEST_ASSERT_MSG_EQ_TOL(p.TargetDelay(400, 0), 10000.0, 1e-6, "never negative");
    }
};

class SwiftWindowTestCase : public TestCase
{
  public:
    SwiftWindowTestCase()
        : TestCase("Swift window: AI, MD once per RTT bounded by max_mdf, pacing below one packet")
    {
    }

  private:
    void DoRun() override
    {
        const SwiftParams p = PaperShapedParams();
        SwiftRp rp;
        // Additive increase: delay 5 us < target; one packet acked: cwnd 10 + 1/10.
        rp.Init(&p, 10, 20000);
        NS_TEST_ASSERT_MSG_EQ(rp.OnAck(5000, 1, 1000, 1), true, "increase");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 10.1, 1e-12, "cwnd += ai / cwnd");
        // Below one packet: cwnd += ai per acked packet.
        rp.Init(&p, 0.5, 20000);
        rp.OnAck(5000, 1, 1000, 1);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 1.5, 1e-12, "cwnd += ai below one packet");
        // Multiplicative decrease: cwnd 10, 1 hop (target 11353.0506), delay 20 us:
        // 10 x (1 - 0.8 (20000 - 11353.0506) / 20000) = 6.5412202.
        rp.Init(&p, 10, 20000);
        rp.OnAck(20000, 1, 100000, 1);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 6.5412202, 1e-6, "MD by beta (delay - target) / delay");
        // Once per RTT: 1 us later, still far above target: unchanged.
        NS_TEST_ASSERT_MSG_EQ(rp.OnAck(20000, 1, 101000, 1), false, "no second decrease within an RTT");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 6.5412202, 1e-6, "unchanged");
        // Still above target one RTT (20 us) after the cut: cut again, at most by max_mdf: a 1 ms
        // delay asks 1 - 0.8 x 0.98865 = 0.209, bounded to 0.5.
        rp.OnAck(1e6, 1, 120000, 1);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 6.5412202 * 0.5, 1e-6, "max_mdf bounds the cut");
        // min_cwnd clamp and pacing: 0.0015 halved is 0.00075, clamped to 0.001.
        rp.Init(&p, 0.0015, 20000);
        rp.OnAck(1e6, 1, 1000000, 1);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 0.001, 1e-12, "min_cwnd");
        // Pacing below one packet: cwnd 0.25, RTT 20 us, 4174 B packets:
        // one packet per 80 us = 0.25 x 4174 x 8 / 20e-6 = 417.4 Mb/s.
        rp.Init(&p, 0.25, 20000);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.Rate(4174, 100e9), 417.4e6, 1e-3, "pacing rtt / cwnd");
        rp.Init(&p, 2, 20000);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.Rate(4174, 100e9), 100e9, 1e-3, "window-limited above one packet");
        // Go-back: a NACK halves (max_mdf) once per RTT; RetxResetThreshold (5) timeouts in a row: min_cwnd.
        rp.Init(&p, 8, 20000);
        rp.OnRetransmit(false, 0);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 4.0, 1e-12, "fast recovery");
        for (int i = 1; i <= 4; ++i)
        {
            rp.OnRetransmit(true, 1000 * i); // within the RTT: no further decrease
        }
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 4.0, 1e-12, "timeouts within an RTT");
        rp.OnRetransmit(true, 5000);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.cwnd, 0.001, 1e-12, "fifth timeout in a row: min_cwnd");
    }
};

// Swift through the NIC: the target its first ACK is compared with, by hand.  h0 - s0 - s1 - h1,
// 100 Gb/s links of 1 us, no switch latency, 4,096 B payload + 78 B headers, 64 B ACKs.
//   base RTT (RdmaNetworkHelper::MaxBaseRtts, rounded up): 3 (1000 + 4174 x 8 / 100)
//     + 3 (1000 + 64 x 8 / 100) = 4001.76 + 3015.36 = 7017.12 -> 7018 ns
//   max_cwnd = one BDP = 100e9 x 7018e-9 / 8 / 4096 = 21.4172 packets, where the QP starts
//   target = 7018 + 2 switches x 1000 + 1632.7716 / sqrt(21.4172) - 163.27716 = 9207.5351 ns
// and the TraceSources fire: TargetDelay once per ACK of new data, RateChange / WindowChange on
// the RdmaCongestionOps object of the NIC.
class SwiftNicTestCase : public TestCase
{
  public:
    SwiftNicTestCase()
        : TestCase("Swift in the NIC: base RTT, hop count and flow term of the target by hand")
    {
    }

  private:
    struct Sinks
    {
        std::vector<double> targets;
        uint32_t windows{0};
    };

    void DoRun() override
    {
        Config::SetDefault("ns3::RdmaNic::CongestionControl", StringValue("swift"));
        FabricSpec f;
        f.hosts = {"h0", "h1"};
        f.switches = {"s0", "s1"};
        f.linkA = {0, 2, 3};
        f.linkB = {2, 3, 1};
        f.rateBps = {100e9, 100e9, 100e9};
        f.delayNs = {1000, 1000, 1000};
        f.kminBytes = {400e3, 400e3, 400e3};
        f.kmaxBytes = {1600e3, 1600e3, 1600e3};
        f.pmax = {0.2, 0.2, 0.2};
        f.headroomBytes = {200000, 200000, 200000};
        f.switchBufferBytes = {32000000, 32000000};
        Ptr<RdmaNetworkHelper> net = CreateObject<RdmaNetworkHelper>();
        net->Build(f);
        Config::SetDefault("ns3::RdmaNic::CongestionControl", StringValue(""));
        Ptr<RdmaCongestionOps> ops = net->GetNic(0)->GetCongestionOps();
        NS_TEST_ASSERT_MSG_EQ(ops->GetInstanceTypeId().GetName(), std::string("ns3::RdmaCcSwift"), "the NIC's CC");
        NS_TEST_ASSERT_MSG_EQ_TOL(ops->BaseRttNs(), 7018.0, 1e-9, "the fabric's base RTT");
        Sinks k;
        ops->TraceConnectWithoutContext("TargetDelay", MakeCallback(+[](Sinks* k, uint32_t, double t) {
                                            k->targets.push_back(t);
                                        }).Bind(&k));
        ops->TraceConnectWithoutContext("WindowChange", MakeCallback(+[](Sinks* k, uint32_t, double) {
                                            k->windows++;
                                        }).Bind(&k));
        const uint64_t bytes = 50 * 4096;
        net->AddMessage(1, 0, 1, bytes, 0, 7, -1, 0);
        while (net->Pending() > 0 && net->Run(-1) == RdmaNetworkHelper::OK)
        {
            net->DrainCompletions();
        }
        // The message completes at the receiver; the last ACKs are still on their way back.
        Simulator::Stop(MicroSeconds(10));
        Simulator::Run();
        NS_TEST_ASSERT_MSG_EQ(k.targets.size(), 50u, "one target per ACK of new data (AckInterval 1)");
        NS_TEST_ASSERT_MSG_EQ_TOL(k.targets.front(), 9207.5351, 1e-3, "base + 2 hops x h + fs(max_cwnd)");
        // Alone, the flow never queues: every RTT is below target, the window stays at its ceiling
        // (additive increase clamped to max_cwnd): WindowChange fires once, for the new QP.
        NS_TEST_ASSERT_MSG_EQ(k.windows, 1u, "a lone flow's window stays at one BDP");
        net->Dispose();
        Simulator::Destroy();
    }
};

// The minimum decrease factor (NVIDIA rpg_min_dec_fac): one cut keeps at least f of the current rate,
// RC <- RC max(1 - alpha/2, f).  Paper reaction point (every CNP cuts), g = 1/256, alpha timer 1 us,
// f = 0.75, 100 Gb/s.  CNP at 0: alpha = 1, unfloored 50 Gb/s, floored 75 Gb/s.  CNP at 200 us:
// alpha = (1 - g)^200 = 0.4571 (200 periods without CNP), 1 - alpha/2 = 0.7714 > f: not floored,
// RC = 75 G x 0.7714.  With f = 0 (the HPCC simulator's model) the first cut gives 50 Gb/s.
class DcqcnMinDecreaseFactorTestCase : public TestCase
{
  public:
    DcqcnMinDecreaseFactorTestCase()
        : TestCase("DCQCN minimum decrease factor floors one cut")
    {
    }

  private:
    void DoRun() override
    {
        DcqcnParams p;
        p.g = 1.0 / 256;
        p.alphaIntervalNs = 1000;
        p.rateDecreaseIntervalNs = 0;
        p.rateIncreaseIntervalNs = 55000;
        p.minRateBps = 100e6;
        p.lineRateBps = 100e9;
        p.vendor = false;
        p.clampTargetRate = true;
        p.minDecreaseFactor = 0.75;
        DcqcnRp rp;
        rp.Init(&p, 0);
        NS_TEST_ASSERT_MSG_EQ(rp.OnCnp(0), true, "first CNP cuts");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 75e9, 1, "alpha = 1 would halve; the floor keeps 75%");
        NS_TEST_ASSERT_MSG_EQ(rp.OnCnp(200000), true, "second CNP cuts");
        const double alpha = std::pow(1 - p.g, 200);
        NS_TEST_ASSERT_MSG_EQ_TOL(alpha, 0.4571, 1e-4, "alpha after 200 quiet periods");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 75e9 * (1 - alpha / 2), 1, "1 - alpha/2 above the floor: unchanged rule");
        DcqcnParams q = p;
        q.minDecreaseFactor = 0;
        DcqcnRp r0;
        r0.Init(&q, 0);
        r0.OnCnp(0);
        NS_TEST_ASSERT_MSG_EQ_TOL(r0.rate, 50e9, 1, "no floor: RC (1 - 1/2)");
        // The vendor reaction point cuts through the same rule at its check.
        DcqcnParams v = p;
        v.vendor = true;
        v.rateDecreaseIntervalNs = 4000;
        DcqcnRp rv;
        rv.Init(&v, 0);
        rv.OnCnp(0);
        NS_TEST_ASSERT_MSG_EQ(rv.OnDecreaseCheck(rv.NextDecreaseCheckNs(0)), true, "vendor check cuts");
        NS_TEST_ASSERT_MSG_EQ_TOL(rv.rate, 75e9, 1, "vendor cut floored at 75%");
    }
};

// CNP pacing at the notification point (the receiver NIC's CnpMode interval / CnpInterval; NVIDIA
// min_time_between_cnps): at most one CNP per QP per interval.  h0 -> s0 -> h1 at 100 Gb/s, 1 us
// links; the switch marks every data packet (Kmin = Kmax = -1 B: a queue of 0 B is above Kmax).
// DCQCN paper reaction point with RateDecreaseInterval 0 (every CNP cuts), 100 packets of 4096 B.
// Paced at 1 ms: the first CE-marked packet arrives at h1 and gets a CNP; the rest arrive after at
// most 99 x 4174 B at 50 Gb/s (the one cut from alpha = 1) = 66 us < 1 ms, so they get none: one
// CNP, one cut.  Unpaced (interval 0): every one of the 100 CE-marked packets gets a CNP.
class CnpPacingTestCase : public TestCase
{
  public:
    CnpPacingTestCase()
        : TestCase("CNP pacing: a CE burst within one interval yields one CNP and one cut")
    {
    }

  private:
    static RdmaCounters Run(int64_t intervalNs, double minDecreaseFactor, double* factorSeen)
    {
        Config::SetDefault("ns3::RdmaNic::CongestionControl", StringValue("dcqcn_paper"));
        Config::SetDefault("ns3::RdmaCcDcqcn::RateDecreaseInterval", TimeValue(NanoSeconds(0)));
        Config::SetDefault("ns3::RdmaCcDcqcn::MinDecreaseFactor", DoubleValue(minDecreaseFactor));
        FabricSpec f;
        f.hosts = {"h0", "h1"};
        f.switches = {"s0"};
        f.linkA = {0, 2};
        f.linkB = {2, 1};
        f.rateBps = {100e9, 100e9};
        f.delayNs = {1000, 1000};
        f.kminBytes = {-1, -1};
        f.kmaxBytes = {-1, -1};
        f.pmax = {1, 1};
        f.headroomBytes = {200000, 200000};
        f.switchBufferBytes = {32000000};
        Ptr<RdmaNetworkHelper> net = CreateObject<RdmaNetworkHelper>();
        net->Build(f);
        // Back to the defaults for the other tests of this process.
        Config::SetDefault("ns3::RdmaNic::CongestionControl", StringValue(""));
        Config::SetDefault("ns3::RdmaCcDcqcn::RateDecreaseInterval", TimeValue(MicroSeconds(4)));
        Config::SetDefault("ns3::RdmaCcDcqcn::MinDecreaseFactor", DoubleValue(0.0));
        for (uint32_t i = 0; i < 2; ++i)
        {
            net->GetNic(i)->SetAttribute("CnpMode", StringValue("interval"));
            net->GetNic(i)->SetAttribute("CnpInterval", TimeValue(NanoSeconds(intervalNs)));
        }
        Ptr<RdmaCcDcqcn> ops = DynamicCast<RdmaCcDcqcn>(net->GetNic(0)->GetCongestionOps());
        *factorSeen = ops ? ops->GetParams().minDecreaseFactor : -1;
        net->AddMessage(1, 0, 1, 100 * 4096, 0, 7, -1, 0);
        while (net->Pending() > 0 && net->Run(-1) == RdmaNetworkHelper::OK)
        {
            net->DrainCompletions();
        }
        Simulator::Stop(MicroSeconds(10));
        Simulator::Run();
        RdmaCounters c = net->GetCounters();
        net->Dispose();
        Simulator::Destroy();
        return c;
    }

    void DoRun() override
    {
        double factor = -1;
        RdmaCounters paced = Run(1000000, 0.75, &factor);
        NS_TEST_ASSERT_MSG_EQ_TOL(factor, 0.75, 1e-12, "MinDecreaseFactor reaches the reaction point");
        NS_TEST_ASSERT_MSG_EQ(paced.ceReceived, 100u, "every packet CE-marked");
        NS_TEST_ASSERT_MSG_EQ(paced.cnpsSent, 1u, "one CNP for the burst");
        NS_TEST_ASSERT_MSG_EQ(paced.rateCuts, 1u, "one cut");
        RdmaCounters unpaced = Run(0, 0.0, &factor);
        NS_TEST_ASSERT_MSG_EQ_TOL(factor, 0.0, 1e-12, "default: no floor");
        NS_TEST_ASSERT_MSG_EQ(unpaced.ceReceived, 100u, "every packet CE-marked");
        NS_TEST_ASSERT_MSG_EQ(unpaced.cnpsSent, 100u, "one CNP per CE-marked packet");
        NS_TEST_ASSERT_MSG_GT(unpaced.rateCuts, 1u, "several cuts without pacing");
    }
};

class HeterosimRdmaCcTestSuite : public TestSuite
{
  public:
    HeterosimRdmaCcTestSuite()
        : TestSuite("heterosim-rdma-cc", Type::UNIT)
    {
        AddTestCase(new CcRegistryTestCase, Duration::QUICK);
        AddTestCase(new SwiftTargetTestCase, Duration::QUICK);
        AddTestCase(new SwiftWindowTestCase, Duration::QUICK);
        AddTestCase(new SwiftNicTestCase, Duration::QUICK);
        AddTestCase(new DcqcnMinDecreaseFactorTestCase, Duration::QUICK);
        AddTestCase(new CnpPacingTestCase, Duration::QUICK);
    }
};

HeterosimRdmaCcTestSuite g_heterosimRdmaCcTestSuite;

} // namespace
