// Binding facade for Python (cppyy): only standard-library types cross it,
// so loading it needs no ns-3 headers in the interpreter (no 15 s cling parse
// of the ns-3 tree, no cling warnings).  One object drives one simulation.
#ifndef HETEROSIM_RDMA_SIM_H
#define HETEROSIM_RDMA_SIM_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fabric-spec.h"

namespace ns3
{

class HeterosimRdmaSim
{
  public:
    HeterosimRdmaSim();
    ~HeterosimRdmaSim();

    /// ns-3 Config::SetDefault(name, StringValue(value)); ns-3 parses the value.
    static void SetDefault(const std::string& name, const std::string& value);
    /// Global seed of ns-3's random streams.
    static void SetSeed(uint32_t seed, uint64_t run);

    /// See RdmaNetworkHelper::Build.  Creates the helper with the defaults set so far.
    void Build(const FabricSpec& fabric);

    /// Set Attribute @p name of host @p host's NIC after Build (e.g. one slow receiver's RxDrainRate);
    /// ns-3 parses @p value.  Before any message is added.
    void SetNicAttribute(uint32_t host, const std::string& name, const std::string& value);

    void AddMessage(uint64_t id, uint32_t src, uint32_t dst, uint64_t bytes, int64_t startNs,
                    uint32_t flowHash, int64_t connection, uint64_t stepBytes);
    /// 0 ok, 1 PFC deadlock, 2 stalled, 3 wall-clock limit, 4 internal error (StatusDetail names it),
    /// 5 transport retry count exceeded.
    int Run(int64_t untilNs);
    int64_t Now() const;
    uint64_t Pending() const;
    /// Flattened (id, finish ns) pairs since the last call.
    std::vector<int64_t> DrainCompletions();
    std::string StatusDetail() const;

    uint32_t NumPorts() const;
    std::vector<std::string> PortNames() const;
    /// One value per port for @p name: tx_bytes, tx_packets, pfc_pause_sent,
    /// pfc_resume_sent, pfc_pause_recv, pfc_resume_recv, paused_ns, ecn_marks,
    /// drops, max_queue_bytes, mean_queue_bytes, queue_sample_sum (the samples the mean divides), queue_bytes.
    std::vector<double> PortStat(const std::string& name) const;
    std::vector<std::string> CounterNames() const;
    std::vector<double> CounterValues() const;
    /// Flattened (time ns, port, bytes) of non-empty (and just emptied) switch queues.
    std::vector<int64_t> QueueSamples() const;
    /// Flattened (time ns, host, qp, rate bit/s) DCQCN rate changes (RateSampleQps).
    std::vector<double> RateSamples() const;
    uint64_t MessageRxBytes(uint32_t dstHost, uint64_t msgId) const;
    /// RdmaNic::ConnectionDcqcnState of @p srcHost's connection to @p dstHost.
    std::vector<double> ConnectionDcqcnState(uint32_t srcHost, uint32_t dstHost, int64_t connection,
                                             bool busyOk) const;
    /// RdmaNic::SaveConnectionCc / RestoreConnectionCc of @p srcHost's connection to @p dstHost.
    std::vector<double> SaveConnectionCc(uint32_t srcHost, uint32_t dstHost, int64_t connection) const;
    bool RestoreConnectionCc(uint32_t srcHost, uint32_t dstHost, int64_t connection,
                             const std::vector<double>& state);
    /// RdmaNetworkHelper::TrimMessage: {status, unsent bytes kept, bytes removed}.
    std::vector<double> TrimMessage(uint32_t srcHost, uint32_t dstHost, int64_t connection, uint64_t msgId);
    double RunWallSeconds() const;
    /// Simulator::Destroy(): ends this simulation (also done by the destructor).
    void Destroy();

    /// Baseline: one ns-3 PointToPoint link, a C++ feeder keeping the device
    /// queue full; returns {wall seconds, packets delivered, simulated seconds}.
    static std::vector<double> RawP2pBaseline(uint64_t packets, uint32_t packetBytes,
                                              double rateBps);

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace ns3

#endif
