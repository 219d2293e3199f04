"""Packet level: PFC pauses one job's traffic causes on another's are reported.

Two jobs spread over two leaves of a 4:1 leaf-spine with PFC as the only congestion control: each leaf
has 16 x 400 Gb/s of NIC ports and 1600 Gb/s up, both jobs' gradient rings cross it (3200 Gb/s each),
so the uplink queues fill, the leaf pauses its NICs, and the queue behind which they wait holds both
jobs' packets: each job is paused for the other's traffic. (Whether a pause happens at all is the ns-3
model's business; here it is forced by a shallow buffer, and the check is the attribution.)"""
from __future__ import annotations

import pytest

from heterosim.cluster import run

from .helpers import cluster, write

NARROW = {"zoo": "gpt3-1.7b", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
          "ffn_hidden_size": 4096, "vocab_size": 8192}


@pytest.mark.slow
def test_cross_job_pfc_pauses_are_attributed(tmp_path):
    data = cluster([{"name": "a", "model": NARROW, "placement": {"policy": "spread", "num_gpus": 16}},
                    {"name": "b", "model": NARROW, "placement": {"policy": "spread", "num_gpus": 16}}],
                   oversubscription=4.0, backend="ns3")
    # 4 MB of shared buffer per switch (a shallow-buffer switch): the dynamic PFC threshold is reached
    # within the first round of the rings instead of after the 128 MB default fills
    data["network"].update(cc="none", acceleration={"mode": "off"}, buffer={"shared_buffer_mb": 4.0})
    res = run(write(tmp_path, data))
    pfc = res.fabric["pfc"]
    assert pfc["paused_ns_total"] > 0
    for ev in pfc["paused_ports"]:
        assert ev["paused_ns"] > 0 and set(ev["jobs_hit"]) <= {"a", "b"}
    assert pfc["cross_job_paused_ns"].get("a -> b", 0) > 0 and pfc["cross_job_paused_ns"].get("b -> a", 0) > 0
    assert res.summary["fabric"]["pfc"]["cross_job_paused_ns"] == pfc["cross_job_paused_ns"]
