"""Ask the CUDA driver (cuda.bindings.driver) which devices exist.

Never raises and never needs a GPU: without cuda-bindings, without a driver, or without devices it
returns []. Only the driver API is used (cuInit, cuDeviceGet*); no context is created.
"""
from __future__ import annotations

from humming import settings
from humming.capabilities.detected import DetectedDevice

SKIP_ENV = "HUMMING_SKIP_DETECT"  # set to 1 to skip asking the driver (e.g. a sandbox where it misbehaves)
SOURCE = "cuda driver"


def _ok(result) -> bool:
    return int(result[0]) == 0


def query_driver() -> list[DetectedDevice]:
    """Every device the CUDA driver reports, labelled vendor 'nvidia' (other detectors may relabel)."""
    if settings.flag(SKIP_ENV):
        return []
    try:
        from cuda.bindings import driver
    except Exception:  # noqa: BLE001 - no cuda-bindings: nothing to detect
        return []
    try:
        if not _ok(driver.cuInit(0)):
            return []
        result = driver.cuDeviceGetCount()
        if not _ok(result):
            return []
        attr = driver.CUdevice_attribute
        devices = []
        for index in range(int(result[1])):
            got = driver.cuDeviceGet(index)
            if not _ok(got):
                continue
            dev = got[1]
            name = driver.cuDeviceGetName(256, dev)
            major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
            minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
            sms = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
            text = bytes(name[1]).split(b"\0", 1)[0].decode("utf-8", "replace").strip() if _ok(name) else ""
            cc = (int(major[1]), int(minor[1])) if _ok(major) and _ok(minor) else None
            devices.append(DetectedDevice(vendor="nvidia", name=text or f"CUDA device {index}",
                                          compute_capability=cc, sms=int(sms[1]) if _ok(sms) else None,
                                          index=index, source=SOURCE))
        return devices
    except Exception:  # noqa: BLE001 - a missing or broken driver means "no device", never a crash
        return []


def detect() -> list[DetectedDevice]:
    """NVIDIA devices (as the driver reports them)."""
    return query_driver()
