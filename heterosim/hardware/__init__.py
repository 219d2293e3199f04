"""Hardware layer: the device catalog (datasheet numbers) and the compute op-time model."""
from heterosim.hardware.catalog import Device, device_names, get_device
from heterosim.hardware.compute import ComputeModel

__all__ = ["Device", "get_device", "device_names", "ComputeModel"]
