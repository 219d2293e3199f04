#include "hpcc.h"

#include <algorithm>

namespace ns3
{

void
HpccRp::Init(const HpccParams* p)
{
    m_p = p;
    window = wc = p->MaxWindow(); // start at line rate (one BDP in flight)
    u = 0;
    uValid = false;
    incStage = 0;
    lastUpdateSeq = 0;
    prev.nHops = 0;
    havePrev = false;
}

double
HpccRp::MeasureInflight(const RdmaIntTag& tag)
{
    const double T = m_p->baseRttNs;
    double uMax = -1;
    double tau = 0;
    for (uint32_t i = 0; i < tag.nHops; ++i)
    {
        const RdmaIntHop& now = tag.hops[i];
        const RdmaIntHop& old = prev.hops[i];
        const double dt = static_cast<double>(now.tsNs - old.tsNs);
        if (dt <= 0 || now.rateBps <= 0)
        {
            continue; // same dequeue instant or an idle record: no rate sample
        }
        const double bBytesPerNs = now.rateBps / 8e9;
        const double txRate = static_cast<double>(now.txBytes - old.txBytes) / dt; // bytes/ns
        const double qlen = static_cast<double>(std::min(now.qlenBytes, old.qlenBytes));
        const double ui = qlen / (bBytesPerNs * T) + txRate / bBytesPerNs;
        if (ui > uMax)
        {
            uMax = ui;
            tau = dt;
        }
    }
    if (uMax < 0)
    {
        return u;
    }
    tau = std::min(tau, T);
    if (!uValid)
    {
        u = uMax;
        uValid = true;
    }
    else
    {
        u = (1.0 - tau / T) * u + (tau / T) * uMax;
    }
    return u;
}

double
HpccRp::ComputeWind(double uNow, bool updateWc)
{
    double w;
    if (uNow >= m_p->eta || incStage >= m_p->maxStage)
    {
        // Multiplicative step towards eta; U == 0 (idle path) jumps to the cap.
        w = uNow > 0 ? wc / (uNow / m_p->eta) + m_p->wAiBytes : m_p->MaxWindow();
        w = std::clamp(w, m_p->MinWindow(), m_p->MaxWindow());
        if (updateWc)
        {
            incStage = 0;
            wc = w;
        }
    }
    else
    {
        w = std::clamp(wc + m_p->wAiBytes, m_p->MinWindow(), m_p->MaxWindow());
        if (updateWc)
        {
            incStage++;
            wc = w;
        }
    }
    return w;
}

bool
HpccRp::OnAck(const RdmaIntTag& tag, uint64_t ackSeq, uint64_t sndNxt)
{
    bool measured = false;
    if (havePrev && prev.nHops == tag.nHops && tag.nHops > 0)
    {
        const double uNow = MeasureInflight(tag);
        if (uValid)
        {
            const bool updateWc = ackSeq > lastUpdateSeq;
            if (updateWc)
            {
                lastUpdateSeq = sndNxt;
            }
            window = ComputeWind(uNow, updateWc);
            measured = true;
        }
    }
    prev = tag; // a path of another length (new route) starts over
    havePrev = true;
    return measured;
}

double
HpccRp::Rate() const
{
    return std::min(m_p->lineRateBps, window * 8e9 / m_p->baseRttNs);
}

} // namespace ns3
