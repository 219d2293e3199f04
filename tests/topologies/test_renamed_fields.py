"""Node fields in GB/s are named ``_gBps`` (``_gbps`` is Gb/s, as in ``nic_gbps``); the old names still read
for one release, with a one-line warning, and both names at once are refused."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from hscommon.errors import RenamedFieldWarning, UserError
from topologies.catalog import node_type


def test_the_gbytes_fields_carry_the_gbytes_suffix():
    h100 = node_type("dgx-h100")
    assert h100.nvlink_gBps == 450.0  # NVLink4: 18 links x 25 GB/s per direction (node_types.yaml's source)
    assert not hasattr(h100, "nvlink_gbps")


def test_old_name_in_overrides_is_read_with_a_warning():
    with pytest.warns(RenamedFieldWarning, match=r"overrides\.nvlink_gbps is renamed nvlink_gBps"):
        spec = node_type("dgx-h100", {"nvlink_gbps": 100.0, "pcie_gbps": 16.0})
    assert (spec.nvlink_gBps, spec.pcie_gBps) == (100.0, 16.0)


def test_both_names_is_an_error():
    with pytest.raises(UserError, match="give nvlink_gBps only"):
        node_type("dgx-h100", {"nvlink_gbps": 100.0, "nvlink_gBps": 200.0}, file="s.yaml",
                  field="cluster.groups[0].node_type")


def test_the_cli_prints_the_warning_as_one_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent("""
        name: t
        model: gpt3-1.7b
        parallelism: {tp: 2, pp: 2}
        training: {global_batch_size: 16, micro_batch_size: 1, seq_length: 2048}
        cluster:
          groups: [{name: h100, node_type: dgx-h100, num_nodes: 1, overrides: {nvlink_gbps: 400}}]
    """))
    proc = subprocess.run([sys.executable, "-m", "heterosim", "validate", str(p)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    warn = [ln for ln in proc.stderr.splitlines() if "nvlink_gbps" in ln]
    assert warn == ["warning: cluster.groups[0].overrides.nvlink_gbps is renamed nvlink_gBps (GB/s; the _gbps "
                    "suffix means Gb/s); the old name is read for this release only"], proc.stderr
