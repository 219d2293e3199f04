#include "rdma-cc-timely.h"

#include "ns3/double.h"
#include "ns3/log.h"
#include "ns3/simulator.h"
#include "ns3/uinteger.h"

#include <algorithm>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaCcTimely");
NS_OBJECT_ENSURE_REGISTERED(RdmaCcTimely);
RDMA_CC_REGISTER("timely", RdmaCcTimely);

TypeId
RdmaCcTimely::GetTypeId()
{
    // TIMELY: Mittal et al., SIGCOMM 2015; values as in the paper and the HPCC
    // simulator's TIMELY (alpha 0.875, beta 0.8, Tlow 50 us, Thigh 500 us, minRTT 20 us).
    static TypeId tid =
        TypeId("ns3::RdmaCcTimely")
            .SetParent<RdmaCongestionOps>()
            .SetGroupName("HeterosimRdma")
            .AddConstructor<RdmaCcTimely>()
            .AddAttribute("Alpha",
                          "EWMA weight of the newest RTT difference.",
                          DoubleValue(0.875),
                          MakeDoubleAccessor(&RdmaCcTimely::m_alpha),
                          MakeDoubleChecker<double>(0, 1))
            .AddAttribute("Beta",
                          "Multiplicative decrease factor beta.",
                          DoubleValue(0.8),
                          MakeDoubleAccessor(&RdmaCcTimely::m_beta),
                          MakeDoubleChecker<double>(0, 1))
            .AddAttribute("TLow",
                          "Below this RTT: additive increase regardless of the gradient.",
                          TimeValue(MicroSeconds(50)),
                          MakeTimeAccessor(&RdmaCcTimely::m_tLow),
                          MakeTimeChecker())
            .AddAttribute("THigh",
                          "Above this RTT: multiplicative decrease by (1 - Thigh/RTT).",
                          TimeValue(MicroSeconds(500)),
                          MakeTimeAccessor(&RdmaCcTimely::m_tHigh),
                          MakeTimeChecker())
            .AddAttribute("MinRtt",
                          "minRTT normalizing the RTT gradient.",
                          TimeValue(MicroSeconds(20)),
                          MakeTimeAccessor(&RdmaCcTimely::m_minRtt),
                          MakeTimeChecker())
            .AddAttribute("Delta",
                          "Additive step delta; 0 = line rate / 1000 (paper: 10 Mb/s at 10G; 100 Mb/s at 100G).",
                          DataRateValue(DataRate("0bps")),
                          MakeDataRateAccessor(&RdmaCcTimely::m_delta),
                          MakeDataRateChecker())
            .AddAttribute("HaiThreshold",
                          "Negative gradients in a row before hyper-active increase (5 delta) (paper: 5).",
                          UintegerValue(5),
                          MakeUintegerAccessor(&RdmaCcTimely::m_haiThreshold),
                          MakeUintegerChecker<uint32_t>(1))
            .AddAttribute("SegmentBytes",
                          "ACKed bytes per completion event, i.e. per rate update (paper: 16-64 KB).",
                          UintegerValue(64 * 1024),
                          MakeUintegerAccessor(&RdmaCcTimely::m_segment),
                          MakeUintegerChecker<uint64_t>(1))
            .AddAttribute("MinRate",
                          "Floor of the TIMELY rate.",
                          DataRateValue(DataRate("100Mbps")),
                          MakeDataRateAccessor(&RdmaCcTimely::m_minRate),
                          MakeDataRateChecker());
    return tid;
}

void
RdmaCcTimely::Configure(const RdmaCcLink& link, RdmaCcOwner* owner)
{
    RdmaCongestionOps::Configure(link, owner);
    const double line = link.lineRateBps;
    m_p.alpha = m_alpha;
    m_p.beta = m_beta;
    m_p.tLowNs = static_cast<double>(m_tLow.GetNanoSeconds());
    m_p.tHighNs = static_cast<double>(m_tHigh.GetNanoSeconds());
    m_p.minRttNs = std::max<double>(1.0, m_minRtt.GetNanoSeconds());
    // 0 = delta scales with the line rate like the HPCC simulator's TIMELY runs
    // (10 Mb/s per 10 Gb/s, the paper's value at 10G).
    m_p.deltaBps = m_delta.GetBitRate() > 0 ? static_cast<double>(m_delta.GetBitRate()) : line / 1000.0;
    m_p.haiThreshold = m_haiThreshold;
    m_p.lineRateBps = line;
    m_p.minRateBps = static_cast<double>(m_minRate.GetBitRate());
}

std::unique_ptr<RdmaCcState>
RdmaCcTimely::NewState(uint32_t qp, uint32_t, int64_t)
{
    auto s = std::make_unique<State>();
    s->qp = qp;
    s->rp.Init(&m_p);
    return s;
}

double
RdmaCcTimely::Rate(const RdmaCcState& s) const
{
    return static_cast<const State&>(s).rp.rate;
}

uint32_t
RdmaCcTimely::OnAck(RdmaCcState& s, const RdmaCcAck& ack)
{
    auto& st = static_cast<State&>(s);
    if (ack.nack || ack.seq < st.nextSeq)
    {
        return NONE;
    }
    // One completion event per SegmentBytes of ACKed data (or per RTT).
    const int64_t rtt = Simulator::Now().GetNanoSeconds() - ack.echoTsNs;
    if (rtt <= 0)
    {
        return NONE;
    }
    st.rp.OnRtt(static_cast<double>(rtt));
    // Next event after a segment, or after everything now in flight
    // when that comes first (low rates: once per RTT).
    st.nextSeq = std::min(ack.seq + m_segment, std::max(ack.sndNxt, ack.seq + 1));
    return RATE;
}

} // namespace ns3
