"""Background traffic configured in a scenario reaches the fabric and slows training down."""
from pathlib import Path

from heterosim import api

ROOT = Path(__file__).resolve().parents[2]


def test_background_load_through_the_scenario():
    base = ["training.global_batch_size=8", "output.trace=false", "output.plots=false"]
    quiet = api.run(ROOT / "scenarios" / "quickstart.yaml", overrides=base)
    busy = api.run(ROOT / "scenarios" / "quickstart.yaml",
                   overrides=base + ["network.background={cdf: websearch, load: 0.6}"])
    bg = busy.sim.net_stats.extra["background"]
    assert bg["flows_completed"] > 1000 and bg["offered_load"] == 0.6
    assert busy.summary["iteration_time_s"] > quiet.summary["iteration_time_s"]
