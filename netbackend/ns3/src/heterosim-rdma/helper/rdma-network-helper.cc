#include "rdma-network-helper.h"

#include "ns3/double.h"
#include "ns3/log.h"
#include "ns3/simulator.h"
#include "ns3/uinteger.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <sstream>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaNetworkHelper");
NS_OBJECT_ENSURE_REGISTERED(RdmaNetworkHelper);

TypeId
RdmaNetworkHelper::GetTypeId()
{
    static TypeId tid =
        TypeId("ns3::RdmaNetworkHelper")
            .SetParent<Object>()
            .SetGroupName("HeterosimRdma")
            .AddConstructor<RdmaNetworkHelper>()
            .AddAttribute("QueueSampleInterval",
                          "Sample every switch egress queue this often.",
                          TimeValue(MicroSeconds(10)),
                          MakeTimeAccessor(&RdmaNetworkHelper::m_sampleInterval),
                          MakeTimeChecker())
            .AddAttribute("StallLimit",
                          "Stop with a deadlock/stall status after this long without delivery.",
                          TimeValue(MilliSeconds(50)),
                          MakeTimeAccessor(&RdmaNetworkHelper::m_stallLimit),
                          MakeTimeChecker())
            // Same patience as StallLimit (Ns3Backend passes network.stall_limit_ns
            // to both): the watchdog stays the last resort for what this misses.
            .AddAttribute("DeadlockHoldTime",
                          "Report a PFC deadlock when a cycle of paused switch ports has "
                          "dequeued nothing for this long (0 = no cycle detection).",
                          TimeValue(MilliSeconds(50)),
                          MakeTimeAccessor(&RdmaNetworkHelper::m_deadlockHold),
                          MakeTimeChecker(Time(0)))
            .AddAttribute("WallLimit",
                          "Stop after this many wall-clock seconds inside Run.",
                          DoubleValue(3600),
                          MakeDoubleAccessor(&RdmaNetworkHelper::m_wallLimitS),
                          MakeDoubleChecker<double>(0))
            .AddAttribute("MaxQueueSamples",
                          "Cap on stored queue samples (non-empty queues only).",
                          UintegerValue(2000000),
                          MakeUintegerAccessor(&RdmaNetworkHelper::m_maxSamples),
                          MakeUintegerChecker<uint64_t>())
            .AddAttribute("Seed",
                          "Derives the per-switch ECMP salts when the fabric gives none.  ECN draws "
                          "come from ns-3's RngSeedManager seed and run (switch s on stream s).",
                          UintegerValue(0),
                          MakeUintegerAccessor(&RdmaNetworkHelper::m_seed),
                          MakeUintegerChecker<uint32_t>());
    return tid;
}

RdmaNetworkHelper::RdmaNetworkHelper() = default;
RdmaNetworkHelper::~RdmaNetworkHelper() = default;

std::vector<std::vector<std::vector<uint16_t>>>
RdmaNetworkHelper::ComputeRoutes(uint32_t nHosts, uint32_t nSwitches,
                                 const std::vector<std::vector<std::pair<uint32_t, uint16_t>>>& adjIn)
{
    const uint32_t n = nHosts + nSwitches;
    // Canonical ECMP order: by neighbour node index, then port (ports are
    // added in link order, so this is link index): netbackend.routing's order.
    auto adj = adjIn;
    for (auto& a : adj)
    {
        std::sort(a.begin(), a.end());
    }
    std::vector<std::vector<std::vector<uint16_t>>> routes(
        nSwitches, std::vector<std::vector<uint16_t>>(nHosts));
    std::vector<int32_t> dist(n);
    std::deque<uint32_t> frontier;
    for (uint32_t h = 0; h < nHosts; ++h)
    {
        // BFS from host h; paths never transit another host.
        std::fill(dist.begin(), dist.end(), -1);
        dist[h] = 0;
        frontier.assign(1, h);
        while (!frontier.empty())
        {
            const uint32_t u = frontier.front();
            frontier.pop_front();
            if (u < nHosts && u != h)
            {
                continue;
            }
            for (const auto& [v, port] : adj[u])
            {
                if (dist[v] < 0)
                {
                    dist[v] = dist[u] + 1;
                    frontier.push_back(v);
                }
            }
        }
        for (uint32_t s = 0; s < nSwitches; ++s)
        {
            const uint32_t u = nHosts + s;
            if (dist[u] < 0)
            {
                continue;
            }
            for (const auto& [v, port] : adj[u])
            {
                if (dist[v] == dist[u] - 1 && (v >= nHosts || v == h))
                {
                    routes[s][h].push_back(port);
                }
            }
        }
    }
    return routes;
}

std::vector<double>
RdmaNetworkHelper::MaxBaseRtts(uint32_t nHosts, const std::vector<std::vector<LinkEnd>>& wires,
                               uint32_t dataWireBytes, uint32_t ackWireBytes)
{
    // Per source host: BFS over hop count (paths never transit a host), with
    // the slowest equal-hop path's one-way times: propagation plus one data
    // packet's serialization per hop forward, one ACK's on the way back.
    const uint32_t n = wires.size();
    std::vector<double> out(nHosts, 0.0);
    std::vector<int32_t> dist(n);
    std::vector<double> fwd(n), rev(n);
    std::deque<uint32_t> frontier;
    for (uint32_t h = 0; h < nHosts; ++h)
    {
        std::fill(dist.begin(), dist.end(), -1);
        std::fill(fwd.begin(), fwd.end(), 0.0);
        std::fill(rev.begin(), rev.end(), 0.0);
        dist[h] = 0;
        frontier.assign(1, h);
        while (!frontier.empty())
        {
            const uint32_t u = frontier.front();
            frontier.pop_front();
            if (u < nHosts && u != h)
            {
                out[h] = std::max(out[h], fwd[u] + rev[u]);
                continue;
            }
            for (const LinkEnd& l : wires[u])
            {
                if (dist[l.peer] < 0)
                {
                    dist[l.peer] = dist[u] + 1;
                    frontier.push_back(l.peer);
                }
                if (dist[l.peer] == dist[u] + 1 && l.rateBps > 0)
                {
                    fwd[l.peer] = std::max(fwd[l.peer], fwd[u] + l.delayNs + dataWireBytes * 8e9 / l.rateBps);
                    rev[l.peer] = std::max(rev[l.peer], rev[u] + l.delayNs + ackWireBytes * 8e9 / l.rateBps);
                }
            }
        }
    }
    return out;
}

std::vector<uint16_t>
RdmaNetworkHelper::PathHops(uint32_t nHosts, const std::vector<std::vector<LinkEnd>>& wires, uint32_t src)
{
    // BFS over links (paths never transit a host): a host at distance d is d - 1 switches away.
    std::vector<int32_t> dist(wires.size(), -1);
    std::vector<uint16_t> out(nHosts, 0);
    std::deque<uint32_t> frontier(1, src);
    dist[src] = 0;
    while (!frontier.empty())
    {
        const uint32_t u = frontier.front();
        frontier.pop_front();
        if (u < nHosts && u != src)
        {
            out[u] = static_cast<uint16_t>(dist[u] - 1);
            continue;
        }
        for (const LinkEnd& l : wires[u])
        {
            if (dist[l.peer] < 0)
            {
                dist[l.peer] = dist[u] + 1;
                frontier.push_back(l.peer);
            }
        }
    }
    return out;
}

void
RdmaNetworkHelper::Build(const FabricSpec& fabric)
{
    const auto& hosts = fabric.hosts;
    const auto& switches = fabric.switches;
    const auto& linkA = fabric.linkA;
    const auto& linkB = fabric.linkB;
    const auto& rateBps = fabric.rateBps;
    const auto& delayNs = fabric.delayNs;
    const auto& kminBytes = fabric.kminBytes;
    const auto& kmaxBytes = fabric.kmaxBytes;
    const auto& pmax = fabric.pmax;
    const auto& headroomBytes = fabric.headroomBytes;
    const auto& switchBufferBytes = fabric.switchBufferBytes;
    m_nHosts = hosts.size();
    m_names = hosts;
    m_names.insert(m_names.end(), switches.begin(), switches.end());
    const uint32_t nSw = switches.size();
    std::vector<Ptr<Node>> hostNodes;
    for (uint32_t h = 0; h < m_nHosts; ++h)
    {
        hostNodes.push_back(CreateObject<Node>());
        m_nics.push_back(CreateObject<RdmaNic>());
        hostNodes.back()->AggregateObject(m_nics.back());
    }
    for (uint32_t s = 0; s < nSw; ++s)
    {
        Ptr<RdmaSwitchNode> sw = CreateObject<RdmaSwitchNode>();
        const uint32_t salt =
            s < fabric.switchSalt.size() ? fabric.switchSalt[s] : RdmaMix32(m_seed * 7919U + s + 1);
        sw->SetAttribute("EcmpSeed", UintegerValue(salt));
        if (s < switchBufferBytes.size() && switchBufferBytes[s] > 0)
        {
            sw->SetAttribute("BufferSize", UintegerValue(switchBufferBytes[s]));
        }
        sw->SetCounters(&m_counters);
        sw->AssignStreams(static_cast<int64_t>(s));
        m_switches.push_back(sw);
    }
    // A switch maps a priority past its classes to its top class and pauses that class, which a
    // NIC sending on a higher priority never hears of: its data would be dropped on a lossless fabric.
    uint64_t fewestClasses = UINT64_MAX;
    for (const auto& sw : m_switches)
    {
        UintegerValue classes;
        sw->GetAttribute("NumPriorities", classes);
        fewestClasses = std::min<uint64_t>(fewestClasses, classes.Get());
    }
    for (const auto& nic : m_nics)
    {
        UintegerValue prio;
        nic->GetAttribute("DataPriority", prio);
        NS_ABORT_MSG_IF(prio.Get() >= fewestClasses,
                        "RdmaNic::DataPriority " << prio.Get() << " needs RdmaSwitchNode::NumPriorities above it (it is "
                                                 << fewestClasses << ")");
    }
    std::vector<std::vector<std::pair<uint32_t, uint16_t>>> adj(m_nHosts + nSw);
    std::vector<std::vector<LinkEnd>> wires(m_nHosts + nSw); // (peer, delay, rate) for base RTTs
    std::vector<bool> hostWired(m_nHosts, false);
    for (std::size_t i = 0; i < linkA.size(); ++i)
    {
        Ptr<RdmaChannel> ch = CreateObject<RdmaChannel>();
        ch->SetAttribute("Delay", TimeValue(NanoSeconds(delayNs[i])));
        const uint32_t ends[2] = {linkA[i], linkB[i]};
        for (int e = 0; e < 2; ++e)
        {
            const uint32_t node = ends[e];
            const uint32_t peer = ends[1 - e];
            // a switch adds its pipeline latency to what it transmits (see rdma-switch.h)
            const double extra =
                node < m_nHosts ? 0.0
                                : static_cast<double>(
                                      m_switches[node - m_nHosts]->GetPipelineLatency().GetNanoSeconds());
            wires[node].push_back(LinkEnd{peer, static_cast<double>(delayNs[i]) + extra, rateBps[i]});
            Ptr<RdmaNetDevice> dev = CreateObject<RdmaNetDevice>();
            dev->SetDataRate(DataRate(static_cast<uint64_t>(rateBps[i])));
            PortRef ref{-1, node, 0, peer};
            if (node < m_nHosts)
            {
                NS_ABORT_MSG_IF(hostWired[node], "host " << m_names[node] << " has two links");
                hostWired[node] = true;
                hostNodes[node]->AddDevice(dev);
                dev->Attach(ch);
            }
            else
            {
                Ptr<RdmaSwitchNode> sw = m_switches[node - m_nHosts];
                dev->Attach(ch);
                const uint32_t local = sw->AddPort(dev);
                sw->SetPortEcn(local, kminBytes[i], kmaxBytes[i], pmax[i]);
                sw->SetPortHeadroom(local, headroomBytes[i]);
                ref.sw = node - m_nHosts;
                ref.local = local;
                adj[node].emplace_back(peer, static_cast<uint16_t>(local));
            }
            if (node < m_nHosts)
            {
                adj[node].emplace_back(peer, 0);
            }
            m_portRefs.push_back(ref);
            m_portDevs.push_back(dev);
        }
    }
    for (uint32_t h = 0; h < m_nHosts; ++h)
    {
        Ptr<RdmaNetDevice> dev = hostNodes[h]->GetNDevices() > 0
                                     ? DynamicCast<RdmaNetDevice>(hostNodes[h]->GetDevice(0))
                                     : CreateObject<RdmaNetDevice>();
        m_nics[h]->Setup(h, dev, &m_counters, this);
    }
    // Every CC with a window needs the fabric's base RTT (HPCC's T, DCTCP's ceiling, the DCQCN /
    // TIMELY window of CcWindow): without it they ran on a 10 us placeholder, which held a lone
    // DCTCP flow to a quarter of its line rate on a path with 10 us links.  A BFS per host, so
    // only where some NIC keeps a window (not under plain DCQCN, TIMELY or none).
    if (std::any_of(m_nics.begin(), m_nics.end(), [](const Ptr<RdmaNic>& n) { return n->NeedsBaseRtt(); }))
    {
        const auto rtts = MaxBaseRtts(m_nHosts, wires, m_nics[0]->DataWireBytes(),
                                      m_nics[0]->AckWireBytes());
        for (uint32_t h = 0; h < m_nHosts; ++h)
        {
            m_nics[h]->SetAutoBaseRtt(static_cast<int64_t>(std::ceil(rtts[h])));
        }
    }
    // A CC whose target scales with the path (Swift): the switches on a shortest path to each host,
    // what the receiver reads from the IP TTL on a real fabric (every ECMP path is a shortest one).
    for (uint32_t h = 0; h < m_nHosts; ++h)
    {
        if (m_nics[h]->NeedsPathHops())
        {
            m_nics[h]->SetPathHops(PathHops(m_nHosts, wires, h));
        }
    }
    auto routes = ComputeRoutes(m_nHosts, nSw, adj);
    for (uint32_t s = 0; s < nSw; ++s)
    {
        m_switches[s]->SetRoutes(std::move(routes[s]));
    }
    m_lastSampled.assign(m_portRefs.size(), 0);
    m_swPortGlobal.assign(nSw, {});
    for (uint32_t g = 0; g < m_portRefs.size(); ++g)
    {
        const PortRef& r = m_portRefs[g];
        if (r.sw >= 0)
        {
            auto& v = m_swPortGlobal[r.sw];
            v.resize(std::max<std::size_t>(v.size(), r.local + 1));
            v[r.local] = g;
        }
    }
}

void
RdmaNetworkHelper::AddMessage(uint64_t id, uint32_t src, uint32_t dst, uint64_t bytes,
                              int64_t startNs, uint32_t flowHash,
                             int64_t connection, uint64_t stepBytes)
{
    m_pending++;
    m_live.insert(id);
    const int64_t now = Simulator::Now().GetNanoSeconds();
    Simulator::Schedule(NanoSeconds(std::max<int64_t>(0, startNs - now)),
                        &RdmaNetworkHelper::Post, this, id, src, dst, bytes, flowHash, connection,
                        stepBytes);
    ArmPeriodic();
}

void
RdmaNetworkHelper::Post(uint64_t id, uint32_t src, uint32_t dst, uint64_t bytes, uint32_t flowHash,
                        int64_t connection, uint64_t stepBytes)
{
    if (m_started++ == 0)
    {
        // The stall clock starts with the first message in flight, not when it was added.
        m_lastProgressNs = Simulator::Now().GetNanoSeconds();
    }
    if (bytes == 0 || src == dst)
    {
        // Nothing crosses the fabric: done when posted.
        Complete(id);
        return;
    }
    m_nics[src]->PostMessage(id, dst, bytes, flowHash, connection, stepBytes);
}

std::vector<double>
RdmaNetworkHelper::TrimMessage(uint32_t src, uint32_t dst, int64_t connection, uint64_t msgId)
{
    std::vector<double> r = m_nics[src]->TrimMessage(dst, connection, msgId);
    if (r[0] == 2.0)
    {
        m_live.erase(msgId);
        m_pending--;
        m_started--;
    }
    return r;
}

void
RdmaNetworkHelper::MessageDelivered(uint64_t msgId)
{
    Complete(msgId);
}

void
RdmaNetworkHelper::TransportFailed(uint32_t src, uint32_t dst, uint64_t msgId, uint32_t retries)
{
    if (m_status == OK)
    {
        std::ostringstream os;
        os << "retry count exceeded: " << m_names[src] << " -> " << m_names[dst] << " message " << msgId
           << " timed out again after " << retries << " retransmissions without progress";
        m_status = TRANSPORT_ERROR;
        m_statusDetail = os.str();
    }
    Simulator::Stop();
}

void
RdmaNetworkHelper::Complete(uint64_t id)
{
    const int64_t now = Simulator::Now().GetNanoSeconds();
    if (m_live.erase(id) == 0)
    {
        // Never a silent double count (it also underflowed m_pending): stop with the id.
        if (m_status == OK)
        {
            std::ostringstream os;
            os << "message " << id << " reported complete twice (at " << now << " ns)";
            m_status = INTERNAL_ERROR;
            m_statusDetail = os.str();
        }
        Simulator::Stop();
        return;
    }
    m_completions.emplace_back(id, now);
    m_pending--;
    m_started--;
    m_lastProgressNs = now;
    if (m_stopAt != now)
    {
        // Stop after every event already queued for this instant, so that all
        // completions at the same time come back together.
        m_stopAt = now;
        m_completionStop = Simulator::Stop(Time(0));
    }
}

void
RdmaNetworkHelper::ArmPeriodic()
{
    if (!m_watchdog.IsPending())
    {
        m_lastDelivered = m_counters.deliveredBytes;
        m_lastProgressNs = Simulator::Now().GetNanoSeconds();
        const Time period = std::max(m_stallLimit / 8, MicroSeconds(1));
        m_watchdog = Simulator::Schedule(period, &RdmaNetworkHelper::Watchdog, this);
    }
    if (!m_deadlockCheck.IsPending() && !m_deadlockHold.IsZero())
    {
        m_deadlockCheck = Simulator::Schedule(std::max(m_deadlockHold / 8, MicroSeconds(1)),
                                              &RdmaNetworkHelper::DeadlockCheck, this);
    }
    if (!m_sampler.IsPending() && !m_sampleInterval.IsZero())
    {
        m_sampler = Simulator::Schedule(m_sampleInterval, &RdmaNetworkHelper::Sample, this);
    }
}

void
RdmaNetworkHelper::Watchdog()
{
    const int64_t now = Simulator::Now().GetNanoSeconds();
    if (m_counters.deliveredBytes != m_lastDelivered)
    {
        m_lastDelivered = m_counters.deliveredBytes;
        m_lastProgressNs = now;
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - m_runStart).count();
    if (m_wallLimitS > 0 && m_runWall + wall > m_wallLimitS)
    {
        m_status = WALL_LIMIT;
        m_statusDetail = "network simulation exceeded its wall-clock limit";
        Simulator::Stop();
        return;
    }
    if (m_started > 0 && now - m_lastProgressNs >= m_stallLimit.GetNanoSeconds())
    {
        std::ostringstream os;
        bool any = false;
        for (uint32_t i = 0; i < m_portRefs.size(); ++i)
        {
            const PortRef& r = m_portRefs[i];
            uint32_t prio = 0;
            const bool paused = r.sw >= 0 ? m_switches[r.sw]->IsPortPaused(r.local, &prio)
                                          : m_nics[r.node]->IsPaused();
            if (paused)
            {
                os << (any ? ", " : "") << m_names[r.node] << "->" << m_names[r.peer];
                any = true;
            }
        }
        m_status = any ? DEADLOCK : STALLED;
        m_statusDetail = any ? "PFC-paused ports: " + os.str() : "no paused port";
        Simulator::Stop();
        return;
    }
    if (m_pending > 0)
    {
        m_watchdog = Simulator::Schedule(std::max(m_stallLimit / 8, MicroSeconds(1)),
                                         &RdmaNetworkHelper::Watchdog, this);
    }
}

void
RdmaNetworkHelper::DeadlockCheck()
{
    if (CheckDeadlockNow())
    {
        std::ostringstream os;
        os << "cycle of PFC-paused ports with no dequeue for "
           << m_deadlockHold.GetNanoSeconds() << " ns: ";
        for (std::size_t i = 0; i < m_cycle.size(); ++i)
        {
            os << (i ? ", " : "") << GetPortName(m_cycle[i]);
        }
        m_status = DEADLOCK;
        m_statusDetail = os.str();
        Simulator::Stop();
        return;
    }
    if (m_pending > 0)
    {
        m_deadlockCheck = Simulator::Schedule(std::max(m_deadlockHold / 8, MicroSeconds(1)),
                                              &RdmaNetworkHelper::DeadlockCheck, this);
    }
}

bool
RdmaNetworkHelper::CheckDeadlockNow()
{
    // Wait-for graph: a node is a switch egress port/class paused by the
    // switch downstream of it (T).  Node U waits for node X when X is an
    // egress of T, itself paused, that holds bytes which came in from U:
    // U cannot resume before T's ingress from U drains, and those bytes
    // cannot leave while X is paused.  A cycle of such nodes, each paused
    // with no data dequeue for DeadlockHoldTime, is a deadlock.
    const int64_t now = Simulator::Now().GetNanoSeconds();
    uint32_t nPrio = 0;
    for (const auto& sw : m_switches)
    {
        nPrio = std::max(nPrio, sw->GetNPriorities());
    }
    const uint32_t nNodes = m_portRefs.size() * nPrio;
    if (m_wfSince.size() != nNodes)
    {
        m_wfSince.assign(nNodes, -1);
        m_wfDeq.assign(nNodes, 0);
    }
    std::vector<uint32_t> paused; // node ids (global port x nPrio + class)
    for (uint32_t g = 0; g < m_portRefs.size(); ++g)
    {
        const PortRef& r = m_portRefs[g];
        if (r.sw < 0 || m_portRefs[g ^ 1].sw < 0)
        {
            continue; // only switch-to-switch ports can be on a cycle
        }
        const Ptr<RdmaSwitchNode>& sw = m_switches[r.sw];
        for (uint32_t c = 1; c < sw->GetNPriorities(); ++c)
        {
            if (sw->IsTxPaused(r.local, c))
            {
                paused.push_back(g * nPrio + c);
            }
        }
    }
    std::vector<int32_t> compact(nNodes, -1);
    for (uint32_t i = 0; i < paused.size(); ++i)
    {
        compact[paused[i]] = static_cast<int32_t>(i);
    }
    for (uint32_t v = 0; v < nNodes; ++v)
    {
        if (compact[v] < 0)
        {
            m_wfSince[v] = -1;
        }
    }
    if (paused.empty())
    {
        return false;
    }
    std::vector<uint8_t> stuck(paused.size(), 0);
    std::vector<std::vector<uint32_t>> edges(paused.size());
    std::vector<uint8_t> from;
    for (uint32_t i = 0; i < paused.size(); ++i)
    {
        const uint32_t g = paused[i] / nPrio;
        const uint32_t c = paused[i] % nPrio;
        const PortRef& r = m_portRefs[g];
        const Ptr<RdmaSwitchNode>& sw = m_switches[r.sw];
        const uint64_t deq = sw->GetDataDequeues(r.local);
        if (m_wfSince[paused[i]] < 0 || m_wfDeq[paused[i]] != deq)
        {
            m_wfSince[paused[i]] = now;
            m_wfDeq[paused[i]] = deq;
        }
        stuck[i] = now - m_wfSince[paused[i]] >= m_deadlockHold.GetNanoSeconds();
        sw->GetQueuedIngresses(r.local, c, from);
        for (uint32_t in = 0; in < from.size(); ++in)
        {
            if (!from[in])
            {
                continue;
            }
            // the upstream egress feeding ingress `in` is the other end of its link
            const uint32_t up = (m_swPortGlobal[r.sw][in] ^ 1) * nPrio + c;
            if (compact[up] >= 0)
            {
                edges[compact[up]].push_back(i);
            }
        }
    }
    const auto cyc = FindCycle(edges, stuck);
    if (cyc.empty())
    {
        return false;
    }
    m_cycle.clear();
    for (uint32_t i : cyc)
    {
        m_cycle.push_back(paused[i] / nPrio);
    }
    std::rotate(m_cycle.begin(), std::min_element(m_cycle.begin(), m_cycle.end()), m_cycle.end());
    return true;
}

std::vector<uint32_t>
RdmaNetworkHelper::FindCycle(const std::vector<std::vector<uint32_t>>& edges,
                             const std::vector<uint8_t>& stuck)
{
    // Iterative DFS over stuck nodes; a back edge to a node on the stack closes a cycle.
    const uint32_t n = edges.size();
    std::vector<uint8_t> color(n, 0); // 0 new, 1 on stack, 2 done
    std::vector<std::pair<uint32_t, uint32_t>> stack; // (node, next edge)
    for (uint32_t root = 0; root < n; ++root)
    {
        if (!stuck[root] || color[root])
        {
            continue;
        }
        stack.emplace_back(root, 0);
        color[root] = 1;
        while (!stack.empty())
        {
            auto& [u, k] = stack.back();
            if (k == edges[u].size())
            {
                color[u] = 2;
                stack.pop_back();
                continue;
            }
            const uint32_t v = edges[u][k++];
            if (!stuck[v] || color[v] == 2)
            {
                continue;
            }
            if (color[v] == 1)
            {
                std::vector<uint32_t> cyc;
                std::size_t j = stack.size();
                while (j-- > 0)
                {
                    cyc.push_back(stack[j].first);
                    if (stack[j].first == v)
                    {
                        break;
                    }
                }
                std::reverse(cyc.begin(), cyc.end());
                return cyc;
            }
            color[v] = 1;
            stack.emplace_back(v, 0);
        }
    }
    return {};
}

void
RdmaNetworkHelper::Sample()
{
    const int64_t now = Simulator::Now().GetNanoSeconds();
    for (uint32_t i = 0; i < m_portRefs.size(); ++i)
    {
        const PortRef& r = m_portRefs[i];
        if (r.sw < 0)
        {
            continue;
        }
        const uint64_t q = m_switches[r.sw]->GetQueueBytes(r.local);
        if ((q > 0 || m_lastSampled[i] > 0) && m_samples.size() / 3 < m_maxSamples)
        {
            m_samples.push_back(now);
            m_samples.push_back(i);
            m_samples.push_back(static_cast<int64_t>(q));
        }
        m_lastSampled[i] = q;
    }
    for (auto& sw : m_switches)
    {
        sw->SampleQueues();
    }
    if (m_pending > 0)
    {
        m_sampler = Simulator::Schedule(m_sampleInterval, &RdmaNetworkHelper::Sample, this);
    }
}

RdmaNetworkHelper::Status
RdmaNetworkHelper::Run(int64_t untilNs)
{
    m_status = OK;
    m_statusDetail.clear();
    EventId stop;
    const int64_t now = Simulator::Now().GetNanoSeconds();
    if (untilNs >= 0)
    {
        stop = Simulator::Stop(NanoSeconds(std::max<int64_t>(0, untilNs - now)));
    }
    m_runStart = std::chrono::steady_clock::now();
    m_stopAt = -1;
    Simulator::Run();
    m_runWall += std::chrono::duration<double>(std::chrono::steady_clock::now() - m_runStart).count();
    // Whichever stop ended this run, the other must not end the next one early.
    stop.Cancel();
    m_completionStop.Cancel();
    if (m_status != OK && m_pending > 0)
    {
        // keep the watchdog armed for a caller that decides to go on
        ArmPeriodic();
    }
    return m_status;
}

std::vector<std::pair<uint64_t, int64_t>>
RdmaNetworkHelper::DrainCompletions()
{
    std::vector<std::pair<uint64_t, int64_t>> out;
    out.swap(m_completions);
    return out;
}

const RdmaPortStats&
RdmaNetworkHelper::GetPortStats(uint32_t port) const
{
    const PortRef& r = m_portRefs[port];
    return r.sw >= 0 ? m_switches[r.sw]->GetPortStats(r.local) : m_nics[r.node]->GetPortStats();
}

uint64_t
RdmaNetworkHelper::GetPortTxBytes(uint32_t port) const
{
    return m_portDevs[port]->GetTxBytes();
}

uint64_t
RdmaNetworkHelper::GetPortTxPackets(uint32_t port) const
{
    return m_portDevs[port]->GetTxPackets();
}

uint64_t
RdmaNetworkHelper::GetPortQueueBytes(uint32_t port) const
{
    const PortRef& r = m_portRefs[port];
    return r.sw >= 0 ? m_switches[r.sw]->GetQueueBytes(r.local) : 0;
}

std::string
RdmaNetworkHelper::GetPortName(uint32_t port) const
{
    const PortRef& r = m_portRefs[port];
    return m_names[r.node] + "->" + m_names[r.peer];
}

void
RdmaNetworkHelper::FlushPausedTime()
{
    for (auto& sw : m_switches)
    {
        sw->FlushPausedTime();
    }
    for (auto& nic : m_nics)
    {
        nic->FlushPausedTime();
    }
}

uint64_t
RdmaNetworkHelper::GetMessageRxBytes(uint32_t dstHost, uint64_t msgId) const
{
    return m_nics[dstHost]->GetMessageRxBytes(msgId);
}

void
RdmaNetworkHelper::DoDispose()
{
    m_watchdog.Cancel();
    m_deadlockCheck.Cancel();
    m_sampler.Cancel();
    m_live.clear();
    m_nics.clear();
    m_switches.clear();
    m_portDevs.clear();
    Object::DoDispose();
}

} // namespace ns3
