// DCTCP as a congestion-control class (rdma-cc-ops.h): the window arithmetic of dctcp.h; the
// receiver echoes CE marks on its ACKs; the NIC sends at line rate within the window.
#ifndef HETEROSIM_RDMA_CC_DCTCP_H
#define HETEROSIM_RDMA_CC_DCTCP_H

#include "dctcp.h"
#include "rdma-cc-ops.h"

namespace ns3
{

class RdmaCcDctcp : public RdmaCongestionOps
{
  public:
    struct State : public RdmaCcState
    {
        DctcpRp rp;
    };

    static TypeId GetTypeId();
    std::string GetName() const override { return "dctcp"; }
    void Configure(const RdmaCcLink& link, RdmaCcOwner* owner) override;
    bool NeedsBaseRtt() const override { return true; }
    bool EcnCapable() const override { return true; }
    CeReaction OnCeReceived() const override { return CE_ECHO; }
    bool HasWindow() const override { return true; }
    bool HasRate() const override { return false; } // line rate within the window
    std::unique_ptr<RdmaCcState> NewState(uint32_t qp, uint32_t dst, int64_t nowNs) override;
    double Window(const RdmaCcState& s) const override;
    uint32_t OnAck(RdmaCcState& s, const RdmaCcAck& ack) override;

  protected:
    void BaseRttChanged() override;

  private:
    DctcpParams m_p;
    double m_g;
};

} // namespace ns3

#endif
