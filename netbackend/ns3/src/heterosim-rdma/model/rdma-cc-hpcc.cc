#include "rdma-cc-hpcc.h"

#include "ns3/double.h"
#include "ns3/log.h"
#include "ns3/uinteger.h"

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaCcHpcc");
NS_OBJECT_ENSURE_REGISTERED(RdmaCcHpcc);
RDMA_CC_REGISTER("hpcc", RdmaCcHpcc);

TypeId
RdmaCcHpcc::GetTypeId()
{
    // HPCC: Li et al., SIGCOMM 2019; defaults of its public ns-3 simulator
    // (shared/network-reference.md).  T is RdmaCongestionOps::BaseRtt.
    static TypeId tid =
        TypeId("ns3::RdmaCcHpcc")
            .SetParent<RdmaCongestionOps>()
            .SetGroupName("HeterosimRdma")
            .AddConstructor<RdmaCcHpcc>()
            .AddAttribute("IntHeaderBytes",
                          "Wire bytes INT adds to HPCC data packets and ACKs (paper: 2 B + 5 hops x 8 B).",
                          UintegerValue(42),
                          MakeUintegerAccessor(&RdmaCcHpcc::m_intBytes),
                          MakeUintegerChecker<uint32_t>(0, 1024))
            .AddAttribute("Eta",
                          "Target utilization eta (paper and simulator: 0.95).",
                          DoubleValue(0.95),
                          MakeDoubleAccessor(&RdmaCcHpcc::m_eta),
                          MakeDoubleChecker<double>(0.01, 1.0))
            .AddAttribute("MaxStage",
                          "Additive-increase stages before a multiplicative update (the authors' simulator: 0; "
                          "the paper as printed: 5, a typo per the authors).",
                          UintegerValue(0),
                          MakeUintegerAccessor(&RdmaCcHpcc::m_maxStage),
                          MakeUintegerChecker<uint32_t>())
            .AddAttribute("Wai",
                          "Additive increase W_AI in bytes (paper: 80 B).",
                          DoubleValue(80.0),
                          MakeDoubleAccessor(&RdmaCcHpcc::m_wai),
                          MakeDoubleChecker<double>(0))
            .AddAttribute("MinRate",
                          "Floor of the HPCC window expressed as a rate (simulator: 100 Mb/s).",
                          DataRateValue(DataRate("100Mbps")),
                          MakeDataRateAccessor(&RdmaCcHpcc::m_minRate),
                          MakeDataRateChecker());
    return tid;
}

void
RdmaCcHpcc::Configure(const RdmaCcLink& link, RdmaCcOwner* owner)
{
    m_p.eta = m_eta;
    m_p.maxStage = m_maxStage;
    m_p.lineRateBps = link.lineRateBps;
    m_p.minRateBps = static_cast<double>(m_minRate.GetBitRate());
    RdmaCongestionOps::Configure(link, owner); // sets the base RTT: BaseRttChanged
}

void
RdmaCcHpcc::BaseRttChanged()
{
    m_p.baseRttNs = m_baseRttNs;
    m_p.wAiBytes = m_wai;
}

std::unique_ptr<RdmaCcState>
RdmaCcHpcc::NewState(uint32_t qp, uint32_t, int64_t)
{
    auto s = std::make_unique<State>();
    s->qp = qp;
    s->rp.Init(&m_p);
    return s;
}

double
RdmaCcHpcc::Rate(const RdmaCcState& s) const
{
    return static_cast<const State&>(s).rp.Rate();
}

double
RdmaCcHpcc::Window(const RdmaCcState& s) const
{
    return static_cast<const State&>(s).rp.window;
}

uint32_t
RdmaCcHpcc::OnAck(RdmaCcState& s, const RdmaCcAck& ack)
{
    if (ack.intTag == nullptr)
    {
        return NONE;
    }
    return static_cast<State&>(s).rp.OnAck(*ack.intTag, ack.seq, ack.sndNxt) ? RATE : NONE;
}

} // namespace ns3
