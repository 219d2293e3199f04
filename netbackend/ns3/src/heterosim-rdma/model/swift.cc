#include "swift.h"

#include <algorithm>
#include <cmath>

namespace ns3
{

double
SwiftParams::FlowScaling(double cwnd) const
{
    if (fsRangeNs <= 0)
    {
        return 0.0;
    }
    const double alpha = fsRangeNs / (1.0 / std::sqrt(fsMinCwnd) - 1.0 / std::sqrt(fsMaxCwnd));
    const double beta = -alpha / std::sqrt(fsMaxCwnd);
    return std::max(0.0, std::min(alpha / std::sqrt(cwnd) + beta, fsRangeNs));
}

double
SwiftParams::TargetDelay(double cwnd, uint32_t hops) const
{
    return baseTargetNs + hops * hopScaleNs + FlowScaling(cwnd);
}

void
SwiftRp::Init(const SwiftParams* p, double initCwnd, double rtt)
{
    m_p = p;
    cwnd = std::clamp(initCwnd, p->minCwnd, p->maxCwnd);
    rttNs = rtt;
    lastTargetNs = p->TargetDelay(cwnd, 0);
    tLastDecreaseNs = -1;
    retransmits = 0;
}

bool
SwiftRp::CanDecrease(int64_t nowNs) const
{
    return tLastDecreaseNs < 0 || static_cast<double>(nowNs - tLastDecreaseNs) >= rttNs;
}

bool
SwiftRp::Finish(double prev, int64_t nowNs)
{
    cwnd = std::clamp(cwnd, m_p->minCwnd, m_p->maxCwnd);
    if (cwnd < prev)
    {
        tLastDecreaseNs = nowNs;
    }
    return cwnd != prev;
}

bool
SwiftRp::OnAck(double delayNs, double ackedPackets, int64_t nowNs, uint32_t hops)
{
    const double prev = cwnd;
    const bool canDecrease = CanDecrease(nowNs); // against the RTT known before this ACK (Algorithm 1)
    rttNs = delayNs;
    retransmits = 0;
    const double target = m_p->TargetDelay(cwnd, hops);
    lastTargetNs = target;
    if (delayNs < target)
    {
        cwnd += cwnd >= 1.0 ? m_p->aiPackets / cwnd * ackedPackets : m_p->aiPackets * ackedPackets;
    }
    else if (canDecrease)
    {
        cwnd *= std::max(1.0 - m_p->betaMd * (delayNs - target) / delayNs, 1.0 - m_p->maxMdf);
    }
    return Finish(prev, nowNs);
}

bool
SwiftRp::OnRetransmit(bool timeout, int64_t nowNs)
{
    const double prev = cwnd;
    if (timeout)
    {
        if (++retransmits >= m_p->retxResetThreshold)
        {
            cwnd = m_p->minCwnd;
        }
        else if (CanDecrease(nowNs))
        {
            cwnd *= 1.0 - m_p->maxMdf;
        }
    }
    else
    {
        retransmits = 0;
        if (CanDecrease(nowNs))
        {
            cwnd *= 1.0 - m_p->maxMdf;
        }
    }
    return Finish(prev, nowNs);
}

double
SwiftRp::Rate(double wireBytes, double lineRateBps) const
{
    if (cwnd >= 1.0 || rttNs <= 0)
    {
        return lineRateBps;
    }
    return std::min(lineRateBps, cwnd * wireBytes * 8e9 / rttNs);
}

} // namespace ns3
