#include "fluid-episode.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <random>
#include <unordered_map>
#include <utility>

namespace ns3
{

namespace
{
using Comp = std::vector<std::pair<uint32_t, double>>; //!< (flow, bytes)

struct Hop
{
    int port; //!< -1: the NIC's own link
    double rateBps;
    double extraNs;
};

struct Flow
{
    uint32_t nic;
    int64_t start;
    double wire;
    double pkt;
    std::vector<Hop> hops;
    std::vector<double> rxDelay; //!< from leaving hop j to the receiver
    double ackNs;
    int64_t cnpInterval;
    DcqcnParams params;
    DcqcnRp rp;
    int64_t incAt{-1}; //!< RdmaNic's increase timer (-1: not armed)
    int64_t decAt{-1}; //!< vendor cut check (-1: none pending)
    std::deque<int64_t> cnps;
    double lastCnp{-1e30};
    double sent{0};
    double delivered{0};
    double finish{-1};
    double lastRx{0}; //!< when the latest bytes forwarded to the receiver arrive there
    uint64_t cuts{0};
    std::unordered_map<int64_t, double> rx;  //!< bytes reaching the receiver per step
    std::unordered_map<int64_t, double> haz; //!< mark hazard reaching the receiver per step
};

struct Chunk
{
    Comp comp;
    double total;
};

struct Port
{
    double bytesPerNs;
    double kmin;
    double kmax;
    double pmax;
    std::deque<Chunk> q;
    double depth{0};
    double maxDepth{0};
    double marks{0};
    std::unordered_map<int64_t, Comp> arr; //!< arrivals per step
};

void
AddTo(Comp& c, uint32_t flow, double b)
{
    for (auto& [f, x] : c)
    {
        if (f == flow)
        {
            x += b;
            return;
        }
    }
    c.emplace_back(flow, b);
}
} // namespace

struct FluidEpisode::Impl
{
    int64_t dt;
    std::mt19937_64 rng;
    std::uniform_real_distribution<double> u{0.0, 1.0};
    std::vector<Port> ports;
    std::vector<double> nicBps;
    std::deque<Flow> flows; // stable addresses: DcqcnRp points at its params
    int64_t now{0};

    // Bytes that cross a point uniformly over [t0, t1) land in the steps they overlap.
    template <class F>
    void Spread(double t0, double t1, double bytes, F&& put)
    {
        const auto step = static_cast<double>(dt);
        auto k = static_cast<int64_t>(std::floor(t0 / step));
        if (t1 <= t0)
        {
            put(k, bytes);
            return;
        }
        for (; static_cast<double>(k) * step < t1; k++)
        {
            const double lo = std::max(t0, static_cast<double>(k) * step);
            const double hi = std::min(t1, static_cast<double>(k + 1) * step);
            if (hi > lo)
            {
                put(k, bytes * (hi - lo) / (t1 - t0));
            }
        }
    }

    // Store and forward: a switch sends a packet once it has all of it, so a byte it starts
    // serving at t is at the next node one packet time later; the NIC's own link is the fluid
    // sending itself (its bytes are on the wire as they are sent).
    static double Serialization(const Flow& f, size_t hop)
    {
        return hop == 0 ? 0.0 : f.pkt * 8e9 / f.hops[hop].rateBps;
    }

    // @p bytes of flow @p i leave hop @p hop uniformly over [t0, t1).
    void Forward(uint32_t i, size_t hop, double t0, double t1, double bytes)
    {
        Flow& f = flows[i];
        const double shift = Serialization(f, hop) + f.hops[hop].extraNs;
        if (hop + 1 < f.hops.size())
        {
            Port& p = ports[f.hops[hop + 1].port];
            Spread(t0 + shift, t1 + shift, bytes, [&](int64_t k, double b) { AddTo(p.arr[k], i, b); });
        }
        else
        {
            Spread(t0 + shift, t1 + shift, bytes, [&](int64_t k, double b) { f.rx[k] += b; });
            f.lastRx = std::max(f.lastRx, t1 + shift);
        }
    }

    // RdmaNic::OnDecreaseCheck / OnIncreaseTimer for the timers due by @p until.
    void Timers(Flow& f, int64_t until)
    {
        for (;;)
        {
            int64_t next = -1;
            for (int64_t x : {f.incAt, f.decAt})
            {
                if (x >= 0 && (next < 0 || x < next))
                {
                    next = x;
                }
            }
            if (next < 0 || next > until)
            {
                return;
            }
            if (f.decAt == next)
            {
                f.decAt = -1;
                if (f.rp.OnDecreaseCheck(next))
                {
                    f.cuts++;
                    f.incAt = next + f.params.rateIncreaseIntervalNs;
                }
            }
            else
            {
                f.rp.OnIncreaseTimer();
                f.incAt = f.rp.NeedsIncrease() ? next + f.params.rateIncreaseIntervalNs : -1;
            }
        }
    }

    // RdmaNic::OnCnp.
    void Cnp(Flow& f, int64_t t)
    {
        if (f.rp.OnCnp(t))
        {
            f.cuts++;
            f.incAt = t + f.params.rateIncreaseIntervalNs;
        }
        else if (f.params.vendor && f.decAt < 0)
        {
            f.decAt = f.rp.NextDecreaseCheckNs(t);
        }
    }
};

FluidEpisode::FluidEpisode(int64_t dtNs, uint64_t seed)
    : m_impl(std::make_unique<Impl>())
{
    m_impl->dt = std::max<int64_t>(1, dtNs);
    m_impl->rng.seed(seed);
}

FluidEpisode::~FluidEpisode() = default;

uint32_t
FluidEpisode::AddPort(double rateBps, double kminBytes, double kmaxBytes, double pmax)
{
    m_impl->ports.push_back(Port{rateBps / 8e9, kminBytes, kmaxBytes, pmax, {}, 0, 0, 0, {}});
    return static_cast<uint32_t>(m_impl->ports.size() - 1);
}

uint32_t
FluidEpisode::AddNic(double lineBps)
{
    m_impl->nicBps.push_back(lineBps);
    return static_cast<uint32_t>(m_impl->nicBps.size() - 1);
}

uint32_t
FluidEpisode::AddFlow(uint32_t nic, int64_t startNs, double wireBytes, double pktWireBytes,
                      const std::vector<double>& hops, double ackNs, const DcqcnParams& params,
                      int64_t cnpIntervalNs, const std::vector<double>& rpState)
{
    Impl& m = *m_impl;
    m.flows.emplace_back();
    Flow& f = m.flows.back();
    f.nic = nic;
    f.start = startNs;
    f.wire = wireBytes;
    f.pkt = pktWireBytes;
    for (size_t j = 0; j + 2 < hops.size(); j += 3)
    {
        f.hops.push_back(Hop{static_cast<int>(hops[j]), hops[j + 1], hops[j + 2]});
    }
    f.rxDelay.assign(f.hops.size(), 0.0);
    double acc = 0;
    for (size_t j = f.hops.size(); j-- > 0;)
    {
        acc += Impl::Serialization(f, j) + f.hops[j].extraNs;
        f.rxDelay[j] = acc;
    }
    f.ackNs = ackNs;
    f.cnpInterval = cnpIntervalNs;
    f.params = params;
    f.rp.Init(&f.params, startNs);
    double inc = -1;
    double dec = -1;
    if (f.rp.Restore(rpState, startNs, inc, dec))
    {
        f.incAt = inc >= 0 ? startNs + std::llround(inc) : -1;
        f.decAt = dec >= 0 ? startNs + std::llround(dec) : -1;
    }
    return static_cast<uint32_t>(m.flows.size() - 1);
}

int64_t
FluidEpisode::Run(int64_t untilNs)
{
    Impl& m = *m_impl;
    const int64_t dt = m.dt;
    const auto n = static_cast<uint32_t>(m.flows.size());
    if (n == 0)
    {
        return m.now;
    }
    int64_t step = m.now / dt;
    if (m.now == 0)
    {
        int64_t first = m.flows[0].start;
        for (const Flow& f : m.flows)
        {
            first = std::min(first, f.start);
        }
        step = first / dt;
    }
    std::vector<double> out(n, 0.0);
    std::vector<uint32_t> touched;
    std::vector<uint32_t> ready;
    for (;; step++)
    {
        const int64_t t = step * dt;
        const int64_t tEnd = t + dt;
        if (untilNs >= 0 && t >= untilNs)
        {
            break;
        }
        bool any = false;
        // 1. reaction points: CNPs that arrive in this step, then timers
        for (Flow& f : m.flows)
        {
            if (f.finish >= 0)
            {
                continue;
            }
            any = true;
            while (!f.cnps.empty() && f.cnps.front() < tEnd)
            {
                const int64_t tc = f.cnps.front();
                f.cnps.pop_front();
                m.Timers(f, tc);
                m.Cnp(f, tc);
            }
            m.Timers(f, tEnd - 1);
        }
        if (!any)
        {
            break;
        }
        // 2. each NIC: round robin among its ready flows, each at most at its rate
        for (uint32_t nic = 0; nic < m.nicBps.size(); nic++)
        {
            ready.clear();
            for (uint32_t i = 0; i < n; i++)
            {
                const Flow& f = m.flows[i];
                if (f.nic == nic && f.start < tEnd && f.sent < f.wire)
                {
                    ready.push_back(i);
                }
            }
            if (ready.empty())
            {
                continue;
            }
            auto want = [&](uint32_t i) {
                const Flow& f = m.flows[i];
                const double avail = static_cast<double>(dt - std::max<int64_t>(0, f.start - t));
                return std::min(f.rp.rate / 8e9 * avail, f.wire - f.sent);
            };
            std::sort(ready.begin(), ready.end(), [&](uint32_t a, uint32_t b) { return want(a) < want(b); });
            double left = m.nicBps[nic] / 8e9 * static_cast<double>(dt);
            size_t k = ready.size();
            for (uint32_t i : ready)
            {
                Flow& f = m.flows[i];
                const double share = left / static_cast<double>(k);
                const double give = std::min(want(i), share);
                left -= give;
                k--;
                if (give <= 0)
                {
                    continue;
                }
                f.sent += give;
                f.rp.OnBytesSent(static_cast<uint64_t>(give));
                // sent at its own rate or its share of the NIC, whichever is lower
                const double t0 = static_cast<double>(std::max(t, f.start));
                const double avail = static_cast<double>(tEnd) - t0;
                const double speed = std::min(f.rp.rate / 8e9, share / avail);
                m.Forward(i, 0, t0, t0 + std::min(avail, give / speed), give);
            }
        }
        // 3. ports serve their FIFOs; marks on the depth left
        for (uint32_t pi = 0; pi < m.ports.size(); pi++)
        {
            Port& p = m.ports[pi];
            auto it = p.arr.find(step);
            if (it != p.arr.end())
            {
                double tot = 0;
                for (const auto& [i, b] : it->second)
                {
                    tot += b;
                }
                p.q.push_back(Chunk{std::move(it->second), tot});
                p.arr.erase(it);
                p.depth += tot;
            }
            double cap = p.bytesPerNs * static_cast<double>(dt);
            double served = 0; // bytes served so far in this step: FIFO order within it
            touched.clear();
            while (cap > 1e-9 && !p.q.empty())
            {
                Chunk& c = p.q.front();
                const double take = std::min(cap, c.total);
                const double frac = take / c.total;
                const double t0 = static_cast<double>(t) + served / p.bytesPerNs;
                served += take;
                const double t1 = static_cast<double>(t) + served / p.bytesPerNs;
                for (auto& [i, b] : c.comp)
                {
                    if (out[i] == 0.0)
                    {
                        touched.push_back(i);
                    }
                    out[i] += b * frac;
                    Flow& f = m.flows[i];
                    size_t j = 0;
                    while (f.hops[j].port != static_cast<int>(pi))
                    {
                        j++;
                    }
                    m.Forward(i, j, t0, t1, b * frac);
                    b *= 1.0 - frac;
                }
                c.total -= take;
                cap -= take;
                p.depth -= take;
                if (c.total <= 1e-9)
                {
                    p.q.pop_front();
                }
            }
            if (p.depth < 1e-6)
            {
                p.depth = 0;
            }
            p.maxDepth = std::max(p.maxDepth, p.depth);
            const double prob = EcnMarkProbability(p.depth, p.kmin, p.kmax, p.pmax);
            for (uint32_t i : touched)
            {
                const double b = out[i];
                out[i] = 0.0;
                Flow& f = m.flows[i];
                size_t j = 0;
                while (f.hops[j].port != static_cast<int>(pi))
                {
                    j++;
                }
                if (prob > 0)
                {
                    const double pk = b / f.pkt;
                    p.marks += pk * prob;
                    const double h =
                        prob < 1.0 ? -pk * std::log1p(-prob) : std::numeric_limits<double>::infinity();
                    const auto kRx = static_cast<int64_t>(
                        std::floor((static_cast<double>(t) + f.rxDelay[j]) / static_cast<double>(dt)));
                    f.haz[kRx] += h;
                }
            }
        }
        // 4. receivers: delivered bytes; CE -> CNP back to the sender
        for (Flow& f : m.flows)
        {
            if (f.finish >= 0)
            {
                continue;
            }
            auto r = f.rx.find(step);
            if (r != f.rx.end())
            {
                const double b = r->second;
                f.rx.erase(r);
                f.delivered += b;
                if (f.delivered >= f.wire - 1e-6 && f.sent >= f.wire - 1e-6)
                {
                    f.finish = f.lastRx;
                }
            }
            auto hz = f.haz.find(step);
            if (hz != f.haz.end())
            {
                const double h = hz->second;
                f.haz.erase(hz);
                if (std::isinf(h) || m.u(m.rng) < 1.0 - std::exp(-h))
                {
                    const double tCe = static_cast<double>(t) + m.u(m.rng) * static_cast<double>(dt);
                    if (f.cnpInterval > 0)
                    {
                        if (tCe - f.lastCnp < static_cast<double>(f.cnpInterval))
                        {
                            continue;
                        }
                        f.lastCnp = tCe;
                    }
                    f.cnps.push_back(static_cast<int64_t>(tCe + f.ackNs));
                }
            }
        }
    }
    m.now = step * dt;
    return m.now;
}

std::vector<double>
FluidEpisode::FinishNs() const
{
    std::vector<double> out;
    for (const Flow& f : m_impl->flows)
    {
        out.push_back(f.finish);
    }
    return out;
}

std::vector<double>
FluidEpisode::RpState(uint32_t flow, int64_t nowNs) const
{
    const Flow& f = m_impl->flows.at(flow);
    auto left = [nowNs](int64_t at) { return at >= 0 ? static_cast<double>(at - nowNs) : -1.0; };
    return f.rp.Save(nowNs, left(f.incAt), left(f.decAt));
}

double
FluidEpisode::MaxQueueBytes() const
{
    double m = 0;
    for (const Port& p : m_impl->ports)
    {
        m = std::max(m, p.maxDepth);
    }
    return m;
}

double
FluidEpisode::Marks() const
{
    double m = 0;
    for (const Port& p : m_impl->ports)
    {
        m += p.marks;
    }
    return m;
}

uint64_t
FluidEpisode::Cuts() const
{
    uint64_t c = 0;
    for (const Flow& f : m_impl->flows)
    {
        c += f.cuts;
    }
    return c;
}

} // namespace ns3
