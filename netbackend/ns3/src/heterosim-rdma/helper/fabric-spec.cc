#include "fabric-spec.h"

namespace ns3
{

FabricSpec::FabricSpec() = default;
FabricSpec::~FabricSpec() = default;

uint32_t
FabricSpec::AddHost(const std::string& name)
{
    hosts.push_back(name);
    return static_cast<uint32_t>(hosts.size() - 1);
}

uint32_t
FabricSpec::AddSwitch(const std::string& name, uint64_t bufferBytes, uint32_t salt)
{
    switches.push_back(name);
    switchBufferBytes.push_back(bufferBytes);
    switchSalt.push_back(salt);
    return static_cast<uint32_t>(hosts.size() + switches.size() - 1);
}

void
FabricSpec::AddLink(uint32_t a, uint32_t b, double linkRateBps, int64_t linkDelayNs, double ecnKminBytes,
                    double ecnKmaxBytes, double ecnPmax, uint64_t linkHeadroomBytes)
{
    linkA.push_back(a);
    linkB.push_back(b);
    rateBps.push_back(linkRateBps);
    delayNs.push_back(linkDelayNs);
    kminBytes.push_back(ecnKminBytes);
    kmaxBytes.push_back(ecnKmaxBytes);
    pmax.push_back(ecnPmax);
    headroomBytes.push_back(linkHeadroomBytes);
}

} // namespace ns3
