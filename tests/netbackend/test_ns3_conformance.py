"""The backend-agnostic conformance suite, run on the ns-3 packet-level backend."""
from __future__ import annotations

import pytest

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from conformance import BackendConformance  # noqa: E402

from netbackend.config import NetworkConfig, resolved_dcqcn  # noqa: E402

pytestmark = pytest.mark.ns3


class TestNs3Conformance(BackendConformance):
    backend_name = "ns3"

    def config(self) -> NetworkConfig:
        return NetworkConfig(backend="ns3", cc="none")


class TestNs3DcqcnConformance(BackendConformance):
    backend_name = "ns3"
    """DCQCN with the default (vendor) preset.

    A flow starting at line rate into a slower bottleneck builds a queue above Kmin; the vendor
    reaction point cuts every 4 us while CNPs arrive and then recovers only on its rate-increase
    timer, each event halving the gap to RT (fast recovery, F = 1).  Once the queue has drained,
    the rate is back at the bottleneck's within two such events, so a flow loses at most about
    two increase intervals of sending time against the wire: ideal <= FCT <= ideal + 2 x 300 us.
    The contract checks run unchanged.
    """

    def _bottleneck(self, topo, msgs, rate_gbps, total_bytes):
        from conformance import ideal_ns, run_all

        from netbackend import Message

        with self.make(topo) as b:
            for mid, (s, d, size) in enumerate(msgs):
                b.send(Message(mid, s, d, size, 0))
            done = run_all(b)
            st = b.stats()
        cfg = self.config()
        ideal = ideal_ns(total_bytes, rate_gbps, cfg)
        assert len(done) == len(msgs)
        two_increases = 2 * resolved_dcqcn(cfg)["rate_increase_interval_ns"]
        assert ideal <= max(done.values()) <= ideal + two_increases
        assert st.extra["drops"] == 0
        assert st.extra["cnps_received"] > 0, "DCQCN reacted"

    def test_single_flow_slower_link_is_bottleneck(self):
        from conformance import dumbbell

        self._bottleneck(dumbbell(1, core_gbps=25.0), [("l0", "r0", 4_000_000)], 25.0, 4_000_000)

    def test_two_flows_share_bottleneck(self):
        from conformance import star

        self._bottleneck(star(3), [("h0", "h2", 4_000_000), ("h1", "h2", 4_000_000)], 100.0, 8_000_000)

    def test_shared_core_link_dumbbell(self):
        from conformance import dumbbell

        self._bottleneck(dumbbell(2), [("l0", "r0", 2_000_000), ("l1", "r1", 2_000_000)], 100.0, 4_000_000)
