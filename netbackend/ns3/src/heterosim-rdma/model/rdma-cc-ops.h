// Congestion control of a queue pair behind one interface, as ns-3's TCP keeps its algorithms
// behind TcpCongestionOps and their per-socket state in TcpSocketState.
//
//  * RdmaCongestionOps (an Object with a TypeId and Attributes): one subclass per algorithm, the
//    algorithm and its parameters.  A NIC creates one from its "CongestionOps" TypeId attribute
//    (or a registered short name, "CongestionControl") and keeps it for all its queue pairs.
//  * RdmaCcState: what one queue pair holds, its own CC's state and nothing else (each ops class
//    derives its own and creates it in NewState).
//  * The NIC calls in on the events a CC reacts to (a data packet sent, an ACK or NACK, a CNP, a
//    go-back) and reads back the pacing rate and the window; a call returns the effects the NIC
//    applies (record the rate, count a cut, re-time the pending send).  A CC with timers of its
//    own (DCQCN) schedules them itself and reports through RdmaCcOwner.
//  * The receiver's reaction to a CE mark (echo it on the ACK, send a CNP, or nothing) is the
//    CC's choice too (CeReaction); the CNP's pacing and class stay the NIC's (notification point).
//
// Adding an algorithm: one class deriving from RdmaCongestionOps with its Attributes, registered
// under a short name with RDMA_CC_REGISTER (the name `cc:` takes in a HeteroSim config), plus its
// config section in netbackend/config.py.  docs/congestion-control.md, "Adding a congestion control".
#ifndef HETEROSIM_RDMA_CC_OPS_H
#define HETEROSIM_RDMA_CC_OPS_H

#include "ns3/nstime.h"
#include "ns3/object.h"
#include "ns3/traced-callback.h"
#include "ns3/type-id.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ns3
{

class RdmaIntTag;

/// Per-QP congestion state: each ops class derives its own (TcpSocketState's role).
struct RdmaCcState
{
    virtual ~RdmaCcState() = default;
    uint32_t qp{0}; //!< the QP's id at its NIC
};

/// What a CC sees of an ACK or NACK.
struct RdmaCcAck
{
    bool nack{false};
    uint64_t seq{0};               //!< cumulative: every byte below it arrived
    bool ece{false};               //!< the ACK echoes a CE mark (DCTCP)
    int64_t echoTsNs{0};           //!< send time of the data packet it answers (0: none)
    const RdmaIntTag* intTag{nullptr}; //!< INT records (CCs with UsesInt only)
    uint64_t sndNxt{0};            //!< the sender's next byte
    uint64_t streamEnd{0};         //!< one past the last byte posted on the QP
};

/// The side of a NIC a CC's own timers report to.
class RdmaCcOwner
{
  public:
    virtual ~RdmaCcOwner() = default;
    /// A CC timer changed QP @p qp's congestion state: apply @p effects (RdmaCongestionOps::Effect).
    virtual void CcChanged(uint32_t qp, uint32_t effects) = 0;
};

/// Line and packet sizes a CC is configured with (RdmaNic::Setup).
struct RdmaCcLink
{
    double lineRateBps{100e9};
    uint32_t payloadBytes{4096}; //!< data payload per packet (MTU)
    uint32_t dataWireBytes{4174}; //!< a full data packet on the wire (headers and INT included)
};

class RdmaCongestionOps : public Object
{
  public:
    /// Effects of a call, for the NIC to apply (bit mask).
    enum Effect : uint32_t
    {
        NONE = 0,
        RATE = 1,   //!< the rate or window changed: record it (RateSampleQps, traces)
        CUT = 2,    //!< count a rate cut (counters' rateCuts)
        REPACE = 4, //!< re-time the pending send to the new rate (RdmaNic::Repace)
        KICK = 8,   //!< with REPACE from a timer: try to transmit after it
    };

    /// What a receiver does with a CE-marked data packet of this CC.
    enum CeReaction
    {
        CE_IGNORE = 0,
        CE_ECHO = 1, //!< echo it on the ACK (FLAG_ECE: DCTCP)
        CE_CNP = 2,  //!< notify the sender with a CNP (DCQCN's notification point)
    };

    /// RateChange / WindowChange: (QP id, bit/s or bytes).
    typedef void (*QpValueCallback)(uint32_t qp, double value);

    static TypeId GetTypeId();
    RdmaCongestionOps();
    ~RdmaCongestionOps() override;

    /// Short name of the algorithm (the registry's).
    virtual std::string GetName() const = 0;

    /// Called once by the NIC before any QP exists.
    virtual void Configure(const RdmaCcLink& link, RdmaCcOwner* owner);
    /// The fabric's unloaded RTT from this host (the helper's; 0: not known yet).  The BaseRtt
    /// attribute wins when set; a 10 us placeholder until the helper has computed it.
    void SetAutoBaseRtt(int64_t ns);
    /// Switches on a shortest path to each host (NeedsPathHops only).
    virtual void SetPathHops(const std::vector<uint16_t>& hops);

    /// The NIC must tell this CC the fabric's base RTT (a window of one BDP, a delay target).
    virtual bool NeedsBaseRtt() const { return m_bdpWindow; }
    /// The NIC must tell this CC the hop count to each host (SetPathHops).
    virtual bool NeedsPathHops() const { return false; }
    /// Data packets are ECN-capable (ECT): switches mark them instead of ignoring them.
    virtual bool EcnCapable() const { return false; }
    /// Data packets and ACKs carry INT records (switches stamp them when IntEnabled).
    virtual bool UsesInt() const { return false; }
    /// Wire bytes INT adds to each data packet and ACK (UsesInt).
    virtual uint32_t IntBytes() const { return 0; }
    virtual CeReaction OnCeReceived() const { return CE_IGNORE; }
    /// What the NIC asks per packet, read once at Setup so a CC without them costs nothing there:
    /// Window can be finite (else the NIC skips the call); Rate can be below line rate; OnSent
    /// can change something.
    virtual bool HasWindow() const { return m_bdpWindow; }
    virtual bool HasRate() const { return true; }
    virtual bool ReactsToSent() const { return false; }

    /// A new QP's state at @p nowNs (its id @p qp, towards host @p dst).
    virtual std::unique_ptr<RdmaCcState> NewState(uint32_t qp, uint32_t dst, int64_t nowNs) = 0;
    /// The QP goes: cancel its timers (the state is freed after).
    virtual void Release(RdmaCcState& s);
    /// Pacing rate, bit/s.
    virtual double Rate(const RdmaCcState& s) const;
    /// Bytes in flight allowed (payload); +infinity: no window.  Here: one BDP with BdpWindow.
    virtual double Window(const RdmaCcState& s) const;

    virtual uint32_t OnSent(RdmaCcState& s, uint32_t wireBytes);
    virtual uint32_t OnAck(RdmaCcState& s, const RdmaCcAck& ack);
    virtual uint32_t OnCnp(RdmaCcState& s);
    /// The QP goes back N: after a NACK (@p timeout false) or a retransmission timeout.
    virtual uint32_t OnGoBack(RdmaCcState& s, bool timeout);

    /// A change is due without new data (a DCQCN cut check pending).
    virtual bool ChangePending(const RdmaCcState& s) const;
    /// The rate as a fraction of line rate, for the accelerator's closed form
    /// (RdmaNic::ConnectionRateFraction).
    virtual double RateFraction(const RdmaCcState& s) const;
    /// RdmaNic::ConnectionDcqcnState: the parameter header and one QP's entries; empty: this CC
    /// has no closed form.
    virtual std::vector<double> ClosedFormHeader() const;
    virtual std::vector<double> ClosedFormQp(const RdmaCcState& s) const;
    /// RdmaNic::SaveConnectionCc / RestoreConnectionCc: empty / false where not supported.
    virtual std::vector<double> Save(const RdmaCcState& s) const;
    virtual bool Restore(RdmaCcState& s, const std::vector<double>& v);

    /// Fire the RateChange / WindowChange traces for @p s (the NIC calls it on every change).
    void NotifyChange(const RdmaCcState& s) const;

    double LineRateBps() const { return m_link.lineRateBps; }
    double BaseRttNs() const { return m_baseRttNs; }
    /// Line rate x base RTT, bytes.
    double BdpBytes() const { return m_bdpBytes; }

    /// Short name -> TypeId of every registered CC (RDMA_CC_REGISTER).
    static std::map<std::string, TypeId>& Registry();
    /// The TypeId registered under @p name, or a TypeId name ("ns3::RdmaCcSwift"); false if none.
    static bool Lookup(const std::string& name, TypeId& tid);
    /// The registered names, comma-separated (messages).
    static std::string Names();

  protected:
    /// The base RTT (and so BdpBytes) changed.
    virtual void BaseRttChanged() {}

    RdmaCcLink m_link;
    RdmaCcOwner* m_owner{nullptr};
    double m_baseRttNs{10000};
    double m_bdpBytes{0};
    Time m_baseRttAttr;
    bool m_bdpWindow{false};
    TracedCallback<uint32_t, double> m_rateTrace;
    TracedCallback<uint32_t, double> m_windowTrace;
};

/// Registers @p cls under @p name at load time (the `cc:` name; RdmaNic "CongestionControl").
struct RdmaCcRegistrar
{
    RdmaCcRegistrar(const char* name, TypeId tid) { RdmaCongestionOps::Registry()[name] = tid; }
};

#define RDMA_CC_REGISTER(name, cls) static ns3::RdmaCcRegistrar g_rdmaCcRegistrar##cls(name, cls::GetTypeId())

/// No end-to-end congestion control: line rate, PFC only.
class RdmaCcNone : public RdmaCongestionOps
{
  public:
    static TypeId GetTypeId();
    std::string GetName() const override { return "none"; }
    bool NeedsBaseRtt() const override { return false; }
    bool HasWindow() const override { return false; }
    bool HasRate() const override { return false; }
    std::unique_ptr<RdmaCcState> NewState(uint32_t qp, uint32_t dst, int64_t nowNs) override;
    double Window(const RdmaCcState& s) const override;
    double RateFraction(const RdmaCcState& s) const override { return 1.0; }
};

} // namespace ns3

#endif
