"""Recognise T-Head PPU (Zhenwu) devices.

A PPU is CUDA-compatible: through the vendor PPU SDK ($PPU_SDK) the CUDA driver API reports it with
a name starting "PPU" or "ZW" and compute capability 8.0. Device nodes are /dev/alixpu*. When the
driver cannot be asked but the nodes exist, the devices are still reported, with an unknown
compute capability, so the family profile can be chosen.
"""
from __future__ import annotations

import glob
import os

from humming import settings
from humming.capabilities.detected import DetectedDevice

VENDOR = "thead"
NAME_PREFIXES = ("PPU", "ZW")
SDK_ENV = "PPU_SDK"
DEVICE_GLOB = "/dev/alixpu*"


def is_ppu_name(name: str) -> bool:
    return name.strip().upper().startswith(NAME_PREFIXES)


def claim(device: DetectedDevice) -> DetectedDevice | None:
    """The PPU view of a device the CUDA driver reported, or None if it is not a PPU."""
    if not is_ppu_name(device.name):
        return None
    return DetectedDevice(vendor=VENDOR, name=device.name, compute_capability=device.compute_capability,
                          sms=device.sms, index=device.index, source=device.source + " (PPU name)")


def device_nodes() -> list[str]:
    try:
        return sorted(p for p in glob.glob(DEVICE_GLOB) if os.path.basename(p)[len("alixpu"):].isdigit())
    except OSError:
        return []


def sdk_path() -> str | None:
    path = settings.system(SDK_ENV)
    return path or None


def detect(driver_devices: list[DetectedDevice] | None = None) -> list[DetectedDevice]:
    """PPU devices: those the CUDA driver reports under a PPU name, else one per /dev/alixpu* node."""
    if driver_devices is None:
        from humming.devices.nvidia.detect import query_driver

        driver_devices = query_driver()
    claimed = [d for d in (claim(dev) for dev in driver_devices) if d is not None]
    if claimed:
        return claimed
    hint = f"; {SDK_ENV}={sdk_path()}" if sdk_path() else ""
    return [DetectedDevice(vendor=VENDOR, name="T-Head PPU", compute_capability=None, sms=None, index=i,
                           source=f"{node}{hint}")
            for i, node in enumerate(device_nodes())]
