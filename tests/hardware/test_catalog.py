"""Device catalog: every required GPU, sane datasheet numbers, one-line errors."""
from __future__ import annotations

import pytest

from heterosim.hardware import Device, device_names, get_device
from heterosim.hardware.catalog import load_devices
from hscommon.errors import UserError

REQUIRED = ["V100", "A100-40", "A100-80", "H100-SXM", "H100-PCIe", "H200", "GH200", "B200", "L40S", "A10",
            "MI250X", "MI300X"]


def test_required_devices_present():
    assert set(REQUIRED) <= set(device_names())


@pytest.mark.parametrize("name", REQUIRED)
def test_device_fields_physical(name):
    d = get_device(name)
    assert isinstance(d, Device) and d.name == name and d.source and d.family and d.sm_count > 0
    assert 10e9 < d.hbm_bytes < 300e9
    assert 300 < d.hbm_GBps < 10000 and d.pcie_GBps >= 16 and d.nvlink_GBps >= 0
    assert 0 < d.launch_overhead_ns < 10_000
    # tensor-core 16-bit beats fp32, fp8 doubles 16-bit where supported
    assert d.peak_flops("bf16") > d.peak_flops("fp32")
    if d.supports("fp8"):
        assert d.peak_tflops["fp8"] == pytest.approx(2 * d.peak_flops("bf16") / 1e12, rel=0.02)


def test_known_datasheet_values():
    a = get_device("A100-80")
    assert a.peak_flops("bf16") == 312e12 and a.hbm_GBps == 2039 and a.nvlink_GBps == 300
    h = get_device("H100-SXM")
    assert h.peak_flops("fp8") == 1979e12 and h.peak_flops("bf16") == 989.5e12 and h.hbm_GBps == 3350
    assert get_device("H200").hbm_bytes == 141e9
    assert get_device("L40S").nvlink_GBps == 0 and get_device("A10").nvlink_GBps == 0


def test_precision_fallbacks():
    assert get_device("A100-80").peak_flops("fp8") == get_device("A100-80").peak_flops("bf16")
    assert get_device("V100").peak_flops("bf16") == 125e12  # no bf16 tensor cores: fp16 path
    assert get_device("V100").peak_flops("tf32") == 15.7e12
    assert get_device("MI250X").effective_precision("fp8") == "bf16"
    with pytest.raises(UserError, match="precision = 'fp4'"):
        get_device("H100-SXM").peak_flops("fp4")


def test_unknown_gpu_error_names_field_value_and_known():
    with pytest.raises(UserError) as ei:
        get_device("H300")
    msg = str(ei.value)
    assert "gpu = 'H300'" in msg and "A100-80" in msg and "\n" not in msg


def test_devices_hashable_and_equal():
    assert hash(get_device("H100-SXM")) == hash(get_device("H100-SXM"))
    assert len({get_device(n) for n in REQUIRED}) == len(REQUIRED)


def test_bad_catalog_file(tmp_path):
    p = tmp_path / "d.yaml"
    p.write_text("X1:\n  source: s\n  peak_tflops: {bf16: 100}\n  hbm_bytes: 1\n  hbm_GBps: 1\n"
                 "  nvlink_GBps: 0\n  launch_overhead_ns: 1\n")
    with pytest.raises(UserError, match="X1.pcie_GBps"):
        load_devices(p)
    p.write_text("X1:\n  source: s\n  peak_tflops: {bf17: 100}\n  hbm_bytes: 1\n  hbm_GBps: 1\n"
                 "  nvlink_GBps: 0\n  pcie_GBps: 1\n  launch_overhead_ns: 1\n")
    with pytest.raises(UserError, match="bf17"):
        load_devices(p)


def test_l2_sizes_from_datasheets_and_bad_value(tmp_path):
    # whitepapers / datasheets: V100 6 MB, A100 40 MB, H100 50 MB, AD102 96 MB (as MiB), CDNA3 8 x 4 MB
    assert get_device("V100").l2_bytes == 6 * 2**20
    assert get_device("A100-80").l2_bytes == 40 * 2**20
    assert get_device("H100-SXM").l2_bytes == get_device("H100-PCIe").l2_bytes == 50 * 2**20
    assert get_device("L40S").l2_bytes == 96 * 2**20
    assert get_device("MI300X").l2_bytes == 32 * 2**20
    p = tmp_path / "d.yaml"
    p.write_text("X1:\n  source: s\n  peak_tflops: {bf16: 100}\n  hbm_bytes: 1\n  hbm_GBps: 1\n"
                 "  nvlink_GBps: 0\n  pcie_GBps: 1\n  launch_overhead_ns: 1\n  l2_bytes: -5\n")
    with pytest.raises(UserError, match=r"X1.l2_bytes.*-5"):
        load_devices(p)
