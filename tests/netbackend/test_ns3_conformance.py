"""The backend-agnostic conformance suite, run on the ns-3 packet-level backend."""
from __future__ import annotations

import pytest

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from conformance import BackendConformance  # noqa: E402

pytestmark = pytest.mark.ns3


class TestNs3Conformance(BackendConformance):
    backend_name = "ns3"
