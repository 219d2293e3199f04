#include "dctcp.h"

#include <algorithm>

namespace ns3
{

void
DctcpRp::Init(const DctcpParams* p)
{
    m_p = p;
    window = std::max(p->maxWindowBytes, p->mtuBytes);
    alpha = 1.0;
    acked = windowEnd = windowAcked = windowMarked = cwrEnd = 0;
    cwr = false;
}

bool
DctcpRp::OnAck(uint64_t ackSeq, bool ece, uint64_t sndNxt)
{
    const uint64_t newly = ackSeq > acked ? ackSeq - acked : 0;
    acked = std::max(acked, ackSeq);
    windowAcked += newly;
    if (ece)
    {
        windowMarked += newly;
    }
    const double before = window;
    if (ackSeq > windowEnd)
    {
        if (windowAcked > 0)
        {
            const double m = static_cast<double>(windowMarked) / static_cast<double>(windowAcked);
            alpha = (1.0 - m_p->g) * alpha + m_p->g * m;
        }
        windowAcked = windowMarked = 0;
        windowEnd = sndNxt;
    }
    if (cwr && ackSeq > cwrEnd)
    {
        cwr = false;
    }
    if (ece && !cwr)
    {
        window = std::max(m_p->mtuBytes, window * (1.0 - alpha / 2.0));
        cwr = true;
        cwrEnd = sndNxt;
    }
    else if (!ece && newly > 0)
    {
        window = std::min(std::max(m_p->maxWindowBytes, m_p->mtuBytes),
                          window + m_p->mtuBytes * static_cast<double>(newly) / window);
    }
    return window != before;
}

} // namespace ns3
