"""The capability model: what a device can do, loaded from YAML device profiles.

No torch and no CUDA here: pure data, strict validation, a registry and device matching.

    from humming.capabilities import get_profile
    caps = get_profile("nvidia-b300")
    caps.has_tcgen05_kind("i8")            # False: INT8 must use the legacy mma.sync path
    caps.find_mma(a_type="s8", b_type="s8")
"""
from __future__ import annotations

from humming.capabilities.detected import DetectedDevice
from humming.capabilities.matching import DeviceMatch, match_device, name_matches, specialize
from humming.capabilities.model import (
    Capabilities,
    Formats,
    Limits,
    MatchRule,
    Memory,
    MmaInstruction,
    Target,
    VendorExtension,
)
from humming.capabilities.registry import (
    PATH_ENV,
    Registry,
    default_registry,
    get_profile,
    list_profiles,
    load_profile_file,
    reload_profiles,
)

FORCE_ENV = "HUMMING_DEVICE_PROFILE"

__all__ = [
    "Capabilities",
    "DetectedDevice",
    "DeviceMatch",
    "FORCE_ENV",
    "Formats",
    "Limits",
    "MatchRule",
    "Memory",
    "MmaInstruction",
    "PATH_ENV",
    "Registry",
    "Target",
    "VendorExtension",
    "default_registry",
    "get_profile",
    "list_profiles",
    "load_profile_file",
    "match_device",
    "name_matches",
    "reload_profiles",
    "specialize",
]
