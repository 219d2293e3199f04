#include "timely.h"

#include <algorithm>

namespace ns3
{

void
TimelyRp::Init(const TimelyParams* p)
{
    m_p = p;
    rate = p->lineRateBps;
    prevRttNs = 0;
    rttDiffNs = 0;
    negGradients = 0;
    havePrev = false;
}

void
TimelyRp::Clamp()
{
    rate = std::clamp(rate, m_p->minRateBps, m_p->lineRateBps);
}

TimelyRp::Action
TimelyRp::OnRtt(double rttNs)
{
    if (!havePrev)
    {
        havePrev = true;
        prevRttNs = rttNs;
        return NONE;
    }
    const double newDiff = rttNs - prevRttNs;
    prevRttNs = rttNs;
    rttDiffNs = (1.0 - m_p->alpha) * rttDiffNs + m_p->alpha * newDiff;
    const double gradient = rttDiffNs / m_p->minRttNs;
    Action a;
    if (rttNs < m_p->tLowNs)
    {
        rate += m_p->deltaBps;
        a = LOW;
    }
    else if (rttNs > m_p->tHighNs)
    {
        rate *= 1.0 - m_p->beta * (1.0 - m_p->tHighNs / rttNs);
        negGradients = 0;
        a = HIGH;
    }
    else if (gradient <= 0)
    {
        negGradients++;
        const bool hai = negGradients >= m_p->haiThreshold;
        rate += (hai ? m_p->haiFactor : 1) * m_p->deltaBps;
        a = hai ? HAI : INCREASE;
    }
    else
    {
        negGradients = 0;
        rate *= 1.0 - m_p->beta * gradient;
        a = DECREASE;
    }
    Clamp();
    return a;
}

} // namespace ns3
