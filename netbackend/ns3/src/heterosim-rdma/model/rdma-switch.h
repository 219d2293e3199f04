// An output-queued RoCE switch: strict-priority egress queues per port, a
// shared-buffer MMU with per ingress port/priority accounting (reserved,
// shared with a dynamic or static PFC threshold, headroom), PFC PAUSE/RESUME
// per priority, RED ECN marking at dequeue, ECMP over equal-cost ports, and
// HPCC in-band telemetry appended to data packets at dequeue.
// Model after shared/network-reference.md ("Switch buffer and PFC").
#ifndef HETEROSIM_RDMA_SWITCH_H
#define HETEROSIM_RDMA_SWITCH_H

#include "rdma-header.h"
#include "rdma-net-device.h"
#include "rdma-stats.h"

#include "ns3/event-id.h"
#include "ns3/node.h"
#include "ns3/random-variable-stream.h"

#include <deque>
#include <vector>

namespace ns3
{

class RdmaSwitchNode : public Node, public RdmaPortOwner
{
  public:
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
    uint64_t GetPfcThreshold() const;
    uint32_t SelectEgress(const RdmaHeader& h) const;

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
        uint64_t headroom{0};
        uint32_t pfcQueued{0};            //!< PFC frames at the head of q[0]
        double kmin{0}, kmax{0}, pmax{0};
        RdmaPortStats stats;
    };

    void TryTransmit(uint32_t port);
    void HandlePfc(uint32_t port, const RdmaHeader& h);
    void SendPfc(uint32_t port, uint8_t prio, bool pause);
    void PauseExpired(uint32_t port, uint8_t prio, uint32_t gen);
    void RefreshPause(uint32_t port, uint8_t prio);
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

} // namespace ns3

#endif
