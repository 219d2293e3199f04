#include "rdma-cc-dctcp.h"

#include "ns3/double.h"
#include "ns3/log.h"

#include <algorithm>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaCcDctcp");
NS_OBJECT_ENSURE_REGISTERED(RdmaCcDctcp);
RDMA_CC_REGISTER("dctcp", RdmaCcDctcp);

TypeId
RdmaCcDctcp::GetTypeId()
{
    // DCTCP: Alizadeh et al., SIGCOMM 2010; RFC 8257.  Its ceiling is one BDP over
    // RdmaCongestionOps::BaseRtt.
    static TypeId tid = TypeId("ns3::RdmaCcDctcp")
                            .SetParent<RdmaCongestionOps>()
                            .SetGroupName("HeterosimRdma")
                            .AddConstructor<RdmaCcDctcp>()
                            .AddAttribute("G",
                                          "DCTCP alpha gain g (paper and RFC 8257: 1/16).",
                                          DoubleValue(1.0 / 16),
                                          MakeDoubleAccessor(&RdmaCcDctcp::m_g),
                                          MakeDoubleChecker<double>(0, 1));
    return tid;
}

void
RdmaCcDctcp::Configure(const RdmaCcLink& link, RdmaCcOwner* owner)
{
    m_p.g = m_g;
    m_p.mtuBytes = static_cast<double>(link.payloadBytes);
    RdmaCongestionOps::Configure(link, owner); // sets the base RTT: BaseRttChanged
}

void
RdmaCcDctcp::BaseRttChanged()
{
    m_p.maxWindowBytes = m_bdpBytes;
}

std::unique_ptr<RdmaCcState>
RdmaCcDctcp::NewState(uint32_t qp, uint32_t, int64_t)
{
    auto s = std::make_unique<State>();
    s->qp = qp;
    s->rp.Init(&m_p);
    return s;
}

double
RdmaCcDctcp::Window(const RdmaCcState& s) const
{
    return static_cast<const State&>(s).rp.window;
}

uint32_t
RdmaCcDctcp::OnAck(RdmaCcState& s, const RdmaCcAck& ack)
{
    if (ack.nack)
    {
        return NONE;
    }
    if (!static_cast<State&>(s).rp.OnAck(std::min(ack.seq, ack.streamEnd), ack.ece, ack.sndNxt))
    {
        return NONE;
    }
    return ack.ece ? (CUT | RATE) : RATE;
}

} // namespace ns3
