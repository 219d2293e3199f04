// N-to-1 incast on one switch, run with the heterosim-rdma module from C++ alone.
//
//     s0   ---+
//     s1   ---+
//     ...     +--- sw0 ---- r0        every link --rate Gb/s, --delay ns
//     sN-1 ---+
//
// Each sender posts one message of --bytes to r0 at time 0 on a long-lived
// connection (as NCCL would).  The bottleneck is sw0's port towards r0; the
// congestion control named by --cc reacts to the ECN marks set there, and PFC
// pauses the senders when sw0's ingress accounting crosses its threshold.
//
// Printed, one line per item (key value pairs, for people and scripts):
//   flow <i> src s<i> dst r0 bytes <B> fct_ns <t> goodput_gbps <g> ce_marks <m>
//        pfc_pause_frames <p> pfc_paused_ns <q>
//   port <name> tx_bytes ... ecn_marks ... pfc_pause_sent ... paused_ns ... max_queue_bytes ... drops ...
//   total ecn_marks ... ce_received ... cnps_sent ... rate_cuts ... pfc_pause_frames ... drops ...
//   bound_ns <N x wire bytes x 8 / rate: no schedule can finish the incast earlier>
//
// ce_marks: CE-marked data packets of that flow seen by r0 (a receive tap on
// r0's port, see CeTap).  pfc_pause_frames / pfc_paused_ns: PAUSE frames sw0
// sent to that sender and the time the sender's NIC spent paused.
//
// Every Attribute of the module can be set on the command line as well, e.g.
//   --ns3::RdmaSwitchNode::PfcDynamic=false --ns3::RdmaSwitchNode::PfcStaticThreshold=20000
// (--PrintAttributes=ns3::RdmaNic lists them); they override --cc's preset.
#include "ns3/command-line.h"
#include "ns3/config.h"
#include "ns3/error-model.h"
#include "ns3/pointer.h"
#include "ns3/rdma-header.h"
#include "ns3/rdma-network-helper.h"
#include "ns3/rng-seed-manager.h"
#include "ns3/simulator.h"
#include "ns3/string.h"
#include "ns3/uinteger.h"

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

/// Counts CE-marked data packets per source host on the port it is attached
/// to and never drops one: RdmaNetDevice consults its ReceiveErrorModel for
/// every packet before handing it to the NIC, which makes it a receive tap.
class CeTap : public ErrorModel
{
  public:
    explicit CeTap(uint32_t nHosts)
        : m_ce(nHosts, 0)
    {
    }

    const std::vector<uint64_t>& Ce() const { return m_ce; }

  private:
    bool DoCorrupt(Ptr<Packet> p) override
    {
        RdmaHeader h;
        p->PeekHeader(h);
        if (h.f.kind == RdmaHeader::DATA && (h.f.flags & RdmaHeader::FLAG_CE) && h.f.src < m_ce.size())
        {
            m_ce[h.f.src]++;
        }
        return false;
    }

    void DoReset() override
    {
    }

    std::vector<uint64_t> m_ce;
};

void
SetNic(const std::string& attr, const std::string& value)
{
    Config::SetDefault("ns3::RdmaNic::" + attr, StringValue(value));
}

void
SetDcqcn(const std::string& attr, const std::string& value)
{
    Config::SetDefault("ns3::RdmaCcDcqcn::" + attr, StringValue(value));
}

/// The module's Attribute defaults for one network.cc preset of heterosim
/// (netbackend/config.py DCQCN_PRESETS): the DCQCN class's defaults are the vendor
/// column, so each preset is set in full here.
bool
ApplyCcPreset(const std::string& cc)
{
    if (cc == "dcqcn")
    {
        // DCQCN as NICs run it (HPCC simulator's Mellanox model): CE echoed on
        // every ACK, alpha every 1 us, cut checks every 4 us, no target clamp.
        SetNic("CongestionOps", "ns3::RdmaCcDcqcn");
        SetNic("CnpMode", "ack_piggyback");
        SetDcqcn("AlphaInterval", "1us");
        SetDcqcn("RateDecreaseInterval", "4us");
        SetDcqcn("RateIncreaseInterval", "300us");
        SetDcqcn("ByteCounter", "0");
        SetDcqcn("FastRecoveryStages", "1");
        SetDcqcn("RateAi", "0bps"); // 0: scaled with the line rate (5 Mb/s per 25 Gb/s)
        SetDcqcn("RateHai", "0bps");
        SetDcqcn("MinRate", "1000Mbps");
        SetDcqcn("ClampTargetRate", "false");
    }
    else if (cc == "dcqcn_paper")
    {
        // Zhu et al., SIGCOMM 2015.
        SetNic("CongestionOps", "ns3::RdmaCcDcqcnPaper");
        SetNic("CnpMode", "interval");
        SetNic("CnpInterval", "50us");
        SetDcqcn("AlphaInterval", "55us");
        SetDcqcn("RateDecreaseInterval", "0ns");
        SetDcqcn("RateIncreaseInterval", "55us");
        SetDcqcn("ByteCounter", "10000000");
        SetDcqcn("FastRecoveryStages", "5");
        SetDcqcn("RateAi", "40Mbps");
        SetDcqcn("RateHai", "400Mbps");
        SetDcqcn("MinRate", "100Mbps");
        SetDcqcn("ClampTargetRate", "true");
    }
    else
    {
        TypeId tid; // any other registered name (hpcc, timely, dctcp, swift, none, ...)
        if (!RdmaCongestionOps::Lookup(cc, tid))
        {
            return false;
        }
        SetNic("CongestionOps", tid.GetName());
    }
    // HPCC needs the switches to append INT records.
    Config::SetDefault("ns3::RdmaSwitchNode::IntEnabled", StringValue(cc == "hpcc" ? "true" : "false"));
    return true;
}

/// (Kmin, Kmax, Pmax) of a port at @p rateGbps, as netbackend.config.ecn_defaults.
void
EcnFor(const std::string& cc, double rateGbps, double& kmin, double& kmax, double& pmax)
{
    if (cc == "dctcp")
    {
        kmin = kmax = 30e3 * rateGbps / 10.0; // one threshold K (HPCC paper's DCTCP setting)
        pmax = 1.0;
    }
    else if (cc == "dcqcn_paper")
    {
        kmin = 5e3;
        kmax = 200e3;
        pmax = 0.01;
    }
    else
    {
        kmin = 4e3 * rateGbps; // 4 KB and 16 KB per Gb/s, Pmax 0.2
        kmax = 16e3 * rateGbps;
        pmax = 0.2;
    }
}

} // namespace

int
main(int argc, char* argv[])
{
    uint32_t senders = 4;
    uint64_t bytes = 1000000;
    std::string cc = "dcqcn";
    double rateGbps = 100.0;
    uint64_t delayNs = 1000;
    uint64_t latencyNs = 500;
    uint32_t seed = 1;

    CommandLine cmd(__FILE__);
    cmd.Usage("N-to-1 incast through one switch; prints every flow's FCT, ECN marks and PFC pauses.");
    cmd.AddValue("senders", "number of senders N", senders);
    cmd.AddValue("bytes", "message bytes per sender", bytes);
    cmd.AddValue("cc", "dcqcn, dcqcn_paper, hpcc, timely, dctcp, swift or none", cc);
    cmd.AddValue("rate", "rate of every link, Gb/s", rateGbps);
    cmd.AddValue("delay", "propagation delay of every link, ns", delayNs);
    cmd.AddValue("latency", "switch pipeline latency, ns", latencyNs);
    cmd.AddValue("seed", "seed of ns-3's random streams (ECN marking draws)", seed);
    cmd.Parse(argc, argv);
    if (senders < 1 || bytes < 1 || rateGbps <= 0)
    {
        std::cerr << "need --senders >= 1, --bytes >= 1 and --rate > 0\n";
        return 2;
    }
    if (!ApplyCcPreset(cc))
    {
        std::cerr << "unknown --cc " << cc << " (dcqcn, dcqcn_paper, hpcc, timely, dctcp, swift, none)\n";
        return 2;
    }
    // Parse again so that Attributes given on the command line win over the preset.
    cmd.Parse(argc, argv);
    Config::SetDefault("ns3::RdmaSwitchNode::PipelineLatency", TimeValue(NanoSeconds(latencyNs)));
    RngSeedManager::SetSeed(seed == 0 ? 1 : seed);

    // Hosts 0..N: r0 then s0..sN-1; switch sw0 is node N+1.  Link i joins
    // host i and the switch: port 2i transmits host -> switch, 2i+1 switch -> host.
    FabricSpec f;
    f.hosts.push_back("r0");
    for (uint32_t i = 0; i < senders; ++i)
    {
        f.hosts.push_back("s" + std::to_string(i));
    }
    f.switches = {"sw0"};
    const uint32_t nHosts = f.hosts.size();
    const double rateBps = rateGbps * 1e9;
    double kmin;
    double kmax;
    double pmax;
    EcnFor(cc, rateGbps, kmin, kmax, pmax);
    UintegerValue payload;
    UintegerValue header;
    {
        // the wire size of a full data packet, for the headroom below
        Ptr<RdmaNic> probe = CreateObject<RdmaNic>();
        probe->GetAttribute("Payload", payload);
        probe->GetAttribute("HeaderBytes", header);
    }
    // RdmaNic::Setup never lets the header be smaller than the one it serializes
    const uint32_t hdr = std::max<uint32_t>(header.Get(), sizeof(RdmaHeader::Fields));
    const double wire = static_cast<double>(payload.Get() + hdr);
    for (uint32_t h = 0; h < nHosts; ++h)
    {
        f.linkA.push_back(h);
        f.linkB.push_back(nHosts);
        f.rateBps.push_back(rateBps);
        f.delayNs.push_back(static_cast<int64_t>(delayNs));
        f.kminBytes.push_back(kmin);
        f.kmaxBytes.push_back(kmax);
        f.pmax.push_back(pmax);
        // PFC headroom: what arrives after a PAUSE is sent, 3 x rate x (delay +
        // pipeline latency) plus a full packet in flight at each end (as Ns3Backend).
        f.headroomBytes.push_back(
            static_cast<uint64_t>(3.0 * rateBps / 8e9 * static_cast<double>(delayNs + latencyNs) + 2 * wire));
    }
    // switchBufferBytes left empty: ns3::RdmaSwitchNode::BufferSize applies.

    Ptr<RdmaNetworkHelper> net = CreateObject<RdmaNetworkHelper>();
    net->Build(f);
    Ptr<CeTap> tap = CreateObject<CeTap>(nHosts);
    net->GetNic(0)->GetDevice()->SetAttribute("ReceiveErrorModel", PointerValue(tap));

    for (uint32_t i = 0; i < senders; ++i)
    {
        const uint32_t src = i + 1;
        // id i, src -> r0, start 0, ECMP entropy (one path here), connection 0, one step.
        net->AddMessage(i, src, 0, bytes, 0, RdmaMix32(src), 0, 0);
    }
    std::vector<int64_t> fct(senders, -1);
    RdmaNetworkHelper::Status status = RdmaNetworkHelper::OK;
    while (net->Pending() > 0)
    {
        status = net->Run(-1);
        for (const auto& [id, t] : net->DrainCompletions())
        {
            fct[id] = t;
        }
        if (status != RdmaNetworkHelper::OK)
        {
            std::cerr << "run stopped (status " << status << "): " << net->StatusDetail() << "\n";
            break;
        }
    }
    net->FlushPausedTime();

    std::cout << std::fixed << std::setprecision(3);
    // Port 2i is host i -> sw0 (the NIC's own port), 2i+1 is sw0 -> host i.
    uint64_t pauseTotal = 0;
    uint64_t marks = 0;
    uint64_t drops = 0;
    for (uint32_t i = 0; i < senders; ++i)
    {
        const uint32_t h = i + 1;
        const RdmaPortStats& toSender = net->GetPortStats(2 * h + 1);
        const RdmaPortStats& nic = net->GetPortStats(2 * h);
        const double gbps = fct[i] > 0 ? static_cast<double>(bytes) * 8.0 / static_cast<double>(fct[i]) : 0.0;
        std::cout << "flow " << i << " src " << f.hosts[h] << " dst r0 bytes " << bytes << " fct_ns "
                  << fct[i] << " goodput_gbps " << gbps << " ce_marks " << tap->Ce()[h]
                  << " pfc_pause_frames " << toSender.pfcPauseSent << " pfc_paused_ns " << nic.pausedNs
                  << "\n";
    }
    for (uint32_t port = 0; port < net->GetNPorts(); ++port)
    {
        const RdmaPortStats& s = net->GetPortStats(port);
        pauseTotal += s.pfcPauseSent;
        marks += s.ecnMarks;
        drops += s.drops;
        std::cout << "port " << net->GetPortName(port) << " tx_bytes " << net->GetPortTxBytes(port)
                  << " ecn_marks " << s.ecnMarks << " pfc_pause_sent " << s.pfcPauseSent
                  << " paused_ns " << s.pausedNs << " max_queue_bytes " << s.maxQueueBytes << " drops "
                  << s.drops << "\n";
    }
    const RdmaCounters& c = net->GetCounters();
    std::cout << "total ecn_marks " << marks << " ce_received " << c.ceReceived << " cnps_sent "
              << c.cnpsSent << " rate_cuts " << c.rateCuts << " pfc_pause_frames " << pauseTotal
              << " drops " << drops << " delivered_bytes " << c.deliveredBytes << "\n";
    // No schedule delivers the incast sooner than the bottleneck port needs to
    // serialize every data packet of every flow.
    const uint64_t full = bytes / payload.Get();
    const uint64_t rest = bytes % payload.Get();
    const double flowWire = static_cast<double>(full) * wire + (rest ? static_cast<double>(rest + hdr) : 0.0);
    std::cout << "bound_ns " << senders * flowWire * 8e9 / rateBps << "\n";

    net->Dispose();
    Simulator::Destroy();
    return status == RdmaNetworkHelper::OK ? 0 : 1;
}
