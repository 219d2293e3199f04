"""The smallest valid training scenario, as YAML text, for the tests that feed bad variants of it to
the loader and the CLI (importable from any test: pytest puts this folder on the path for conftest.py)."""
from __future__ import annotations

import textwrap

TINY_YAML = """
name: t
model: gpt3-1.7b
parallelism: {tp: 2, pp: 2}
training: {global_batch_size: 16, micro_batch_size: 1, seq_length: 2048}
cluster:
  groups: [{name: h100, node_type: dgx-h100, num_nodes: 1}]
"""


def write(tmp_path, text: str, name: str = "s.yaml"):
    """``text`` (dedented) as ``tmp_path / name``; returns the path."""
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p
