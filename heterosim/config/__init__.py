"""Validated configuration models, one per concept, and the scenario loader."""
from heterosim.config.loader import load_scenario, load_yaml, scenario_json_schema
from heterosim.config.model import ModelConfig
from heterosim.config.parallel import ParallelConfig
from heterosim.config.scenario import CommConfig, OutputConfig, Scenario
from heterosim.config.training import TrainingConfig
from netbackend.config import NetworkConfig
from topologies.config import ClusterConfig, DeviceGroup, NodeType, SystemConfig

__all__ = [
    "load_scenario", "load_yaml", "scenario_json_schema", "ModelConfig", "ParallelConfig", "Scenario",
    "TrainingConfig", "NetworkConfig", "ClusterConfig", "DeviceGroup", "NodeType", "SystemConfig",
    "CommConfig", "OutputConfig",
]
