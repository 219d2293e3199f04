// Replays a log of the calls a run made on its ns3::FluidNet (bench_fluid_model.py --record) in a
// native program: the model's own CPU time, with no Python and no ns-3 around it, and a hash of
// everything it returned, so two builds of fluid-net.cc can be compared for speed and for
// identical results.  Built by bench_fluid_model.py with the module's compiler flags.
//
//   fluid_replay LOG [THREADS]   ->   "cpu_s <s> wall_s <s> hash <16 hex> steps <n> qp_steps <n> marks <x> cnps <n>"
//
// THREADS: FluidNet::SetThreads (default 1); cpu_s counts every thread, wall_s is the time in the
// model's calls.
#include "ns3/fluid-net.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using ns3::DcqcnParams;
using ns3::FluidNet;

namespace
{
/// FNV-1a over the bit patterns of every value the model returned.
struct Hash
{
    uint64_t h{1469598103934665603ULL};

    void Add(double x)
    {
        uint64_t b;
        std::memcpy(&b, &x, sizeof b);
        h = (h ^ b) * 1099511628211ULL;
    }

    void Add(const std::vector<double>& v)
    {
        for (double x : v)
        {
            Add(x);
        }
    }
};

std::vector<double>
ReadVector(std::istringstream& s)
{
    size_t n = 0;
    s >> n;
    std::vector<double> v(n);
    for (double& x : v)
    {
        s >> x;
    }
    return v;
}

double
CpuSeconds()
{
    return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}
} // namespace

int
main(int argc, char** argv)
{
    if (argc != 2 && argc != 3)
    {
        std::cerr << "usage: fluid_replay LOG [THREADS]\n";
        return 2;
    }
    std::ifstream in(argv[1]);
    if (!in)
    {
        std::cerr << "fluid_replay: cannot read " << argv[1] << "\n";
        return 2;
    }
    std::unique_ptr<FluidNet> net;
    Hash hash;
    double cpu = 0;
    double wall = 0;
    std::string line;
    std::string op;
    while (std::getline(in, line))
    {
        std::istringstream s(line);
        s >> op;
        const double c0 = CpuSeconds();
        const auto w0 = std::chrono::steady_clock::now();
        if (op == "Init")
        {
            int64_t dt = 0;
            uint64_t seed = 0;
            s >> dt >> seed;
            net = std::make_unique<FluidNet>(dt, seed);
#ifndef FLUID_REPLAY_NO_THREADS
            net->SetThreads(argc == 3 ? static_cast<uint32_t>(std::stoul(argv[2])) : 1);
#endif
        }
        else if (!net)
        {
            std::cerr << "fluid_replay: the log must start with Init\n";
            return 2;
        }
        else if (op == "AddPort")
        {
            double rate, kmin, kmax, pmax;
            s >> rate >> kmin >> kmax >> pmax;
            net->AddPort(rate, kmin, kmax, pmax);
        }
        else if (op == "SetPortSwitch")
        {
            uint32_t port, sw;
            s >> port >> sw;
            net->SetPortSwitch(port, sw);
        }
        else if (op == "AddNic")
        {
            double rate;
            s >> rate;
            net->AddNic(rate);
        }
        else if (op == "AddFlow")
        {
            uint32_t nic;
            s >> nic;
            const std::vector<double> hops = ReadVector(s);
            double pkt, ack;
            DcqcnParams p;
            int vendor, clamp;
            int64_t cnp, now;
            s >> pkt >> ack >> p.g >> p.alphaIntervalNs >> p.rateDecreaseIntervalNs >> p.rateIncreaseIntervalNs >>
                p.byteCounterBytes >> p.fastRecoveryStages >> p.rateAiBps >> p.rateHaiBps >> p.minRateBps >>
                p.lineRateBps >> vendor >> clamp >> cnp >> now;
            p.vendor = vendor != 0;
            p.clampTargetRate = clamp != 0;
            net->AddFlow(nic, hops, pkt, ack, p, cnp, now);
        }
        else if (op == "SetStepCredits")
        {
            uint32_t flow, n;
            s >> flow >> n;
            net->SetStepCredits(flow, n);
        }
        else if (op == "Post")
        {
            uint32_t flow;
            int64_t id, start;
            double wire, step;
            s >> flow >> id >> start >> wire >> step;
            net->Post(flow, id, start, wire, step);
        }
        else if (op == "Run")
        {
            int64_t until;
            s >> until;
            hash.Add(static_cast<double>(net->Run(until)));
        }
        else if (op == "DrainCompletions")
        {
            hash.Add(net->DrainCompletions());
        }
        else if (op == "SaveState")
        {
            uint32_t flow;
            int64_t now;
            s >> flow >> now;
            hash.Add(net->SaveState(flow, now));
        }
        else if (op == "RestoreState")
        {
            uint32_t flow;
            s >> flow;
            const std::vector<double> state = ReadVector(s);
            int64_t now;
            s >> now;
            hash.Add(net->RestoreState(flow, state, now) ? 1.0 : 0.0);
        }
        else if (op == "Idle")
        {
            uint32_t flow;
            s >> flow;
            hash.Add(net->Idle(flow) ? 1.0 : 0.0);
        }
        else if (op == "FlowProgress")
        {
            uint32_t flow;
            s >> flow;
            hash.Add(net->FlowProgress(flow));
        }
        else if (op == "Trim")
        {
            uint32_t flow;
            s >> flow;
            hash.Add(net->Trim(flow));
        }
        else if (op == "PortQueue")
        {
            hash.Add(net->PortQueue());
        }
        else if (op == "SetQueueSampling") // (the samples are taken while stepping: their cost counts)
        {
            int64_t interval;
            uint64_t most;
            s >> interval >> most;
            net->SetQueueSampling(interval, most);
        }
        else if (op == "PortQueueIntegral")
        {
            for (double v : net->PortQueueIntegral())
            {
                hash.Add(v);
            }
        }
        else if (op == "QueueSamples")
        {
            std::vector<uint32_t> ports;
            for (double p : ReadVector(s))
            {
                ports.push_back(static_cast<uint32_t>(p));
            }
            for (double v : net->QueueSamples(ports))
            {
                hash.Add(v);
            }
        }
        // other calls (the run's final statistics) only read: their values are printed below
        cpu += CpuSeconds() - c0;
        wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    }
    if (!net)
    {
        std::cerr << "fluid_replay: empty log\n";
        return 2;
    }
    double marks = 0;
    for (double m : net->PortMarks())
    {
        marks += m;
    }
    const std::vector<double> work = net->Work();
    std::printf("cpu_s %.3f wall_s %.3f hash %016llx steps %.0f qp_steps %.0f marks %.3f cnps %llu\n", cpu, wall,
                static_cast<unsigned long long>(hash.h), work[0], work[1], marks,
                static_cast<unsigned long long>(net->Cnps()));
    return 0;
}
