// Swift (Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
// Datacenter", SIGCOMM 2020) window arithmetic, free of events so that it can be unit-tested.
// Windows are in packets, times in nanoseconds.
//
//  * Target delay (section 3.5, "Scaling the target delay"):
//      target = base_target + hops x h + max(0, min(alpha / sqrt(cwnd) + beta, fs_range)),
//      alpha = fs_range / (1/sqrt(fs_min_cwnd) - 1/sqrt(fs_max_cwnd)), beta = -alpha / sqrt(fs_max_cwnd)
//    (topology-based scaling by the path's hop count; flow-based scaling, larger targets for
//    flows with small windows).
//  * On an ACK (Algorithm 1): delay < target: additive increase, cwnd += ai / cwnd per acked
//    packet (cwnd += ai per acked packet while cwnd < 1); otherwise, at most once per RTT,
//    multiplicative decrease cwnd *= max(1 - beta_md (delay - target) / delay, 1 - max_mdf).
//  * Go-back after a NACK (fast recovery) or a timeout: cwnd *= 1 - max_mdf, at most once per
//    RTT; RetxResetThreshold timeouts in a row set cwnd = min_cwnd.
//  * cwnd stays within [min_cwnd, max_cwnd]; below one packet the sender paces one packet
//    every rtt / cwnd (section 3.3, large-scale incast).
//  * "At most once per RTT": now - t_last_decrease >= rtt, where t_last_decrease moves when an
//    update leaves cwnd lower than before.  Algorithm 1 as printed moves it when cwnd <= its
//    previous value; read literally that keeps a window that stays above target and cannot yet
//    decrease (unchanged) from ever decreasing, so a decrease is taken to mean "lower".
//  The paper's endpoint window (ecwnd, host delay) is not modelled: a NIC here has no host delay
//  other than the optional receive pipeline.
#ifndef HETEROSIM_SWIFT_H
#define HETEROSIM_SWIFT_H

#include <cstdint>

namespace ns3
{

struct SwiftParams
{
    double aiPackets{1.0};      //!< ai: additive increase, packets per RTT
    double betaMd{0.8};         //!< beta: multiplicative decrease constant
    double maxMdf{0.5};         //!< max_mdf: largest decrease per RTT
    double minCwnd{0.001};      //!< packets (section 3.3)
    double maxCwnd{1e9};        //!< packets
    double baseTargetNs{10000}; //!< base_target
    double hopScaleNs{1000};    //!< h: target per switch hop
    double fsRangeNs{5000};     //!< fs_range: largest flow-based scaling; 0 = off
    double fsMinCwnd{0.1};      //!< packets: the window given the whole fs_range
    double fsMaxCwnd{100};      //!< packets: the window given no flow-based scaling
    uint32_t retxResetThreshold{5}; //!< timeouts in a row before cwnd = min_cwnd

    /// Flow-based scaling term for a window of @p cwnd packets, ns.
    double FlowScaling(double cwnd) const;
    /// The target delay for a window of @p cwnd packets over @p hops switches, ns.
    double TargetDelay(double cwnd, uint32_t hops) const;
};

class SwiftRp
{
  public:
    void Init(const SwiftParams* p, double cwnd, double rttNs);
    /// An ACK for @p ackedPackets packets (may be fractional) with RTT sample @p delayNs at
    /// @p nowNs over @p hops switches.  Returns true when cwnd changed.
    bool OnAck(double delayNs, double ackedPackets, int64_t nowNs, uint32_t hops);
    /// Go-back after a NACK (@p timeout false) or a retransmission timeout.  True when cwnd changed.
    bool OnRetransmit(bool timeout, int64_t nowNs);
    /// Pacing rate for packets of @p wireBytes: below one packet, one packet per rtt / cwnd;
    /// else @p lineRateBps (the window alone limits).
    double Rate(double wireBytes, double lineRateBps) const;

    double cwnd{1};           //!< packets
    double rttNs{0};          //!< latest RTT sample
    double lastTargetNs{0};   //!< target at the last ACK (for traces and tests)
    int64_t tLastDecreaseNs{-1}; //!< -1: never
    uint32_t retransmits{0};

  private:
    bool CanDecrease(int64_t nowNs) const;
    bool Finish(double prev, int64_t nowNs);
    const SwiftParams* m_p{nullptr};
};

} // namespace ns3

#endif
