#include "rdma-cc-ops.h"

#include "ns3/boolean.h"
#include "ns3/log.h"
#include "ns3/trace-source-accessor.h"

#include <algorithm>
#include <limits>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaCongestionOps");
NS_OBJECT_ENSURE_REGISTERED(RdmaCongestionOps);
NS_OBJECT_ENSURE_REGISTERED(RdmaCcNone);
RDMA_CC_REGISTER("none", RdmaCcNone);

TypeId
RdmaCongestionOps::GetTypeId()
{
    static TypeId tid =
        TypeId("ns3::RdmaCongestionOps")
            .SetParent<Object>()
            .SetGroupName("HeterosimRdma")
            // T of every CC that needs the fabric's RTT (HPCC's T, DCTCP's ceiling, the BDP window,
            // Swift's base target).  It was the NIC's HpccBaseRtt, and applied to every CC then too.
            .AddAttribute("BaseRtt",
                          "T; 0 = the largest unloaded RTT from this host to any host (computed from the fabric).",
                          TimeValue(Time(0)),
                          MakeTimeAccessor(&RdmaCongestionOps::m_baseRttAttr),
                          MakeTimeChecker())
            // The HPCC simulator's window option for rate-based CCs (was the NIC's CcWindow).
            .AddAttribute("BdpWindow",
                          "Rate-based CCs (DCQCN, TIMELY): also cap bytes in flight per QP at one BDP "
                          "(line rate x base RTT), the HPCC simulator's window option; window-based "
                          "CCs ignore it.",
                          BooleanValue(false),
                          MakeBooleanAccessor(&RdmaCongestionOps::m_bdpWindow),
                          MakeBooleanChecker())
            .AddTraceSource("RateChange",
                            "A QP's pacing rate after its CC changed (QP id, bit/s).",
                            MakeTraceSourceAccessor(&RdmaCongestionOps::m_rateTrace),
                            "ns3::RdmaCongestionOps::QpValueCallback")
            .AddTraceSource("WindowChange",
                            "A QP's window after its CC changed (QP id, bytes; window CCs only).",
                            MakeTraceSourceAccessor(&RdmaCongestionOps::m_windowTrace),
                            "ns3::RdmaCongestionOps::QpValueCallback");
    return tid;
}

RdmaCongestionOps::RdmaCongestionOps() = default;
RdmaCongestionOps::~RdmaCongestionOps() = default;

void
RdmaCongestionOps::Configure(const RdmaCcLink& link, RdmaCcOwner* owner)
{
    m_link = link;
    m_owner = owner;
    SetAutoBaseRtt(0);
}

void
RdmaCongestionOps::SetAutoBaseRtt(int64_t ns)
{
    // An explicit attribute wins; otherwise the helper's value; otherwise a
    // placeholder of 10 us until the helper has computed the fabric's RTT.
    int64_t t = m_baseRttAttr.GetNanoSeconds();
    if (t <= 0)
    {
        t = ns > 0 ? ns : 10000;
    }
    m_baseRttNs = static_cast<double>(t);
    // One BDP at line rate over the same T: the BDP window and DCTCP's ceiling.
    m_bdpBytes = m_link.lineRateBps * m_baseRttNs / 8e9;
    BaseRttChanged();
}

void
RdmaCongestionOps::SetPathHops(const std::vector<uint16_t>&)
{
}

void
RdmaCongestionOps::Release(RdmaCcState&)
{
}

double
RdmaCongestionOps::Rate(const RdmaCcState&) const
{
    return m_link.lineRateBps;
}

double
RdmaCongestionOps::Window(const RdmaCcState&) const
{
    // HPCC simulator convention: send while bytes in flight are below W.
    return m_bdpWindow ? std::max(m_bdpBytes, static_cast<double>(m_link.payloadBytes))
                       : std::numeric_limits<double>::infinity();
}

uint32_t
RdmaCongestionOps::OnSent(RdmaCcState&, uint32_t)
{
    return NONE;
}

uint32_t
RdmaCongestionOps::OnAck(RdmaCcState&, const RdmaCcAck&)
{
    return NONE;
}

uint32_t
RdmaCongestionOps::OnCnp(RdmaCcState&)
{
    return NONE;
}

uint32_t
RdmaCongestionOps::OnGoBack(RdmaCcState&, bool)
{
    return NONE;
}

bool
RdmaCongestionOps::ChangePending(const RdmaCcState&) const
{
    return false;
}

double
RdmaCongestionOps::RateFraction(const RdmaCcState& s) const
{
    return Rate(s) / m_link.lineRateBps;
}

std::vector<double>
RdmaCongestionOps::ClosedFormHeader() const
{
    return {};
}

std::vector<double>
RdmaCongestionOps::ClosedFormQp(const RdmaCcState&) const
{
    return {};
}

std::vector<double>
RdmaCongestionOps::Save(const RdmaCcState&) const
{
    return {};
}

bool
RdmaCongestionOps::Restore(RdmaCcState&, const std::vector<double>&)
{
    return false;
}

void
RdmaCongestionOps::NotifyChange(const RdmaCcState& s) const
{
    if (!m_rateTrace.IsEmpty())
    {
        m_rateTrace(s.qp, Rate(s));
    }
    if (!m_windowTrace.IsEmpty())
    {
        const double w = Window(s);
        if (w < std::numeric_limits<double>::infinity())
        {
            m_windowTrace(s.qp, w);
        }
    }
}

std::map<std::string, TypeId>&
RdmaCongestionOps::Registry()
{
    static std::map<std::string, TypeId> names; // filled at load time, before any lookup
    return names;
}

bool
RdmaCongestionOps::Lookup(const std::string& name, TypeId& tid)
{
    const auto& reg = Registry();
    const auto it = reg.find(name);
    if (it != reg.end())
    {
        tid = it->second;
        return true;
    }
    TypeId found;
    if (TypeId::LookupByNameFailSafe(name, &found) && found.IsChildOf(RdmaCongestionOps::GetTypeId()))
    {
        tid = found;
        return true;
    }
    return false;
}

std::string
RdmaCongestionOps::Names()
{
    std::string out;
    for (const auto& [name, tid] : Registry())
    {
        out += (out.empty() ? "" : ", ") + name;
    }
    return out;
}

// ------------------------------------------------------------------ none

TypeId
RdmaCcNone::GetTypeId()
{
    static TypeId tid = TypeId("ns3::RdmaCcNone")
                            .SetParent<RdmaCongestionOps>()
                            .SetGroupName("HeterosimRdma")
                            .AddConstructor<RdmaCcNone>();
    return tid;
}

std::unique_ptr<RdmaCcState>
RdmaCcNone::NewState(uint32_t qp, uint32_t, int64_t)
{
    auto s = std::make_unique<RdmaCcState>();
    s->qp = qp;
    return s;
}

double
RdmaCcNone::Window(const RdmaCcState&) const
{
    return std::numeric_limits<double>::infinity(); // line rate, no window (BdpWindow ignored)
}

} // namespace ns3
