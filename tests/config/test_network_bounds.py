"""Issue 40: PFC pause quanta and the retransmit timeout are bounded by what hardware can express.

Expected ends are derived here from the standards, not read from the code:

* IEEE 802.1Qbb (PFC) carries a pause time per priority as a 16-bit count of quanta of 512 bit
  times, so one PAUSE lasts at most 65535 x 512 bit times; the slowest supported port (1 Gb/s,
  one bit per ns) makes that 65535 x 512 ns = 33,553,920 ns.  The C++ switch stores it in 32 bits.
* InfiniBand's Local ACK Timeout (IBTA spec vol. 1, 9.7.6.1.3; RoCE NICs use the same field) is
  4.096 us x 2^n with a 5-bit n: 8.192 us (n = 1) up to 4.096 us x 2^31 = 8,796,093,022,208 ns.
"""
from __future__ import annotations

import pytest

from heterosim.config.loader import load_scenario
from heterosim.errors import ConfigError
from cli_helpers import one_line_message
from tiny_scenario import TINY_YAML, write

PAUSE_MAX_NS = 65535 * 512 * 1  # quanta x bits per quantum x ns per bit at 1 Gb/s
RTO_MIN_NS = 4096 * 2 ** 1
RTO_MAX_NS = 4096 * 2 ** 31


def _load(tmp_path, *sets):
    return load_scenario(write(tmp_path, TINY_YAML), list(sets))


_one_line = one_line_message


@pytest.mark.parametrize("field,value,needle", [
    ("network.pfc.pause_quanta_ns", 10 ** 13, f"allowed: 0 to {PAUSE_MAX_NS:,} ns"),  # wrapped to 1.3 s in 32 bits
    ("network.pfc.pause_quanta_ns", PAUSE_MAX_NS + 1, f"allowed: 0 to {PAUSE_MAX_NS:,} ns"),
    ("network.pfc.pause_quanta_ns", -1, "allowed: 0 to"),
    ("network.transport.retransmit_timeout_ns", RTO_MAX_NS + 1, f"{RTO_MAX_NS:,} ns"),
    ("network.transport.retransmit_timeout_ns", 10 ** 15, f"{RTO_MAX_NS:,} ns"),
    ("network.transport.retransmit_timeout_ns", RTO_MIN_NS - 1, f"allowed: {RTO_MIN_NS} to"),
    ("network.transport.retransmit_timeout_ns", 0, f"allowed: {RTO_MIN_NS} to"),
])
def test_out_of_range_is_one_line_naming_field_and_value(tmp_path, field, value, needle):
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, f"{field}={value}")
    _one_line(exc, str(tmp_path / "s.yaml"), field, str(value), needle)


@pytest.mark.parametrize("field,value", [
    ("network.pfc.pause_quanta_ns", 0), ("network.pfc.pause_quanta_ns", PAUSE_MAX_NS),
    ("network.transport.retransmit_timeout_ns", RTO_MIN_NS),
    ("network.transport.retransmit_timeout_ns", RTO_MAX_NS),
])
def test_ends_of_the_range_are_accepted(tmp_path, field, value):
    sc = _load(tmp_path, f"{field}={value}")
    section, name = field.split(".")[1:]
    assert getattr(getattr(sc.network, section), name) == value


def test_the_default_timeout_is_inside_the_range():
    from netbackend.config import NetworkConfig

    assert RTO_MIN_NS <= NetworkConfig().transport.retransmit_timeout_ns <= RTO_MAX_NS
