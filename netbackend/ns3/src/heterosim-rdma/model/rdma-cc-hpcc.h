// HPCC as a congestion-control class (rdma-cc-ops.h): the window arithmetic of hpcc.h fed with
// the INT records each ACK echoes; the NIC paces at W / T.
#ifndef HETEROSIM_RDMA_CC_HPCC_H
#define HETEROSIM_RDMA_CC_HPCC_H

#include "hpcc.h"
#include "rdma-cc-ops.h"

#include "ns3/data-rate.h"

namespace ns3
{

class RdmaCcHpcc : public RdmaCongestionOps
{
  public:
    struct State : public RdmaCcState
    {
        HpccRp rp;
    };

    static TypeId GetTypeId();
    std::string GetName() const override { return "hpcc"; }
    void Configure(const RdmaCcLink& link, RdmaCcOwner* owner) override;
    bool NeedsBaseRtt() const override { return true; }
    bool UsesInt() const override { return true; }
    bool HasWindow() const override { return true; }
    uint32_t IntBytes() const override { return m_intBytes; }
    std::unique_ptr<RdmaCcState> NewState(uint32_t qp, uint32_t dst, int64_t nowNs) override;
    double Rate(const RdmaCcState& s) const override;
    double Window(const RdmaCcState& s) const override;
    uint32_t OnAck(RdmaCcState& s, const RdmaCcAck& ack) override;
    const HpccParams& GetParams() const { return m_p; }

  protected:
    void BaseRttChanged() override;

  private:
    HpccParams m_p;
    uint32_t m_intBytes;
    double m_eta;
    uint32_t m_maxStage;
    double m_wai;
    DataRate m_minRate;
};

} // namespace ns3

#endif
