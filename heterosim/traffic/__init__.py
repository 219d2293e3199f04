"""Network-only traffic studies: a fabric, hosts and synthetic flows, no training job.

    from heterosim.traffic import load_traffic, run_traffic
    run_traffic(load_traffic("scenarios/traffic/hpcc-fb-hadoop-30-incast.yaml"), "results/t", ccs="dcqcn,hpcc")
"""
from heterosim.traffic.build import load_traffic, plan
from heterosim.traffic.config import TrafficScenario
from heterosim.traffic.run import run_traffic, simulate

__all__ = ["TrafficScenario", "load_traffic", "plan", "run_traffic", "simulate"]
