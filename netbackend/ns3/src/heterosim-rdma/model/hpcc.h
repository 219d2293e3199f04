// HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019,
// Algorithm 1) sender arithmetic, free of events so that it can be
// unit-tested: the NIC calls OnAck with the INT stack echoed by each ACK.
//
//  * MeasureInflight: per hop i, txRate = dTxBytes/dTs between the previous
//    and this ACK's records, u_i = min(qlen, qlen_prev)/(B_i T) + txRate/B_i;
//    the most utilized hop sets u and tau = its dTs; tau <= T;
//    U <- (1 - tau/T) U + (tau/T) u.  (The first measurement sets U = u.)
//  * ComputeWind: if U >= eta or incStage >= maxStage:
//    W = Wc / (U/eta) + W_AI, else W = Wc + W_AI.  Wc (the reference window)
//    and incStage are updated only once per RTT: on the first ACK beyond
//    lastUpdateSeq, which then moves to snd_nxt.
//  * The window bounds bytes in flight and the NIC paces at R = W / T.
//    W stays within [minRate T, lineRate T].
#ifndef HETEROSIM_HPCC_H
#define HETEROSIM_HPCC_H

#include "rdma-int-tag.h"

#include <cstdint>

namespace ns3
{

struct HpccParams
{
    double eta{0.95};         //!< target utilization (paper and simulator: 0.95)
    uint32_t maxStage{0};     //!< additive-increase stages (paper: 5; simulator: 0)
    double wAiBytes{0};       //!< additive increase per update, bytes
    double baseRttNs{0};      //!< T
    double lineRateBps{100e9};
    double minRateBps{100e6};

    double MaxWindow() const { return lineRateBps * baseRttNs / 8e9; }
    double MinWindow() const { return minRateBps * baseRttNs / 8e9; }
};

/// Sender state of one queue pair.
class HpccRp
{
  public:
    void Init(const HpccParams* p);
    /// An ACK echoing @p tag arrived; @p ackSeq is its cumulative sequence,
    /// @p sndNxt the sender's next byte.  Returns true when U was measured.
    bool OnAck(const RdmaIntTag& tag, uint64_t ackSeq, uint64_t sndNxt);
    /// Updates and returns U from an INT stack (needs the previous stack).
    double MeasureInflight(const RdmaIntTag& tag);
    /// Returns the new window; moves Wc and incStage when @p updateWc.
    double ComputeWind(double u, bool updateWc);
    /// Pacing rate W / T, bit/s.
    double Rate() const;

    double window{0};   //!< W, bytes
    double wc{0};       //!< Wc, bytes
    double u{0};        //!< U (EWMA of the max-hop utilization)
    bool uValid{false};
    uint32_t incStage{0};
    uint64_t lastUpdateSeq{0};
    RdmaIntTag prev;    //!< INT records of the previous ACK
    bool havePrev{false};

  private:
    const HpccParams* m_p{nullptr};
};

} // namespace ns3

#endif
