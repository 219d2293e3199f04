// Congestion control behind RdmaCongestionOps: the registry of names, and Swift's window arithmetic
// against hand calculations (Kumar et al., SIGCOMM 2020, Algorithm 1 and section 3.5).
#include "ns3/rdma-cc-ops.h"
#include "ns3/rdma-cc-swift.h"
#include "ns3/simulator.h"
#include "ns3/swift.h"
#include "ns3/test.h"

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

class HeterosimRdmaCcTestSuite : public TestSuite
{
  public:
    HeterosimRdmaCcTestSuite()
        : TestSuite("heterosim-rdma-cc", Type::UNIT)
    {
        AddTestCase(new CcRegistryTestCase, Duration::QUICK);
        AddTestCase(new SwiftTargetTestCase, Duration::QUICK);
        AddTestCase(new SwiftWindowTestCase, Duration::QUICK);
    }
};

HeterosimRdmaCcTestSuite g_heterosimRdmaCcTestSuite;

} // namespace
