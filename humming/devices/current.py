"""Which device this process runs on and which profile describes it: detection, the forced profile, the live
compile target. Below humming.device (the user-facing description) so that the runtime can ask it too.

Profile choice, in order: HUMMING_DEVICE_PROFILE=<name> forces one; otherwise the detected device is matched by
vendor, compute capability and name; an unknown card falls back to the closest family profile, with a warning.
"""
from __future__ import annotations

import functools
import sys
import warnings

from humming import settings
from humming.capabilities import (
    FORCE_ENV,
    PATH_ENV,
    Capabilities,
    DetectedDevice,
    get_profile,
    match_device,
    specialize,
)
from humming.errors import UnsupportedOnDevice

NO_DEVICE_WHY = "no CUDA driver, or no GPU/PPU visible"
NO_DEVICE = f"no device found ({NO_DEVICE_WHY})"
HOW_TO_FORCE = (f"set {FORCE_ENV}=<profile name> to use a profile anyway (list them with `python -m humming "
                f"profiles`), or add a YAML profile in a directory named by {PATH_ENV}")


@functools.lru_cache(maxsize=1)
def _detect_cached() -> tuple[DetectedDevice, ...]:
    from humming.devices.nvidia import detect as nvidia
    from humming.devices.thead_ppu import detect as ppu

    driver_devices = nvidia.detect()
    devices = [ppu.claim(d) or d for d in driver_devices]
    if not any(d.vendor == ppu.VENDOR for d in devices):
        devices += ppu.detect(driver_devices=[])  # /dev/alixpu* nodes the driver did not report
    return tuple(devices)


def detect_devices(refresh: bool = False) -> tuple[DetectedDevice, ...]:
    """Every device the detectors find (cached; `refresh=True` asks again). Never raises."""
    if refresh:
        _detect_cached.cache_clear()
    return _detect_cached()


def _current_index() -> int:
    torch = sys.modules.get("torch")  # only if the caller already uses torch; never imported here
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:  # noqa: BLE001
        pass
    return 0


def current_device() -> DetectedDevice | None:
    devices = detect_devices()
    index = _current_index()
    return next((d for d in devices if d.index == index), devices[0] if devices else None)


def current_profile() -> Capabilities:
    """The profile kernels are planned for: the forced one, else the current device's match."""
    forced = settings.raw(FORCE_ENV)
    if forced:
        return get_profile(forced)
    device = current_device()
    if device is None:
        raise UnsupportedOnDevice(f"{NO_DEVICE}; {HOW_TO_FORCE}")
    found = match_device(device)
    if found.profile is None:
        raise UnsupportedOnDevice(f"{found.reason}; {HOW_TO_FORCE}")
    if found.warning:
        warnings.warn(found.warning, stacklevel=2)
    return specialize(found.profile, device)




def resolve_profile(profile=None) -> Capabilities:
    """A Capabilities object from a profile, a profile name, or (None) the current device."""
    if profile is None:
        return current_profile()
    if isinstance(profile, str):
        return get_profile(profile)
    return profile


_live: list = [None, None]  # [the detected devices it was worked out for, the target]


def live_arch() -> str | None:
    """The compile target of the GPU this process runs on (None without one); worked out again when the detected
    devices change (a refresh, or a test's stand-in detector)."""
    devices = detect_devices()
    if _live[0] is not devices:
        dev = current_device()
        found = None if dev is None else match_device(dev).profile
        _live[:] = [devices, None if found is None else found.target.arch]
    return _live[1]


def runs_here(caps) -> bool:
    """Kernels compiled for the profile's own target run on the live GPU (or there is none: planning only). A
    profile forced onto another GPU keeps the kernels that compile for any target (mma.sync)."""
    return live_arch() in (None, caps.target.arch)


def emulation_arch(caps) -> str | None:
    """The live GPU's target when it is not the profile's own (the profile is emulated there), else None."""
    live = live_arch()
    return live if live and live != caps.target.arch else None
