#include "rdma-cc-dcqcn.h"

#include "ns3/boolean.h"
#include "ns3/double.h"
#include "ns3/log.h"
#include "ns3/simulator.h"
#include "ns3/uinteger.h"

#include <algorithm>
#include <cmath>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaCcDcqcn");
NS_OBJECT_ENSURE_REGISTERED(RdmaCcDcqcn);
NS_OBJECT_ENSURE_REGISTERED(RdmaCcDcqcnPaper);
RDMA_CC_REGISTER("dcqcn", RdmaCcDcqcn);
RDMA_CC_REGISTER("dcqcn_paper", RdmaCcDcqcnPaper);

TypeId
RdmaCcDcqcn::GetTypeId()
{
    // The defaults are one preset, the vendor reaction point as the HPCC simulator models it
    // (netbackend/config.py DCQCN_PRESETS "dcqcn", from shared/network-reference.md).
    static TypeId tid =
        TypeId("ns3::RdmaCcDcqcn")
            .SetParent<RdmaCongestionOps>()
            .SetGroupName("HeterosimRdma")
            .AddConstructor<RdmaCcDcqcn>()
            .AddAttribute("G",
                          "Alpha EWMA gain g.",
                          DoubleValue(1.0 / 256),
                          MakeDoubleAccessor(&RdmaCcDcqcn::m_g),
                          MakeDoubleChecker<double>(0, 1))
            .AddAttribute("AlphaInterval",
                          "Alpha decays once per interval without CNP.",
                          TimeValue(MicroSeconds(1)),
                          MakeTimeAccessor(&RdmaCcDcqcn::m_alphaInterval),
                          MakeTimeChecker())
            .AddAttribute("RateDecreaseInterval",
                          "At most one rate cut per interval.",
                          TimeValue(MicroSeconds(4)),
                          MakeTimeAccessor(&RdmaCcDcqcn::m_rateDecreaseInterval),
                          MakeTimeChecker())
            .AddAttribute("RateIncreaseInterval",
                          "Rate-increase timer period.",
                          TimeValue(MicroSeconds(300)),
                          MakeTimeAccessor(&RdmaCcDcqcn::m_rateIncreaseInterval),
                          MakeTimeChecker())
            .AddAttribute("ByteCounter",
                          "Rate-increase byte counter; 0 = off.",
                          UintegerValue(0),
                          MakeUintegerAccessor(&RdmaCcDcqcn::m_byteCounter),
                          MakeUintegerChecker<uint64_t>())
            .AddAttribute("FastRecoveryStages",
                          "F: fast-recovery stages before additive increase.",
                          UintegerValue(1),
                          MakeUintegerAccessor(&RdmaCcDcqcn::m_fastRecovery),
                          MakeUintegerChecker<uint32_t>())
            .AddAttribute("RateAi",
                          "Additive increase step R_AI; 0 = line rate x 5/25000 (20 Mb/s at 100G).",
                          DataRateValue(DataRate("0bps")),
                          MakeDataRateAccessor(&RdmaCcDcqcn::m_rateAi),
                          MakeDataRateChecker())
            .AddAttribute("RateHai",
                          "Hyper-additive increase step R_HAI; 0 = line rate x 50/25000.",
                          DataRateValue(DataRate("0bps")),
                          MakeDataRateAccessor(&RdmaCcDcqcn::m_rateHai),
                          MakeDataRateChecker())
            .AddAttribute("MinRate",
                          "Floor of the current rate.",
                          DataRateValue(DataRate("1000Mbps")),
                          MakeDataRateAccessor(&RdmaCcDcqcn::m_minRate),
                          MakeDataRateChecker())
            .AddAttribute("ClampTargetRate",
                          "RT <- RC on every cut; false: only on cuts after an increase event.",
                          BooleanValue(false),
                          MakeBooleanAccessor(&RdmaCcDcqcn::m_clamp),
                          MakeBooleanChecker())
            .AddAttribute("MinDecreaseFactor",
                          "A cut keeps at least this fraction of the current rate: RC <- RC max(1 - alpha/2, f) "
                          "(NVIDIA rpg_min_dec_fac / 100, ConnectX default 0.5); 0 = no floor (the HPCC "
                          "simulator's model).",
                          DoubleValue(0.0),
                          MakeDoubleAccessor(&RdmaCcDcqcn::m_minDecreaseFactor),
                          MakeDoubleChecker<double>(0, 1));
    return tid;
}

TypeId
RdmaCcDcqcnPaper::GetTypeId()
{
    static TypeId tid = TypeId("ns3::RdmaCcDcqcnPaper")
                            .SetParent<RdmaCcDcqcn>()
                            .SetGroupName("HeterosimRdma")
                            .AddConstructor<RdmaCcDcqcnPaper>();
    return tid;
}

void
RdmaCcDcqcn::Configure(const RdmaCcLink& link, RdmaCcOwner* owner)
{
    RdmaCongestionOps::Configure(link, owner);
    m_p.g = m_g;
    m_p.alphaIntervalNs = std::max<int64_t>(1, m_alphaInterval.GetNanoSeconds());
    m_p.rateDecreaseIntervalNs = m_rateDecreaseInterval.GetNanoSeconds();
    m_p.rateIncreaseIntervalNs = std::max<int64_t>(1, m_rateIncreaseInterval.GetNanoSeconds());
    m_p.byteCounterBytes = m_byteCounter;
    m_p.fastRecoveryStages = m_fastRecovery;
    m_p.lineRateBps = link.lineRateBps;
    // 0 = scale with the line rate as the HPCC simulator's preset does:
    // R_AI = 5 Mb/s and R_HAI = 50 Mb/s per 25 Gb/s (shared/network-reference.md).
    m_p.rateAiBps = m_rateAi.GetBitRate() > 0 ? static_cast<double>(m_rateAi.GetBitRate())
                                              : m_p.lineRateBps * 5.0 / 25000.0;
    m_p.rateHaiBps = m_rateHai.GetBitRate() > 0 ? static_cast<double>(m_rateHai.GetBitRate())
                                                : m_p.lineRateBps * 50.0 / 25000.0;
    m_p.minRateBps = static_cast<double>(m_minRate.GetBitRate());
    m_p.vendor = Vendor();
    m_p.clampTargetRate = m_clamp;
    m_p.minDecreaseFactor = m_minDecreaseFactor;
}

std::unique_ptr<RdmaCcState>
RdmaCcDcqcn::NewState(uint32_t qp, uint32_t, int64_t nowNs)
{
    auto s = std::make_unique<State>();
    s->qp = qp;
    s->rp.Init(&m_p, nowNs);
    return s;
}

void
RdmaCcDcqcn::Release(RdmaCcState& s)
{
    auto& st = static_cast<State&>(s);
    st.incTimer.Cancel();
    st.decTimer.Cancel();
}

double
RdmaCcDcqcn::Rate(const RdmaCcState& s) const
{
    return static_cast<const State&>(s).rp.rate;
}

uint32_t
RdmaCcDcqcn::OnSent(RdmaCcState& s, uint32_t wireBytes)
{
    return static_cast<State&>(s).rp.OnBytesSent(wireBytes) ? (RATE | REPACE) : NONE;
}

void
RdmaCcDcqcn::ArmIncrease(State& st)
{
    st.incTimer.Cancel();
    st.incTimer = Simulator::Schedule(m_rateIncreaseInterval, &RdmaCcDcqcn::IncreaseTimer, this, &st);
}

uint32_t
RdmaCcDcqcn::OnCnp(RdmaCcState& s)
{
    auto& st = static_cast<State&>(s);
    if (st.rp.OnCnp(Simulator::Now().GetNanoSeconds()))
    {
        ArmIncrease(st);
        return CUT | RATE | REPACE;
    }
    if (m_p.vendor)
    {
        ScheduleDecreaseCheck(st);
    }
    return NONE;
}

void
RdmaCcDcqcn::ScheduleDecreaseCheck(State& st)
{
    // Checks without a pending CNP change nothing, so only the next grid point
    // after a CNP is scheduled (equivalent to the vendor's endless 4 us timer).
    if (st.decTimer.IsPending())
    {
        return;
    }
    const int64_t now = Simulator::Now().GetNanoSeconds();
    const int64_t at = st.rp.NextDecreaseCheckNs(now);
    if (at >= 0)
    {
        st.decTimer = Simulator::Schedule(NanoSeconds(at - now), &RdmaCcDcqcn::DecreaseCheck, this, &st);
    }
}

void
RdmaCcDcqcn::DecreaseCheck(State* st)
{
    if (st->rp.OnDecreaseCheck(Simulator::Now().GetNanoSeconds()))
    {
        m_owner->CcChanged(st->qp, CUT | RATE | REPACE | KICK);
        ArmIncrease(*st);
    }
}

void
RdmaCcDcqcn::IncreaseTimer(State* st)
{
    st->rp.OnIncreaseTimer();
    m_owner->CcChanged(st->qp, RATE | REPACE | KICK);
    if (st->rp.NeedsIncrease())
    {
        st->incTimer = Simulator::Schedule(m_rateIncreaseInterval, &RdmaCcDcqcn::IncreaseTimer, this, st);
    }
}

bool
RdmaCcDcqcn::ChangePending(const RdmaCcState& s) const
{
    return static_cast<const State&>(s).decTimer.IsPending();
}

double
RdmaCcDcqcn::RateFraction(const RdmaCcState& s) const
{
    const auto& rp = static_cast<const State&>(s).rp;
    return std::min(rp.rate, rp.target) / m_p.lineRateBps;
}

std::vector<double>
RdmaCcDcqcn::ClosedFormHeader() const
{
    return {m_p.lineRateBps,
            m_p.rateAiBps,
            m_p.rateHaiBps,
            static_cast<double>(m_p.fastRecoveryStages),
            static_cast<double>(m_p.rateIncreaseIntervalNs),
            static_cast<double>(m_p.byteCounterBytes)};
}

std::vector<double>
RdmaCcDcqcn::ClosedFormQp(const RdmaCcState& s) const
{
    const auto& st = static_cast<const State&>(s);
    const int64_t next = st.incTimer.IsPending()
                             ? (Simulator::Now() + Simulator::GetDelayLeft(st.incTimer)).GetNanoSeconds()
                             : -1;
    return {st.rp.rate,
            st.rp.target,
            static_cast<double>(st.rp.timerStage),
            static_cast<double>(st.rp.byteStage),
            static_cast<double>(next),
            st.rp.cnpSeen ? 1.0 : 0.0,
            st.rp.AlphaAt(Simulator::Now().GetNanoSeconds())};
}

std::vector<double>
RdmaCcDcqcn::Save(const RdmaCcState& s) const
{
    const auto& st = static_cast<const State&>(s);
    auto left = [](const EventId& e) {
        return e.IsPending() ? static_cast<double>(Simulator::GetDelayLeft(e).GetNanoSeconds()) : -1.0;
    };
    return st.rp.Save(Simulator::Now().GetNanoSeconds(), left(st.incTimer), left(st.decTimer));
}

bool
RdmaCcDcqcn::Restore(RdmaCcState& s, const std::vector<double>& v)
{
    if (v.size() != 16)
    {
        return false;
    }
    auto& st = static_cast<State&>(s);
    double incLeft = -1;
    double decLeft = -1;
    st.rp.Restore(v, Simulator::Now().GetNanoSeconds(), incLeft, decLeft);
    st.incTimer.Cancel();
    if (incLeft >= 0)
    {
        st.incTimer = Simulator::Schedule(NanoSeconds(std::llround(incLeft)), &RdmaCcDcqcn::IncreaseTimer,
                                          this, &st);
    }
    st.decTimer.Cancel();
    if (decLeft >= 0)
    {
        st.decTimer = Simulator::Schedule(NanoSeconds(std::llround(decLeft)), &RdmaCcDcqcn::DecreaseCheck,
                                          this, &st);
    }
    return true;
}

} // namespace ns3
