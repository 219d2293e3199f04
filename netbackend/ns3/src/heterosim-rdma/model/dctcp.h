// DCTCP (Alizadeh et al., SIGCOMM 2010; RFC 8257) sender arithmetic for a NIC
// queue pair, free of events so that it can be unit-tested.
//
//  * Switches mark CE above one threshold K; the receiver echoes CE on the
//    ACK of every marked packet (FLAG_ECE).
//  * Observation window = one window of data: it ends on the first ACK
//    beyond windowEnd (snd_nxt when the window began).  At its end
//    alpha <- (1 - g) alpha + g M, M = marked / acknowledged bytes in it.
//  * On an ECE, at most once per window of data (RFC 8257 section 3.3):
//    W <- W (1 - alpha / 2), never below one packet.
//  * Otherwise congestion avoidance: W grows by one MTU per window
//    (MTU x acked / W per ACK).  W never exceeds one BDP at line rate.
//  * A QP starts with W = one BDP (line rate x base RTT), i.e. at line rate,
//    as every QP does in the HPCC simulator; alpha starts at 1 (RFC 8257).
#ifndef HETEROSIM_DCTCP_H
#define HETEROSIM_DCTCP_H

#include <cstdint>

namespace ns3
{

struct DctcpParams
{
    double g{1.0 / 16};     //!< alpha gain (paper and RFC 8257: 1/16)
    double mtuBytes{4096};  //!< additive increase per window, and the floor of W
    double maxWindowBytes{0}; //!< one BDP: line rate x base RTT
};

class DctcpRp
{
  public:
    void Init(const DctcpParams* p);
    /// An ACK acknowledging up to @p ackSeq arrived (@p ece: it echoes CE);
    /// @p sndNxt is the sender's next byte.  Returns true if W changed.
    bool OnAck(uint64_t ackSeq, bool ece, uint64_t sndNxt);

    double window{0}; //!< W, bytes in flight allowed
    double alpha{1.0};
    uint64_t acked{0};        //!< highest cumulative ACK seen
    uint64_t windowEnd{0};    //!< observation window ends beyond this byte
    uint64_t windowAcked{0};  //!< bytes acknowledged in this observation window
    uint64_t windowMarked{0}; //!< of which echoed CE
    uint64_t cwrEnd{0};       //!< no further cut until the ACKs pass this byte
    bool cwr{false};

  private:
    const DctcpParams* m_p{nullptr};
};

} // namespace ns3

#endif
