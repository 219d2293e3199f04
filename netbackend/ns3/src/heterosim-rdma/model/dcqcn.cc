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
    alphaCnp = decreaseCnp = false;
    alphaNextNs = gridNs = 0;
}

void
DcqcnRp::Cut()
{
    // Without clamping, RT moves to RC only when an increase event happened
    // since the last cut (HPCC simulator: rpTimeStage != 0).
    if (m_p->clampTargetRate || timerStage != 0 || byteStage != 0)
    {
        target = rate;
    }
    // The minimum decrease factor bounds one cut (NVIDIA rpg_min_dec_fac); 0 leaves
    // RC (1 - alpha/2) as it was (alpha <= 1 keeps that factor >= 0.5 > 0).
    rate = std::max(m_p->minRateBps, rate * std::max(1.0 - alpha / 2.0, m_p->minDecreaseFactor));
    timerStage = byteStage = 0;
    bytesSinceEvent = 0;
}

double
DcqcnRp::AlphaAt(int64_t nowNs) const
{
    if (!cnpSeen)
    {
        return alpha;
    }
    if (!m_p->vendor)
    {
        const int64_t k = nowNs > alphaRefNs ? (nowNs - alphaRefNs) / m_p->alphaIntervalNs : 0;
        return k > 0 ? alpha * std::pow(1.0 - m_p->g, static_cast<double>(k)) : alpha;
    }
    if (nowNs < alphaNextNs)
    {
        return alpha;
    }
    const int64_t periods = (nowNs - alphaNextNs) / m_p->alphaIntervalNs + 1;
    // The first period that ended may have seen a CNP; the rest saw none.
    double a = alphaCnp ? (1.0 - m_p->g) * alpha + m_p->g : (1.0 - m_p->g) * alpha;
    if (periods > 1)
    {
        a *= std::pow(1.0 - m_p->g, static_cast<double>(periods - 1));
    }
    return a;
}

void
DcqcnRp::CatchUpAlpha(int64_t nowNs)
{
    if (!cnpSeen || nowNs < alphaNextNs)
    {
        return;
    }
    const int64_t periods = (nowNs - alphaNextNs) / m_p->alphaIntervalNs + 1;
    alpha = AlphaAt(nowNs);
    alphaCnp = false;
    alphaNextNs += periods * m_p->alphaIntervalNs;
}

int64_t
DcqcnRp::NextDecreaseCheckNs(int64_t nowNs) const
{
    if (!cnpSeen)
    {
        return -1;
    }
    if (nowNs <= gridNs)
    {
        return gridNs;
    }
    const int64_t period = std::max<int64_t>(1, m_p->rateDecreaseIntervalNs);
    const int64_t k = (nowNs - gridNs + period - 1) / period;
    return gridNs + k * period;
}

bool
DcqcnRp::OnDecreaseCheck(int64_t nowNs)
{
    CatchUpAlpha(nowNs);
    if (!decreaseCnp)
    {
        return false;
    }
    decreaseCnp = false;
    Cut();
    lastCutNs = nowNs;
    return true;
}

bool
DcqcnRp::OnCnp(int64_t nowNs)
{
    if (m_p->vendor)
    {
        if (!cnpSeen)
        {
            // First CNP: alpha = 1, both period grids start now; this CNP
            // still counts for the first cut check (not for the alpha period).
            cnpSeen = true;
            alpha = 1.0;
            alphaCnp = false;
            alphaNextNs = nowNs + m_p->alphaIntervalNs;
            gridNs = nowNs + std::max<int64_t>(1, m_p->rateDecreaseIntervalNs) + 1;
            target = rate;
        }
        else
        {
            CatchUpAlpha(nowNs);
            alphaCnp = true;
        }
        decreaseCnp = true;
        return false;
    }
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
    Cut();
    alpha = (1.0 - m_p->g) * alpha + m_p->g;
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

std::vector<double>
DcqcnRp::Save(int64_t nowNs, double incLeftNs, double decLeftNs) const
{
    return {rate,
            target,
            alpha,
            static_cast<double>(timerStage),
            static_cast<double>(byteStage),
            static_cast<double>(bytesSinceEvent),
            lastCutNs >= 0 ? 1.0 : 0.0,
            static_cast<double>(lastCutNs - nowNs),
            static_cast<double>(alphaRefNs - nowNs),
            cnpSeen ? 1.0 : 0.0,
            alphaCnp ? 1.0 : 0.0,
            decreaseCnp ? 1.0 : 0.0,
            static_cast<double>(alphaNextNs - nowNs),
            static_cast<double>(gridNs - nowNs),
            incLeftNs,
            decLeftNs};
}

bool
DcqcnRp::Restore(const std::vector<double>& s, int64_t nowNs, double& incLeftNs, double& decLeftNs)
{
    if (s.size() != 16)
    {
        return false;
    }
    auto at = [nowNs](double rel) { return nowNs + static_cast<int64_t>(std::llround(rel)); };
    rate = s[0];
    target = s[1];
    alpha = s[2];
    timerStage = static_cast<uint32_t>(s[3]);
    byteStage = static_cast<uint32_t>(s[4]);
    bytesSinceEvent = static_cast<uint64_t>(s[5]);
    lastCutNs = s[6] > 0 ? at(s[7]) : -1;
    alphaRefNs = at(s[8]);
    cnpSeen = s[9] > 0;
    alphaCnp = s[10] > 0;
    decreaseCnp = s[11] > 0;
    alphaNextNs = at(s[12]);
    gridNs = at(s[13]);
    incLeftNs = s[14];
    decLeftNs = s[15];
    return true;
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
