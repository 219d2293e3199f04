#include "rdma-switch.h"

#include "dcqcn.h"
#include "rdma-int-tag.h"

#include "ns3/boolean.h"
#include "ns3/log.h"
#include "ns3/simulator.h"
#include "ns3/trace-source-accessor.h"
#include "ns3/uinteger.h"

#include <algorithm>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("RdmaSwitchNode");
NS_OBJECT_ENSURE_REGISTERED(RdmaSwitchNode);

TypeId
RdmaSwitchNode::GetTypeId()
{
    static TypeId tid =
        TypeId("ns3::RdmaSwitchNode")
            .SetParent<Node>()
            .SetGroupName("HeterosimRdma")
            .AddConstructor<RdmaSwitchNode>()
            .AddAttribute("NumPriorities",
                          "Egress priority classes per port (class 0 = control, never paused).",
                          UintegerValue(2),
                          MakeUintegerAccessor(&RdmaSwitchNode::m_nPrio),
                          MakeUintegerChecker<uint32_t>(2, 8))
            .AddAttribute("BufferSize",
                          "Shared packet buffer of the switch, bytes.",
                          UintegerValue(32 * 1000 * 1000),
                          MakeUintegerAccessor(&RdmaSwitchNode::m_bufferBytes),
                          MakeUintegerChecker<uint64_t>())
            .AddAttribute("PfcEnabled",
                          "Lossless mode: PAUSE upstream instead of dropping.",
                          BooleanValue(true),
                          MakeBooleanAccessor(&RdmaSwitchNode::m_pfcEnabled),
                          MakeBooleanChecker())
            .AddAttribute("PfcDynamic",
                          "Dynamic PFC threshold (free shared buffer >> shift) instead of static.",
                          BooleanValue(true),
                          MakeBooleanAccessor(&RdmaSwitchNode::m_pfcDynamic),
                          MakeBooleanChecker())
            .AddAttribute("PfcShift",
                          "Dynamic threshold = free shared buffer / 2^shift.",
                          UintegerValue(3),
                          MakeUintegerAccessor(&RdmaSwitchNode::m_pfcShift),
                          MakeUintegerChecker<uint32_t>(0, 20))
            .AddAttribute("PfcStaticThreshold",
                          "Static PFC threshold on shared bytes per ingress class.",
                          UintegerValue(256 * 1024),
                          MakeUintegerAccessor(&RdmaSwitchNode::m_pfcStaticBytes),
                          MakeUintegerChecker<uint64_t>())
            .AddAttribute("PfcResumeOffset",
                          "RESUME when the ingress class is this far below the threshold.",
                          UintegerValue(3 * 1024),
                          MakeUintegerAccessor(&RdmaSwitchNode::m_resumeOffsetBytes),
                          MakeUintegerChecker<uint64_t>())
            .AddAttribute("PfcPauseQuanta",
                          "Pause duration carried by PAUSE frames; 0 = until RESUME.",
                          TimeValue(Time(0)),
                          MakeTimeAccessor(&RdmaSwitchNode::m_pauseQuanta),
                          MakeTimeChecker())
            .AddAttribute("ReservedPerQueue",
                          "Guaranteed bytes per ingress port/class.",
                          UintegerValue(4 * 1024),
                          MakeUintegerAccessor(&RdmaSwitchNode::m_reservedBytes),
                          MakeUintegerChecker<uint64_t>())
            .AddAttribute("EcnEnabled",
                          "RED ECN marking at dequeue.",
                          BooleanValue(true),
                          MakeBooleanAccessor(&RdmaSwitchNode::m_ecnEnabled),
                          MakeBooleanChecker())
            .AddAttribute("EcmpSeed",
                          "Per-switch seed mixed into the flow hash.",
                          UintegerValue(0),
                          MakeUintegerAccessor(&RdmaSwitchNode::m_ecmpSeed),
                          MakeUintegerChecker<uint32_t>())
            .AddAttribute("EcmpByKey",
                          "Pick among equal-cost ports by the flow key alone (rail pinning).",
                          BooleanValue(false),
                          MakeBooleanAccessor(&RdmaSwitchNode::m_ecmpByKey),
                          MakeBooleanChecker())
            .AddAttribute("IntEnabled",
                          "Append an INT record (HPCC) to data packets that carry an INT tag.",
                          BooleanValue(false),
                          MakeBooleanAccessor(&RdmaSwitchNode::m_intEnabled),
                          MakeBooleanChecker())
            .AddAttribute("PfcFrameBytes",
                          "Wire size of a PFC frame.",
                          UintegerValue(64),
                          MakeUintegerAccessor(&RdmaSwitchNode::m_pfcFrameBytes),
                          MakeUintegerChecker<uint32_t>(sizeof(RdmaHeader::Fields), 1500))
            // 0 here; Ns3Backend sets network.per_hop_latency_ns (the value the
            // flow backend adds per switch).  Applies to ports added afterwards.
            .AddAttribute("PipelineLatency",
                          "Switch latency, added to the propagation of every port it transmits on.",
                          TimeValue(Time(0)),
                          MakeTimeAccessor(&RdmaSwitchNode::m_pipelineLatency),
                          MakeTimeChecker(Time(0)))
            // Trace sources: a study attaches its own sinks (TraceConnectWithoutContext); unconnected
            // they cost one emptiness test where they fire.
            .AddTraceSource("QueueDepth",
                            "Bytes in an egress port's data classes after each enqueue and dequeue.",
                            MakeTraceSourceAccessor(&RdmaSwitchNode::m_queueTrace),
                            "ns3::RdmaSwitchNode::QueueDepthCallback")
            .AddTraceSource("PfcSent",
                            "PAUSE (true) or RESUME (false) sent upstream out of a port, per class.",
                            MakeTraceSourceAccessor(&RdmaSwitchNode::m_pfcSentTrace),
                            "ns3::RdmaSwitchNode::PfcCallback")
            .AddTraceSource("PfcReceived",
                            "PAUSE (true) or RESUME (false) that reached an egress port, per class.",
                            MakeTraceSourceAccessor(&RdmaSwitchNode::m_pfcRecvTrace),
                            "ns3::RdmaSwitchNode::PfcCallback")
            .AddTraceSource("EcnMark",
                            "A data packet marked CE at an egress port (port, queue bytes left behind it).",
                            MakeTraceSourceAccessor(&RdmaSwitchNode::m_markTrace),
                            "ns3::RdmaSwitchNode::QueueDepthCallback");
    return tid;
}

RdmaSwitchNode::RdmaSwitchNode()
{
    m_rng = CreateObject<UniformRandomVariable>();
}

RdmaSwitchNode::~RdmaSwitchNode() = default;

int64_t
RdmaSwitchNode::AssignStreams(int64_t stream)
{
    m_rng->SetStream(stream);
    return 1;
}

uint32_t
RdmaSwitchNode::AddPort(Ptr<RdmaNetDevice> dev)
{
    Port port;
    port.dev = dev;
    port.q.resize(m_nPrio);
    port.qBytes.assign(m_nPrio, 0);
    port.txPaused.assign(m_nPrio, 0);
    port.pausedSince.assign(m_nPrio, 0);
    port.pauseGen.assign(m_nPrio, 0);
    port.ingBytes.assign(m_nPrio, 0);
    port.hdrmBytes.assign(m_nPrio, 0);
    port.rxPaused.assign(m_nPrio, 0);
    port.rxPauseGen.assign(m_nPrio, 0);
    const uint32_t idx = m_ports.size();
    m_ports.push_back(std::move(port));
    AddDevice(dev);
    dev->SetTxExtraDelay(m_pipelineLatency);
    dev->SetOwner(this, idx);
    return idx;
}

void
RdmaSwitchNode::SetPortEcn(uint32_t port, double kminBytes, double kmaxBytes, double pmax)
{
    m_ports[port].kmin = kminBytes;
    m_ports[port].kmax = kmaxBytes;
    m_ports[port].pmax = pmax;
}

void
RdmaSwitchNode::SetPortHeadroom(uint32_t port, uint64_t bytes)
{
    m_totalHeadroom -= m_ports[port].headroom;
    m_ports[port].headroom = bytes;
    m_totalHeadroom += bytes;
}

void
RdmaSwitchNode::SetRoutes(std::vector<std::vector<uint16_t>> routes)
{
    m_routes = std::move(routes);
}

uint64_t
RdmaSwitchNode::Shared(const Port& in, uint8_t prio) const
{
    return in.ingBytes[prio] > m_reservedBytes ? in.ingBytes[prio] - m_reservedBytes : 0;
}

uint64_t
RdmaSwitchNode::GetPfcThreshold() const
{
    if (!m_pfcDynamic)
    {
        return m_pfcStaticBytes;
    }
    // Headroom is set aside only in lossless mode: a lossy switch never PAUSEs.
    const uint64_t committed = (m_pfcEnabled ? m_totalHeadroom : 0) +
                               m_reservedBytes * m_ports.size() + m_sharedUsed;
    const uint64_t free = m_bufferBytes > committed ? m_bufferBytes - committed : 0;
    return free >> m_pfcShift;
}

uint32_t
RdmaSwitchNode::SelectEgress(const RdmaHeader& h) const
{
    if (h.f.dst >= m_routes.size())
    {
        return UINT32_MAX;
    }
    const auto& ports = m_routes[h.f.dst];
    if (ports.empty())
    {
        return UINT32_MAX;
    }
    const uint32_t n = ports.size();
    if (n == 1)
    {
        return ports[0];
    }
    return ports[m_ecmpByKey ? h.f.flowHash % n : RdmaEcmpIndex(h.f.flowHash, m_ecmpSeed, n)];
}

void
RdmaSwitchNode::AddIngress(Port& in, uint8_t prio, uint32_t size)
{
    const uint64_t before = Shared(in, prio);
    in.ingBytes[prio] += size;
    m_sharedUsed += Shared(in, prio) - before;
}

void
RdmaSwitchNode::PortReceive(uint32_t inPort, Ptr<Packet> p)
{
    RdmaHeader h;
    p->PeekHeader(h);
    if (h.f.kind == RdmaHeader::PFC)
    {
        HandlePfc(inPort, h);
        return;
    }
    const uint32_t out = SelectEgress(h);
    Port& in = m_ports[inPort];
    if (out == UINT32_MAX)
    {
        in.stats.drops++;
        if (m_counters)
        {
            m_counters->unroutable++;
        }
        return;
    }
    const uint8_t prio = std::min<uint8_t>(h.f.priority, m_nPrio - 1);
    const uint32_t size = p->GetSize();
    if (prio != 0)
    {
        if (m_pfcEnabled)
        {
            const uint64_t thr = GetPfcThreshold();
            const uint64_t ing = in.ingBytes[prio] + size;
            const uint64_t newShared = ing > m_reservedBytes ? ing - m_reservedBytes : 0;
            if (in.hdrmBytes[prio] > 0 || newShared > thr)
            {
                if (in.hdrmBytes[prio] + size > in.headroom)
                {
                    in.stats.drops++; // headroom too small for the link: reported as a drop
                    return;
                }
                in.hdrmBytes[prio] += size;
            }
            else
            {
                AddIngress(in, prio, size);
            }
            m_totalBytes += size;
            // XOFF against the threshold after this admission (it falls as the
            // shared buffer fills), as the reference MMU checks it.
            if (!in.rxPaused[prio] &&
                (in.hdrmBytes[prio] > 0 || Shared(in, prio) >= GetPfcThreshold()))
            {
                in.rxPaused[prio] = 1;
                SendPfc(inPort, prio, true);
            }
        }
        else
        {
            // Lossy: per-ingress admission first (reserved bytes always, shared
            // bytes while under the threshold), then the whole buffer.
            const uint64_t ing = in.ingBytes[prio] + size;
            const uint64_t newShared = ing > m_reservedBytes ? ing - m_reservedBytes : 0;
            if (newShared > GetPfcThreshold() || m_totalBytes + size > m_bufferBytes)
            {
                m_ports[out].stats.drops++;
                return;
            }
            AddIngress(in, prio, size);
            m_totalBytes += size;
        }
    }
    Port& eg = m_ports[out];
    eg.q[prio].push_back(Entry{p, size, static_cast<uint16_t>(inPort), h.f.kind == RdmaHeader::DATA});
    eg.qBytes[prio] += size;
    if (prio != 0)
    {
        uint64_t depth = 0;
        for (uint32_t c = 1; c < m_nPrio; ++c)
        {
            depth += eg.qBytes[c];
        }
        eg.stats.maxQueueBytes = std::max(eg.stats.maxQueueBytes, depth);
        if (!m_queueTrace.IsEmpty())
        {
            m_queueTrace(out, depth);
        }
    }
    if (!eg.dev->IsBusy())
    {
        TryTransmit(out);
    }
}

void
RdmaSwitchNode::ReleaseIngress(uint32_t port, uint8_t prio, uint32_t size)
{
    Port& in = m_ports[port];
    m_totalBytes -= size;
    if (in.hdrmBytes[prio] > 0)
    {
        const uint32_t fromHdrm = std::min<uint64_t>(in.hdrmBytes[prio], size);
        in.hdrmBytes[prio] -= fromHdrm;
        size -= fromHdrm;
    }
    if (size > 0)
    {
        const uint64_t before = Shared(in, prio);
        in.ingBytes[prio] -= std::min<uint64_t>(in.ingBytes[prio], size);
        m_sharedUsed -= before - Shared(in, prio);
    }
    // RESUME also when the ingress holds nothing in shared: with a threshold
    // below the resume offset a drained ingress would otherwise stay paused.
    if (m_pfcEnabled && in.rxPaused[prio] && in.hdrmBytes[prio] == 0 &&
        (Shared(in, prio) == 0 || Shared(in, prio) + m_resumeOffsetBytes <= GetPfcThreshold()))
    {
        in.rxPaused[prio] = 0;
        SendPfc(port, prio, false);
    }
}

void
RdmaSwitchNode::TryTransmit(uint32_t portIdx)
{
    Port& port = m_ports[portIdx];
    if (port.dev->IsBusy())
    {
        return;
    }
    for (uint32_t c = 0; c < m_nPrio; ++c)
    {
        if (port.q[c].empty() || (c != 0 && port.txPaused[c]))
        {
            continue;
        }
        Entry e = std::move(port.q[c].front());
        port.q[c].pop_front();
        if (c == 0 && port.pfcQueued > 0)
        {
            port.pfcQueued--; // PFC frames sit at the head of the control queue
        }
        port.qBytes[c] -= e.size;
        if (c != 0)
        {
            port.dataDequeued++;
            ReleaseIngress(e.inPort, c, e.size);
            if (!m_queueTrace.IsEmpty())
            {
                m_queueTrace(portIdx, GetQueueBytes(portIdx) - port.qBytes[0]);
            }
            // ACK/NAK (and CNPs) may share a lossless class with data (RdmaNic AckClass): they are
            // buffered, paused and counted like data, but never marked and never carry INT hops.
            if (m_ecnEnabled && e.data)
            {
                const double prob =
                    EcnMarkProbability(port.qBytes[c], port.kmin, port.kmax, port.pmax);
                if (prob > 0 && (prob >= 1 || m_rng->GetValue() < prob))
                {
                    RdmaHeader h;
                    e.p->RemoveHeader(h);
                    if (h.f.flags & RdmaHeader::FLAG_ECT)
                    {
                        h.f.flags |= RdmaHeader::FLAG_CE;
                        port.stats.ecnMarks++;
                        m_markTrace(portIdx, port.qBytes[c]);
                    }
                    e.p->AddHeader(h);
                }
            }
            if (m_intEnabled && e.data)
            {
                RdmaIntTag tag;
                if (e.p->RemovePacketTag(tag))
                {
                    RdmaIntHop hop;
                    hop.tsNs = Simulator::Now().GetNanoSeconds();
                    hop.txBytes = port.dev->GetTxBytes() + e.size;
                    hop.qlenBytes = GetQueueBytes(portIdx);
                    hop.rateBps = static_cast<double>(port.dev->GetDataRate().GetBitRate());
                    tag.Push(hop);
                    e.p->AddPacketTag(tag);
                }
            }
        }
        port.dev->Transmit(e.p);
        return;
    }
}

void
RdmaSwitchNode::PortTxDone(uint32_t port)
{
    TryTransmit(port);
}

void
RdmaSwitchNode::SendPfc(uint32_t portIdx, uint8_t prio, bool pause)
{
    Port& port = m_ports[portIdx];
    RdmaHeader h;
    h.f.kind = RdmaHeader::PFC;
    h.f.priority = prio;
    h.f.flags = pause ? RdmaHeader::FLAG_PAUSE : 0;
    h.f.payload = static_cast<uint32_t>(m_pauseQuanta.GetNanoSeconds());
    Ptr<Packet> p = Create<Packet>(m_pfcFrameBytes - h.GetSerializedSize());
    p->AddHeader(h);
    // PFC frames jump the control queue (they must not wait behind ACKs) but
    // keep their order among themselves: a RESUME overtaking the PAUSE it
    // answers would leave the upstream port paused for ever.
    m_pfcSentTrace(portIdx, prio, pause);
    port.q[0].insert(port.q[0].begin() + port.pfcQueued,
                     Entry{p, p->GetSize(), static_cast<uint16_t>(portIdx), false});
    port.pfcQueued++;
    port.qBytes[0] += p->GetSize();
    if (pause)
    {
        port.stats.pfcPauseSent++;
        if (!m_pauseQuanta.IsZero())
        {
            Simulator::Schedule(m_pauseQuanta / 2, &RdmaSwitchNode::RefreshPause, this, portIdx, prio,
                                port.rxPauseGen[prio]);
        }
    }
    else
    {
        port.stats.pfcResumeSent++;
        port.rxPauseGen[prio]++; // a pause that starts again refreshes on its own chain only
    }
    TryTransmit(portIdx);
}

void
RdmaSwitchNode::RefreshPause(uint32_t port, uint8_t prio, uint32_t gen)
{
    if (m_ports[port].rxPaused[prio] && m_ports[port].rxPauseGen[prio] == gen)
    {
        SendPfc(port, prio, true);
    }
}

void
RdmaSwitchNode::HandlePfc(uint32_t portIdx, const RdmaHeader& h)
{
    Port& port = m_ports[portIdx];
    const uint8_t prio = std::min<uint8_t>(h.f.priority, m_nPrio - 1);
    if (prio == 0)
    {
        return;
    }
    const int64_t now = Simulator::Now().GetNanoSeconds();
    m_pfcRecvTrace(portIdx, prio, bool(h.f.flags & RdmaHeader::FLAG_PAUSE));
    if (h.f.flags & RdmaHeader::FLAG_PAUSE)
    {
        port.stats.pfcPauseRecv++;
        if (!port.txPaused[prio])
        {
            port.txPaused[prio] = 1;
            port.pausedSince[prio] = now;
        }
        if (h.f.payload > 0)
        {
            const uint32_t gen = ++port.pauseGen[prio];
            Simulator::Schedule(NanoSeconds(h.f.payload),
                                &RdmaSwitchNode::PauseExpired, this, portIdx, prio, gen);
        }
    }
    else
    {
        port.stats.pfcResumeRecv++;
        PauseExpired(portIdx, prio, port.pauseGen[prio]);
    }
}

void
RdmaSwitchNode::PauseExpired(uint32_t portIdx, uint8_t prio, uint32_t gen)
{
    Port& port = m_ports[portIdx];
    if (gen != port.pauseGen[prio] || !port.txPaused[prio])
    {
        return;
    }
    port.txPaused[prio] = 0;
    port.stats.pausedNs += Simulator::Now().GetNanoSeconds() - port.pausedSince[prio];
    TryTransmit(portIdx);
}

void
RdmaSwitchNode::FlushPausedTime()
{
    const int64_t now = Simulator::Now().GetNanoSeconds();
    for (auto& port : m_ports)
    {
        for (uint32_t c = 1; c < m_nPrio; ++c)
        {
            if (port.txPaused[c])
            {
                port.stats.pausedNs += now - port.pausedSince[c];
                port.pausedSince[c] = now;
            }
        }
    }
}

uint64_t
RdmaSwitchNode::GetQueueBytes(uint32_t portIdx) const
{
    uint64_t total = 0;
    for (uint32_t c = 1; c < m_nPrio; ++c)
    {
        total += m_ports[portIdx].qBytes[c];
    }
    return total;
}

bool
RdmaSwitchNode::IsPortPaused(uint32_t portIdx, uint32_t* prio) const
{
    for (uint32_t c = 1; c < m_nPrio; ++c)
    {
        if (m_ports[portIdx].txPaused[c])
        {
            if (prio)
            {
                *prio = c;
            }
            return true;
        }
    }
    return false;
}

void
RdmaSwitchNode::GetQueuedIngresses(uint32_t portIdx, uint32_t prio, std::vector<uint8_t>& out) const
{
    out.assign(m_ports.size(), 0);
    for (const Entry& e : m_ports[portIdx].q[prio])
    {
        out[e.inPort] = 1;
    }
}

void
RdmaSwitchNode::SampleQueues()
{
    for (uint32_t i = 0; i < m_ports.size(); ++i)
    {
        m_ports[i].stats.queueSampleSum += GetQueueBytes(i);
        m_ports[i].stats.queueSamples++;
    }
}

void
RdmaSwitchNode::DoDispose()
{
    for (auto& port : m_ports)
    {
        port.q.clear();
        port.dev = nullptr;
    }
    m_ports.clear();
    m_rng = nullptr;
    Node::DoDispose();
}

} // namespace ns3
