// Test binary: ns-3's TestRunner over the suites linked in (heterosim-rdma).
#include "ns3/test.h"

int
main(int argc, char** argv)
{
    return ns3::TestRunner::Run(argc, argv);
}
