#include "rdma-cc-swift.h"

#include "ns3/double.h"
#include "ns3/log.h"
#include "ns3/simulator.h"
#include "ns3/trace-source-accessor.h"
#include "ns3/uinteger.h"

#include <algorithm>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaCcSwift");
NS_OBJECT_ENSURE_REGISTERED(RdmaCcSwift);
RDMA_CC_REGISTER("swift", RdmaCcSwift);

TypeId
RdmaCcSwift::GetTypeId()
{
    // Kumar et al., SIGCOMM 2020.  The formulas are the paper's (Algorithm 1; section 3.5 for the
    // target).  Numbers: min_cwnd 0.001 packets is the paper's (section 3.3); the paper publishes
    // no values for the others, each chosen here with its reason (docs/congestion-control.md,
    // "Swift", lists them).
    static TypeId tid =
        TypeId("ns3::RdmaCcSwift")
            .SetParent<RdmaCongestionOps>()
            .SetGroupName("HeterosimRdma")
            .AddConstructor<RdmaCcSwift>()
            // 1 packet per RTT: TCP's congestion-avoidance increase (RFC 5681), the AIMD Swift
            // evolved from.
            .AddAttribute("Ai",
                          "ai: additive increase, packets per RTT.",
                          DoubleValue(1.0),
                          MakeDoubleAccessor(&RdmaCcSwift::m_ai),
                          MakeDoubleChecker<double>(0))
            // 0.8: TIMELY's beta (Mittal et al., SIGCOMM 2015), Swift's predecessor at Google.
            .AddAttribute("Beta",
                          "beta: multiplicative decrease constant, cwnd *= 1 - beta (delay - target) / delay.",
                          DoubleValue(0.8),
                          MakeDoubleAccessor(&RdmaCcSwift::m_beta),
                          MakeDoubleChecker<double>(0, 1))
            // 0.5: at most halve per RTT, TCP's loss response (RFC 5681).
            .AddAttribute("MaxMdf",
                          "max_mdf: the largest decrease per RTT (and per go-back).",
                          DoubleValue(0.5),
                          MakeDoubleAccessor(&RdmaCcSwift::m_maxMdf),
                          MakeDoubleChecker<double>(0, 1))
            .AddAttribute("MinCwnd",
                          "min_cwnd, packets (paper section 3.3: 0.001).",
                          DoubleValue(0.001),
                          MakeDoubleAccessor(&RdmaCcSwift::m_minCwnd),
                          MakeDoubleChecker<double>(1e-6))
            // One BDP: a lone flow then runs at line rate without queueing, as DCTCP's ceiling here.
            .AddAttribute("MaxCwnd",
                          "max_cwnd, packets; 0 = one BDP (line rate x base RTT).  A QP starts there "
                          "(line rate, as every QP here does).",
                          DoubleValue(0),
                          MakeDoubleAccessor(&RdmaCcSwift::m_maxCwndAttr),
                          MakeDoubleChecker<double>(0))
            // 0: the unloaded RTT the delay is measured against (the helper's, as HPCC's T), so the
            // rest of the target is queueing.
            .AddAttribute("BaseTarget",
                          "base_target; 0 = the fabric's unloaded RTT from this host (BaseRtt).",
                          TimeValue(Time(0)),
                          MakeTimeAccessor(&RdmaCcSwift::m_baseTarget),
                          MakeTimeChecker())
            // 1 us per switch: a queue of 12.5 KB (3 MTU packets) per hop at 100 Gb/s.
            .AddAttribute("HopScale",
                          "h: target added per switch on the path.",
                          TimeValue(MicroSeconds(1)),
                          MakeTimeAccessor(&RdmaCcSwift::m_hopScale),
                          MakeTimeChecker())
            // 5 us: five hops' worth; the largest extra a flow of fs_min_cwnd gets.
            .AddAttribute("FsRange",
                          "fs_range: the largest flow-based scaling; 0 = off.",
                          TimeValue(MicroSeconds(5)),
                          MakeTimeAccessor(&RdmaCcSwift::m_fsRange),
                          MakeTimeChecker())
            .AddAttribute("FsMinCwnd",
                          "fs_min_cwnd, packets: a window this small gets all of fs_range.",
                          DoubleValue(0.1),
                          MakeDoubleAccessor(&RdmaCcSwift::m_fsMinCwnd),
                          MakeDoubleChecker<double>(1e-6))
            .AddAttribute("FsMaxCwnd",
                          "fs_max_cwnd, packets: a window this large gets no flow-based scaling.",
                          DoubleValue(100),
                          MakeDoubleAccessor(&RdmaCcSwift::m_fsMaxCwnd),
                          MakeDoubleChecker<double>(1e-6))
            // 5: RETX_RESET_THRESHOLD of Algorithm 1 (no value in the paper).
            .AddAttribute("RetxResetThreshold",
                          "Timeouts in a row after which cwnd = min_cwnd.",
                          UintegerValue(5),
                          MakeUintegerAccessor(&RdmaCcSwift::m_retx),
                          MakeUintegerChecker<uint32_t>(1))
            .AddTraceSource("TargetDelay",
                            "The target delay a QP's last ACK was compared with (QP id, ns).",
                            MakeTraceSourceAccessor(&RdmaCcSwift::m_targetTrace),
                            "ns3::RdmaCongestionOps::QpValueCallback");
    return tid;
}

void
RdmaCcSwift::Configure(const RdmaCcLink& link, RdmaCcOwner* owner)
{
    RdmaCongestionOps::Configure(link, owner); // sets the base RTT: BaseRttChanged
}

void
RdmaCcSwift::BaseRttChanged()
{
    const int64_t bt = m_baseTarget.GetNanoSeconds();
    m_p.baseTargetNs = bt > 0 ? static_cast<double>(bt) : m_baseRttNs;
    m_p.hopScaleNs = static_cast<double>(m_hopScale.GetNanoSeconds());
    m_p.fsRangeNs = static_cast<double>(m_fsRange.GetNanoSeconds());
    m_p.aiPackets = m_ai;
    m_p.betaMd = m_beta;
    m_p.maxMdf = m_maxMdf;
    m_p.minCwnd = m_minCwnd;
    m_p.fsMinCwnd = m_fsMinCwnd;
    m_p.fsMaxCwnd = m_fsMaxCwnd;
    m_p.retxResetThreshold = m_retx;
    m_p.maxCwnd = m_maxCwndAttr > 0 ? m_maxCwndAttr : std::max(1.0, m_bdpBytes / m_link.payloadBytes);
}

void
RdmaCcSwift::SetPathHops(const std::vector<uint16_t>& hops)
{
    m_hops = hops;
}

std::unique_ptr<RdmaCcState>
RdmaCcSwift::NewState(uint32_t qp, uint32_t dst, int64_t)
{
    auto s = std::make_unique<State>();
    s->qp = qp;
    s->hops = dst < m_hops.size() ? m_hops[dst] : 0;
    s->rp.Init(&m_p, m_p.maxCwnd, m_baseRttNs);
    return s;
}

double
RdmaCcSwift::Rate(const RdmaCcState& s) const
{
    return static_cast<const State&>(s).rp.Rate(m_link.dataWireBytes, m_link.lineRateBps);
}

double
RdmaCcSwift::Window(const RdmaCcState& s) const
{
    return std::max(1.0, static_cast<const State&>(s).rp.cwnd) * m_link.payloadBytes;
}

uint32_t
RdmaCcSwift::OnAck(RdmaCcState& s, const RdmaCcAck& ack)
{
    auto& st = static_cast<State&>(s);
    if (ack.nack || ack.seq <= st.acked)
    {
        return NONE; // go-back is OnGoBack; a duplicate acknowledges nothing new
    }
    const double packets = static_cast<double>(ack.seq - st.acked) / m_link.payloadBytes;
    st.acked = ack.seq;
    const int64_t now = Simulator::Now().GetNanoSeconds();
    const bool changed = st.rp.OnAck(static_cast<double>(now - ack.echoTsNs), packets, now, st.hops);
    if (!m_targetTrace.IsEmpty())
    {
        m_targetTrace(st.qp, st.rp.lastTargetNs);
    }
    return changed ? RATE : NONE;
}

uint32_t
RdmaCcSwift::OnGoBack(RdmaCcState& s, bool timeout)
{
    return static_cast<State&>(s).rp.OnRetransmit(timeout, Simulator::Now().GetNanoSeconds()) ? RATE : NONE;
}

} // namespace ns3
