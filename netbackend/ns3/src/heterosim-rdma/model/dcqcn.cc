#include "dcqcn.h"

#include <algorithm>
#include <cmath>

namespace ns3
{

void
DcqcnRp::Init(const DcqcnParams* p, int64_t nowNs)
{
    m_p = p;
    rate = p->lineRateBps;
    target = p->lineRateBps;
    alpha = 1.0;
    timerStage = byteStage = 0;
    bytesSinceEvent = 0;
    lastCutNs = -1;
    alphaRefNs = nowNs;
    cnpSeen = false;
}

bool
DcqcnRp::OnCnp(int64_t nowNs)
{
    if (!cnpSeen)
    {
        alpha = 1.0;
    }
    else if (nowNs > alphaRefNs)
    {
        const int64_t k = (nowNs - alphaRefNs) / m_p->alphaIntervalNs;
        if (k > 0)
        {
            alpha *= std::pow(1.0 - m_p->g, static_cast<double>(k));
        }
    }
    alphaRefNs = nowNs; // every CNP restarts the alpha timer
    cnpSeen = true;
    if (lastCutNs >= 0 && nowNs - lastCutNs < m_p->rateDecreaseIntervalNs)
    {
        return false;
    }
    lastCutNs = nowNs;
    target = rate;
    rate = std::max(m_p->minRateBps, rate * (1.0 - alpha / 2.0));
    alpha = (1.0 - m_p->g) * alpha + m_p->g;
    timerStage = byteStage = 0;
    bytesSinceEvent = 0;
    return true;
}

DcqcnRp::Stage
DcqcnRp::Increase()
{
    const uint32_t bc = m_p->byteCounterBytes > 0 ? byteStage : timerStage;
    const uint32_t hi = std::max(timerStage, bc);
    const uint32_t lo = std::min(timerStage, bc);
    const uint32_t F = m_p->fastRecoveryStages;
    Stage stage;
    if (hi < F)
    {
        stage = FAST_RECOVERY;
    }
    else if (lo > F)
    {
        stage = HYPER;
        target += m_p->rateHaiBps;
    }
    else
    {
        stage = ADDITIVE;
        target += m_p->rateAiBps;
    }
    target = std::min(target, m_p->lineRateBps);
    rate = std::min((rate + target) / 2.0, m_p->lineRateBps);
    return stage;
}

DcqcnRp::Stage
DcqcnRp::OnIncreaseTimer()
{
    // Stages are counted before this event: the first F events after a cut
    // are fast recovery.
    const Stage s = Increase();
    timerStage++;
    return s;
}

bool
DcqcnRp::OnBytesSent(uint64_t bytes)
{
    if (m_p->byteCounterBytes == 0)
    {
        return false;
    }
    bytesSinceEvent += bytes;
    if (bytesSinceEvent < m_p->byteCounterBytes)
    {
        return false;
    }
    bytesSinceEvent = 0;
    if (!NeedsIncrease())
    {
        return false;
    }
    Increase();
    byteStage++;
    return true;
}

bool
DcqcnRp::NeedsIncrease() const
{
    return rate < m_p->lineRateBps || target < m_p->lineRateBps;
}

double
EcnMarkProbability(double qBytes, double kminBytes, double kmaxBytes, double pmax)
{
    if (qBytes <= kminBytes)
    {
        return 0.0;
    }
    if (qBytes > kmaxBytes)
    {
        return 1.0;
    }
    if (kmaxBytes <= kminBytes)
    {
        return 1.0;
    }
    return pmax * (qBytes - kminBytes) / (kmaxBytes - kminBytes);
}

} // namespace ns3
