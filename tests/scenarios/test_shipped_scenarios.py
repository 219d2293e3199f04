"""Every scenario shipped in scenarios/ validates: schema, plan, memory (what `heterosim validate` does).

scenarios/traffic/ holds traffic studies (heterosim traffic), checked in tests/traffic.
"""
from pathlib import Path

import pytest

from heterosim import api

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").rglob("*.yaml")
                   if not {"sweeps", "traffic"} & set(p.relative_to(ROOT / "scenarios").parts))


def test_there_are_scenarios():
    assert len(SCENARIOS) >= 12  # quickstart, stage-tp and the ten H-suite files


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT)))
def test_scenario_validates(path):
    prepared = api.prepare(api.load(path))
    assert prepared.ir.world_size == prepared.system.num_gpus
