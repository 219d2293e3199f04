// The fabric to build, as plain arrays.  Only standard-library types, so Python
// fills it through cppyy without parsing ns-3 headers, and both the binding
// facade and RdmaNetworkHelper take it unchanged.
#ifndef HETEROSIM_FABRIC_SPEC_H
#define HETEROSIM_FABRIC_SPEC_H

#include <cstdint>
#include <string>
#include <vector>

namespace ns3
{

/// Nodes 0..H-1 are hosts, H..H+S-1 switches; link i joins nodes linkA[i] and
/// linkB[i]; port 2i transmits a->b, port 2i+1 transmits b->a.  ECN thresholds
/// and headroom apply to the switch egress/ingress ports of each link.
struct FabricSpec
{
    // Out of line (fabric-spec.cc): cppyy then calls compiled code.  Filling the vectors from
    // Python instead made cling instantiate std::vector's constructors for each element type,
    // ~0.1 s of JIT per type and ~0.9 s per run (py-spy, GPT-3 175B on 128 GPUs).
    FabricSpec();
    ~FabricSpec();
    /// Appends a host; hosts come before the first link that names them.  Returns its node index.
    uint32_t AddHost(const std::string& name);
    /// Appends a switch (node index hosts.size() + its position, so after every host) with its
    /// shared buffer (0 = the BufferSize Attribute) and ECMP salt.  Returns its node index.
    uint32_t AddSwitch(const std::string& name, uint64_t bufferBytes, uint32_t salt);
    /// Appends a link between nodes @p a and @p b with its ECN thresholds and PFC headroom.
    void AddLink(uint32_t a, uint32_t b, double linkRateBps, int64_t linkDelayNs, double ecnKminBytes,
                 double ecnKmaxBytes, double ecnPmax, uint64_t linkHeadroomBytes);

    std::vector<std::string> hosts;
    std::vector<std::string> switches;
    std::vector<uint32_t> linkA;
    std::vector<uint32_t> linkB;
    std::vector<double> rateBps;
    std::vector<int64_t> delayNs;
    std::vector<double> kminBytes;
    std::vector<double> kmaxBytes;
    std::vector<double> pmax;
    std::vector<uint64_t> headroomBytes;
    std::vector<uint64_t> switchBufferBytes; ///< per switch; 0 = the BufferSize Attribute
    /// Per switch ECMP salt (netbackend.routing.Router.switch_salt32); empty =
    /// derived from the helper's Seed (C++-only use).
    std::vector<uint32_t> switchSalt;
};

} // namespace ns3

#endif
