// An output-queued RoCE switch: strict-priority egress queues per port, a
// shared-buffer MMU with per ingress port/priority accounting (reserved,
// shared with a dynamic or static threshold, headroom), PFC PAUSE/RESUME
// per priority, RED ECN marking at dequeue, ECMP over equal-cost ports, and
// HPCC in-band telemetry appended to data packets at dequeue.
// Model after shared/network-reference.md ("Switch buffer and PFC").
//
// MMU, per ingress port/priority (the HPCC simulator's shared-buffer MMU):
// - lossless (PFC on): bytes up to the threshold are "shared", bytes beyond it
//   go to the port's headroom (a drop only when headroom overflows); PAUSE
//   when headroom is in use or shared >= threshold; RESUME when headroom is
//   empty and shared is 0 or shared + resume offset <= threshold (the "is 0"
//   case matters when the threshold is below the offset: a drained ingress
//   must never stay paused).
// - lossy (PFC off): admit while the ingress's shared bytes stay under the
//   threshold (dynamic or static, headroom not reserved), then the
//   whole-buffer check; a drop is counted at the egress port it was bound for.
//
// Pipeline latency (PipelineLatency): added to the propagation delay of every
// port the switch transmits on, instead of delaying the packet inside the
// switch.  An unloaded packet's one-way time through k switches is then
// sum(serialization + propagation) + k x latency exactly, at no extra event
// per packet (the receive event is simply scheduled later).  The packet is
// queued and counted in the buffer when it arrives rather than one latency
// later, and a PAUSE reaches the upstream port one latency later, so the
// bytes in flight after a PAUSE grow by rate x latency per direction: the
// headroom of a port must cover propagation + latency (Ns3Backend does).
//
// ECMP: among the equal-cost ports towards a destination (kept in canonical
// order: by neighbour node index, then link index) the switch takes index
// RdmaEcmpIndex(flowHash, salt, n); the salt is per switch (EcmpSeed).  This
// is the same function as netbackend.routing's ecmp_index over the same
// canonical order, so both backends route a flow on the same path.  Rail
// mode (EcmpByKey) takes flowHash % n, flowHash being the NIC's rail.
#ifndef HETEROSIM_RDMA_SWITCH_H
#define HETEROSIM_RDMA_SWITCH_H

#include "rdma-header.h"
#include "rdma-net-device.h"
#include "rdma-stats.h"

#include "ns3/event-id.h"
#include "ns3/node.h"
#include "ns3/random-variable-stream.h"
#include "ns3/traced-callback.h"

#include <deque>
#include <vector>

namespace ns3
{

class RdmaSwitchNode : public Node, public RdmaPortOwner
{
  public:
    /// (egress port, bytes): QueueDepth after each data enqueue/dequeue; EcnMark at each mark.
    typedef void (*QueueDepthCallback)(uint32_t port, uint64_t bytes);
    /// (port, class, true = PAUSE / false = RESUME): PfcSent, PfcReceived.
    typedef void (*PfcCallback)(uint32_t port, uint8_t prio, bool pause);

    static TypeId GetTypeId();
    RdmaSwitchNode();
    ~RdmaSwitchNode() override;

    /// Add a port; returns its index.
    uint32_t AddPort(Ptr<RdmaNetDevice> dev);
    uint32_t GetNPorts() const { return m_ports.size(); }
    Ptr<RdmaNetDevice> GetPort(uint32_t i) const { return m_ports[i].dev; }
    void SetPortEcn(uint32_t port, double kminBytes, double kmaxBytes, double pmax);
    void SetPortHeadroom(uint32_t port, uint64_t bytes);
    /// Equal-cost egress ports towards each destination host.
    void SetRoutes(std::vector<std::vector<uint16_t>> routes);
    void SetCounters(RdmaCounters* c) { m_counters = c; }
    int64_t AssignStreams(int64_t stream);

    const RdmaPortStats& GetPortStats(uint32_t port) const { return m_ports[port].stats; }
    /// Close open pause intervals so that pausedNs is up to date.
    void FlushPausedTime();
    /// Bytes queued at egress port @p port (all classes).
    uint64_t GetQueueBytes(uint32_t port) const;
    bool IsPortPaused(uint32_t port, uint32_t* prio) const;
    void SampleQueues(); //!< add one sample of every egress queue to the stats
    uint64_t GetSharedUsed() const { return m_sharedUsed; }
    /// Shared-buffer threshold per ingress class: the PFC threshold with PFC
    /// on, the lossy admission threshold with PFC off.
    uint64_t GetPfcThreshold() const;
    uint32_t SelectEgress(const RdmaHeader& h) const;
    Time GetPipelineLatency() const { return m_pipelineLatency; }

    // MMU state, for tests and deadlock detection
    uint32_t GetNPriorities() const { return m_nPrio; }
    /// Bytes of ingress @p port / class held in reserved + shared (not headroom).
    uint64_t GetIngressBytes(uint32_t port, uint32_t prio) const { return m_ports[port].ingBytes[prio]; }
    uint64_t GetHeadroomBytes(uint32_t port, uint32_t prio) const { return m_ports[port].hdrmBytes[prio]; }
    /// We have PAUSEd the sender upstream of ingress @p port, class @p prio.
    bool IsRxPaused(uint32_t port, uint32_t prio) const { return m_ports[port].rxPaused[prio]; }
    /// Egress @p port, class @p prio is stopped by a PAUSE from downstream.
    bool IsTxPaused(uint32_t port, uint32_t prio) const { return m_ports[port].txPaused[prio]; }
    /// Data packets (classes >= 1) dequeued at egress @p port so far.
    uint64_t GetDataDequeues(uint32_t port) const { return m_ports[port].dataDequeued; }
    /// out[i] = 1 if egress @p port, class @p prio holds a packet that came in on port i.
    void GetQueuedIngresses(uint32_t port, uint32_t prio, std::vector<uint8_t>& out) const;

    // RdmaPortOwner
    void PortReceive(uint32_t port, Ptr<Packet> p) override;
    void PortTxDone(uint32_t port) override;

  protected:
    void DoDispose() override;

  private:
    struct Entry
    {
        Ptr<Packet> p;
        uint32_t size;
        uint16_t inPort;
        bool data; //!< a DATA packet (ECN marking and INT apply to these only)
    };

    struct Port
    {
        Ptr<RdmaNetDevice> dev;
        std::vector<std::deque<Entry>> q;
        std::vector<uint64_t> qBytes;
        std::vector<uint8_t> txPaused;    //!< egress class stopped by downstream PFC
        std::vector<int64_t> pausedSince;
        std::vector<uint32_t> pauseGen;   //!< invalidates pause-expiry events
        std::vector<uint64_t> ingBytes;   //!< reserved + shared bytes per ingress class
        std::vector<uint64_t> hdrmBytes;  //!< headroom bytes per ingress class
        std::vector<uint8_t> rxPaused;    //!< we have paused the upstream sender
        std::vector<uint32_t> rxPauseGen; //!< ends a pause's refresh chain when the pause ends
        uint64_t headroom{0};
        uint32_t pfcQueued{0};            //!< PFC frames at the head of q[0]
        uint64_t dataDequeued{0};         //!< data packets sent (deadlock detection)
        double kmin{0}, kmax{0}, pmax{0};
        RdmaPortStats stats;
    };

    void TryTransmit(uint32_t port);
    void HandlePfc(uint32_t port, const RdmaHeader& h);
    void SendPfc(uint32_t port, uint8_t prio, bool pause);
    void PauseExpired(uint32_t port, uint8_t prio, uint32_t gen);
    void RefreshPause(uint32_t port, uint8_t prio, uint32_t gen);
    void AddIngress(Port& in, uint8_t prio, uint32_t size);
    void ReleaseIngress(uint32_t port, uint8_t prio, uint32_t size);
    uint64_t Shared(const Port& in, uint8_t prio) const;

    std::vector<Port> m_ports;
    std::vector<std::vector<uint16_t>> m_routes;
    RdmaCounters* m_counters{nullptr};
    Ptr<UniformRandomVariable> m_rng;

    // attributes
    uint32_t m_nPrio;
    uint64_t m_bufferBytes;
    bool m_pfcEnabled;
    bool m_pfcDynamic;
    uint32_t m_pfcShift;
    uint64_t m_pfcStaticBytes;
    uint64_t m_resumeOffsetBytes;
    Time m_pauseQuanta;
    uint64_t m_reservedBytes;
    bool m_ecnEnabled;
    uint32_t m_ecmpSeed;
    bool m_ecmpByKey;
    bool m_intEnabled;
    uint32_t m_pfcFrameBytes;
    Time m_pipelineLatency;

    TracedCallback<uint32_t, uint64_t> m_queueTrace;
    TracedCallback<uint32_t, uint8_t, bool> m_pfcSentTrace;
    TracedCallback<uint32_t, uint8_t, bool> m_pfcRecvTrace;
    TracedCallback<uint32_t, uint64_t> m_markTrace;

    uint64_t m_sharedUsed{0};
    uint64_t m_totalBytes{0}; //!< all data bytes held (for the lossy limit)
    uint64_t m_totalHeadroom{0};
};

/// 32-bit finalizer (MurmurHash3 fmix32): spreads flow hashes over ports.
inline uint32_t
RdmaMix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bU;
    h ^= h >> 13;
    h *= 0xc2b2ae35U;
    h ^= h >> 16;
    return h;
}

/// ECMP choice among @p n equal-cost ports in canonical order; the same
/// function as netbackend.routing.ecmp_index (keep the two identical).
inline uint32_t
RdmaEcmpIndex(uint32_t flowHash, uint32_t salt, uint32_t n)
{
    return RdmaMix32(flowHash ^ salt) % n;
}

} // namespace ns3

#endif
