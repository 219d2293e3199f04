// Swift (Kumar et al., SIGCOMM 2020) as a congestion-control class (rdma-cc-ops.h): a
// delay-based window (swift.h) fed one RTT sample per ACK, measured from the data packet's send
// time the ACK echoes (the NIC timestamps of the paper), with the target scaled by the path's
// switch hops (the helper's shortest-path count, what the paper reads from the IP TTL) and by
// the flow's window.  The NIC sends within the window, paced below one packet per RTT.
//
// Defaults and their sources: docs/congestion-control.md, "Swift".
#ifndef HETEROSIM_RDMA_CC_SWIFT_H
#define HETEROSIM_RDMA_CC_SWIFT_H

#include "rdma-cc-ops.h"
#include "swift.h"

namespace ns3
{

class RdmaCcSwift : public RdmaCongestionOps
{
  public:
    struct State : public RdmaCcState
    {
        SwiftRp rp;
        uint64_t acked{0}; //!< highest cumulative ACK seen
        uint32_t hops{0};  //!< switches on the path to the QP's destination
    };

    /// TargetDelay: (QP id, target ns at the last ACK).
    static TypeId GetTypeId();
    std::string GetName() const override { return "swift"; }
    void Configure(const RdmaCcLink& link, RdmaCcOwner* owner) override;
    bool NeedsBaseRtt() const override { return true; }
    bool NeedsPathHops() const override { return true; }
    bool HasWindow() const override { return true; }
    void SetPathHops(const std::vector<uint16_t>& hops) override;
    std::unique_ptr<RdmaCcState> NewState(uint32_t qp, uint32_t dst, int64_t nowNs) override;
    double Rate(const RdmaCcState& s) const override;
    double Window(const RdmaCcState& s) const override;
    uint32_t OnAck(RdmaCcState& s, const RdmaCcAck& ack) override;
    uint32_t OnGoBack(RdmaCcState& s, bool timeout) override;
    const SwiftParams& GetParams() const { return m_p; }

  protected:
    void BaseRttChanged() override;

  private:
    SwiftParams m_p;
    std::vector<uint16_t> m_hops;
    double m_ai;
    double m_beta;
    double m_maxMdf;
    double m_minCwnd;
    double m_fsMinCwnd;
    double m_fsMaxCwnd;
    uint32_t m_retx;
    double m_maxCwndAttr;
    Time m_baseTarget;
    Time m_hopScale;
    Time m_fsRange;
    TracedCallback<uint32_t, double> m_targetTrace;
};

} // namespace ns3

#endif
