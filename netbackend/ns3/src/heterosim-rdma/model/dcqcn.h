// DCQCN (Zhu et al., SIGCOMM 2015) rate arithmetic, kept free of events so
// that it can be unit-tested: the NIC owns the timers and calls in here.
//
// Reaction point per QP (see shared/network-reference.md, "DCQCN roles"):
//  * CNP (at most one cut per rate-decrease interval): RT <- RC,
//    RC <- max(min, RC max(1 - alpha/2, f)), alpha <- (1-g) alpha + g, stages reset
//    (f: the minimum decrease factor, 0 = none).
//    The first CNP of a QP sets alpha = 1 before the cut.
//  * Alpha timer: alpha <- (1-g) alpha for every alpha interval without a CNP.
//    It is evaluated lazily (alpha (1-g)^k at the next CNP), which equals a
//    timer restarted by each CNP, without an event per microsecond per QP.
//  * Increase events (timer, optional byte counter), with T / BC the numbers of
//    such events since the last cut (BC = T when the byte counter is off):
//    max(T,BC) < F: fast recovery RC <- (RC+RT)/2; min(T,BC) > F: hyper
//    increase RT += R_HAI; otherwise additive RT += R_AI; then RC <- (RC+RT)/2.
//    RT and RC never exceed the line rate.
//
// Two reaction-point variants, each one coherent reference:
//  * PAPER (Zhu et al., SIGCOMM 2015): the above; every CNP may cut (the
//    notification point spaces CNPs), RT <- RC on every cut.
//  * VENDOR (the Mellanox behaviour that the HPCC simulator's dcqcn preset
//    models): a CNP only sets two flags.  Alpha is updated at the end of every
//    alpha period, with +g if a CNP arrived in it; every rate-decrease period
//    a cut happens if a CNP arrived since the last check; periods run on a grid
//    anchored at the QP's first CNP (the cut check 1 ns after the alpha
//    update).  Without target clamping RT <- RC only on cuts that follow an
//    increase event.  Periods are evaluated lazily (no event per period): the
//    NIC schedules a cut check only when a CNP is pending.
#ifndef HETEROSIM_DCQCN_H
#define HETEROSIM_DCQCN_H

#include <cstdint>
#include <vector>

namespace ns3
{

struct DcqcnParams
{
    double g{1.0 / 256};
    int64_t alphaIntervalNs{1000};
    int64_t rateDecreaseIntervalNs{4000};
    int64_t rateIncreaseIntervalNs{300000};
    uint64_t byteCounterBytes{0}; //!< 0 = byte counter off
    uint32_t fastRecoveryStages{1};
    double rateAiBps{20e6};
    double rateHaiBps{200e6};
    double minRateBps{100e6};
    double lineRateBps{100e9};
    bool vendor{false};         //!< VENDOR reaction point (else PAPER)
    bool clampTargetRate{true}; //!< RT <- RC on every cut
    //! A cut keeps at least this fraction of RC: RC <- RC max(1 - alpha/2, f) (NVIDIA
    //! rpg_min_dec_fac / 100).  0 = no floor; with alpha <= 1 any f <= 0.5 never binds.
    double minDecreaseFactor{0};
};

/// Reaction-point state of one queue pair.
class DcqcnRp
{
  public:
    enum Stage
    {
        FAST_RECOVERY = 0,
        ADDITIVE = 1,
        HYPER = 2,
    };

    void Init(const DcqcnParams* p, int64_t nowNs);
    /// A CNP arrived; returns true when it cut the rate (PAPER).  VENDOR: never
    /// cuts here; the NIC calls OnDecreaseCheck at NextDecreaseCheckNs().
    bool OnCnp(int64_t nowNs);
    /// VENDOR: the periodic cut check at @p nowNs; returns true when it cut.
    bool OnDecreaseCheck(int64_t nowNs);
    /// VENDOR: the first check time >= @p nowNs on this QP's grid (-1: no CNP yet).
    int64_t NextDecreaseCheckNs(int64_t nowNs) const;
    /// VENDOR: apply every alpha period that ended at or before @p nowNs.
    void CatchUpAlpha(int64_t nowNs);
    /// The alpha a CNP at @p nowNs would start from (every period that ended
    /// by then applied: VENDOR as CatchUpAlpha, PAPER whole periods since the
    /// last CNP), without changing the state.  The accelerated backend reads it
    /// to tell a settled connection (a cut would take under 1 % of its rate).
    double AlphaAt(int64_t nowNs) const;
    /// The rate-increase timer fired; returns the stage applied.
    Stage OnIncreaseTimer();
    /// @p bytes were sent; returns true if the byte counter fired (rate raised).
    bool OnBytesSent(uint64_t bytes);
    /// True while below line rate (the increase timer must run).
    bool NeedsIncrease() const;
    /// The state as 16 numbers, times relative to @p nowNs, with the NIC's increase timer and
    /// cut check @p incLeftNs / @p decLeftNs from now (-1: not armed).  The exchange format of
    /// RdmaNic::SaveConnectionCc and FluidNet.
    std::vector<double> Save(int64_t nowNs, double incLeftNs, double decLeftNs) const;
    /// The inverse of Save; false (unchanged) when @p s is not 16 numbers.  The timers' delays
    /// are returned in @p incLeftNs / @p decLeftNs for the owner to re-arm.
    bool Restore(const std::vector<double>& s, int64_t nowNs, double& incLeftNs, double& decLeftNs);

    double rate{0};   //!< RC, bit/s
    double target{0}; //!< RT, bit/s
    double alpha{1};
    uint32_t timerStage{0};
    uint32_t byteStage{0};
    uint64_t bytesSinceEvent{0};
    int64_t lastCutNs{-1};
    int64_t alphaRefNs{0};
    bool cnpSeen{false};
    bool alphaCnp{false};    //!< VENDOR: a CNP arrived in the current alpha period
    bool decreaseCnp{false}; //!< VENDOR: a CNP arrived since the last cut check
    int64_t alphaNextNs{0};  //!< VENDOR: end of the current alpha period
    int64_t gridNs{0};       //!< VENDOR: first cut check (first CNP + period + 1 ns)

  private:
    void Cut();
    Stage Increase();
    const DcqcnParams* m_p{nullptr};
};

/// RED-style marking probability for egress queue depth @p qBytes.
double EcnMarkProbability(double qBytes, double kminBytes, double kmaxBytes, double pmax);

} // namespace ns3

#endif
