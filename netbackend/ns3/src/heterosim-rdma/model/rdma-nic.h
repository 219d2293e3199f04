// Host RDMA NIC: reliable-connection queue pairs over one port.
//
// Transport, as NCCL drives RDMA (shared/network-reference.md, "How NCCL
// drives RDMA"): a message posted on a connection (peer, connection id) goes
// to one of that connection's long-lived QPs (round robin over
// QpsPerConnection), split into work requests of at most its step size; at
// most MaxOutstandingSteps steps of a connection are in flight, and a step's
// slot returns when its last byte is acknowledged (the receiver's
// clear-to-send for that slot travels back with the same timing; the GPU's
// consumption of the slot is not modelled).  QPs, their congestion state and
// the receiver's state persist across messages until the connection closes
// (Dispose).  A message without a connection (or with QpMode per_message) gets
// a fresh QP at line rate that is freed, at both ends, when it completes.
//
// Sender: per-QP pacing at the congestion-control rate and within its window
// (both the CC's: rdma-cc-ops.h; the NIC holds one RdmaCongestionOps, chosen by
// its CongestionOps TypeId, and each QP only its own CC's state), MTU-sized packets that never span work requests,
// go-back-N on NACK and after a retransmission timeout, round-robin among
// ready QPs.  Receiver: cumulative ACK every N packets (and at the end of each
// work request), NACK on a sequence gap (repeated after NackInterval while the
// gap persists), CNPs for CE-marked packets at most once per interval per QP
// or echoed on ACKs, or an ECN echo, as the CC asks (OnCeReceived).  Control packets (ACK, NACK, CNP)
// leave before any data; each kind travels in a configurable class (AckClass,
// CnpClass): the data class, where switches buffer it with data and PFC pauses
// it (what RoCE NICs do with ACK/NAK), or class 0, strict priority and never
// paused (what they do with CNPs).  A QP that times out RetryCount times in a
// row without progress ends the run with a transport error, as the NIC moves
// the QP to the error state (IBV_WC_RETRY_EXC_ERR).  With RxDrainRate, received
// data goes through a receive buffer drained at that rate (PCIe / host memory)
// and is processed (delivered, acknowledged) when drained; a filling buffer
// PAUSEs the switch port above (a slow receiver's PFC storm).
#ifndef HETEROSIM_RDMA_NIC_H
#define HETEROSIM_RDMA_NIC_H

#include "rdma-cc-ops.h"
#include "rdma-int-tag.h"
#include "rdma-header.h"
#include "rdma-net-device.h"
#include "rdma-stats.h"

#include "ns3/data-rate.h"
#include "ns3/event-id.h"
#include "ns3/object.h"
#include "ns3/traced-callback.h"

#include <deque>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ns3
{

class RdmaNic : public Object, public RdmaPortOwner, public RdmaCcOwner
{
  public:
    enum QpMode
    {
        QP_PER_CONNECTION = 0,
        QP_PER_MESSAGE = 1,
    };

    /// Traffic class a control packet travels in: the QP's data class (lossless: buffered and
    /// PAUSEd with data, FIFO behind it at switches) or class 0 (strict priority, never paused).
    enum CtrlClass
    {
        CLASS_DATA = 0,
        CLASS_CONTROL = 1,
    };

    enum CnpMode
    {
        CNP_INTERVAL = 0,
        CNP_ACK_PIGGYBACK = 1,
    };

    struct RateSample
    {
        int64_t timeNs;
        uint32_t qp;
        double rateBps;
    };

    /// RateChange: (QP id, rate bit/s).
    typedef void (*RateCallback)(uint32_t qp, double rateBps);
    /// PfcSent / PfcReceived: (class, true = PAUSE / false = RESUME).
    typedef void (*PfcCallback)(uint8_t prio, bool pause);

    static TypeId GetTypeId();
    RdmaNic();
    ~RdmaNic() override;

    void Setup(uint32_t hostIndex, Ptr<RdmaNetDevice> dev, RdmaCounters* counters,
               RdmaDeliverySink* sink);
    /// Post a message now.  @p flowHash is the ECMP entropy every data packet
    /// carries (the caller's hash of the flow, unchanged); @p connection < 0:
    /// a QP of its own; @p stepBytes 0: the whole message is one work request.
    /// Returns the QP id it was placed on.
    uint32_t PostMessage(uint64_t msgId, uint32_t dstHost, uint64_t bytes, uint32_t flowHash,
                         int64_t connection, uint64_t stepBytes);

    Ptr<RdmaNetDevice> GetDevice() const { return m_dev; }
    const RdmaPortStats& GetPortStats() const { return m_stats; }
    void FlushPausedTime();
    bool IsPaused() const { return m_dataPaused; }
    /// Apply RxDrainRate / RxBufferBytes set after Setup (PAUSE and RESUME levels from the link);
    /// call it before any data arrives.
    void ConfigureRxPipeline();
    /// Receive pipeline (RxDrainRate): the most bytes its buffer held, and its PAUSE/RESUME levels.
    uint64_t GetRxBufferMaxBytes() const { return m_rxMaxBytes; }
    uint64_t GetRxXoffBytes() const { return m_rxXoffBytes; }
    uint64_t GetRxXonBytes() const { return m_rxXonBytes; }
    uint32_t GetActiveQps() const { return m_qps.size(); }
    /// Receiver-side QP records held (freed with per-message QPs).
    uint32_t GetRxQpStates() const { return m_rx.size(); }
    uint32_t GetConnections() const { return m_conns.size(); }
    /// Delivered payload bytes of a message still in progress at this receiver
    /// (needs TrackMessageBytes); 0 if unknown or finished.
    uint64_t GetMessageRxBytes(uint64_t msgId) const;
    const std::vector<RateSample>& GetRateSamples() const { return m_rateSamples; }
    /// Congestion state of connection (@p dstHost, @p connection), for the
    /// accelerated backend's decision whether its next message may be computed in
    /// closed form: min over its QPs of min(RC, RT) / line rate (1 without a
    /// rate-based CC); -1: no such connection; -2: data outstanding or a DCQCN
    /// cut check pending (its rate may still change without new data).
    double ConnectionRateFraction(uint32_t dstHost, int64_t connection) const;
    /// DCQCN state of that connection's idle QPs, for a closed-form rate
    /// trajectory: empty when the connection is unknown, busy (data outstanding,
    /// steps waiting) or a cut check is pending; else {line rate bit/s, R_AI,
    /// R_HAI, F, increase interval ns, byte counter bytes} then per QP {RC bit/s,
    /// RT bit/s, timer stage, byte stage, next increase-timer expiry ns (-1: none),
    /// 1 if it ever had a CNP else 0, the alpha a CNP now would start from}.
    std::vector<double> ConnectionDcqcnState(uint32_t dstHost, int64_t connection,
                                             bool busyOk = false) const;
    /// Remove the unsent tail of message @p msgId, the newest one on connection
    /// (@p dstHost, @p connection) (trim newest first), so that the accelerated
    /// backend can carry it on in closed form.  Only whole work requests go: the
    /// one being sent (or, if every posted one is sent, the next step) stays and
    /// becomes the message's last, so the receiver still completes the message.
    /// Returns {status, unsent bytes kept, bytes removed}: status 0 nothing
    /// removed, 1 tail removed, 2 the message removed whole (nothing of it was
    /// sent; it will never complete).
    std::vector<double> TrimMessage(uint32_t dstHost, int64_t connection, uint64_t msgId);
    /// The whole DCQCN reaction-point state of that connection's QP (one QP,
    /// DCQCN only; empty otherwise), every time in it relative to now:
    /// {RC, RT, alpha, timer stage, byte stage, bytes since the last event,
    /// has a cut, last cut, alpha reference, CNP seen, CNP in the alpha period,
    /// CNP since the last check, alpha period end, cut-check grid, increase
    /// timer left (-1: none), cut check left (-1: none)}.  With
    /// RestoreConnectionCc, the accelerated backend hands a connection back to
    /// packet level in the congestion state a recorded episode had at that point.
    std::vector<double> SaveConnectionCc(uint32_t dstHost, int64_t connection) const;
    /// Set the state SaveConnectionCc returned (times shifted to now) and re-arm
    /// its timers; false if the connection has no single DCQCN QP.
    bool RestoreConnectionCc(uint32_t dstHost, int64_t connection, const std::vector<double>& state);
    /// The congestion control (created by Setup from CongestionOps / CongestionControl): its
    /// Attributes and TraceSources (RateChange, WindowChange, and its own).
    Ptr<RdmaCongestionOps> GetCongestionOps() const { return m_ops; }
    /// Whether this NIC's CC needs the fabric's base RTT (SetAutoBaseRtt): a window of one BDP,
    /// a delay target.
    bool NeedsBaseRtt() const { return m_ops->NeedsBaseRtt(); }
    /// Whether its CC needs the switch hop count to each host (SetPathHops).
    bool NeedsPathHops() const { return m_ops->NeedsPathHops(); }
    void SetPathHops(const std::vector<uint16_t>& hops) { m_ops->SetPathHops(hops); }
    /// Wire bytes of a full data packet and of an ACK (INT included).
    uint32_t DataWireBytes() const;
    uint32_t AckWireBytes() const;
    /// The CC's T when its BaseRtt attribute is 0 (set by the network helper:
    /// the largest unloaded RTT from this host to any other host).
    void SetAutoBaseRtt(int64_t ns);
    // RdmaCcOwner: a CC timer changed QP @p qp's state.
    void CcChanged(uint32_t qp, uint32_t effects) override;

    // RdmaPortOwner
    void PortReceive(uint32_t port, Ptr<Packet> p) override;
    void PortTxDone(uint32_t port) override;

  protected:
    void DoDispose() override;

  private:
    struct MsgRec
    {
        uint64_t id;
        uint64_t end;     //!< stream offset one past this work request's last byte
        bool last{true};  //!< the message's last work request
        int32_t conn{-1}; //!< connection whose step slot it holds (-1: none)
        uint64_t start{0}; //!< stream offset of its first byte (set by Enqueue)
    };

    struct Step
    {
        uint64_t id;
        uint64_t bytes;
        bool last;
        uint32_t qp;
    };

    /// One (peer, connection id): its QPs and its step credits.
    struct Connection
    {
        uint32_t dst{0};
        std::vector<uint32_t> qps;
        uint32_t nextQp{0};
        uint32_t outstanding{0};   //!< steps in flight
        std::deque<Step> waiting;  //!< steps posted, waiting for a slot
    };

    struct SendQp
    {
        uint32_t id{0};
        uint32_t dst{0};
        uint32_t flowHash{0};
        bool perMessage{true};
        bool inReady{false};
        uint64_t sndNxt{0};
        uint64_t sndUna{0};
        uint64_t sndMax{0}; //!< highest offset ever sent (retransmission accounting)
        uint64_t streamEnd{0};
        std::deque<MsgRec> msgs; //!< messages not yet fully acknowledged
        std::unique_ptr<RdmaCcState> cc; //!< its congestion control's state, nothing else
        double nextSendNs{0};
        /// When the QP last became able to send after it could not for its own reasons (no
        /// data, window closed, go-back).  Pacing credits a ready QP the time it then waited
        /// for the NIC (another QP's packet on the wire), so QPs sharing a NIC keep their rates.
        double readySinceNs{0};
        /// The rate and packet size nextSendNs was timed with: a rate change re-times the pending
        /// send to the new rate's gap after the last packet (Repace).
        double pacedRateBps{0};
        double pacedWireBytes{0};
        EventId rtoTimer;
        uint64_t rtoUna{0};
        uint32_t rtoRetries{0}; //!< timeouts in a row without progress (RetryCount)
    };

    struct RecvQp
    {
        uint64_t expected{0};
        int64_t lastCnpNs{-1};
        uint32_t unacked{0};
        int64_t nackAgainNs{-1};   //!< a NACK for the same gap only after this
        uint64_t lastNackSeq{0};
        uint32_t src{0};
        uint32_t qp{0};
        EventId nackTimer;         //!< repeats the NACK while the gap persists
        bool cnpPending{false};
        bool ecePending{false};
    };

    void TryTransmit();
    void SendData(SendQp& qp);
    void SendControl(uint8_t kind, uint32_t dst, uint32_t qp, uint64_t seq, uint8_t flags,
                     int64_t echoTs = 0, const RdmaIntTag* intTag = nullptr);
    double CurrentRate(const SendQp& qp) const;
    bool WindowBlocked(const SendQp& qp) const;
    void MakeReady(SendQp& qp);
    void OnData(const RdmaHeader& h, Ptr<Packet> p);
    void OnAck(const RdmaHeader& h, Ptr<Packet> p);
    void OnCnp(SendQp& qp);
    /// Apply what a CC call returned (RdmaCongestionOps::Effect).
    void ApplyCc(SendQp& qp, uint32_t effects);
    /// The only QP of connection (@p dstHost, @p connection), else nullptr
    /// (Save/RestoreConnectionCc).
    SendQp* SingleQp(uint32_t dstHost, int64_t connection);
    void SendNack(RecvQp& rq);
    void RxEnqueue(Ptr<Packet> p);
    void RxStartDrain(bool backToBack);
    void RxDrained();
    void SendPfcFrame(bool pause);
    void OnNackTimer(uint64_t rxKey);
    SendQp& NewQp(uint32_t dst, uint32_t flowHash, bool perMessage);
    void ReleaseSteps(int32_t connIdx);
    void Enqueue(SendQp& qp, const MsgRec& rec);
    void OnRto(uint32_t qpId);
    void ArmRto(SendQp& qp);
    void Wake();
    void RetireQp(uint32_t qpId);
    void RecordRate(const SendQp& qp);
    void Repace(SendQp& qp, bool kick);

    Ptr<RdmaNetDevice> m_dev;
    uint32_t m_host{0};
    RdmaCounters* m_counters{nullptr};
    RdmaDeliverySink* m_sink{nullptr};
    RdmaPortStats m_stats;

    std::unordered_map<uint32_t, SendQp> m_qps;
    std::map<std::pair<uint32_t, int64_t>, int32_t> m_connIndex;
    std::vector<Connection> m_conns;
    std::unordered_map<uint64_t, RecvQp> m_rx;
    /// (src, QP) keys of per-message QPs whose last packet arrived here: a later copy of one of
    /// their packets is a duplicate (acknowledged, never delivered again).
    std::unordered_set<uint64_t> m_rxDone;
    std::unordered_map<uint64_t, uint64_t> m_msgRxBytes;
    std::deque<Ptr<Packet>> m_ctrl;     //!< control packets of class 0: first, never paused
    std::deque<Ptr<Packet>> m_ctrlData; //!< ACK/NAK/CNP in the data class: before data, paused with it
    std::deque<Ptr<Packet>> m_pfcQ;     //!< PAUSE/RESUME from the receive pipeline: before anything
    // receive pipeline (RxDrainRate > 0)
    std::deque<Ptr<Packet>> m_rxQ;
    uint64_t m_rxBytes{0};
    uint64_t m_rxMaxBytes{0};
    bool m_rxDraining{false};
    bool m_rxPausing{false};       //!< we have PAUSEd our switch port
    double m_rxDrainEndNs{0};
    double m_rxDrainBps{0};
    uint64_t m_rxXoffBytes{0};
    uint64_t m_rxXonBytes{0};
    std::deque<uint32_t> m_ready;
    uint32_t m_nextQpId{1};
    bool m_dataPaused{false};
    int64_t m_pausedSince{0};
    double m_resumedNs{0}; //!< end of the last PFC pause (paused time is not credited to pacing)
    uint32_t m_pauseGen{0};
    EventId m_wake;
    int64_t m_wakeAt{-1};
    std::vector<RateSample> m_rateSamples;
    TracedCallback<uint32_t, double> m_rateTrace;
    TracedCallback<uint8_t, bool> m_pfcSentTrace;
    TracedCallback<uint8_t, bool> m_pfcRecvTrace;

    // attributes
    uint32_t m_payload;
    uint32_t m_headerBytes;
    uint32_t m_ctrlBytes;
    uint32_t m_ackInterval;
    QpMode m_qpMode;
    uint32_t m_qpsPerConn;
    uint32_t m_maxSteps;
    TypeId m_ccTid;
    std::string m_ccName;
    Ptr<RdmaCongestionOps> m_ops;
    // what the hot path asks of the CC, read once at Setup
    bool m_ecnCapable{false};
    bool m_hasWindow{false};
    bool m_hasRate{false};
    bool m_reactsToSent{false};
    bool m_useInt{false};
    uint32_t m_intBytes{0};
    RdmaCongestionOps::CeReaction m_ceReaction{RdmaCongestionOps::CE_IGNORE};
    double m_lineBps{0};
    CnpMode m_cnpMode;
    Time m_cnpInterval;
    Time m_rto;
    Time m_nackInterval;
    uint8_t m_dataPrio;
    CtrlClass m_ackClass;
    CtrlClass m_cnpClass;
    uint32_t m_retryCount;
    DataRate m_rxDrain;
    uint64_t m_rxBufferBytes;
    bool m_rxPfc;
    bool m_trackMsgBytes;
    uint32_t m_rateSampleQps;
};

} // namespace ns3

#endif
