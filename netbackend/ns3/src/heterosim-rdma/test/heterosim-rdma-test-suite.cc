// Unit tests in ns-3 style for the heterosim-rdma module: DCQCN rate
// arithmetic, RED marking probability, MMU thresholds and ECMP spreading.
#include "ns3/dcqcn.h"
#include "ns3/rdma-header.h"
#include "ns3/rdma-switch.h"
#include "ns3/simulator.h"
#include "ns3/test.h"
#include "ns3/uinteger.h"

#include <cmath>
#include <vector>

using namespace ns3;

namespace
{

DcqcnParams
Params100G()
{
    DcqcnParams p;
    p.g = 1.0 / 256;
    p.alphaIntervalNs = 1000;
    p.rateDecreaseIntervalNs = 4000;
    p.rateIncreaseIntervalNs = 300000;
    p.fastRecoveryStages = 1;
    p.rateAiBps = 20e6;
    p.rateHaiBps = 200e6;
    p.minRateBps = 100e6;
    p.lineRateBps = 100e9;
    return p;
}

class DcqcnDecreaseTestCase : public TestCase
{
  public:
    DcqcnDecreaseTestCase()
        : TestCase("DCQCN rate decrease and alpha update")
    {
    }

  private:
    void DoRun() override
    {
        DcqcnParams p = Params100G();
        DcqcnRp rp;
        rp.Init(&p, 0);
        NS_TEST_ASSERT_MSG_EQ(rp.OnCnp(0), true, "first CNP cuts");
        // alpha = 1 on the first CNP: RC halves, RT keeps the old rate.
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 50e9, 1, "RC = RC (1 - 1/2)");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, 100e9, 1, "RT = old RC");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, 1.0, 1e-12, "alpha = (1-g) 1 + g = 1");
        // Within the rate-decrease interval: no cut, but the alpha timer restarts.
        NS_TEST_ASSERT_MSG_EQ(rp.OnCnp(2000), false, "second CNP inside 4 us is ignored");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 50e9, 1, "rate unchanged");
        // Alpha decayed for 2 intervals before the ignored CNP and 8 after it.
        NS_TEST_ASSERT_MSG_EQ(rp.OnCnp(10000), true, "third CNP cuts");
        const double g = p.g;
        const double alpha = std::pow(1 - g, 10);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 50e9 * (1 - alpha / 2), 1, "RC (1 - alpha/2)");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, 50e9, 1, "RT = RC before the cut");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, (1 - g) * alpha + g, 1e-12, "alpha EWMA");
        // Floor at the minimum rate.
        for (int i = 0; i < 200; ++i)
        {
            rp.OnCnp(20000 + i * 5000);
        }
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, p.minRateBps, 1, "rate floors at min rate");
    }
};

class DcqcnIncreaseTestCase : public TestCase
{
  public:
    DcqcnIncreaseTestCase()
        : TestCase("DCQCN fast recovery, additive and hyper increase")
    {
    }

  private:
    void DoRun() override
    {
        DcqcnParams p = Params100G();
        DcqcnRp rp;
        rp.Init(&p, 0);
        rp.rate = 40e9;
        rp.target = 60e9;
        NS_TEST_ASSERT_MSG_EQ(rp.OnIncreaseTimer(), DcqcnRp::FAST_RECOVERY, "stage 0 < F");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 50e9, 1, "RC = (RC + RT) / 2");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, 60e9, 1, "RT unchanged in fast recovery");
        NS_TEST_ASSERT_MSG_EQ(rp.OnIncreaseTimer(), DcqcnRp::ADDITIVE, "stage F: additive");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, 60.02e9, 1, "RT += R_AI");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, (50e9 + 60.02e9) / 2, 1, "RC = (RC + RT) / 2");
        NS_TEST_ASSERT_MSG_EQ(rp.OnIncreaseTimer(), DcqcnRp::HYPER, "stage > F: hyper");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, 60.22e9, 1, "RT += R_HAI");
        // Never above line rate.
        for (int i = 0; i < 2000; ++i)
        {
            rp.OnIncreaseTimer();
        }
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 100e9, 1, "capped at line rate");
        NS_TEST_ASSERT_MSG_EQ(rp.NeedsIncrease(), false, "at line rate: timer may stop");
        // A cut resets the stages: the next event is fast recovery again.
        rp.OnCnp(1000000);
        NS_TEST_ASSERT_MSG_EQ(rp.OnIncreaseTimer(), DcqcnRp::FAST_RECOVERY, "stages reset by cut");
    }
};

class DcqcnByteCounterTestCase : public TestCase
{
  public:
    DcqcnByteCounterTestCase()
        : TestCase("DCQCN byte counter raises the rate")
    {
    }

  private:
    void DoRun() override
    {
        DcqcnParams p = Params100G();
        p.byteCounterBytes = 10 * 1000 * 1000;
        p.fastRecoveryStages = 5;
        DcqcnRp rp;
        rp.Init(&p, 0);
        rp.OnCnp(0);
        NS_TEST_ASSERT_MSG_EQ(rp.OnBytesSent(9999999), false, "below the byte counter");
        NS_TEST_ASSERT_MSG_EQ(rp.OnBytesSent(1), true, "byte counter fires");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 75e9, 1, "fast recovery");
        NS_TEST_ASSERT_MSG_EQ(rp.byteStage, 1u, "byte stage counted");
    }
};

class EcnProbabilityTestCase : public TestCase
{
  public:
    EcnProbabilityTestCase()
        : TestCase("RED ECN marking probability")
    {
    }

  private:
    void DoRun() override
    {
        const double kmin = 400e3;
        const double kmax = 1600e3;
        NS_TEST_ASSERT_MSG_EQ_TOL(EcnMarkProbability(0, kmin, kmax, 0.2), 0.0, 1e-12, "empty");
        NS_TEST_ASSERT_MSG_EQ_TOL(EcnMarkProbability(kmin, kmin, kmax, 0.2), 0.0, 1e-12, "at Kmin");
        NS_TEST_ASSERT_MSG_EQ_TOL(EcnMarkProbability(1000e3, kmin, kmax, 0.2), 0.1, 1e-12, "midway");
        NS_TEST_ASSERT_MSG_EQ_TOL(EcnMarkProbability(kmax, kmin, kmax, 0.2), 0.2, 1e-12, "at Kmax");
        NS_TEST_ASSERT_MSG_EQ_TOL(EcnMarkProbability(kmax + 1, kmin, kmax, 0.2), 1.0, 1e-12, "above");
    }
};

class SwitchThresholdAndEcmpTestCase : public TestCase
{
  public:
    SwitchThresholdAndEcmpTestCase()
        : TestCase("dynamic PFC threshold and ECMP spreading")
    {
    }

  private:
    void DoRun() override
    {
        Ptr<RdmaSwitchNode> sw = CreateObject<RdmaSwitchNode>();
        sw->SetAttribute("BufferSize", UintegerValue(1 << 20));
        for (int i = 0; i < 4; ++i)
        {
            sw->AddPort(CreateObject<RdmaNetDevice>());
            sw->SetPortHeadroom(i, 1 << 14);
        }
        // (1 MiB - 4 x 16 KiB headroom - 4 x 4 KiB reserved) / 8
        const uint64_t expect = ((1 << 20) - 4 * (1 << 14) - 4 * 4096) >> 3;
        NS_TEST_ASSERT_MSG_EQ(sw->GetPfcThreshold(), expect, "free buffer >> shift");
        std::vector<std::vector<uint16_t>> routes(1, std::vector<uint16_t>{0, 1, 2, 3});
        sw->SetRoutes(routes);
        std::vector<int> hits(4, 0);
        RdmaHeader h;
        h.f.dst = 0;
        for (uint32_t flow = 0; flow < 4000; ++flow)
        {
            h.f.flowHash = RdmaMix32(flow);
            hits[sw->SelectEgress(h)]++;
        }
        for (int i = 0; i < 4; ++i)
        {
            NS_TEST_ASSERT_MSG_GT(hits[i], 850, "ECMP spreads flows over all ports");
        }
        h.f.flowHash = 12345;
        const uint32_t first = sw->SelectEgress(h);
        NS_TEST_ASSERT_MSG_EQ(sw->SelectEgress(h), first, "same flow, same port");
        Simulator::Destroy();
    }
};

class HeterosimRdmaTestSuite : public TestSuite
{
  public:
    HeterosimRdmaTestSuite()
        : TestSuite("heterosim-rdma", Type::UNIT)
    {
        AddTestCase(new DcqcnDecreaseTestCase, Duration::QUICK);
        AddTestCase(new DcqcnIncreaseTestCase, Duration::QUICK);
        AddTestCase(new DcqcnByteCounterTestCase, Duration::QUICK);
        AddTestCase(new EcnProbabilityTestCase, Duration::QUICK);
        AddTestCase(new SwitchThresholdAndEcmpTestCase, Duration::QUICK);
    }
};

HeterosimRdmaTestSuite g_heterosimRdmaTestSuite;

} // namespace
