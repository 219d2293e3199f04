// TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the
// Datacenter", SIGCOMM 2015, Algorithm 1) rate arithmetic, free of events.
// The NIC feeds one RTT sample per completion event (a segment of ACKed
// bytes, 16-64 KB in the paper), measured from the data packet's NIC send
// timestamp echoed by the ACK.
//
//   rtt_diff <- (1 - alpha) rtt_diff + alpha (new_rtt - prev_rtt)
//   g = rtt_diff / minRTT
//   new_rtt < Tlow:  R <- R + delta
//   new_rtt > Thigh: R <- R (1 - beta (1 - Thigh/new_rtt))
//   g <= 0:          R <- R + N delta (N = 5 after haiThreshold negative
//                    gradients in a row: hyper-active increase, else 1)
//   else:            R <- R (1 - beta g)
//   R stays within [minRate, lineRate].  The first sample only sets prev_rtt.
#ifndef HETEROSIM_TIMELY_H
#define HETEROSIM_TIMELY_H

#include <cstdint>

namespace ns3
{

struct TimelyParams
{
    double alpha{0.875};      //!< EWMA weight of the newest RTT difference
    double beta{0.8};         //!< multiplicative decrease factor
    double tLowNs{50000};
    double tHighNs{500000};
    double minRttNs{20000};   //!< normalizes the gradient
    double deltaBps{100e6};   //!< additive step
    uint32_t haiThreshold{5}; //!< negative gradients in a row before HAI
    uint32_t haiFactor{5};    //!< N in HAI mode
    double lineRateBps{100e9};
    double minRateBps{100e6};
};

class TimelyRp
{
  public:
    enum Action
    {
        NONE = 0,      //!< first sample
        LOW = 1,       //!< below Tlow: additive increase
        HIGH = 2,      //!< above Thigh: multiplicative decrease
        INCREASE = 3,  //!< non-positive gradient: additive (or HAI) increase
        HAI = 4,
        DECREASE = 5,  //!< positive gradient: multiplicative decrease
    };

    void Init(const TimelyParams* p);
    Action OnRtt(double rttNs);

    double rate{0};
    double prevRttNs{0};
    double rttDiffNs{0};
    uint32_t negGradients{0};
    bool havePrev{false};

  private:
    void Clamp();
    const TimelyParams* m_p{nullptr};
};

} // namespace ns3

#endif
