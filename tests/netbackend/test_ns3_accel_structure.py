"""Issue 41 (structure): how the accelerated backend is chosen, the public interface of the plain ns-3
backend it talks through, and the size rules of its parts (GUIDE: no class over ~500 lines or 25
attributes, no function over 100 lines).

The interface checks compare each operation against a second, independent view of the same quantity
(``stats()``, the message as sent, the documented TrimMessage contract)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip("cppyy", reason="ns-3 backend needs the ns3 wheel (pip install 'heterosim[ns3]')")

from conformance import run_all, star  # noqa: E402

from hscommon.errors import UserError  # noqa: E402
from netbackend import Message  # noqa: E402
from netbackend.config import NetworkConfig  # noqa: E402
from netbackend.ns3 import Ns3Backend, create_ns3_backend  # noqa: E402
from netbackend.ns3.accel import AcceleratedNs3Backend  # noqa: E402
from netbackend.registry import backend_class, create_backend  # noqa: E402

pytestmark = pytest.mark.ns3
NS3 = Path(__file__).resolve().parents[2] / "netbackend" / "ns3"
ACCEL_MODULES = ("accel.py", "accel_stats.py", "closed_form.py", "fastforward.py", "handback.py", "islands.py",
                 "memo.py", "packet.py", "partitions.py", "paths.py", "ports.py")
"""The accelerator (accel.py and the modules it was split into)."""


def cfg(mode: str, **kw) -> NetworkConfig:
    return NetworkConfig(backend="ns3", cc="dcqcn", acceleration={"mode": mode}, **kw)


# ------------------------------------------------------------------ choosing the backend
def test_the_registry_picks_the_accelerated_backend_when_the_config_asks():
    assert backend_class("ns3") is Ns3Backend  # (check_config, validate_kinds: the registered class)
    with create_backend("ns3", star(2), cfg("auto")) as b:
        assert type(b) is AcceleratedNs3Backend
        assert isinstance(b.inner, Ns3Backend) and b.inner.config.acceleration.mode == "off"
    with create_backend("ns3", star(2), cfg("off")) as b:
        assert type(b) is Ns3Backend
    with create_backend("ns3", star(2)) as b:  # no config: the default, plain packet level
        assert type(b) is Ns3Backend


def test_ns3backend_is_plain_packet_level_and_refuses_acceleration_in_one_line():
    with pytest.raises(UserError) as e:
        Ns3Backend(star(2), cfg("auto"))
    assert e.value.field == "network.acceleration.mode" and e.value.value == "auto"
    assert "create_ns3_backend" in str(e.value) and "\n" not in str(e.value)
    with Ns3Backend(star(2), cfg("off")) as b:  # the refusal held no ns-3 simulation
        b.send(Message(0, "h0", "h1", 1000, 0))
        assert len(run_all(b)) == 1


def test_the_factory_passes_backend_options_through():
    with create_ns3_backend(star(2), cfg("off"), 0, track_message_bytes=True) as b:
        b.send(Message(0, "h0", "h1", 2_000_000, 0))
        b.advance(40_000)
        assert 0 < b.message_rx_bytes(Message(0, "h0", "h1", 2_000_000, 0)) < 2_000_000


# --------------------------------------------------------------- the accelerator's interface
def test_interface_port_and_counter_views_agree_with_stats():
    """port_links / port_stat / port_names / counter against stats(), which reads ns-3 its own way."""
    with create_ns3_backend(star(4), cfg("off"), 0) as b:
        for i in range(3):  # a 3 -> 1 incast: marks, CNPs
            b.send(Message(i, f"h{i}", "h3", 3_000_000, 0, connection=0, step_bytes=524_288))
        run_all(b)
        st = b.stats()
        tx = b.port_stat("tx_bytes")
        assert len(tx) == len(b.port_links) == len(b.port_names()) == 2 * len(star(4).links)
        assert {b.port_links[i]: int(v) for i, v in enumerate(tx)} == st.link_bytes
        marks = b.port_stat("ecn_marks")
        assert {b.port_names()[i]: int(v) for i, v in enumerate(marks) if v} == st.extra["ecn_marks_per_port"]
        assert st.extra["ecn_marks"] > 0
        for name, value in st.extra["counters"].items():
            assert b.counter(name) == value
        assert list(b.queue_samples())  # (ns, port, bytes) triples of the incast's queue
        assert len(list(b.queue_samples())) % 3 == 0


def test_interface_trim_message_contract():
    """TrimMessage as documented: status 2 takes a message that has not started whole (then forget());
    status 1 keeps the work request being sent (``kept``: its bytes not sent yet) and takes the steps after it
    whole, and the message then completes in ns-3 with the kept request."""
    step, size = 524_288, 8 * 524_288
    with create_ns3_backend(star(2), cfg("off"), 0, track_message_bytes=True) as b:
        b.send(Message(1, "h0", "h1", size, 0, connection=0, step_bytes=step))
        b.send(Message(2, "h0", "h1", size, 0, connection=0, step_bytes=step))  # queued behind 1 on its QP
        b.advance(20_000)  # 20 us at 100 Gb/s: within the first step of message 1
        assert b.message_size(1) == size
        got = b.delivered_bytes("h1", 1)
        assert 0 < got < step and b.delivered_bytes("h1", 2) == 0
        status, kept, removed = b.trim_message("h0", "h1", 0, 2)  # (newest first, as the accelerator does)
        assert (status, kept, removed) == (2, 0, size)
        b.forget(2)
        status, kept, removed = b.trim_message("h0", "h1", 0, 1)
        # the first step is being sent: it stays (its unsent bytes are ``kept``), the 7 others leave whole
        assert status == 1 and removed == size - step and 0 < kept < step
        assert kept + removed <= size - got  # unsent bytes are undelivered ones
        done = run_all(b)
        assert set(done) == {1} and b.pending() == 0


# ------------------------------------------------------------------------- structure
def _accel_trees():
    for name in ACCEL_MODULES:
        yield name, ast.parse((NS3 / name).read_text())


def test_the_accelerator_reaches_ns3_only_through_the_public_interface():
    """No private member of the inner backend (``x.inner._anything``) and no ns-3 simulation object (``_sim``)
    anywhere in the accelerator."""
    bad = []
    for name, tree in _accel_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                if node.attr.startswith("_") and isinstance(node.value, ast.Attribute) and node.value.attr == "inner":
                    bad.append(f"{name}:{node.lineno} inner.{node.attr}")
                if node.attr == "_sim":
                    bad.append(f"{name}:{node.lineno} _sim")
    assert not bad


def test_the_accelerator_parts_use_no_private_member_of_one_another():
    """Its collaborators reach each other (and the model's objects) by public names only: an underscored
    attribute is read only on ``self``."""
    bad = []
    for name, tree in _accel_trees():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                bad.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert not bad


def test_the_accelerator_keeps_the_size_rules():
    """Each class at most 500 lines and 25 attributes (its own ``self.x =`` and dataclass fields, with the
    three NetworkBackend sets for a backend), each function at most 100 lines."""
    over = []
    for name, tree in _accel_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                attrs = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
                for sub in ast.walk(node):
                    targets = sub.targets if isinstance(sub, ast.Assign) else (
                        [sub.target] if isinstance(sub, (ast.AnnAssign, ast.AugAssign)) else [])
                    for t in targets:
                        for x in ast.walk(t):
                            if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == "self":
                                attrs.add(x.attr)
                if any(isinstance(base, ast.Name) and base.id == "NetworkBackend" for base in node.bases):
                    attrs |= {"topology", "config", "seed"}
                lines = node.end_lineno - node.lineno + 1
                if lines > 500 or len(attrs) > 25:
                    over.append(f"{name} {node.name}: {lines} lines, {len(attrs)} attributes")
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 100:
                over.append(f"{name} {node.name}(): {node.end_lineno - node.lineno + 1} lines")
    assert not over
