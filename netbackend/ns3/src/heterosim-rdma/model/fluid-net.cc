#include "fluid-net.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <bit>
#include <cmath>
#include <deque>
#include <limits>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <utility>

namespace ns3
{

namespace
{
/// A flow's bytes in a port's queue or arrivals: which hop of its path the port is, so serving
/// it needs no search of the path.  (16 bytes: parts are read for every step a port queues and
/// serves them; the hop's ingress is read from Impl::hopOut, which forwarding reads anyway:
/// -2.8% D1 misses and -1.9% instructions against a 24-byte part with the ingress in it, on an
/// H0-GPT-3 replay slice under cachegrind.)
struct Part
{
    uint32_t flow;
    uint32_t hop; //!< the flow's hop there, as an index into Impl::hopOut (which has its ingress)
    double bytes;
};

using Comp = std::vector<Part>;

/// Islands are split among lanes (threads) only where a step has at least this many flows and
/// ports to step: below it, handing half a step to another core (~0.3 us each way) costs more than
/// it saves.  Speed only: every result is the same however the islands are split.
constexpr size_t kMinWeightParallel = 24;

/// Spins (a pause each: 28.5 ns on this project's 2-core machine, ~30 us in all) a worker waits for
/// the next step before it yields its core between looks, and the caller waits for a lane the worker
/// took before it yields.
constexpr uint32_t kIdleSpins = 1u << 10;

/// How long a worker keeps looking for the next step (yielding its core to any other thread between
/// looks) before it sleeps on a futex.  The Python work between two runs of the model is ~50 us on
/// average with a long tail (H0-GPT-3: 1.13 M of 1.83 M gaps over 30 us); a worker asleep at a run's
/// start woke too late to take half of the split steps (4.4 M of 9.4 M), and a wake-up in a virtual
/// machine costs tens of us.
constexpr auto kIdleLook = std::chrono::microseconds(500);

struct Hop
{
    int port; //!< -1: the NIC's own link
    double rateBps;
    double extraNs;
    double shiftNs{0}; //!< leaving this hop -> at the next node (Serialization + extraNs)
    uint32_t ingress{UINT32_MAX}; //!< the ingress this hop's port's switch receives the flow by
};

/// What forwarding a flow's bytes past one of its hops reads, for every (flow, hop) in one flat
/// array: a part's hop index reaches it with one load (no flow, no vector of hops).
struct HopOut
{
    static constexpr uint32_t kReceiver = UINT32_MAX;
    double shiftNs;       //!< Hop::shiftNs
    uint32_t next;        //!< the next hop's port; kReceiver: this is the last hop
    uint32_t ingress;     //!< this hop's Hop::ingress (read for every part queued and served)
    uint32_t slot[2];     //!< per bin parity: where the flow was last in the next port's arrivals
};

/// Mark hazard reaching a receiver, per step: the expected CE packets and how many of the flow's
/// packets carried them.  Marks are due one path delay after the port that made them, so a
/// farther hop's may be due after a nearer hop's: steps are added at either end.
class HazardBySteps
{
  public:
    bool Empty() const
    {
        return m_h.empty();
    }

    /// Steps with a hazard still to reach the receiver.
    uint32_t Pending() const
    {
        return m_pending;
    }

    /// @p h expected marks on @p packets of the flow's packets due at @p step.  Ports marking the
    /// same bytes add their hazards; the packets are the same ones, so the most any port saw.
    void Add(int64_t step, double h, double packets)
    {
        if (m_h.empty())
        {
            m_base = step;
        }
        for (; step < m_base; m_base--)
        {
            m_h.push_front(Due{kNone, 0.0});
        }
        while (static_cast<int64_t>(m_h.size()) <= step - m_base)
        {
            m_h.push_back(Due{kNone, 0.0});
        }
        Due& v = m_h[static_cast<size_t>(step - m_base)];
        if (v.h < 0)
        {
            v.h = 0.0;
            m_pending++;
        }
        v.h += h;
        v.packets = std::max(v.packets, packets);
    }

    /// The hazard due at @p step, if any (steps are taken in order, each once).
    bool Take(int64_t step, double& h, double& packets)
    {
        if (m_h.empty() || m_base != step)
        {
            return false;
        }
        h = m_h.front().h;
        packets = m_h.front().packets;
        m_h.pop_front();
        m_base++;
        while (!m_h.empty() && m_h.front().h < 0) // the front is always a step with a hazard
        {
            m_h.pop_front();
            m_base++;
        }
        m_pending--;
        return true;
    }

  private:
    struct Due
    {
        double h;       //!< kNone where no mark is due
        double packets;
    };

    static constexpr double kNone = -1.0;
    std::deque<Due> m_h; //!< m_h[k]: step m_base + k
    int64_t m_base{0};
    uint32_t m_pending{0};
};

/// A FIFO indexed from its front by a mask (std::deque's indexing, a division and two loads, was
/// a tenth of the model's instructions: every byte forwarded looks up the next port's step).  Its
/// slots stay in place with their lists' capacity: an element enters as the slot left there (its
/// user empties a slot before popping it), so the steady state allocates and moves nothing.
template <class T>
class Ring
{
  public:
    bool empty() const
    {
        return m_n == 0;
    }

    size_t size() const
    {
        return m_n;
    }

    T& operator[](size_t k)
    {
        return m_v[(m_head + k) & m_mask];
    }

    const T& operator[](size_t k) const
    {
        return m_v[(m_head + k) & m_mask];
    }

    T& front()
    {
        return m_v[m_head];
    }

    const T& back() const
    {
        return (*this)[m_n - 1];
    }

    /// Appends the slot after the last (empty, as its last user left it); returns it.
    T& push_back()
    {
        if (m_n == m_v.size())
        {
            Grow();
        }
        m_n++;
        return (*this)[m_n - 1];
    }

    /// Appends a copy of @p x (for plain values: nothing in the slot to keep).
    void push_back(const T& x)
    {
        push_back() = x;
    }

    void pop_front()
    {
        m_head = (m_head + 1) & m_mask;
        m_n--;
    }

    void pop_back()
    {
        m_n--;
    }

  private:
    void Grow()
    {
        std::vector<T> v(std::max<size_t>(8, 2 * m_v.size())); // a power of two
        for (size_t k = 0; k < m_v.size(); k++)
        {
            v[k] = std::move((*this)[k]); // every slot, in order from the front
        }
        m_v = std::move(v);
        m_mask = m_v.size() - 1;
        m_head = 0;
    }

    std::vector<T> m_v;
    size_t m_mask{0};
    size_t m_head{0};
    size_t m_n{0};
};

struct Msg
{
    int64_t id;
    int64_t start;
    double begin; //!< the flow's cumulative wire bytes before this message
    double end;   //!< ... when this message is done
};

struct Flow
{
    double pkt; //!< a full packet's wire bytes
    std::vector<Hop> hops;
    std::vector<double> rxDelay; //!< from leaving hop j to the receiver
    double ackNs;
    int64_t cnpInterval;
    DcqcnParams params;
    DcqcnRp rp;
    int64_t incAt{-1}; //!< RdmaNic's increase timer (-1: not armed)
    int64_t decAt{-1}; //!< vendor cut check (-1: none pending)
    std::deque<int64_t> cnps;
    double lastCnp{-1e30};
    double rxPackets{0}; //!< packets past the receiver in marked steps since the last boundary (< 1)
    double markH{0};     //!< hazard since the last packet boundary ...
    double markPackets{0}; //!< ... over this many packets
    std::deque<Msg> msgs; //!< posted, not yet delivered
    double posted{0};
    double sent{0};
    double rxPos{0}; //!< bytes forwarded to the receiver (FIFO keeps a flow's bytes in order)
    double rxLastNs{0}; //!< when its latest bytes reached the receiver
    HazardBySteps haz;
    uint32_t hop0{0}; //!< its first hop's index in Impl::hopOut (the others follow)
    uint32_t maxSteps{0};            //!< step credits (0: none)
    Ring<double> stepEnds;           //!< ends of the steps posted and not yet acknowledged
    Ring<std::pair<double, double>> rxLog; //!< (ns, step end) received, ACKs on their way
    double acked{0};                 //!< bytes whose ACK is back at the sender
    uint64_t rng{0};                 //!< its mark draws' counter (Impl::Uniform)
    bool live{false};
};

/// The flows, each at a fixed address (DcqcnRp points at its params) and reached by one load.
class FlowTable
{
  public:
    Flow& operator[](size_t i)
    {
        return *m_v[i];
    }

    const Flow& operator[](size_t i) const
    {
        return *m_v[i];
    }

    Flow& at(size_t i)
    {
        return *m_v.at(i);
    }

    const Flow& at(size_t i) const
    {
        return *m_v.at(i);
    }

    size_t size() const
    {
        return m_v.size();
    }

    Flow& Add()
    {
        m_v.push_back(std::make_unique<Flow>());
        return *m_v.back();
    }

  private:
    std::vector<std::unique_ptr<Flow>> m_v;
};

struct Chunk
{
    Comp comp;
    double total;
};

struct Port
{
    double bytesPerNs;
    double kmin;
    double kmax;
    double pmax;
    Ring<Chunk> q; //!< slots out of it hold empty lists
    double depth{0};
    uint32_t sw{UINT32_MAX}; //!< the switch it is on (SetPortSwitch)
    double maxDepth{0};
    double depthNs{0};     //!< PortQueueIntegral
    double lastSampled{0}; //!< its depth at the previous sample tick
    double marks{0};
    double txBytes{0};
    // Arrivals per step: bins[k] holds step base + k, every step before base served.  Bytes
    // arrive at a step at or after the current one; those for the current step, sent by a
    // port served after this one in it, wait in `late` and are served first next step.
    Ring<Comp> bins; //!< slots out of it hold empty lists
    int64_t base{0};
    Comp late;
    bool live{false};

    bool Arriving() const
    {
        return !late.empty() || !bins.empty();
    }

    /// The arrivals of step @p k if its list exists or is the next one (appended: the frontier
    /// moves a step each step, ~240 times a step in an H0-GPT-3 replay), else null (k < base wraps
    /// past the size).  (With lists present the port is live: no wake-up to do.)
    Comp* FindBin(int64_t k)
    {
        const auto d = static_cast<uint64_t>(k - base);
        if (d < bins.size())
        {
            return &bins[d];
        }
        return d == bins.size() && d > 0 ? &bins.push_back() : nullptr;
    }

    /// The arrivals of step @p k (>= @p step, the step being computed).
    /// (Out of line: most bytes land in a step whose list exists, found by FindBin.)
    [[gnu::noinline]] Comp& Bin(int64_t k, int64_t step)
    {
        if (bins.empty() && base < step)
        {
            base = step;
        }
        if (k < base)
        {
            return late;
        }
        while (static_cast<int64_t>(bins.size()) <= k - base)
        {
            bins.push_back();
        }
        return bins[static_cast<size_t>(k - base)];
    }
};

/// Bytes of float residue a flow may be short of a total and still count as there (the fluid
/// shares split and rejoin a flow's bytes many times).
double
Slack(double total)
{
    return 1e-3 + 1e-9 * total;
}

/// One statistic of every port, in port order.
std::vector<double>
PerPort(const std::vector<Port>& ports, double Port::*member)
{
    std::vector<double> v;
    v.reserve(ports.size());
    for (const Port& p : ports)
    {
        v.push_back(p.*member);
    }
    return v;
}

/// Adds @p b bytes of @p flow to @p c; returns the index of its part.
/// (Inlined: half the bytes forwarded start a part, most often in an empty list.)
[[gnu::always_inline]] inline uint32_t
AddTo(Comp& c, uint32_t flow, uint32_t hop, double b)
{
    const size_t n = c.size();
    Part* x = c.data();
    for (size_t j = 0; j < n; j++)
    {
        if (x[j].flow == flow)
        {
            x[j].bytes += b;
            return static_cast<uint32_t>(j);
        }
    }
    c.push_back(Part{flow, hop, b});
    return static_cast<uint32_t>(n);
}

/// static_cast<int64_t>(std::floor(x)), the same integer without a libm call (finite x in range).
int64_t
FloorToInt(double x)
{
    const auto k = static_cast<int64_t>(x); // toward zero
    return static_cast<double>(k) > x ? k - 1 : k;
}
/// splitmix64's output function (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014; constants from Vigna's public-domain reference code): a 64-bit
/// mix good enough to drive a generator by a counter.
uint64_t
Mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/// Flows that share a port or a NIC, with the ports holding their bytes.  A step of one island
/// reads and writes nothing of another's (a flow's bytes stay on its path, a port's parts are its
/// island's flows', an ingress is a port or NIC of the flows entering by it), so islands are stepped
/// in any order, or at once, with the same results.
struct Island
{
    std::vector<uint32_t> flows; //!< live, by flow index
    std::vector<uint32_t> ports; //!< live, in the order they woke (FIFO serving reads them so)
    size_t weight{0};            //!< flows + ports at the last regrouping (the lanes' balance)
};

/// One thread's share of a step: its islands, its scratch lists and what it hands back.
/// (Aligned: two lanes' counters on one cache line would bounce between the cores.)
struct alignas(64) Lane
{
    std::vector<uint32_t> islands;
    std::vector<uint32_t> ready;
    std::vector<uint32_t> touched;
    std::vector<std::pair<double, int64_t>> done;
    std::vector<std::pair<uint32_t, int64_t>> swAdd; //!< (switch, a port's peak bytes x 1024)
    std::vector<double> samples;                     //!< (ns, port, bytes) flattened
    uint64_t cnps{0};
    uint64_t cuts{0};
};

/// A worker thread that offers to step one lane.  Each step's lane goes to whichever of the worker
/// and the caller claims it first (the caller once its own lane is done): a worker that is asleep
/// or descheduled costs the step nothing but its lane run in turn, where waiting for it to wake
/// (tens of us in a virtual machine) cost more than the lane.  Between steps the worker spins a
/// while (kIdleSpins), keeps looking, yielding its core between looks (kIdleLook), then sleeps on a
/// futex.
struct Worker
{
    std::atomic<uint32_t> go{0};      //!< bumped for each step to run (the futex word)
    std::atomic<uint32_t> claimed{0}; //!< the last step whose lane someone took
    std::atomic<uint32_t> ack{0};     //!< the last step the worker finished
    std::atomic<uint32_t> sleeping{0};
    std::atomic<bool> stop{false};
    std::atomic<int64_t> step{0};
    std::thread thread;
};

inline void
CpuRelax()
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
} // namespace

struct FluidNet::Impl
{
    int64_t dt;
    uint64_t seed{0};
    std::vector<Port> ports;
    std::vector<double> nicBps;
    FlowTable flows;
    std::vector<Island> islands;
    std::vector<uint32_t> woken; //!< flows Post woke since the last regrouping (in no island yet)
    bool regroup{false};
    std::vector<Lane> lanes{1};
    std::vector<std::unique_ptr<Worker>> workers; //!< lanes[k + 1]'s thread
    pid_t workerPid{0};                           //!< the process that started them (not a fork's child)
    uint32_t threads{1};                          //!< SetThreads
    bool parallel{false};                         //!< this grouping uses more than one lane
    std::vector<std::pair<double, int64_t>> done; //!< (finish ns, message id), known ahead
    int64_t now{0};
    int64_t curStep{0}; //!< the step Step is computing
    // PFC check: bytes queued per ingress and per switch, and their maxima
    std::unordered_map<int64_t, uint32_t> ingressId; //!< (upstream port, or -1 - NIC) -> index
    std::vector<uint32_t> ingressSw;
    std::vector<double> ingBytes;
    std::vector<double> ingMax;
    std::vector<int64_t> swAcc; //!< per switch: this step's peak bytes x 1024 (integers: any order sums the same)
    std::vector<uint32_t> swTouched;
    std::vector<double> swMax;
    std::vector<HopOut> hopOut;  //!< per flow, its hops from Flow::hop0
    std::vector<uint32_t> hopAt; //!< per flow: the hop (in hopOut) of the port being served
    std::vector<double> wantOf;  //!< per flow: bytes it would send this step
    std::vector<double> limitOf; //!< per flow: how far its step credits let it send this step
    std::vector<double> outOf;   //!< per flow: bytes it sent from the port being served (0 between ports)
    std::vector<int64_t> startOf; //!< per ready flow: NextStart, found once per step
    std::vector<uint32_t> nicOf;  //!< per flow: its NIC (the ready list's sort key)
    std::vector<uint32_t> rankOf; //!< per flow: its place in (NIC, flow) order
    // regrouping's scratch: per port and NIC, the flow that last claimed it (by generation)
    std::vector<uint32_t> keyFlow;
    std::vector<uint64_t> keyGen;
    uint64_t gen{0};
    std::vector<uint32_t> parent; //!< union-find over flows
    // (and its lists, kept with their capacity: a regrouping follows most posts)
    std::vector<uint32_t> rgLive;
    std::vector<uint32_t> rgRootOf;
    std::vector<uint32_t> rgMinFlow;
    std::vector<uint32_t> rgIslandOfRoot;
    std::vector<uint32_t> rgOrphans;
    std::vector<std::pair<uint32_t, uint32_t>> rgFirsts;
    std::vector<Island> rgNext;
    std::vector<Island> spareIslands; //!< emptied islands, their lists' capacity kept
    double steps{0};
    double flowSteps{0};
    double parallelSteps{0}; //!< steps split among lanes
    int64_t sampleEvery{0}; //!< SetQueueSampling (0: none)
    int64_t nextSample{0};
    uint64_t maxSamples{0};
    std::vector<int64_t> ticks; //!< the sample ticks in the step being computed
    std::vector<double> samples; //!< (ns, port, bytes) flattened
    std::vector<double> stepSamples;
    uint64_t cnps{0};
    uint64_t cuts{0};

    ~Impl()
    {
        if (workerPid != getpid())
        {
            for (auto& w : workers)
            {
                // a fork's child: the threads are its parent's (not joinable here, and a joinable
                // std::thread may not be destroyed): left as they are
                w.release();
            }
            return;
        }
        for (auto& w : workers)
        {
            w->stop.store(true, std::memory_order_release);
            w->go.fetch_add(1, std::memory_order_seq_cst);
            w->go.notify_one();
            w->thread.join();
        }
    }

    // A uniform draw in [0, 1) from the flow's own counter-driven stream: a flow's draws do not
    // depend on which other flows drew before it, so islands step in any order.
    double Uniform(Flow& f)
    {
        f.rng += 0x9e3779b97f4a7c15ULL;
        return static_cast<double>(Mix64(f.rng) >> 11) * 0x1.0p-53;
    }

    void Wake(uint32_t i)
    {
        if (!flows[i].live)
        {
            flows[i].live = true;
            woken.push_back(i);
            regroup = true;
        }
    }

    void WakePort(Island& is, uint32_t p)
    {
        if (!ports[p].live)
        {
            ports[p].live = true;
            is.ports.push_back(p);
        }
    }

    bool AnyLive() const
    {
        if (!woken.empty())
        {
            return true;
        }
        for (const Island& is : islands)
        {
            if (!is.flows.empty() || !is.ports.empty())
            {
                return true;
            }
        }
        return false;
    }

    bool AnyPortLive() const
    {
        for (const Island& is : islands)
        {
            if (!is.ports.empty())
            {
                return true;
            }
        }
        return false;
    }

    size_t LiveFlows() const
    {
        size_t n = woken.size();
        for (const Island& is : islands)
        {
            n += is.flows.size();
        }
        return n;
    }

    // With no port holding bytes: the earliest next message start of the live flows, or -1 if a
    // flow has bytes or reaction-point work in flight (or none has a start).
    int64_t NextStartIfQuiet() const
    {
        int64_t next = -1;
        for (const Island& is : islands)
        {
            for (uint32_t i : is.flows)
            {
                const Flow& f = flows[i];
                if (f.rxPos < f.sent - Slack(f.posted) || Pending(f))
                {
                    return -1;
                }
                const int64_t s = NextStart(f);
                if (s >= 0 && (next < 0 || s < next))
                {
                    next = s;
                }
            }
        }
        return next;
    }

    // An empty island, from the spares where one is left.
    Island FreshIsland()
    {
        if (spareIslands.empty())
        {
            return Island{};
        }
        Island is = std::move(spareIslands.back());
        spareIslands.pop_back();
        is.flows.clear();
        is.ports.clear();
        is.weight = 0;
        return is;
    }

    uint32_t Find(uint32_t x)
    {
        while (parent[x] != x)
        {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        return x;
    }

    void Regroup();
    bool StartWorkers();

    // Bytes that cross a point uniformly over [t0, t1) land in the steps they overlap.
    // (Inlined, as its caller's @p put: ~10 M calls a replay.)
    template <class F>
    [[gnu::always_inline]] void Spread(double t0, double t1, double bytes, F&& put)
    {
        const auto step = static_cast<double>(dt);
        auto k = FloorToInt(t0 / step);
        if (t1 <= t0)
        {
            put(k, bytes);
            return;
        }
        const double len = t1 - t0;
        double edge = static_cast<double>(k) * step; // step k's start, computed once per step
        for (; edge < t1; k++)
        {
            const double nextEdge = static_cast<double>(k + 1) * step;
            const double lo = std::max(t0, edge);
            const double hi = std::min(t1, nextEdge);
            if (hi > lo)
            {
                put(k, bytes * (hi - lo) / len);
            }
            edge = nextEdge;
        }
    }

    // Store and forward: a switch sends a packet once it has all of it, so a byte it starts
    // serving at t is at the next node one packet time later; the NIC's own link is the fluid
    // sending itself (its bytes are on the wire as they are sent).
    static double Serialization(const Flow& f, size_t hop)
    {
        return hop == 0 ? 0.0 : f.pkt * 8e9 / f.hops[hop].rateBps;
    }

    // @p bytes of flow @p i leave its hop @p gh (an index into hopOut) uniformly over [t0, t1).
    // (Inlined: ~9 M calls a replay, from two loops.)
    [[gnu::always_inline]] void Forward(Island& is, Lane& L, uint32_t i, uint32_t gh, double t0, double t1,
                                        double bytes)
    {
        HopOut& h = hopOut[gh];
        if (h.next == HopOut::kReceiver)
        {
            Deliver(L, flows[i], h.shiftNs, t0, t1, bytes);
            return;
        }
        Port& p = ports[h.next];
        const int64_t cur = curStep;
        Spread(t0 + h.shiftNs, t1 + h.shiftNs, bytes, [&](int64_t k, double b) __attribute__((always_inline)) {
            Comp* cp = p.FindBin(k);
            if (cp == nullptr)
            {
                cp = &p.Bin(k, cur);
                // a port not live has no arrivals, so its first bytes always come this way
                WakePort(is, h.next);
            }
            Comp& c = *cp;
            // a flow's parts arrive in about the same order every step: try where it was
            uint32_t& at = h.slot[k & 1];
            if (at < c.size() && c[at].flow == i)
            {
                c[at].bytes += b;
            }
            else
            {
                at = AddTo(c, i, gh + 1, b);
            }
        });
    }

    // The last hop: @p bytes of @p f leave it uniformly over [t0, t1), at the receiver @p shift later.
    // (Out of line: Forward, inlined where ports serve, stays small.)
    [[gnu::noinline]] void Deliver(Lane& L, Flow& f, double shift, double t0, double t1, double bytes)
    {
        // at the receiver: each message whose last byte is in [rxPos, rxPos + bytes) is delivered
        const double p0 = f.rxPos;
        f.rxPos += bytes;
        f.rxLastNs = t1 + shift;
        if (f.maxSteps > 0)
        {
            // each step that ends in this slice: the ACK of its last byte leaves when it arrives
            const double e = Slack(f.posted);
            // the steps not yet acknowledged are few (at most about MaxOutstandingSteps): a scan
            // from the front finds the first past p0 + e as upper_bound would
            const size_t n = f.stepEnds.size();
            size_t k = 0;
            while (k < n && f.stepEnds[k] <= p0 + e)
            {
                ++k;
            }
            for (; k < n && f.stepEnds[k] <= f.rxPos + e; ++k)
            {
                const double x = std::clamp((f.stepEnds[k] - p0) / bytes, 0.0, 1.0);
                f.rxLog.push_back({t0 + shift + x * (t1 - t0), f.stepEnds[k]});
            }
        }
        while (!f.msgs.empty() && f.msgs.front().end <= f.rxPos + Slack(f.posted))
        {
            const double x = std::clamp((f.msgs.front().end - p0) / bytes, 0.0, 1.0);
            L.done.emplace_back(t0 + shift + x * (t1 - t0), f.msgs.front().id);
            f.msgs.pop_front();
        }
    }

    // RdmaNic::OnDecreaseCheck / OnIncreaseTimer for the timers due by @p until; rate cuts counted in @p cutCount.
    static void Timers(Flow& f, int64_t until, uint64_t& cutCount)
    {
        for (;;)
        {
            int64_t next = -1;
            for (int64_t x : {f.incAt, f.decAt})
            {
                if (x >= 0 && (next < 0 || x < next))
                {
                    next = x;
                }
            }
            if (next < 0 || next > until)
            {
                return;
            }
            if (f.decAt == next)
            {
                f.decAt = -1;
                if (f.rp.OnDecreaseCheck(next))
                {
                    cutCount++;
                    f.incAt = next + f.params.rateIncreaseIntervalNs;
                }
            }
            else
            {
                f.rp.OnIncreaseTimer();
                f.incAt = f.rp.NeedsIncrease() ? next + f.params.rateIncreaseIntervalNs : -1;
            }
        }
    }

    // RdmaNic::OnCnp.
    static void Cnp(Lane& L, Flow& f, int64_t t)
    {
        L.cnps++;
        if (f.rp.OnCnp(t))
        {
            L.cuts++;
            f.incAt = t + f.params.rateIncreaseIntervalNs;
        }
        else if (f.params.vendor && f.decAt < 0)
        {
            f.decAt = f.rp.NextDecreaseCheckNs(t);
        }
    }

    // A flow whose bytes are all sent and received, to the float residue BytesDone allows, delivers what
    // it still holds when its last bytes arrived.  Without this a message whose last few bytes (at
    // most Slack) were left unsent behind a step-credit limit equal to its end was never delivered:
    // the flow counted as idle and left the live list, and the message waited for the
    // connection's next one (H1-LLaMA-65B: 10.7 B of 10.7 GB short, the iteration never ended).
    // (@p f's bytes are done: BytesDone, which this leaves as it is.)
    static void Settle(Lane& L, Flow& f)
    {
        for (const Msg& m : f.msgs)
        {
            L.done.emplace_back(f.rxLastNs, m.id);
        }
        f.msgs.clear();
        if (f.maxSteps > 0 && !f.stepEnds.empty() && (f.rxLog.empty() || f.rxLog.back().second < f.stepEnds.back()))
        {
            f.rxLog.push_back({f.rxLastNs, f.stepEnds.back()}); // its last step's ACK leaves then too
        }
    }

    // Every posted byte sent and past the receiver, to the float residue Slack allows.
    static bool BytesDone(const Flow& f)
    {
        const double e = Slack(f.posted);
        return f.sent >= f.posted - e && f.rxPos >= f.sent - e;
    }

    bool Busy(const Flow& f) const
    {
        return !BytesDone(f) || Pending(f);
    }

    // Reaction-point work left: a CNP or marks on their way, a cut check due.
    static bool Pending(const Flow& f)
    {
        return !f.cnps.empty() || !f.haz.Empty() || f.decAt >= 0;
    }

    // Step credits: ACKs back by @p t free their steps; returns how far the flow may send.
    static double CreditLimit(Flow& f, int64_t t)
    {
        if (f.maxSteps == 0)
        {
            return std::numeric_limits<double>::infinity();
        }
        while (!f.rxLog.empty() && f.rxLog.front().first + f.ackNs <= static_cast<double>(t))
        {
            f.acked = f.rxLog.front().second;
            f.rxLog.pop_front();
        }
        const double e = Slack(f.posted);
        while (!f.stepEnds.empty() && f.stepEnds.front() <= f.acked + e)
        {
            f.stepEnds.pop_front();
        }
        return f.stepEnds.size() > f.maxSteps ? f.stepEnds[f.maxSteps - 1]
                                              : std::numeric_limits<double>::infinity();
    }

    // The flow's next message start not yet sent (-1: none).
    static int64_t NextStart(const Flow& f)
    {
        for (const Msg& m : f.msgs)
        {
            if (m.end > f.sent + Slack(f.posted))
            {
                return m.start;
            }
        }
        return -1;
    }

    void Step(int64_t step);
    void StepLane(Lane& L, int64_t step);
    void StepIsland(Island& is, Lane& L, int64_t step);
};

void
FluidNet::Impl::Regroup()
{
    regroup = false;
    // the live flows: the islands' in their order, then the woken
    std::vector<uint32_t>& live = rgLive;
    live.clear();
    for (const Island& is : islands)
    {
        live.insert(live.end(), is.flows.begin(), is.flows.end());
    }
    live.insert(live.end(), woken.begin(), woken.end());
    woken.clear();
    // union-find over the live flows (indices into `live`) by the NIC and switch ports each uses
    const size_t nKeys = ports.size() + nicBps.size();
    if (keyFlow.size() < nKeys)
    {
        keyFlow.resize(nKeys);
        keyGen.resize(nKeys, 0);
    }
    gen++;
    parent.resize(live.size());
    for (uint32_t a = 0; a < live.size(); a++)
    {
        parent[a] = a;
    }
    auto claim = [&](size_t key, uint32_t a) {
        if (keyGen[key] != gen)
        {
            keyGen[key] = gen;
            keyFlow[key] = a;
            return;
        }
        const uint32_t x = Find(a);
        const uint32_t y = Find(keyFlow[key]);
        if (x != y)
        {
            parent[std::max(x, y)] = std::min(x, y);
        }
    };
    for (uint32_t a = 0; a < live.size(); a++)
    {
        const Flow& f = flows[live[a]];
        claim(ports.size() + nicOf[live[a]], a);
        for (size_t j = 1; j < f.hops.size(); j++)
        {
            claim(static_cast<size_t>(f.hops[j].port), a);
        }
    }
    // new islands, one per root, ordered by their smallest flow index (a canonical order: the same
    // however earlier steps were split among lanes)
    std::vector<uint32_t>& rootOf = rgRootOf;
    rootOf.assign(live.size(), 0);
    std::vector<std::pair<uint32_t, uint32_t>>& firsts = rgFirsts; // (smallest flow, root)
    firsts.clear();
    std::vector<uint32_t>& minFlow = rgMinFlow;
    minFlow.assign(live.size(), UINT32_MAX);
    for (uint32_t a = 0; a < live.size(); a++)
    {
        rootOf[a] = Find(a);
        minFlow[rootOf[a]] = std::min(minFlow[rootOf[a]], live[a]);
    }
    for (uint32_t a = 0; a < live.size(); a++)
    {
        if (rootOf[a] == a)
        {
            firsts.emplace_back(minFlow[a], a);
        }
    }
    std::sort(firsts.begin(), firsts.end());
    std::vector<uint32_t>& islandOfRoot = rgIslandOfRoot;
    islandOfRoot.assign(live.size(), UINT32_MAX);
    std::vector<Island>& next = rgNext;
    next.clear();
    for (size_t k = 0; k < firsts.size(); k++)
    {
        next.push_back(FreshIsland());
    }
    for (uint32_t k = 0; k < firsts.size(); k++)
    {
        islandOfRoot[firsts[k].second] = k;
    }
    for (uint32_t a = 0; a < live.size(); a++)
    {
        next[islandOfRoot[rootOf[a]]].flows.push_back(live[a]);
    }
    for (Island& is : next)
    {
        std::sort(is.flows.begin(), is.flows.end());
    }
    // live ports: each old island's in its order, old islands in their order (two islands that
    // merge had never shared a port: either order of their ports serves the same)
    std::vector<uint32_t>& orphans = rgOrphans;
    orphans.clear();
    for (const Island& is : islands)
    {
        for (uint32_t p : is.ports)
        {
            if (keyGen[p] == gen)
            {
                next[islandOfRoot[Find(keyFlow[p])]].ports.push_back(p);
            }
            else
            {
                orphans.push_back(p); // (never expected: a live port holds a live flow's bytes)
            }
        }
    }
    if (!orphans.empty())
    {
        next.push_back(FreshIsland());
        next.back().ports = orphans;
    }
    islands.swap(next);
    for (Island& is : next) // the old islands, kept for their lists' capacity
    {
        spareIslands.push_back(std::move(is));
    }
    next.clear();
    // lanes: the heaviest island first, each to the lightest lane (the split only sets speed)
    size_t total = 0;
    for (Island& is : islands)
    {
        is.weight = is.flows.size() + is.ports.size();
        total += is.weight;
    }
    const uint32_t n = std::max<uint32_t>(1, threads);
    // every island on the caller's lane
    auto serial = [&]() {
        parallel = false;
        for (Lane& L : lanes)
        {
            L.islands.clear();
        }
        for (uint32_t k = 0; k < islands.size(); k++)
        {
            lanes[0].islands.push_back(k);
        }
    };
    // Parallel only where a step is long enough to pay for handing half of it over (kMinWeightParallel).
    if (n == 1 || total < kMinWeightParallel || islands.size() < 2)
    {
        serial();
        return;
    }
    for (Lane& L : lanes)
    {
        L.islands.clear();
    }
    if (lanes.size() < n)
    {
        lanes.resize(n);
    }
    std::vector<uint32_t> order(islands.size());
    for (uint32_t k = 0; k < order.size(); k++)
    {
        order[k] = k;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return islands[a].weight > islands[b].weight; });
    std::vector<size_t> load(n, 0);
    for (uint32_t k : order)
    {
        const auto lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        lanes[lightest].islands.push_back(k);
        load[lightest] += islands[k].weight;
    }
    // one lane with (nearly) everything: not worth a hand-over
    if (*std::max_element(load.begin(), load.end()) * 8 > total * 7)
    {
        serial();
        return;
    }
    // (a fork's child: its parent's threads are not here; the lanes run in turn)
    parallel = StartWorkers();
}

bool
FluidNet::Impl::StartWorkers()
{
    if (!workers.empty() && workerPid != getpid())
    {
        return false;
    }
    workerPid = getpid();
    while (workers.size() + 1 < threads)
    {
        auto w = std::make_unique<Worker>();
        Worker* wp = w.get();
        const size_t laneIndex = workers.size() + 1;
        w->thread = std::thread([this, wp, laneIndex]() {
            uint32_t seen = 0;
            for (;;)
            {
                uint32_t g = 0;
                std::chrono::steady_clock::time_point since{};
                for (uint32_t spins = 0; (g = wp->go.load(std::memory_order_acquire)) == seen;)
                {
                    if (++spins < kIdleSpins)
                    {
                        CpuRelax();
                        continue;
                    }
                    if (spins == kIdleSpins)
                    {
                        since = std::chrono::steady_clock::now();
                    }
                    if (std::chrono::steady_clock::now() - since < kIdleLook)
                    {
                        std::this_thread::yield();
                        continue;
                    }
                    wp->sleeping.store(1, std::memory_order_seq_cst);
                    if (wp->go.load(std::memory_order_seq_cst) == seen)
                    {
                        wp->go.wait(seen, std::memory_order_seq_cst);
                    }
                    wp->sleeping.store(0, std::memory_order_relaxed);
                    spins = 0;
                }
                seen = g;
                if (wp->stop.load(std::memory_order_acquire))
                {
                    return;
                }
                uint32_t free = g - 1; // unclaimed: the caller has not taken it
                if (wp->claimed.compare_exchange_strong(free, g, std::memory_order_acq_rel))
                {
                    StepLane(lanes[laneIndex], wp->step.load(std::memory_order_relaxed));
                    wp->ack.store(g, std::memory_order_release);
                }
            }
        });
        workers.push_back(std::move(w));
    }
    return true;
}

void
FluidNet::Impl::Step(int64_t step)
{
    const int64_t t = step * dt;
    const int64_t tEnd = t + dt;
    curStep = step;
    if (hopAt.size() < flows.size())
    {
        hopAt.resize(flows.size());
        wantOf.resize(flows.size());
        limitOf.resize(flows.size());
        outOf.resize(flows.size(), 0.0);
        startOf.resize(flows.size());
        std::vector<uint32_t> byRank(flows.size());
        for (uint32_t i = 0; i < flows.size(); i++)
        {
            byRank[i] = i;
        }
        std::sort(byRank.begin(), byRank.end(), [&](uint32_t a, uint32_t b) {
            return nicOf[a] != nicOf[b] ? nicOf[a] < nicOf[b] : a < b;
        });
        rankOf.resize(flows.size());
        for (uint32_t r = 0; r < flows.size(); r++)
        {
            rankOf[byRank[r]] = r;
        }
    }
    // queue samples at the ticks in this step
    ticks.clear();
    if (sampleEvery > 0 && nextSample < tEnd && samples.size() / 3 < maxSamples)
    {
        if (nextSample < t) // (idle time jumped over: no port was live then)
        {
            nextSample = (t + sampleEvery - 1) / sampleEvery * sampleEvery;
        }
        for (; nextSample < tEnd; nextSample += sampleEvery)
        {
            ticks.push_back(nextSample);
        }
    }
    if (parallel)
    {
        parallelSteps += 1;
        for (size_t k = 0; k < workers.size(); k++)
        {
            Worker& w = *workers[k];
            w.step.store(step, std::memory_order_relaxed);
            w.go.fetch_add(1, std::memory_order_seq_cst);
            // (one wake-up per sleep: the flag is cleared by whoever wakes the worker first)
            if (w.sleeping.load(std::memory_order_seq_cst) != 0 && w.sleeping.exchange(0) != 0)
            {
                w.go.notify_one();
            }
        }
        StepLane(lanes[0], step);
        for (size_t k = 0; k < workers.size(); k++)
        {
            Worker& w = *workers[k];
            const uint32_t g = w.go.load(std::memory_order_relaxed);
            uint32_t free = g - 1;
            if (w.claimed.compare_exchange_strong(free, g, std::memory_order_acq_rel))
            {
                StepLane(lanes[k + 1], step); // the worker had not started it: run it here
                continue;
            }
            for (uint32_t spins = 0; w.ack.load(std::memory_order_acquire) != g;)
            {
                if (++spins < kIdleSpins)
                {
                    CpuRelax();
                }
                else
                {
                    std::this_thread::yield(); // (the worker was descheduled mid-lane)
                }
            }
        }
    }
    else
    {
        for (Lane& L : lanes)
        {
            StepLane(L, step);
        }
    }
    // what the lanes hand back, summed and ordered so that no result depends on the split
    stepSamples.clear();
    for (Lane& L : lanes)
    {
        done.insert(done.end(), L.done.begin(), L.done.end());
        L.done.clear();
        cnps += L.cnps;
        cuts += L.cuts;
        L.cnps = 0;
        L.cuts = 0;
        for (const auto& [sw, v] : L.swAdd)
        {
            if (swAcc[sw] == 0)
            {
                swTouched.push_back(sw);
            }
            swAcc[sw] += v;
        }
        L.swAdd.clear();
        stepSamples.insert(stepSamples.end(), L.samples.begin(), L.samples.end());
        L.samples.clear();
    }
    for (uint32_t sw : swTouched)
    {
        swMax[sw] = std::max(swMax[sw], static_cast<double>(swAcc[sw]) / 1024.0);
        swAcc[sw] = 0;
    }
    swTouched.clear();
    if (!stepSamples.empty())
    {
        const size_t n = stepSamples.size() / 3;
        std::vector<uint32_t> order(n);
        for (uint32_t k = 0; k < n; k++)
        {
            order[k] = k;
        }
        std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
            return stepSamples[3 * a] != stepSamples[3 * b] ? stepSamples[3 * a] < stepSamples[3 * b]
                                                            : stepSamples[3 * a + 1] < stepSamples[3 * b + 1];
        });
        for (uint32_t k : order)
        {
            if (samples.size() / 3 >= maxSamples)
            {
                break;
            }
            samples.insert(samples.end(), stepSamples.begin() + 3 * k, stepSamples.begin() + 3 * k + 3);
        }
    }
}

void
FluidNet::Impl::StepLane(Lane& L, int64_t step)
{
    for (uint32_t k : L.islands)
    {
        Island& is = islands[k];
        if (!is.flows.empty() || !is.ports.empty())
        {
            StepIsland(is, L, step);
        }
    }
}

void
FluidNet::Impl::StepIsland(Island& is, Lane& L, int64_t step)
{
    std::vector<double>& out = outOf;
    std::vector<uint32_t>& ready = L.ready;
    std::vector<uint32_t>& touched = L.touched;
    const int64_t t = step * dt;
    const int64_t tEnd = t + dt;
    // 1. reaction points: CNPs that arrive in this step, then timers
    for (uint32_t i : is.flows)
    {
        Flow& f = flows[i];
        while (!f.cnps.empty() && f.cnps.front() < tEnd)
        {
            const int64_t tc = f.cnps.front();
            f.cnps.pop_front();
            Timers(f, tc, L.cuts);
            Cnp(L, f, tc);
        }
        Timers(f, tEnd - 1, L.cuts);
    }
    // 2. each NIC: round robin among its ready flows, each at most at its rate
    ready.clear();
    for (uint32_t i : is.flows)
    {
        Flow& f = flows[i];
        const int64_t s = NextStart(f);
        if (s >= 0 && s < tEnd)
        {
            startOf[i] = s;
            limitOf[i] = CreditLimit(f, t);
            if (f.sent < limitOf[i] - Slack(f.posted))
            {
                ready.push_back(i);
            }
        }
    }
    // in (NIC, flow) order: an island's ready flows are few (a dozen), a sort is cheap
    std::sort(ready.begin(), ready.end(), [&](uint32_t a, uint32_t b) { return rankOf[a] < rankOf[b]; });
    for (size_t lo = 0; lo < ready.size();)
    {
        size_t hi = lo;
        while (hi < ready.size() && nicOf[ready[hi]] == nicOf[ready[lo]])
        {
            hi++;
        }
        auto t0of = [&](uint32_t i) { return std::max(t, startOf[i]); };
        auto want = [&](uint32_t i) {
            const Flow& f = flows[i];
            // up to the end of the messages that have started by the end of this step
            double upto = f.sent;
            for (const Msg& m : f.msgs)
            {
                if (m.start < tEnd)
                {
                    upto = std::max(upto, m.end);
                }
            }
            return std::min(f.rp.rate / 8e9 * static_cast<double>(tEnd - t0of(i)), std::min(upto, limitOf[i]) - f.sent);
        };
        for (size_t r = lo; r < hi; r++)
        {
            wantOf[ready[r]] = want(ready[r]);
        }
        std::sort(ready.begin() + lo, ready.begin() + hi,
                  [&](uint32_t a, uint32_t b) { return wantOf[a] < wantOf[b]; });
        double left = nicBps[nicOf[ready[lo]]] / 8e9 * static_cast<double>(dt);
        size_t k = hi - lo;
        for (size_t r = lo; r < hi; r++)
        {
            const uint32_t i = ready[r];
            Flow& f = flows[i];
            const double share = left / static_cast<double>(k);
            const double give = std::min(wantOf[i], share);
            left -= give;
            k--;
            if (give <= 0)
            {
                continue;
            }
            const auto t0 = static_cast<double>(t0of(i));
            f.sent += give;
            if (f.params.byteCounterBytes > 0) // (the call, in another unit, does nothing otherwise)
            {
                f.rp.OnBytesSent(static_cast<uint64_t>(give));
            }
            // sent at its own rate or its share of the NIC, whichever is lower
            const double avail = static_cast<double>(tEnd) - t0;
            const double speed = std::min(f.rp.rate / 8e9, share / avail);
            Forward(is, L, i, f.hop0, t0, t0 + std::min(avail, give / speed), give);
        }
        lo = hi;
    }
    // 3. ports serve their FIFOs in order; marks on the depth left
    for (size_t n = 0; n < is.ports.size(); n++)
    {
        const uint32_t pi = is.ports[n];
        Port& p = ports[pi];
        // @p c joins the FIFO (its list swapped with the empty one of the slot it takes)
        auto enqueue = [&](Comp& c) {
            double tot = 0;
            for (const Part& x : c)
            {
                tot += x.bytes;
                const uint32_t g = hopOut[x.hop].ingress;
                if (g != UINT32_MAX)
                {
                    ingBytes[g] += x.bytes;
                    ingMax[g] = std::max(ingMax[g], ingBytes[g]);
                }
            }
            Chunk& ch = p.q.push_back();
            ch.comp.swap(c);
            ch.total = tot;
            p.depth += tot;
        };
        if (!p.late.empty())
        {
            enqueue(p.late);
        }
        while (!p.bins.empty() && p.base <= step)
        {
            if (!p.bins.front().empty())
            {
                enqueue(p.bins.front());
            }
            p.bins.pop_front();
            p.base++;
        }
        p.base = std::max(p.base, step + 1);
        if (p.sw != UINT32_MAX && p.depth > 0)
        {
            // the switch's bytes this step: its ports' queues with this step's arrivals, before serving
            L.swAdd.emplace_back(p.sw, std::llround(p.depth * 1024.0));
        }
        const double cap0 = p.bytesPerNs * static_cast<double>(dt);
        // The depth this step leaves, by the subtractions the serving below makes, in its order:
        // marks are on it, and a port that marks nothing (most) skips the per-flow tally.  It is
        // the port's depth once served.
        double left = p.depth;
        {
            double cap = cap0;
            for (size_t c = 0; cap > 1e-9 && c < p.q.size(); c++)
            {
                const double take = std::min(cap, p.q[c].total);
                cap -= take;
                left -= take;
            }
        }
        if (left < 1e-6)
        {
            left = 0;
        }
        // (EcnMarkProbability is 0 at or below Kmin, as for most ports most steps: no call then)
        const double prob = left <= p.kmin ? 0.0 : EcnMarkProbability(left, p.kmin, p.kmax, p.pmax);
        double cap = cap0;
        double served = 0;
        touched.clear();
        while (cap > 1e-9 && !p.q.empty())
        {
            Chunk& c = p.q.front();
            const double take = std::min(cap, c.total);
            const double frac = take / c.total;
            const double t0 = static_cast<double>(t) + served / p.bytesPerNs;
            served += take;
            const double t1 = static_cast<double>(t) + served / p.bytesPerNs;
            const double rest = c.total - take;
            for (Part& x : c.comp)
            {
                const uint32_t i = x.flow;
                if (prob > 0)
                {
                    if (out[i] == 0.0)
                    {
                        touched.push_back(i);
                        hopAt[i] = x.hop;
                    }
                    out[i] += x.bytes * frac;
                }
                const uint32_t g = hopOut[x.hop].ingress;
                if (g != UINT32_MAX)
                {
                    ingBytes[g] -= x.bytes * frac;
                }
                Forward(is, L, i, x.hop, t0, t1, x.bytes * frac);
                if (rest > 1e-9)
                {
                    x.bytes *= 1.0 - frac; // (a chunk served whole leaves its parts behind)
                }
            }
            c.total = rest;
            cap -= take;
            if (c.total <= 1e-9)
            {
                c.comp.clear();
                p.q.pop_front();
            }
        }
        p.txBytes += served;
        p.depth = left;
        p.maxDepth = std::max(p.maxDepth, p.depth);
        p.depthNs += left * static_cast<double>(dt);
        for (uint32_t i : touched) // (empty unless prob > 0)
        {
            const double b = out[i];
            out[i] = 0.0;
            Flow& f = flows[i];
            const uint32_t j = hopAt[i] - f.hop0;
            // its packets in this step, each marked with probability prob: pk * prob expected
            // marks (a step may hold a fraction of one of its packets), drawn at the receiver
            const double pk = b / f.pkt;
            const double h = pk * prob;
            p.marks += h;
            const auto kRx = static_cast<int64_t>(
                std::floor((static_cast<double>(t) + f.rxDelay[j]) / static_cast<double>(dt)));
            f.haz.Add(std::max(kRx, step + 1), h, pk);
        }
    }
    // 4. receivers: CE -> CNP back to the sender
    for (uint32_t i : is.flows)
    {
        Flow& f = flows[i];
        double h = 0;
        double pk = 0;
        if (!f.haz.Take(step, h, pk))
        {
            continue;
        }
        // RED draws once per packet, and a flow's packets come evenly spaced, not as a Poisson
        // stream: the packets whose last byte arrives in this step (a boundary of the running
        // packet count) are each CE with the mean marking probability since the previous
        // boundary.  Under saturated marking every packet is then CE, as at packet level, where a
        // Poisson count would leave ~20% of 1 us alpha periods without a CNP at 1.6 packets per
        // us and slow DCQCN's alpha and its cuts (measured: rates falling 1.6x slower than ns-3).
        f.markH += h;
        f.markPackets += pk;
        f.rxPackets += pk; // kept below 1: the fraction of a packet past the last boundary
        const double n = std::floor(f.rxPackets);
        f.rxPackets -= n;
        if (n < 1)
        {
            continue;
        }
        const double q = std::min(1.0, f.markH / std::max(f.markPackets, 1e-12));
        f.markH = 0;
        f.markPackets = 0;
        // (pow's exact result at n = 1 and 2, where nearly all boundaries are, without the call)
        const double clear = n == 1 ? 1.0 - q : n == 2 ? (1.0 - q) * (1.0 - q) : std::pow(1.0 - q, n);
        if (Uniform(f) < 1.0 - clear)
        {
            const double tCe = static_cast<double>(t) + Uniform(f) * static_cast<double>(dt);
            if (f.cnpInterval > 0)
            {
                if (tCe - f.lastCnp < static_cast<double>(f.cnpInterval))
                {
                    continue;
                }
                f.lastCnp = tCe;
            }
            f.cnps.push_back(static_cast<int64_t>(tCe + f.ackNs));
        }
    }
    // queue samples at the ticks in this step (before emptied ports leave the live list: their 0 is kept)
    for (int64_t tick : ticks)
    {
        for (uint32_t pi : is.ports)
        {
            Port& p = ports[pi];
            if (p.depth > 0 || p.lastSampled > 0)
            {
                L.samples.insert(L.samples.end(), {static_cast<double>(tick), static_cast<double>(pi), p.depth});
            }
            p.lastSampled = p.depth;
        }
    }
    // the idle leave the live lists
    std::erase_if(is.flows, [&](uint32_t i) {
        Flow& f = flows[i];
        const bool done = BytesDone(f);
        if (done && !f.msgs.empty())
        {
            Settle(L, f);
        }
        if (!done || Pending(f))
        {
            return false;
        }
        f.live = false;
        return true;
    });
    std::erase_if(is.ports, [&](uint32_t pi) {
        Port& p = ports[pi];
        if (!p.q.empty() || p.Arriving())
        {
            return false;
        }
        p.live = false;
        if (p.lastSampled > 0 && sampleEvery > 0 && samples.size() / 3 < maxSamples)
        {
            // empty at the next tick (the switches' sampler would read 0 there)
            L.samples.insert(L.samples.end(), {static_cast<double>(nextSample), static_cast<double>(pi), 0.0});
        }
        p.lastSampled = 0;
        return true;
    });
}

FluidNet::FluidNet(int64_t dtNs, uint64_t seed)
    : m_impl(std::make_unique<Impl>())
{
    m_impl->dt = std::max<int64_t>(1, dtNs);
    m_impl->seed = seed;
}

FluidNet::~FluidNet() = default;

uint32_t
FluidNet::AddPort(double rateBps, double kminBytes, double kmaxBytes, double pmax)
{
    m_impl->ports.push_back(Port{rateBps / 8e9, kminBytes, kmaxBytes, pmax});
    return static_cast<uint32_t>(m_impl->ports.size() - 1);
}

void
FluidNet::SetPortSwitch(uint32_t port, uint32_t switchId)
{
    Impl& m = *m_impl;
    m.ports.at(port).sw = switchId;
    if (m.swAcc.size() <= switchId)
    {
        m.swAcc.resize(switchId + 1, 0);
        m.swMax.resize(switchId + 1, 0.0);
    }
}

uint32_t
FluidNet::AddNic(double lineBps)
{
    m_impl->nicBps.push_back(lineBps);
    return static_cast<uint32_t>(m_impl->nicBps.size() - 1);
}

uint32_t
FluidNet::AddFlow(uint32_t nic, const std::vector<double>& hops, double pktWireBytes, double ackNs,
                  const DcqcnParams& params, int64_t cnpIntervalNs, int64_t nowNs)
{
    Impl& m = *m_impl;
    Flow& f = m.flows.Add();
    m.nicOf.push_back(nic);
    f.pkt = pktWireBytes;
    for (size_t j = 0; j + 2 < hops.size(); j += 3)
    {
        f.hops.push_back(Hop{static_cast<int>(hops[j]), hops[j + 1], hops[j + 2]});
    }
    for (size_t j = 1; j < f.hops.size(); j++)
    {
        const uint32_t sw = m.ports.at(static_cast<size_t>(f.hops[j].port)).sw;
        if (sw == UINT32_MAX)
        {
            continue;
        }
        const int64_t key = j >= 2 ? f.hops[j - 1].port : -1 - static_cast<int64_t>(nic);
        auto [it, fresh] = m.ingressId.emplace(key, static_cast<uint32_t>(m.ingressSw.size()));
        if (fresh)
        {
            m.ingressSw.push_back(sw);
            m.ingBytes.push_back(0.0);
            m.ingMax.push_back(0.0);
        }
        f.hops[j].ingress = it->second;
    }
    f.rxDelay.assign(f.hops.size(), 0.0);
    double acc = 0;
    for (size_t j = f.hops.size(); j-- > 0;)
    {
        f.hops[j].shiftNs = Impl::Serialization(f, j) + f.hops[j].extraNs;
        acc += f.hops[j].shiftNs;
        f.rxDelay[j] = acc;
    }
    f.hop0 = static_cast<uint32_t>(m.hopOut.size());
    for (size_t j = 0; j < f.hops.size(); j++)
    {
        const bool last = j + 1 == f.hops.size();
        m.hopOut.push_back(HopOut{f.hops[j].shiftNs, last ? HopOut::kReceiver : static_cast<uint32_t>(f.hops[j + 1].port),
                                  f.hops[j].ingress, {UINT32_MAX, UINT32_MAX}});
    }
    f.ackNs = ackNs;
    f.cnpInterval = cnpIntervalNs;
    f.params = params;
    f.rp.Init(&f.params, nowNs);
    const auto id = static_cast<uint32_t>(m.flows.size() - 1);
    f.rng = Mix64(m.seed ^ Mix64(id + 1)); // its own stream: the model's seed and its index
    return id;
}

void
FluidNet::SetThreads(uint32_t threads)
{
    m_impl->threads = std::max<uint32_t>(1, threads);
    m_impl->regroup = true;
}

void
FluidNet::SetStepCredits(uint32_t flow, uint32_t maxSteps)
{
    m_impl->flows.at(flow).maxSteps = maxSteps;
}

void
FluidNet::Post(uint32_t flow, int64_t msgId, int64_t startNs, double wireBytes, double stepWireBytes)
{
    Flow& f = m_impl->flows.at(flow);
    const double begin = f.posted;
    f.posted += wireBytes;
    f.msgs.push_back(Msg{msgId, startNs, begin, f.posted});
    if (f.maxSteps > 0)
    {
        // as RdmaNic::Send cuts a message into steps (the last one shorter)
        if (stepWireBytes > 0)
        {
            const auto n = static_cast<int64_t>(std::ceil(wireBytes / stepWireBytes - 1e-9));
            for (int64_t j = 1; j < n; j++)
            {
                f.stepEnds.push_back(begin + static_cast<double>(j) * stepWireBytes);
            }
        }
        f.stepEnds.push_back(f.posted);
    }
    m_impl->Wake(flow);
}

int64_t
FluidNet::Run(int64_t untilNs)
{
    Impl& m = *m_impl;
    if (m.regroup)
    {
        m.Regroup(); // flows Post woke join their islands (one per run: Post comes between runs)
    }
    const int64_t dt = m.dt;
    int64_t step = m.now / dt;
    for (;;)
    {
        double first = std::numeric_limits<double>::infinity();
        for (const auto& d : m.done)
        {
            first = std::min(first, d.first);
        }
        if (first <= static_cast<double>(step * dt))
        {
            break; // a delivery is due: the caller takes it first
        }
        if (untilNs >= 0 && step * dt >= untilNs)
        {
            break;
        }
        if (!m.AnyLive())
        {
            if (!std::isinf(first))
            {
                step = std::max(step, static_cast<int64_t>(std::ceil(first / static_cast<double>(dt))));
                continue;
            }
            step = untilNs >= 0 ? std::max(step, (untilNs + dt - 1) / dt) : step;
            break;
        }
        // jump to the next start when nothing is in flight
        if (!m.AnyPortLive())
        {
            const int64_t next = m.NextStartIfQuiet();
            if (next >= 0 && next / dt > step)
            {
                step = next / dt;
                if (untilNs >= 0 && step * dt >= untilNs)
                {
                    break;
                }
            }
        }
        m.Step(step);
        m.steps += 1;
        m.flowSteps += static_cast<double>(m.LiveFlows());
        step++;
    }
    m.now = std::max(m.now, step * dt);
    return m.now;
}

int64_t
FluidNet::Now() const
{
    return m_impl->now;
}

std::vector<double>
FluidNet::DrainCompletions()
{
    Impl& m = *m_impl;
    std::vector<double> out;
    std::sort(m.done.begin(), m.done.end());
    size_t k = 0;
    for (; k < m.done.size() && m.done[k].first <= static_cast<double>(m.now); k++)
    {
        out.push_back(static_cast<double>(m.done[k].second));
        out.push_back(m.done[k].first);
    }
    m.done.erase(m.done.begin(), m.done.begin() + static_cast<long>(k));
    return out;
}

uint32_t
FluidNet::Active() const
{
    return static_cast<uint32_t>(m_impl->LiveFlows());
}

bool
FluidNet::Idle(uint32_t flow) const
{
    return !m_impl->Busy(m_impl->flows.at(flow));
}

std::vector<double>
FluidNet::FlowProgress(uint32_t flow) const
{
    const Flow& f = m_impl->flows.at(flow);
    return {f.posted, f.sent, f.rxPos, static_cast<double>(f.cnps.size()), static_cast<double>(f.haz.Pending()),
            static_cast<double>(f.decAt)};
}

std::vector<double>
FluidNet::SaveState(uint32_t flow, int64_t nowNs) const
{
    Flow& f = m_impl->flows.at(flow);
    Impl::Timers(f, nowNs, m_impl->cuts); // lazily: timers of an idle flow fire when next looked at
    auto left = [nowNs](int64_t at) { return at >= 0 ? static_cast<double>(at - nowNs) : -1.0; };
    return f.rp.Save(nowNs, left(f.incAt), left(f.decAt));
}

bool
FluidNet::RestoreState(uint32_t flow, const std::vector<double>& state, int64_t nowNs)
{
    Flow& f = m_impl->flows.at(flow);
    double inc = -1;
    double dec = -1;
    if (!f.rp.Restore(state, nowNs, inc, dec))
    {
        return false;
    }
    f.incAt = inc >= 0 ? nowNs + std::llround(inc) : -1;
    f.decAt = dec >= 0 ? nowNs + std::llround(dec) : -1;
    return true;
}

std::vector<double>
FluidNet::Trim(uint32_t flow)
{
    Flow& f = m_impl->flows.at(flow);
    std::vector<double> out;
    const double e = Slack(f.posted);
    std::deque<Msg> keep;
    for (Msg& m : f.msgs)
    {
        if (m.end <= f.sent + e)
        {
            keep.push_back(m); // sent whole: the model delivers it
            continue;
        }
        const double total = m.end - m.begin;
        const double sentIn = std::max(0.0, f.sent - m.begin);
        const double kept = sentIn <= e ? 0.0 : std::min(total, std::ceil(sentIn / f.pkt - 1e-9) * f.pkt);
        out.insert(out.end(), {static_cast<double>(m.id), kept, total - kept, sentIn});
        if (kept > 0)
        {
            m.end = m.begin + kept;
            keep.push_back(m);
        }
    }
    f.msgs = std::move(keep);
    f.posted = f.msgs.empty() ? f.sent : std::max(f.sent, f.msgs.back().end);
    while (!f.stepEnds.empty() && f.stepEnds.back() > f.posted + e)
    {
        f.stepEnds.pop_back();
    }
    if (f.maxSteps > 0 && f.posted > f.acked + e && (f.stepEnds.empty() || f.stepEnds.back() < f.posted - e))
    {
        f.stepEnds.push_back(f.posted); // the kept part ends its last step
    }
    return out;
}

std::vector<double>
FluidNet::PortQueue() const
{
    return PerPort(m_impl->ports, &Port::depth);
}

std::vector<double>
FluidNet::Work() const
{
    return {m_impl->steps, m_impl->flowSteps, m_impl->parallelSteps};
}

std::vector<double>
FluidNet::PortMarks() const
{
    return PerPort(m_impl->ports, &Port::marks);
}

std::vector<double>
FluidNet::PortMaxQueue() const
{
    return PerPort(m_impl->ports, &Port::maxDepth);
}

std::vector<double>
FluidNet::PortQueueIntegral() const
{
    return PerPort(m_impl->ports, &Port::depthNs);
}

void
FluidNet::SetQueueSampling(int64_t intervalNs, uint64_t maxSamples)
{
    m_impl->sampleEvery = std::max<int64_t>(0, intervalNs);
    m_impl->maxSamples = maxSamples;
}

std::vector<double>
FluidNet::QueueSamples(const std::vector<uint32_t>& ports) const
{
    const std::vector<double>& v = m_impl->samples;
    std::vector<double> out;
    for (size_t j = 0; j + 2 < v.size(); j += 3)
    {
        if (std::find(ports.begin(), ports.end(), static_cast<uint32_t>(v[j + 1])) != ports.end())
        {
            out.insert(out.end(), {v[j], v[j + 1], v[j + 2]});
        }
    }
    return out;
}

std::vector<double>
FluidNet::IngressMaxQueue() const
{
    std::vector<double> v;
    for (size_t g = 0; g < m_impl->ingMax.size(); g++)
    {
        v.push_back(m_impl->ingressSw[g]);
        v.push_back(m_impl->ingMax[g]);
    }
    return v;
}

std::vector<double>
FluidNet::SwitchMaxQueue() const
{
    return m_impl->swMax;
}

std::vector<double>
FluidNet::PortTxBytes() const
{
    return PerPort(m_impl->ports, &Port::txBytes);
}

uint64_t
FluidNet::Cnps() const
{
    return m_impl->cnps;
}

uint64_t
FluidNet::Cuts() const
{
    return m_impl->cuts;
}

} // namespace ns3
