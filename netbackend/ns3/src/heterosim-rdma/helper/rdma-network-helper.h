// Builds an RDMA fabric (NICs, switches, links, ECMP routes) from plain arrays
// and runs it: messages in, completions out, statistics recorded in C++.
#ifndef HETEROSIM_RDMA_NETWORK_HELPER_H
#define HETEROSIM_RDMA_NETWORK_HELPER_H

#include "fabric-spec.h"
#include "ns3/object.h"
#include "ns3/event-id.h"
#include "ns3/nstime.h"
#include "ns3/rdma-nic.h"
#include "ns3/rdma-stats.h"
#include "ns3/rdma-switch.h"

#include <chrono>
#include <string>
#include <unordered_set>
#include <vector>

namespace ns3
{

class RdmaNetworkHelper : public Object, public RdmaDeliverySink
{
  public:
    enum Status
    {
        OK = 0,
        DEADLOCK = 1,
        STALLED = 2,
        WALL_LIMIT = 3,
        INTERNAL_ERROR = 4, //!< a model invariant broke (e.g. a message completed twice)
        TRANSPORT_ERROR = 5, //!< a QP exceeded its retry count (RdmaNic RetryCount)
    };

    static TypeId GetTypeId();
    RdmaNetworkHelper();
    ~RdmaNetworkHelper() override;

    /// Nodes 0..H-1 are hosts, H..H+S-1 switches; link i joins nodes a[i] and
    /// b[i]; port 2i transmits a->b, port 2i+1 transmits b->a.  ECN and
    /// headroom apply to switch egress/ingress ports of each link.
    void Build(const FabricSpec& fabric);

    void AddMessage(uint64_t id, uint32_t src, uint32_t dst, uint64_t bytes, int64_t startNs,
                    uint32_t flowHash, int64_t connection, uint64_t stepBytes);
    /// Run until the next completion time or @p untilNs (< 0: no limit).
    Status Run(int64_t untilNs);
    uint64_t Pending() const { return m_pending; }
    std::vector<std::pair<uint64_t, int64_t>> DrainCompletions();
    const std::string& StatusDetail() const { return m_statusDetail; }

    // statistics
    uint32_t GetNPorts() const { return m_portRefs.size(); }
    uint32_t GetNHosts() const { return m_nHosts; }
    const RdmaPortStats& GetPortStats(uint32_t port) const;
    uint64_t GetPortTxBytes(uint32_t port) const;
    uint64_t GetPortTxPackets(uint32_t port) const;
    uint64_t GetPortQueueBytes(uint32_t port) const;
    std::string GetPortName(uint32_t port) const;
    void FlushPausedTime();
    const RdmaCounters& GetCounters() const { return m_counters; }
    const std::vector<int64_t>& GetQueueSamples() const { return m_samples; }
    uint64_t GetMessageRxBytes(uint32_t dstHost, uint64_t msgId) const;
    Ptr<RdmaNic> GetNic(uint32_t host) const { return m_nics[host]; }
    /// RdmaNic::TrimMessage on @p src's NIC; a message removed whole no longer
    /// counts as pending (it will never complete here).
    std::vector<double> TrimMessage(uint32_t src, uint32_t dst, int64_t connection, uint64_t msgId);
    Ptr<RdmaSwitchNode> GetSwitch(uint32_t i) const { return m_switches[i]; }
    double GetRunWallSeconds() const { return m_runWall; }

    struct LinkEnd
    {
        uint32_t peer;
        double delayNs;
        double rateBps;
    };

    /// Per host, the largest unloaded RTT to any other host (one data packet
    /// out, one ACK back, store-and-forward per hop): HPCC's T.
    static std::vector<double> MaxBaseRtts(uint32_t nHosts,
                                           const std::vector<std::vector<LinkEnd>>& wires,
                                           uint32_t dataWireBytes, uint32_t ackWireBytes);
    /// Switches on a shortest path from host @p src to each host (0 for itself and unreachable
    /// hosts): the hop count of a CC's per-hop target (Swift).
    static std::vector<uint16_t> PathHops(uint32_t nHosts, const std::vector<std::vector<LinkEnd>>& wires,
                                          uint32_t src);

    /// Equal-cost next hops: result[s][h] = ports of switch s towards host h,
    /// in canonical ECMP order (by neighbour node index, then port = link order).
    static std::vector<std::vector<std::vector<uint16_t>>> ComputeRoutes(
        uint32_t nHosts, uint32_t nSwitches,
        const std::vector<std::vector<std::pair<uint32_t, uint16_t>>>& adjacency);

    // RdmaDeliverySink
    void MessageDelivered(uint64_t msgId) override;
    void TransportFailed(uint32_t src, uint32_t dst, uint64_t msgId, uint32_t retries) override;

  protected:
    void DoDispose() override;

  private:
    struct PortRef
    {
        int32_t sw;     //!< switch index, or -1 for a host NIC
        uint32_t node;  //!< node index (host or H + switch)
        uint32_t local; //!< port index on that switch
        uint32_t peer;  //!< node index at the other end
    };

    void Post(uint64_t id, uint32_t src, uint32_t dst, uint64_t bytes, uint32_t flowHash,
              int64_t connection, uint64_t stepBytes);
    void Complete(uint64_t id);
    void ArmPeriodic();
    void Watchdog();
    /// Wait-for graph over PFC-paused switch egress ports; stops the run with
    /// DEADLOCK when a cycle has dequeued nothing for DeadlockHoldTime.
    void DeadlockCheck();
    /// A cycle among @p stuck nodes of the wait-for graph (empty: none).
    static std::vector<uint32_t> FindCycle(const std::vector<std::vector<uint32_t>>& edges,
                                           const std::vector<uint8_t>& stuck);

  public:
    /// One wait-for check now (tests); true if it found a deadlocked cycle.
    bool CheckDeadlockNow();
    /// Ports (global indices) of the last cycle reported.
    const std::vector<uint32_t>& GetDeadlockCycle() const { return m_cycle; }

  private:
    void Sample();

    std::vector<std::string> m_names;
    uint32_t m_nHosts{0};
    std::vector<Ptr<RdmaNic>> m_nics;
    std::vector<Ptr<RdmaSwitchNode>> m_switches;
    std::vector<PortRef> m_portRefs;
    std::vector<Ptr<RdmaNetDevice>> m_portDevs;
    RdmaCounters m_counters;
    uint64_t m_pending{0};
    uint64_t m_started{0}; ///< posted and not complete: a message added for later is not in flight
    std::unordered_set<uint64_t> m_live; ///< ids added and not yet complete (a second completion is an error)
    std::vector<std::pair<uint64_t, int64_t>> m_completions;
    int64_t m_stopAt{-1};
    EventId m_completionStop; ///< the stop scheduled by a completion, cancelled when Run returns
    Status m_status{OK};
    std::string m_statusDetail;
    EventId m_watchdog;
    EventId m_deadlockCheck;
    /// Per wait-for node (global port x class): data dequeues when last seen
    /// paused in a cycle, and since when (-1: not in a cycle at the last check).
    std::vector<uint64_t> m_wfDeq;
    std::vector<int64_t> m_wfSince;
    std::vector<uint32_t> m_cycle;
    std::vector<std::vector<uint32_t>> m_swPortGlobal; //!< [switch][local port] -> global port
    EventId m_sampler;
    uint64_t m_lastDelivered{0};
    int64_t m_lastProgressNs{0};
    std::vector<int64_t> m_samples; //!< flattened (time ns, port, bytes)
    std::vector<uint64_t> m_lastSampled;
    double m_runWall{0};
    std::chrono::steady_clock::time_point m_runStart;

    // attributes
    Time m_sampleInterval;
    Time m_stallLimit;
    Time m_deadlockHold;
    double m_wallLimitS;
    uint64_t m_maxSamples;
    uint32_t m_seed;
};

} // namespace ns3

#endif
