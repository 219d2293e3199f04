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
