"""Sharded data parallelism's collectives reported apart inside the exposed DP figure (issue 38: the breakdown
by kind reports FSDP all-gather / reduce-scatter like TP/DP/PP/EP)."""
from pathlib import Path

import pytest

from heterosim import api

ROOT = Path(__file__).parents[2]


def _breakdown(name: str, overrides=None) -> dict:
    sc = api.load(str(ROOT / "scenarios" / "fsdp" / f"{name}.yaml"), overrides or [])
    return api.simulate(api.prepare(sc)).summary["breakdown"]


def test_zero3_dp_is_its_gathers_and_reduce_scatters():
    # pp = 1 and nothing else crosses the DP group under ZeRO-3: every exposed DP nanosecond is one of the two
    b = _breakdown("zero3")
    d = b["exposed_dp_detail"]
    assert set(d) == {"fsdp_allgather", "fsdp_reducescatter"}
    assert d["fsdp_allgather"] > 0 and d["fsdp_reducescatter"] > 0
    assert sum(d.values()) == pytest.approx(b["exposed_comm"]["dp"], rel=1e-12)


def test_hsdp_adds_the_replicate_allreduce_and_zero1_reports_none():
    b = _breakdown("hsdp")
    d = b["exposed_dp_detail"]
    assert "hsdp_allreduce" in d and sum(d.values()) == pytest.approx(b["exposed_comm"]["dp"], rel=1e-12)
    assert "exposed_dp_detail" not in _breakdown("zero1")  # ZeRO-1's reduce-scatter / all-gather are plain DP
