// TIMELY as a congestion-control class (rdma-cc-ops.h): the rate arithmetic of timely.h fed one
// RTT sample per completion event (SegmentBytes of ACKed data, or everything in flight when that
// comes first), measured from the data packet's send time the ACK echoes.
#ifndef HETEROSIM_RDMA_CC_TIMELY_H
#define HETEROSIM_RDMA_CC_TIMELY_H

#include "rdma-cc-ops.h"
#include "timely.h"

#include "ns3/data-rate.h"

namespace ns3
{

class RdmaCcTimely : public RdmaCongestionOps
{
  public:
    struct State : public RdmaCcState
    {
        TimelyRp rp;
        uint64_t nextSeq{0}; //!< next completion event
    };

    static TypeId GetTypeId();
    std::string GetName() const override { return "timely"; }
    void Configure(const RdmaCcLink& link, RdmaCcOwner* owner) override;
    std::unique_ptr<RdmaCcState> NewState(uint32_t qp, uint32_t dst, int64_t nowNs) override;
    double Rate(const RdmaCcState& s) const override;
    uint32_t OnAck(RdmaCcState& s, const RdmaCcAck& ack) override;
    const TimelyParams& GetParams() const { return m_p; }

  private:
    TimelyParams m_p;
    double m_alpha;
    double m_beta;
    Time m_tLow;
    Time m_tHigh;
    Time m_minRtt;
    DataRate m_delta;
    uint32_t m_haiThreshold;
    uint64_t m_segment;
    DataRate m_minRate;
};

} // namespace ns3

#endif
