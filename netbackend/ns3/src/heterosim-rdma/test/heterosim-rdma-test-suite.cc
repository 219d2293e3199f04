// Unit tests in ns-3 style for the heterosim-rdma module: DCQCN rate
// arithmetic, HPCC window and TIMELY rate updates, RED marking probability,
// MMU thresholds and ECMP spreading.
#include "ns3/dcqcn.h"
#include "ns3/dctcp.h"
#include "ns3/error-model.h"
#include "ns3/fluid-net.h"
#include "ns3/hpcc.h"
#include "ns3/pointer.h"
#include "ns3/rdma-net-device.h"
#include "ns3/rdma-network-helper.h"
#include "ns3/timely.h"
#include "ns3/rdma-header.h"
#include "ns3/rdma-switch.h"
#include "ns3/simulator.h"
#include "ns3/test.h"
#include "ns3/string.h"
#include "ns3/uinteger.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
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

/// A device's rate reads back through its Attribute (it could only be set), and serializes a
/// packet at that rate.
class DeviceDataRateTestCase : public TestCase
{
  public:
    DeviceDataRateTestCase()
        : TestCase("RdmaNetDevice DataRate reads back")
    {
    }

  private:
    void DoRun() override
    {
        Ptr<RdmaNetDevice> dev = CreateObject<RdmaNetDevice>();
        dev->SetAttribute("DataRate", DataRateValue(DataRate("400Gbps")));
        DataRateValue v;
        dev->GetAttribute("DataRate", v);
        NS_TEST_ASSERT_MSG_EQ(v.Get().GetBitRate(), 400000000000ULL, "the rate set is the rate read");
        NS_TEST_ASSERT_MSG_EQ(dev->GetDataRate().GetBitRate(), 400000000000ULL, "and the device's own");
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

RdmaIntTag
OneHop(int64_t ts, uint64_t txBytes, uint64_t qlen, double rate = 100e9)
{
    RdmaIntTag t;
    RdmaIntHop h;
    h.tsNs = ts;
    h.txBytes = txBytes;
    h.qlenBytes = qlen;
    h.rateBps = rate;
    t.Push(h);
    return t;
}

class HpccWindowTestCase : public TestCase
{
  public:
    HpccWindowTestCase()
        : TestCase("HPCC utilization estimate and window update (Algorithm 1)")
    {
    }

  private:
    void DoRun() override
    {
        HpccParams p;
        p.eta = 0.95;
        p.maxStage = 0;
        p.baseRttNs = 10000;
        p.lineRateBps = 100e9; // 12.5 B/ns: B x T = 125 KB
        p.minRateBps = 100e6;
        p.wAiBytes = 50;
        HpccRp rp;
        rp.Init(&p);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.window, 125000.0, 1e-9, "starts at one BDP");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.Rate(), 100e9, 1, "line rate");
        bool measured = rp.OnAck(OneHop(1000, 1000000, 0), 4000, 8000);
        NS_TEST_ASSERT_MSG_EQ(measured, false, "first ACK only stores the INT records");
        // Link busy for 1 us (12500 B): txRate/B = 1; qlen = min(25000, 0) = 0 -> U = 1.
        measured = rp.OnAck(OneHop(2000, 1012500, 25000), 8000, 100000);
        NS_TEST_ASSERT_MSG_EQ(measured, true, "measured");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.u, 1.0, 1e-12, "first measurement sets U");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.window, 125000.0 / (1.0 / 0.95) + 50, 1e-6, "W = Wc/(U/eta) + W_AI");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.wc, rp.window, 1e-9, "first ACK past lastUpdateSeq moves Wc");
        NS_TEST_ASSERT_MSG_EQ(rp.lastUpdateSeq, 100000u, "lastUpdateSeq = snd_nxt");
        const double wc = rp.wc;
        // 2 us at half rate (12500 B), qlen min(50000, 25000) = 25000 -> 0.2 + 0.5 = 0.7;
        // tau/T = 0.2: U = 0.8 x 1 + 0.2 x 0.7 = 0.94.
        measured = rp.OnAck(OneHop(4000, 1025000, 50000), 50000, 120000);
        NS_TEST_ASSERT_MSG_EQ(measured, true, "measured");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.u, 0.94, 1e-12, "EWMA over tau/T");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.window, wc / (0.94 / 0.95) + 50, 1e-6, "per-ACK window from Wc");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.wc, wc, 1e-9, "Wc moves once per RTT only");
        NS_TEST_ASSERT_MSG_EQ(rp.lastUpdateSeq, 100000u, "unchanged within the RTT");
        const double rate = rp.Rate();
        NS_TEST_ASSERT_MSG_EQ_TOL(rate, rp.window * 8e9 / 10000, 1, "R = W / T");

        // Two hops: the more utilized one sets u and tau.
        HpccRp two;
        two.Init(&p);
        RdmaIntTag a = OneHop(0, 0, 0);
        RdmaIntHop h2{0, 0, 0, 400e9};
        a.Push(h2);
        two.OnAck(a, 1, 10);
        RdmaIntTag b = OneHop(1000, 6250, 0);             // hop 0: 0.5
        RdmaIntHop h2b{500, 50000, 125000 * 4, 400e9};    // hop 1: qlen 0 (min) + 50000/(50*500) = 2
        b.Push(h2b);
        two.OnAck(b, 20, 30);
        NS_TEST_ASSERT_MSG_EQ_TOL(two.u, 2.0, 1e-12, "max over hops");

        // Additive stages (paper: maxStage 5) before multiplicative updates.
        HpccParams q = p;
        q.maxStage = 2;
        HpccRp st;
        st.Init(&q);
        st.wc = 60000;
        // (the test macros evaluate their arguments more than once: compute first)
        double w = st.ComputeWind(0.5, true);
        NS_TEST_ASSERT_MSG_EQ_TOL(w, 60050.0, 1e-9, "stage 0: W = Wc + W_AI");
        NS_TEST_ASSERT_MSG_EQ(st.incStage, 1u, "stage counted");
        w = st.ComputeWind(0.5, true);
        NS_TEST_ASSERT_MSG_EQ_TOL(w, 60100.0, 1e-9, "stage 1: additive");
        w = st.ComputeWind(0.5, true);
        NS_TEST_ASSERT_MSG_EQ_TOL(w, 60100.0 / (0.5 / 0.95) + 50, 1e-6, "stage 2 = maxStage: multiplicative");
        NS_TEST_ASSERT_MSG_EQ(st.incStage, 0u, "reset");
        w = st.ComputeWind(1.9, true);
        NS_TEST_ASSERT_MSG_EQ_TOL(w, 114240.0 / 2 + 50, 1e-6, "U >= eta: cut");
        st.incStage = q.maxStage;
        w = st.ComputeWind(0.1, false);
        NS_TEST_ASSERT_MSG_EQ_TOL(w, 125000.0, 1e-9, "capped at one BDP (line rate)");
        w = st.ComputeWind(1e6, false);
        NS_TEST_ASSERT_MSG_EQ_TOL(w, q.MinWindow(), 1e-9, "floor at min rate");
    }
};

class TimelyRateTestCase : public TestCase
{
  public:
    TimelyRateTestCase()
        : TestCase("TIMELY gradient, Tlow and Thigh, hyper-active increase (Algorithm 1)")
    {
    }

  private:
    void DoRun() override
    {
        TimelyParams p; // alpha 0.875, beta 0.8, Tlow 50 us, Thigh 500 us, minRTT 20 us
        p.deltaBps = 100e6;
        p.lineRateBps = 100e9;
        TimelyRp rp;
        rp.Init(&p);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 100e9, 1, "starts at line rate");
        rp.rate = 50e9;
        TimelyRp::Action a = rp.OnRtt(30000);
        NS_TEST_ASSERT_MSG_EQ(a, TimelyRp::NONE, "first sample only sets prev_rtt");
        a = rp.OnRtt(40000);
        NS_TEST_ASSERT_MSG_EQ(a, TimelyRp::LOW, "below Tlow");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 50.1e9, 1, "R + delta");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rttDiffNs, 8750.0, 1e-9, "rtt_diff = alpha x 10 us");
        // new diff 20 us: rtt_diff = 0.125 x 8750 + 0.875 x 20000 = 18593.75; g = 0.9296875
        a = rp.OnRtt(60000);
        NS_TEST_ASSERT_MSG_EQ(a, TimelyRp::DECREASE, "positive gradient");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 50.1e9 * (1 - 0.8 * 18593.75 / 20000), 1, "R (1 - beta g)");
        const double r0 = rp.rate;
        for (int i = 0; i < 4; ++i)
        {
            a = rp.OnRtt(i == 0 ? 55000 : 55000 - i);
            NS_TEST_ASSERT_MSG_EQ(a, TimelyRp::INCREASE, "non-positive gradient: additive");
        }
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, r0 + 4 * 100e6, 1, "4 x delta");
        a = rp.OnRtt(54990);
        NS_TEST_ASSERT_MSG_EQ(a, TimelyRp::HAI, "5th negative gradient in a row: HAI");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, r0 + 9 * 100e6, 1, "HAI adds 5 delta");
        a = rp.OnRtt(1000000);
        NS_TEST_ASSERT_MSG_EQ(a, TimelyRp::HIGH, "above Thigh");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, (r0 + 9 * 100e6) * (1 - 0.8 * 0.5), 1,
                                  "R (1 - beta (1 - Thigh/RTT))");
        NS_TEST_ASSERT_MSG_EQ(rp.negGradients, 0u, "HAI count reset");
        for (int i = 0; i < 2000; ++i)
        {
            rp.OnRtt(10000);
        }
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 100e9, 1, "capped at line rate");
        rp.OnRtt(400000); // inside [Tlow, Thigh] with a huge gradient: R (1 - beta g) < 0
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, p.minRateBps, 1, "floor at min rate");
    }
};

// Vendor (Mellanox) DCQCN reaction point as the HPCC simulator's dcqcn preset
// models it (shared/network-reference.md): flags on CNP, alpha per 1 us period,
// cut checks every 4 us on a grid from the first CNP (+1 ns), no target
// clamping on a cut that follows no increase event.  Expected values by hand.
class DcqcnVendorTestCase : public TestCase
{
  public:
    DcqcnVendorTestCase()
        : TestCase("DCQCN vendor reaction point step by step")
    {
    }

  private:
    void DoRun() override
    {
        DcqcnParams p = Params100G();
        p.vendor = true;
        p.clampTargetRate = false;
        p.minRateBps = 1000e6;
        const double g = p.g;
        DcqcnRp rp;
        rp.Init(&p, 0);
        NS_TEST_ASSERT_MSG_EQ(rp.NextDecreaseCheckNs(0), -1, "no CNP yet: no check");
        NS_TEST_ASSERT_MSG_EQ(rp.OnCnp(10000), false, "a CNP never cuts by itself");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 100e9, 1, "rate unchanged until the check");
        NS_TEST_ASSERT_MSG_EQ(rp.NextDecreaseCheckNs(10000), 14001, "first check 4 us + 1 ns later");
        NS_TEST_ASSERT_MSG_EQ(rp.OnDecreaseCheck(14001), true, "pending CNP: cut");
        // Alpha: 1 at the first CNP, then 4 periods (11..14 us) without a CNP.
        double alpha = std::pow(1 - g, 4);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, alpha, 1e-12, "alpha decayed 4 periods");
        double rate = 100e9 * (1 - alpha / 2);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, rate, 1, "RC (1 - alpha/2)");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, 100e9, 1, "no increase since the last cut: RT stays");
        NS_TEST_ASSERT_MSG_EQ(rp.OnDecreaseCheck(18001), false, "no CNP since: no cut");
        // A CNP at 19.5 us: the period ending 19 us (and 15..18) saw none; the one ending 20 us does.
        rp.OnCnp(19500);
        NS_TEST_ASSERT_MSG_EQ(rp.NextDecreaseCheckNs(19500), 22001, "next grid point");
        NS_TEST_ASSERT_MSG_EQ(rp.OnDecreaseCheck(22001), true, "cut");
        alpha *= std::pow(1 - g, 5);         // periods ending 15..19 us
        alpha = (1 - g) * alpha + g;         // period ending 20 us had the CNP
        alpha *= std::pow(1 - g, 2);         // 21, 22 us
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, alpha, 1e-12, "alpha +g only for the period with the CNP");
        rate *= 1 - alpha / 2;
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, rate, 1, "second cut");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, 100e9, 1, "still no increase event: RT stays");
        // Increase timer: stage 0 < F = 1 fast recovery towards RT, then a cut clamps RT.
        NS_TEST_ASSERT_MSG_EQ(rp.OnIncreaseTimer(), DcqcnRp::FAST_RECOVERY, "stage 0");
        rate = (rate + 100e9) / 2;
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, rate, 1, "RC = (RC + RT) / 2");
        rp.OnCnp(30000);
        NS_TEST_ASSERT_MSG_EQ(rp.OnDecreaseCheck(rp.NextDecreaseCheckNs(30000)), true, "cut");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, rate, 1, "after an increase event RT <- RC");
    }
};

// Save / Restore: the exchange format of RdmaNic::SaveConnectionCc and FluidNet.
// A restored reaction point must go on exactly as the saved one.
class DcqcnSaveRestoreTestCase : public TestCase
{
  public:
    DcqcnSaveRestoreTestCase()
        : TestCase("DCQCN state saved and restored goes on as the original")
    {
    }

  private:
    void DoRun() override
    {
        DcqcnParams p = Params100G();
        p.vendor = true;
        p.clampTargetRate = false;
        DcqcnRp a;
        a.Init(&p, 0);
        a.OnCnp(10000);
        a.OnDecreaseCheck(a.NextDecreaseCheckNs(10000));
        a.OnCnp(19500);
        const std::vector<double> s = a.Save(20000, 300000 - 6000, 2001);
        NS_TEST_ASSERT_MSG_EQ(s.size(), 16u, "16 values");
        NS_TEST_ASSERT_MSG_EQ_TOL(s[14], 294000, 1e-9, "increase timer left, as given");
        DcqcnRp b;
        b.Init(&p, 0);
        double inc = -1;
        double dec = -1;
        NS_TEST_ASSERT_MSG_EQ(b.Restore(s, 20000, inc, dec), true, "restored");
        NS_TEST_ASSERT_MSG_EQ_TOL(dec, 2001, 1e-9, "cut check left");
        NS_TEST_ASSERT_MSG_EQ(b.Restore(std::vector<double>(15, 0.0), 20000, inc, dec), false,
                              "a wrong size is refused");
        // both take the same events from here: the same cut, the same alpha, the same recovery
        const int64_t check = a.NextDecreaseCheckNs(20000);
        NS_TEST_ASSERT_MSG_EQ(b.NextDecreaseCheckNs(20000), check, "same grid");
        NS_TEST_ASSERT_MSG_EQ(a.OnDecreaseCheck(check), true, "original cuts");
        NS_TEST_ASSERT_MSG_EQ(b.OnDecreaseCheck(check), true, "restored cuts");
        a.OnIncreaseTimer();
        b.OnIncreaseTimer();
        NS_TEST_ASSERT_MSG_EQ_TOL(b.rate, a.rate, 1e-6, "same rate");
        NS_TEST_ASSERT_MSG_EQ_TOL(b.target, a.target, 1e-6, "same target");
        NS_TEST_ASSERT_MSG_EQ_TOL(b.AlphaAt(60000), a.AlphaAt(60000), 1e-15, "same alpha");
    }
};

// AlphaAt: the alpha a CNP would start from, read without changing the state
// (the accelerated backend's test for a settled connection), both reactions.
class DcqcnAlphaAtTestCase : public TestCase
{
  public:
    DcqcnAlphaAtTestCase()
        : TestCase("DCQCN alpha read ahead without side effects")
    {
    }

  private:
    void DoRun() override
    {
        DcqcnParams p = Params100G(); // alpha period 1 us, g = 1/256
        p.vendor = true;
        const double g = p.g;
        DcqcnRp rp;
        rp.Init(&p, 0);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.AlphaAt(1000000), 1.0, 1e-15, "no CNP yet: alpha stays 1");
        rp.OnCnp(10000); // first CNP: alpha 1, periods end at 11, 12, ... us
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.AlphaAt(10999), 1.0, 1e-15, "no period ended yet");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.AlphaAt(14000), std::pow(1 - g, 4), 1e-15, "periods ending 11..14 us");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, 1.0, 1e-15, "reading changed nothing");
        rp.OnCnp(19500); // catches up 11..19 us (9 periods), the period ending 20 us has a CNP
        const double at19 = std::pow(1 - g, 9);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, at19, 1e-15, "nine CNP-less periods applied");
        const double at22 = ((1 - g) * at19 + g) * std::pow(1 - g, 2);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.AlphaAt(22001), at22, 1e-15, "+g only in the period with the CNP");
        DcqcnRp copy = rp;
        copy.CatchUpAlpha(22001);
        NS_TEST_ASSERT_MSG_EQ_TOL(copy.alpha, rp.AlphaAt(22001), 1e-15, "as CatchUpAlpha would set it");
        // After 70 ms idle the alpha left is (1 - g)^70000 of it: a settled connection.
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.AlphaAt(70022001), at22 * std::pow(1 - g, 70000), 1e-15, "decayed");

        DcqcnParams q = p; // PAPER: decay by whole periods since the last CNP
        q.vendor = false;
        q.alphaIntervalNs = 55000;
        DcqcnRp pr;
        pr.Init(&q, 0);
        pr.OnCnp(0); // alpha 1, then (1 - g) * 1 + g = 1
        NS_TEST_ASSERT_MSG_EQ_TOL(pr.AlphaAt(54999), 1.0, 1e-15, "no whole period yet");
        NS_TEST_ASSERT_MSG_EQ_TOL(pr.AlphaAt(110000), std::pow(1 - g, 2), 1e-15, "two periods");
        NS_TEST_ASSERT_MSG_EQ_TOL(pr.alpha, 1.0, 1e-15, "reading changed nothing");
    }
};

// DCQCN as in the SIGCOMM'15 paper: cut on each CNP, alpha timer 55 us
// restarted by CNPs, F = 5, timer and byte counter (10 MB), R_AI 40 Mb/s,
// R_HAI 400 Mb/s, RT <- RC on every cut.
class DcqcnPaperTestCase : public TestCase
{
  public:
    DcqcnPaperTestCase()
        : TestCase("DCQCN paper reaction point step by step")
    {
    }

  private:
    void DoRun() override
    {
        DcqcnParams p;
        p.g = 1.0 / 256;
        p.alphaIntervalNs = 55000;
        p.rateDecreaseIntervalNs = 0;
        p.rateIncreaseIntervalNs = 55000;
        p.byteCounterBytes = 10000000;
        p.fastRecoveryStages = 5;
        p.rateAiBps = 40e6;
        p.rateHaiBps = 400e6;
        p.minRateBps = 100e6;
        p.lineRateBps = 100e9;
        p.vendor = false;
        p.clampTargetRate = true;
        const double g = p.g;
        DcqcnRp rp;
        rp.Init(&p, 0);
        NS_TEST_ASSERT_MSG_EQ(rp.OnCnp(0), true, "first CNP cuts at once");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, 50e9, 1, "alpha = 1: half");
        NS_TEST_ASSERT_MSG_EQ(rp.OnCnp(110000), true, "every CNP cuts (the NP spaces them)");
        double alpha = std::pow(1 - g, 2); // two 55 us periods without CNP
        double rate = 50e9 * (1 - alpha / 2);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, rate, 1, "RC (1 - alpha/2)");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, 50e9, 1, "RT <- RC");
        double target = 50e9;
        for (int i = 0; i < 5; ++i)
        {
            NS_TEST_ASSERT_MSG_EQ(rp.OnIncreaseTimer(), DcqcnRp::FAST_RECOVERY, "T < F");
            rate = (rate + target) / 2;
        }
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, rate, 1, "five halvings towards RT");
        NS_TEST_ASSERT_MSG_EQ(rp.OnIncreaseTimer(), DcqcnRp::ADDITIVE, "T = F, BC = 0: additive");
        target += 40e6;
        rate = (rate + target) / 2;
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, target, 1, "RT += R_AI");
        // The byte counter: a 10 MB event each; hyper only when both passed F.
        for (int i = 0; i < 6; ++i)
        {
            NS_TEST_ASSERT_MSG_EQ(rp.OnBytesSent(5000000), false, "half a byte-counter step");
            NS_TEST_ASSERT_MSG_EQ(rp.OnBytesSent(5000000), true, "10 MB: increase event");
            target += 40e6; // BC = 0..5 <= F: additive
            rate = (rate + target) / 2;
        }
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, target, 1, "six additive byte-counter events");
        rp.OnBytesSent(10000000);
        target += 400e6; // T = 6 > F and BC = 6 > F: hyper
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.target, target, 1, "RT += R_HAI");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.rate, (rate + target) / 2, 1, "RC = (RC + RT) / 2");
    }
};

// DCTCP window (RFC 8257): alpha per observation window, at most one cut per
// window of data, one MTU per window otherwise, capped at one BDP.
class DctcpWindowTestCase : public TestCase
{
  public:
    DctcpWindowTestCase()
        : TestCase("DCTCP alpha, cut once per window, additive increase")
    {
    }

  private:
    void DoRun() override
    {
        DctcpParams p;
        p.g = 1.0 / 16;
        p.mtuBytes = 4096;
        p.maxWindowBytes = 100000;
        DctcpRp rp;
        rp.Init(&p);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.window, 100000, 1e-9, "starts at one BDP");
        rp.OnAck(4096, false, 100000);
        double alpha = 15.0 / 16; // first window: nothing marked
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, alpha, 1e-12, "alpha <- (1-g) alpha");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.window, 100000, 1e-9, "capped at one BDP");
        NS_TEST_ASSERT_MSG_EQ(rp.OnAck(8192, true, 104096), true, "ECE cuts");
        double w = 100000 * (1 - alpha / 2);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.window, w, 1e-6, "W (1 - alpha/2)");
        NS_TEST_ASSERT_MSG_EQ(rp.OnAck(12288, true, 108192), false, "second ECE in the window: no cut");
        rp.OnAck(104097, false, 150000); // ends the observation window begun at 100000
        alpha = (1 - 1.0 / 16) * alpha + (1.0 / 16) * (8192.0 / 100001.0);
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, alpha, 1e-12, "alpha from the marked share");
        w += 4096.0 * (104097 - 12288) / w;
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.window, w, 1e-6, "one MTU per window");
        for (int i = 0; i < 40; ++i)
        {
            rp.OnAck(200000 + i * 4096, true, 10000000 + i * 4096);
        }
        // The first of these ACKs ends the window (all of it marked), then cuts once.
        alpha = (1 - 1.0 / 16) * alpha + 1.0 / 16;
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.alpha, alpha, 1e-12, "alpha with M = 1");
        NS_TEST_ASSERT_MSG_EQ_TOL(rp.window, w * (1 - alpha / 2), 1e-6, "still one cut per window");
    }
};

/// Drops the first @c m_times DATA packets carrying sequence @c m_seq.
class SeqDropModel : public ErrorModel
{
  public:
    uint64_t m_seq{0};
    uint32_t m_times{0};
    uint32_t m_dropped{0};

  private:
    bool DoCorrupt(Ptr<Packet> p) override
    {
        RdmaHeader h;
        p->PeekHeader(h);
        if (h.f.kind == RdmaHeader::DATA && h.f.seq == m_seq && m_dropped < m_times)
        {
            m_dropped++;
            return true;
        }
        return false;
    }

    void DoReset() override
    {
    }
};

/// Two hosts through one switch, 100 Gb/s links of 1 us, the dcqcn preset's ECN band at 100G.
Ptr<RdmaNetworkHelper>
TwoHostFabric()
{
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
    return net;
}

// Go-back-N on a lossless fabric with a lost packet whose retransmission is
// lost too: the first NACK recovers the first loss; the second needs the
// receiver's NACK repeated after NackInterval (500 us).  Without the repeat
// (and without an RTO under PFC) the message never completes.
class GoBackNTestCase : public TestCase
{
  public:
    GoBackNTestCase()
        : TestCase("go-back-N with a dropped packet and a dropped retransmission")
    {
    }

  private:
    void DoRun() override
    {
        Ptr<RdmaNetworkHelper> net = TwoHostFabric();
        Ptr<SeqDropModel> em = CreateObject<SeqDropModel>();
        em->m_seq = 10 * 4096;
        em->m_times = 2;
        net->GetNic(1)->GetDevice()->SetAttribute("ReceiveErrorModel", PointerValue(em));
        const uint64_t bytes = 100 * 4096;
        net->AddMessage(1, 0, 1, bytes, 0, 7, -1, 0);
        std::vector<std::pair<uint64_t, int64_t>> done;
        while (net->Pending() > 0 && net->Run(-1) == RdmaNetworkHelper::OK)
        {
            for (const auto& c : net->DrainCompletions())
            {
                done.push_back(c);
            }
        }
        NS_TEST_ASSERT_MSG_EQ(done.size(), 1u, "the message completes");
        NS_TEST_ASSERT_MSG_EQ(em->m_dropped, 2u, "original and first retransmission dropped");
        const RdmaCounters& c = net->GetCounters();
        NS_TEST_ASSERT_MSG_EQ(c.nacksSent, 2u, "one NACK, repeated once after the interval");
        NS_TEST_ASSERT_MSG_EQ(c.deliveredBytes, bytes, "every byte delivered once");
        NS_TEST_ASSERT_MSG_GT(c.retransmittedPackets, 90u, "go back N: everything from the gap again");
        NS_TEST_ASSERT_MSG_GT(done[0].second, 500000, "second recovery waited for the NACK interval");
        NS_TEST_ASSERT_MSG_LT(done[0].second, 1000000, "and not for the 4 ms retransmission timeout");
        NS_TEST_ASSERT_MSG_EQ(net->GetNic(1)->GetRxQpStates(), 0u, "per-message QP state freed");
        net->Dispose();
        Simulator::Destroy();
    }
};

// Issue 41's crash on a small case: a retransmission timeout (3 us) shorter than the round trip
// makes the sender go back and send a one-packet message again after the receiver completed it
// and freed the per-message QP's state.  By hand (1000 B payload + 78 B header = 1078 B, 86 ns at
// 100 Gb/s with the sub-ns carry; 64 B ACK 5 ns; 1 us links; no switch latency): the original
// reaches h1 at 86 + 1000 + 86 + 1000 = 2172 ns (completion); its ACK reaches h0 at
// 2172 + 2 x (5 + 1000) = 4182 ns; the timer armed at 0 fires at 3000 ns, before it, and sends
// the packet again; that copy reaches h1 at 3000 + 2172 = 5172 ns, after the completion.  Before
// the fix it restarted the freed receiver at sequence 0 and completed message 1 a second time.
// Expected: one completion at 2172 ns, one timeout, one retransmitted packet, one duplicate
// discarded (and re-ACKed: 2 ACKs), 1000 bytes delivered, no receiver state left.
class LateDuplicateAfterCompletionTestCase : public TestCase
{
  public:
    LateDuplicateAfterCompletionTestCase()
        : TestCase("a retransmitted copy arriving after its message completed is a duplicate")
    {
    }

  private:
    void DoRun() override
    {
        Ptr<RdmaNetworkHelper> net = TwoHostFabric();
        net->GetNic(0)->SetAttribute("RetransmitTimeout", TimeValue(NanoSeconds(3000)));
        net->AddMessage(1, 0, 1, 1000, 0, 7, -1, 0);
        std::vector<std::pair<uint64_t, int64_t>> done;
        RdmaNetworkHelper::Status st = RdmaNetworkHelper::OK;
        for (int i = 0; i < 10 && st == RdmaNetworkHelper::OK; ++i)
        {
            st = net->Run(20000); // well past every event above
            for (const auto& c : net->DrainCompletions())
            {
                done.push_back(c);
            }
        }
        NS_TEST_ASSERT_MSG_EQ(int(st), int(RdmaNetworkHelper::OK), net->StatusDetail());
        NS_TEST_ASSERT_MSG_EQ(done.size(), 1u, "message 1 completes once");
        NS_TEST_ASSERT_MSG_EQ(done.empty() ? -1 : done[0].second, 2172, "at the original's arrival");
        const RdmaCounters& c = net->GetCounters();
        NS_TEST_ASSERT_MSG_EQ(c.timeouts, 1u, "the 3 us timer fired once");
        NS_TEST_ASSERT_MSG_EQ(c.retransmittedPackets, 1u, "one copy sent again");
        NS_TEST_ASSERT_MSG_EQ(c.duplicatesDiscarded, 1u, "the copy is a duplicate at the receiver");
        NS_TEST_ASSERT_MSG_EQ(c.acksSent, 2u, "the original's ACK and the duplicate's");
        NS_TEST_ASSERT_MSG_EQ(c.deliveredBytes, 1000u, "delivered once");
        NS_TEST_ASSERT_MSG_EQ(net->Pending(), 0u, "nothing pending (no underflow)");
        NS_TEST_ASSERT_MSG_EQ(net->GetNic(1)->GetRxQpStates(), 0u, "no receiver state revived");
        net->Dispose();
        Simulator::Destroy();
    }
};

// A second completion of one message id stops the run with an internal error naming the id,
// whatever produced it (here the sink is called twice by hand).
class DoubleCompletionIsInternalErrorTestCase : public TestCase
{
  public:
    DoubleCompletionIsInternalErrorTestCase()
        : TestCase("a message completed twice is an internal error naming its id")
    {
    }

  private:
    void DoRun() override
    {
        Ptr<RdmaNetworkHelper> net = TwoHostFabric();
        net->AddMessage(42, 0, 1, 1000, 0, 7, -1, 0);
        Simulator::Schedule(NanoSeconds(100), [net]() { net->MessageDelivered(42); });
        Simulator::Schedule(NanoSeconds(200), [net]() { net->MessageDelivered(42); });
        RdmaNetworkHelper::Status st = net->Run(150);
        NS_TEST_ASSERT_MSG_EQ(int(st), int(RdmaNetworkHelper::OK), "the first completion is fine");
        net->DrainCompletions();
        st = net->Run(300);
        NS_TEST_ASSERT_MSG_EQ(int(st), int(RdmaNetworkHelper::INTERNAL_ERROR), "the second is an error");
        NS_TEST_ASSERT_MSG_EQ((net->StatusDetail().find("message 42 ") != std::string::npos), true,
                              net->StatusDetail());
        NS_TEST_ASSERT_MSG_EQ(net->Pending(), 0u, "no underflow");
        net->Dispose();
        Simulator::Destroy();
    }
};

/// Make switch @p sw receive, from the device at the far end of its port towards @p towards, a
/// PAUSE of class @p prio lasting @p ns: that egress port stops sending the class for @p ns.
void
InjectPause(Ptr<RdmaSwitchNode> sw, Ptr<RdmaNetDevice> towards, uint8_t prio, uint32_t ns)
{
    for (uint32_t i = 0; i < sw->GetNPorts(); ++i)
    {
        if (sw->GetPort(i)->GetPeer() == towards)
        {
            RdmaHeader h;
            h.f.kind = RdmaHeader::PFC;
            h.f.priority = prio;
            h.f.flags = RdmaHeader::FLAG_PAUSE;
            h.f.payload = ns;
            Ptr<Packet> p = Create<Packet>(64 - h.GetSerializedSize());
            p->AddHeader(h);
            sw->PortReceive(i, p);
            return;
        }
    }
    NS_ABORT_MSG("no switch port towards that device");
}

/// Run until nothing is pending or @p untilNs; the completions and the last status.
std::pair<std::vector<std::pair<uint64_t, int64_t>>, RdmaNetworkHelper::Status>
RunAll(Ptr<RdmaNetworkHelper> net, int64_t untilNs)
{
    std::vector<std::pair<uint64_t, int64_t>> done;
    RdmaNetworkHelper::Status st = RdmaNetworkHelper::OK;
    while (st == RdmaNetworkHelper::OK && Simulator::Now().GetNanoSeconds() < untilNs)
    {
        st = net->Run(untilNs);
        for (const auto& c : net->DrainCompletions())
        {
            done.push_back(c);
        }
    }
    return {done, st};
}

// ACK/NAK in the data class (the deployed default, RdmaNic AckClass) queue at a switch behind data
// of that class and wait out a PAUSE with it; in the control class they pass.  Two hosts through one
// switch (100 Gb/s, 1 us links, no switch latency), 1000 B payload (1078 B: 86 ns; ACK 64 B: 5 ns),
// one step in flight per connection.  At 0 the switch's port towards h0 is PAUSEd for 20 us (class
// 1), h0 posts message 1 (2000 B in two 1000 B steps, connection 0) and h1 posts message 2 (1000 B)
// to h0.  Message 2's packet waits in that port from 1086 ns.  Step 1 reaches h1 at
// 86 + 1000 + 86 + 1000 = 2172 ns; h1's ACK reaches the switch at 2172 + 5 + 1000 = 3177 ns.
// - data class: it queues behind message 2's packet; at 20000 ns that goes (86 ns), then the ACK
//   (5 ns), at h0 at 20091 + 1000 = 21091 ns; step 2 leaves then and reaches h1 at 21091 + 2172 =
//   23263 ns: message 1 completes at 23263 ns.  (h0's own ACK for message 2, sent at 21086 ns,
//   crosses the switch towards h1 before step 2 arrives there and does not delay it.)
// - control class: the ACK passes the paused port at once, reaches h0 at 3177 + 5 + 1000 = 4182 ns,
//   and message 1 completes at 4182 + 2172 = 6354 ns.
// Message 2 completes at 20000 + 86 + 1000 = 21086 ns either way.
class AckPausedBehindDataTestCase : public TestCase
{
  public:
    AckPausedBehindDataTestCase()
        : TestCase("an ACK in the lossless data class waits behind paused data; in class 0 it passes")
    {
    }

  private:
    static std::map<uint64_t, int64_t> Run(const std::string& ackClass)
    {
        Ptr<RdmaNetworkHelper> net = TwoHostFabric();
        for (uint32_t i = 0; i < 2; ++i)
        {
            net->GetNic(i)->SetAttribute("Payload", UintegerValue(1000));
            net->GetNic(i)->SetAttribute("MaxOutstandingSteps", UintegerValue(1));
            net->GetNic(i)->SetAttribute("AckClass", StringValue(ackClass));
        }
        Ptr<RdmaSwitchNode> sw = net->GetSwitch(0);
        Ptr<RdmaNetDevice> h0 = net->GetNic(0)->GetDevice();
        Simulator::Schedule(Time(0), [sw, h0]() { InjectPause(sw, h0, 1, 20000); });
        net->AddMessage(1, 0, 1, 2000, 0, 7, 0, 1000);
        net->AddMessage(2, 1, 0, 1000, 0, 9, -1, 0);
        std::map<uint64_t, int64_t> fin;
        for (const auto& c : RunAll(net, 100000).first)
        {
            fin[c.first] = c.second;
        }
        net->Dispose();
        Simulator::Destroy();
        return fin;
    }

    void DoRun() override
    {
        std::map<uint64_t, int64_t> data = Run("data");
        NS_TEST_ASSERT_MSG_EQ(data.size(), 2u, "both messages complete");
        NS_TEST_ASSERT_MSG_EQ(data[2], 21086, "message 2 waits out the pause");
        NS_TEST_ASSERT_MSG_EQ(data[1], 23263, "step 2 waited for the ACK queued behind message 2");
        std::map<uint64_t, int64_t> ctrl = Run("control");
        NS_TEST_ASSERT_MSG_EQ(ctrl[2], 21086, "message 2 as before");
        NS_TEST_ASSERT_MSG_EQ(ctrl[1], 6354, "the class-0 ACK passed the paused port");
    }
};

// A PAUSE upstream of the receiver (the switch's port towards h1 held for 4.5 ms) longer than a
// 1 ms retransmission timeout, shorter than the deployed one.  One 1000 B message from h0 at 0: it
// waits in the switch from 1086 ns, leaves at 4,500,000 and reaches h1 at 4,500,000 + 86 + 1000 =
// 4,501,086 ns; the ACK is back at h0 at 4,501,086 + 2 x (5 + 1000) = 4,503,096 ns.
// - deployed timer (NCCL_IB_TIMEOUT 20: 4.29 s): no timeout, nothing sent again.
// - 1 ms timer: a real NIC cannot see the pause and times out at 1, 2, 3 and 4 ms (the fifth, at
//   5 ms, is after the ACK): 4 copies, all queued behind the original, all discarded as duplicates;
//   the message still completes once, at 4,501,086 ns.
// - 1 ms timer with RetryCount 2: timeouts at 1 and 2 ms; the third, at 3 ms, exceeds the retry
//   count and the run ends with a transport error naming the message.
class UpstreamPauseAndRetransmitTimeoutTestCase : public TestCase
{
  public:
    UpstreamPauseAndRetransmitTimeoutTestCase()
        : TestCase("a pause upstream longer than the timeout: none at the deployed timer, retries counted")
    {
    }

  private:
    struct Out
    {
        std::vector<std::pair<uint64_t, int64_t>> done;
        RdmaNetworkHelper::Status st;
        std::string detail;
        RdmaCounters c;
        int64_t now;
    };

    static Out Run(int64_t rtoNs, uint32_t retries)
    {
        Ptr<RdmaNetworkHelper> net = TwoHostFabric();
        net->GetNic(0)->SetAttribute("Payload", UintegerValue(1000));
        if (rtoNs > 0)
        {
            net->GetNic(0)->SetAttribute("RetransmitTimeout", TimeValue(NanoSeconds(rtoNs)));
        }
        net->GetNic(0)->SetAttribute("RetryCount", UintegerValue(retries));
        Ptr<RdmaSwitchNode> sw = net->GetSwitch(0);
        Ptr<RdmaNetDevice> h1 = net->GetNic(1)->GetDevice();
        Simulator::Schedule(Time(0), [sw, h1]() { InjectPause(sw, h1, 1, 4500000); });
        net->AddMessage(1, 0, 1, 1000, 0, 7, -1, 0);
        auto [done, st] = RunAll(net, 6000000);
        Out o{done, st, net->StatusDetail(), net->GetCounters(), Simulator::Now().GetNanoSeconds()};
        net->Dispose();
        Simulator::Destroy();
        return o;
    }

    void DoRun() override
    {
        Out vendor = Run(0, 7);
        NS_TEST_ASSERT_MSG_EQ(int(vendor.st), int(RdmaNetworkHelper::OK), vendor.detail);
        NS_TEST_ASSERT_MSG_EQ(vendor.done.size(), 1u, "completes");
        NS_TEST_ASSERT_MSG_EQ(vendor.done[0].second, 4501086, "when the pause lets it through");
        NS_TEST_ASSERT_MSG_EQ(vendor.c.timeouts, 0u, "no timeout at 4.29 s");
        NS_TEST_ASSERT_MSG_EQ(vendor.c.retransmittedPackets, 0u, "nothing sent again");

        Out shortRto = Run(1000000, 7);
        NS_TEST_ASSERT_MSG_EQ(int(shortRto.st), int(RdmaNetworkHelper::OK), shortRto.detail);
        NS_TEST_ASSERT_MSG_EQ(shortRto.done.size(), 1u, "completes once");
        NS_TEST_ASSERT_MSG_EQ(shortRto.done[0].second, 4501086, "at the original's arrival");
        NS_TEST_ASSERT_MSG_EQ(shortRto.c.timeouts, 4u, "1, 2, 3 and 4 ms");
        NS_TEST_ASSERT_MSG_EQ(shortRto.c.retransmittedPackets, 4u, "four copies");
        NS_TEST_ASSERT_MSG_EQ(shortRto.c.duplicatesDiscarded, 4u, "all duplicates at h1");
        NS_TEST_ASSERT_MSG_EQ(shortRto.c.deliveredBytes, 1000u, "delivered once");

        Out failed = Run(1000000, 2);
        NS_TEST_ASSERT_MSG_EQ(int(failed.st), int(RdmaNetworkHelper::TRANSPORT_ERROR), failed.detail);
        NS_TEST_ASSERT_MSG_EQ(failed.now, 3000000, "the third timeout ends the run");
        NS_TEST_ASSERT_MSG_EQ(failed.c.timeouts, 2u, "two retries were made");
        NS_TEST_ASSERT_MSG_EQ((failed.detail.find("h0 -> h1 message 1 ") != std::string::npos), true,
                              failed.detail);
    }
};

// The adders Python fills a FabricSpec with give the same arrays as filling the vectors
// directly (the two-host, one-switch fabric of GoBackNTestCase), and node indices with the
// switches after every host.
class FabricSpecAddersTestCase : public TestCase
{
  public:
    FabricSpecAddersTestCase()
        : TestCase("FabricSpec adders fill the same arrays as direct assignment")
    {
    }

  private:
    void DoRun() override
    {
        FabricSpec f;
        NS_TEST_ASSERT_MSG_EQ(f.AddHost("h0"), 0u, "first host is node 0");
        NS_TEST_ASSERT_MSG_EQ(f.AddHost("h1"), 1u, "second host is node 1");
        NS_TEST_ASSERT_MSG_EQ(f.AddSwitch("s0", 32000000, 77), 2u, "the switch follows the hosts");
        f.AddLink(0, 2, 100e9, 1000, 400e3, 1600e3, 0.2, 200000);
        f.AddLink(2, 1, 25e9, 1500, 100e3, 400e3, 0.1, 50000);
        NS_TEST_ASSERT_MSG_EQ((f.hosts == std::vector<std::string>{"h0", "h1"}), true, "hosts");
        NS_TEST_ASSERT_MSG_EQ((f.switches == std::vector<std::string>{"s0"}), true, "switches");
        NS_TEST_ASSERT_MSG_EQ((f.switchBufferBytes == std::vector<uint64_t>{32000000}), true, "buffer");
        NS_TEST_ASSERT_MSG_EQ((f.switchSalt == std::vector<uint32_t>{77}), true, "salt");
        NS_TEST_ASSERT_MSG_EQ((f.linkA == std::vector<uint32_t>{0, 2}), true, "linkA");
        NS_TEST_ASSERT_MSG_EQ((f.linkB == std::vector<uint32_t>{2, 1}), true, "linkB");
        NS_TEST_ASSERT_MSG_EQ((f.rateBps == std::vector<double>{100e9, 25e9}), true, "rates");
        NS_TEST_ASSERT_MSG_EQ((f.delayNs == std::vector<int64_t>{1000, 1500}), true, "delays");
        NS_TEST_ASSERT_MSG_EQ((f.kminBytes == std::vector<double>{400e3, 100e3}), true, "Kmin");
        NS_TEST_ASSERT_MSG_EQ((f.kmaxBytes == std::vector<double>{1600e3, 400e3}), true, "Kmax");
        NS_TEST_ASSERT_MSG_EQ((f.pmax == std::vector<double>{0.2, 0.1}), true, "Pmax");
        NS_TEST_ASSERT_MSG_EQ((f.headroomBytes == std::vector<uint64_t>{200000, 50000}), true, "headroom");
    }
};

// FluidNet islands: flows that share no port or NIC are stepped apart, on one thread or two, with
// the same results; a flow's results do not depend on traffic it shares nothing with.
class FluidNetIslandsTestCase : public TestCase
{
  public:
    FluidNetIslandsTestCase()
        : TestCase("FluidNet islands: the same results on one thread or two, and alone")
    {
    }

  private:
    struct Outcome
    {
        std::vector<std::pair<int64_t, double>> done; //!< (message id, finish ns), by id
        std::vector<double> marks;
        std::vector<double> switchMax;
        std::vector<double> samples;
        uint64_t cnps{0};
        uint64_t cuts{0};
        double parallelSteps{0};
    };

    // @p islands incasts of 10 NICs into one 400 G port each (every port on switch 0), 1 MB from
    // each NIC 1 us apart, ECN on: enough flows and ports (33) that two threads split the islands.
    static Outcome Run(uint32_t islands, uint32_t threads)
    {
        DcqcnParams p = Params100G();
        p.lineRateBps = 400e9;
        p.rateAiBps = 80e6;
        p.rateHaiBps = 800e6;
        FluidNet net(250, 7);
        net.SetThreads(threads);
        net.SetQueueSampling(1000, 100000);
        int64_t id = 0;
        for (uint32_t k = 0; k < islands; k++)
        {
            const uint32_t port = net.AddPort(400e9, 20e3, 200e3, 0.2);
            net.SetPortSwitch(port, 0);
            for (int j = 0; j < 10; j++)
            {
                const uint32_t nic = net.AddNic(400e9);
                const uint32_t f =
                    net.AddFlow(nic, {-1.0, 400e9, 500.0, static_cast<double>(port), 400e9, 1000.0}, 4160.0, 3000.0, p, 0, 0);
                net.Post(f, id++, 1000 * j, 1e6);
            }
        }
        Outcome o;
        for (int guard = 0; guard < 100000; guard++)
        {
            net.Run(-1);
            const std::vector<double> d = net.DrainCompletions();
            if (d.empty())
            {
                break;
            }
            for (size_t j = 0; j + 1 < d.size(); j += 2)
            {
                o.done.emplace_back(static_cast<int64_t>(d[j]), d[j + 1]);
            }
        }
        std::sort(o.done.begin(), o.done.end());
        o.marks = net.PortMarks();
        o.switchMax = net.SwitchMaxQueue();
        std::vector<uint32_t> all;
        for (uint32_t k = 0; k < islands; k++)
        {
            all.push_back(k);
        }
        o.samples = net.QueueSamples(all);
        o.cnps = net.Cnps();
        o.cuts = net.Cuts();
        o.parallelSteps = net.Work()[2];
        return o;
    }

    void DoRun() override
    {
        const Outcome one = Run(3, 1);
        const Outcome two = Run(3, 2);
        NS_TEST_ASSERT_MSG_EQ(one.done.size(), 30u, "every message delivered");
        NS_TEST_ASSERT_MSG_EQ(one.parallelSteps, 0.0, "one thread: no step split");
        NS_TEST_ASSERT_MSG_GT(two.parallelSteps, 100.0, "two threads: the islands' steps split");
        NS_TEST_ASSERT_MSG_GT(one.cnps, 30u, "the incasts marked and cut");
        NS_TEST_ASSERT_MSG_EQ((one.done == two.done), true, "finish times, one thread or two");
        NS_TEST_ASSERT_MSG_EQ((one.marks == two.marks), true, "marks per port");
        NS_TEST_ASSERT_MSG_EQ((one.switchMax == two.switchMax), true, "the switch's most bytes at once");
        NS_TEST_ASSERT_MSG_EQ((one.samples == two.samples), true, "queue samples");
        NS_TEST_ASSERT_MSG_EQ(one.cnps, two.cnps, "CNPs");
        NS_TEST_ASSERT_MSG_EQ(one.cuts, two.cuts, "cuts");
        // the first island alone: its messages finish as beside the others (its flows draw from
        // their own streams), and the switch held less at once
        const Outcome alone = Run(1, 1);
        NS_TEST_ASSERT_MSG_EQ(alone.done.size(), 10u, "the island's messages");
        for (size_t j = 0; j < alone.done.size(); j++)
        {
            NS_TEST_ASSERT_MSG_EQ(alone.done[j].first, one.done[j].first, "message id");
            NS_TEST_ASSERT_MSG_EQ(alone.done[j].second, one.done[j].second, "finish ns, alone or beside others");
        }
        NS_TEST_ASSERT_MSG_EQ(alone.marks[0], one.marks[0], "its port's marks");
        NS_TEST_ASSERT_MSG_GT(one.switchMax[0], alone.switchMax[0] * 2, "three incasts' bytes on one switch");
    }
};

// Pacing follows a rate change at once: a QP restored at DCQCN's 1 Gbit/s floor (one 4,174-byte
// packet per 33.4 us) whose increase timer raises it 10 us later to (RC + RT) / 2 = 50.5 Gbit/s
// (fast recovery, F = 1) sends its next packet then, the new gap after its last one being past,
// not 33.4 us after the last (the old gap).  Expected times by hand from the wire size and rates.
class PacingFollowsRateTestCase : public TestCase
{
  public:
    PacingFollowsRateTestCase()
        : TestCase("pacing: a rate raised by the increase timer applies to the next packet")
    {
    }

  private:
    void DoRun() override
    {
        Ptr<RdmaNetworkHelper> net = TwoHostFabric();
        const uint64_t pkt = 4096; // Payload; 78 header bytes make 4,174 on the wire
        const double wire = 4174.0 * 8; // bits
        auto runOne = [&]() {
            int64_t fin = -1;
            while (fin < 0 && net->Pending() > 0 && net->Run(-1) == RdmaNetworkHelper::OK)
            {
                for (const auto& c : net->DrainCompletions())
                {
                    fin = c.second;
                }
            }
            return fin;
        };
        // one packet at line rate: the path's latency for a lone packet
        net->AddMessage(1, 0, 1, pkt, 0, 7, 3, 0);
        const int64_t t1 = runOne();
        const int64_t lone = t1; // sent at 0 on an idle path
        // the connection's QP at 1 Gbit/s, target line rate, its increase timer due in 10 us
        const std::vector<double> state = {1e9, 100e9, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10000, -1};
        NS_TEST_ASSERT_MSG_EQ(net->GetNic(0)->RestoreConnectionCc(1, 3, state), true, "state restored");
        net->AddMessage(2, 0, 1, 3 * pkt, t1, 7, 3, 0);
        const int64_t t2 = runOne();
        // At the restore the gap after message 1's packet (sent at 0) becomes 1 Gbit/s's, 33.4 us:
        // message 2 waits.  At t1 + 10 us the rate is 50.5 Gbit/s, whose gap from 0 is long past, so
        // its first packet goes then and the other two follow back to back (each credited at most
        // one gap of waiting, and the line is the slower): the last leaves 2 x 333.92 ns later.
        const double firstNs = static_cast<double>(t1) + 10000;
        const double expect = firstNs + 2 * wire / 100.0 + static_cast<double>(lone);
        NS_TEST_ASSERT_MSG_EQ_TOL(static_cast<double>(t2), expect, 3.0, "delivered as re-paced");
        // (with the old gap kept the first packet would go at t1 and the second 33.4 us later)
        NS_TEST_ASSERT_MSG_LT(static_cast<double>(t2), static_cast<double>(t1) + wire / 1.0 - 1000,
                              "not held to the 1 Gbit/s gap");
        net->Dispose();
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
        AddTestCase(new DcqcnVendorTestCase, Duration::QUICK);
        AddTestCase(new DcqcnPaperTestCase, Duration::QUICK);
        AddTestCase(new DcqcnAlphaAtTestCase, Duration::QUICK);
        AddTestCase(new DcqcnSaveRestoreTestCase, Duration::QUICK);
        AddTestCase(new DctcpWindowTestCase, Duration::QUICK);
        AddTestCase(new GoBackNTestCase, Duration::QUICK);
        AddTestCase(new LateDuplicateAfterCompletionTestCase, Duration::QUICK);
        AddTestCase(new DoubleCompletionIsInternalErrorTestCase, Duration::QUICK);
        AddTestCase(new AckPausedBehindDataTestCase, Duration::QUICK);
        AddTestCase(new UpstreamPauseAndRetransmitTimeoutTestCase, Duration::QUICK);
        AddTestCase(new PacingFollowsRateTestCase, Duration::QUICK);
        AddTestCase(new FabricSpecAddersTestCase, Duration::QUICK);
        AddTestCase(new HpccWindowTestCase, Duration::QUICK);
        AddTestCase(new TimelyRateTestCase, Duration::QUICK);
        AddTestCase(new EcnProbabilityTestCase, Duration::QUICK);
        AddTestCase(new FluidNetIslandsTestCase, Duration::QUICK);
        AddTestCase(new DeviceDataRateTestCase, Duration::QUICK);
        AddTestCase(new SwitchThresholdAndEcmpTestCase, Duration::QUICK);
    }
};

HeterosimRdmaTestSuite g_heterosimRdmaTestSuite;

} // namespace
