// DCQCN as a congestion-control class (rdma-cc-ops.h): the reaction point of dcqcn.h (its rate
// arithmetic, unit-tested on its own) with the NIC-side timers it needs: the rate-increase timer
// and, for the vendor reaction point, the cut check scheduled when a CNP is pending.
//
//  * RdmaCcDcqcn: the VENDOR reaction point (Mellanox, as the HPCC simulator's dcqcn preset models
//    it); the receiver answers CE marks with CNPs (the NIC's CnpMode / CnpInterval / CnpClass).
//  * RdmaCcDcqcnPaper: the PAPER reaction point (Zhu et al., SIGCOMM 2015).  Same Attributes; their
//    defaults are the vendor preset's, HeteroSim's `cc: dcqcn_paper` sets the paper's values
//    (netbackend/config.py DCQCN_PRESETS).
#ifndef HETEROSIM_RDMA_CC_DCQCN_H
#define HETEROSIM_RDMA_CC_DCQCN_H

#include "dcqcn.h"
#include "rdma-cc-ops.h"

#include "ns3/data-rate.h"
#include "ns3/event-id.h"

namespace ns3
{

class RdmaCcDcqcn : public RdmaCongestionOps
{
  public:
    struct State : public RdmaCcState
    {
        DcqcnRp rp;
        EventId incTimer;
        EventId decTimer; //!< VENDOR: pending cut check
    };

    static TypeId GetTypeId();
    std::string GetName() const override { return "dcqcn"; }
    void Configure(const RdmaCcLink& link, RdmaCcOwner* owner) override;
    bool EcnCapable() const override { return true; }
    CeReaction OnCeReceived() const override { return CE_CNP; }
    bool ReactsToSent() const override { return true; } // the byte counter
    std::unique_ptr<RdmaCcState> NewState(uint32_t qp, uint32_t dst, int64_t nowNs) override;
    void Release(RdmaCcState& s) override;
    double Rate(const RdmaCcState& s) const override;
    uint32_t OnSent(RdmaCcState& s, uint32_t wireBytes) override;
    uint32_t OnCnp(RdmaCcState& s) override;
    bool ChangePending(const RdmaCcState& s) const override;
    double RateFraction(const RdmaCcState& s) const override;
    std::vector<double> ClosedFormHeader() const override;
    std::vector<double> ClosedFormQp(const RdmaCcState& s) const override;
    std::vector<double> Save(const RdmaCcState& s) const override;
    bool Restore(RdmaCcState& s, const std::vector<double>& v) override;
    const DcqcnParams& GetParams() const { return m_p; }

  protected:
    /// The reaction point: vendor here, the paper's in RdmaCcDcqcnPaper.
    virtual bool Vendor() const { return true; }

  private:
    void IncreaseTimer(State* st);
    void DecreaseCheck(State* st);
    void ScheduleDecreaseCheck(State& st);
    void ArmIncrease(State& st);

    DcqcnParams m_p;
    double m_g;
    Time m_alphaInterval;
    Time m_rateDecreaseInterval;
    Time m_rateIncreaseInterval;
    uint64_t m_byteCounter;
    uint32_t m_fastRecovery;
    DataRate m_rateAi;
    DataRate m_rateHai;
    DataRate m_minRate;
    bool m_clamp;
    double m_minDecreaseFactor;
};

class RdmaCcDcqcnPaper : public RdmaCcDcqcn
{
  public:
    static TypeId GetTypeId();
    std::string GetName() const override { return "dcqcn_paper"; }

  protected:
    bool Vendor() const override { return false; }
};

} // namespace ns3

#endif
