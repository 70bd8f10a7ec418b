"""Which profile describes a live device: by vendor, compute capability and name patterns.

Name patterns (a profile's `match.names`) are case-insensitive. A pattern with '*' or '?' is a glob
over the whole name ("*810E*"); any other pattern is a phrase of whole words ("H20" matches
"NVIDIA H20" but not "NVIDIA H200"; "RTX PRO 6000" matches "NVIDIA RTX PRO 6000 Blackwell ...").

Order of preference:
  1. a device profile whose name pattern matches (cc equal, or unknown on either side);
  2. a device profile without name patterns whose compute capability is equal;
  3. fallback, with a warning: the closest family profile whose compiled code runs on this device
     (equal cc, else the nearest lower one of the same major); if no family's code can run there, the
     profile of another device with the same compute capability.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace

from humming.capabilities.detected import DetectedDevice
from humming.capabilities.model import Capabilities
from humming.capabilities.registry import Registry, default_registry


@dataclass(frozen=True)
class DeviceMatch:
    device: DetectedDevice
    profile: Capabilities | None
    how: str            # "name", "compute_capability", "fallback" or "none"
    reason: str
    warning: str | None = None

    @property
    def exact(self) -> bool:
        return self.how in ("name", "compute_capability")


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def name_matches(pattern: str, name: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(name.lower(), pattern.lower())
    want, have = _words(pattern), _words(name)
    return bool(want) and any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def _cc(cc: tuple[int, int] | None) -> str:
    return "cc ?" if cc is None else f"cc {cc[0]}.{cc[1]}"


def _runs_on(profile: Capabilities, cc: tuple[int, int], registry: Registry) -> bool:
    arch = profile.target.arch
    if arch is None or arch not in registry.rules.targets:
        return profile.match.compute_capability == cc
    return registry.rules.targets[arch].runs_on(cc)


def _fallback(device: DetectedDevice, candidates: list[Capabilities], registry: Registry) -> DeviceMatch:
    cc = device.compute_capability
    if cc is None:
        families = [p for p in candidates if p.abstract and p.verified]
        if len(families) == 1:
            best = families[0]
        else:
            return DeviceMatch(device, None, "none",
                               f"no {device.vendor} profile recognises {device.name!r} and its compute capability "
                               "is unknown")
    else:
        usable = [p for p in candidates if p.verified and p.match.compute_capability
                  and p.match.compute_capability <= cc and _runs_on(p, cc, registry)]
        if not usable:
            return DeviceMatch(device, None, "none",
                               f"no {device.vendor} profile matches {device.name!r} ({_cc(cc)}) and none of the "
                               "known targets produces code it can run")
        # a family profile (conservative values) before another device's profile; then the nearest cc
        best = max(usable, key=lambda p: (p.abstract, p.match.compute_capability, -len(p.name)))
    kind = "family profile" if best.abstract else "profile of another device"
    warning = (f"no profile matches {device.name!r} ({_cc(cc)}); using the {kind} {best.name!r} "
               f"(target {best.target.arch}, {_cc(best.match.compute_capability)}). Limits such as SM count and "
               "shared memory may differ: add a profile for this device or set HUMMING_DEVICE_PROFILE.")
    return DeviceMatch(device, best, "fallback", f"closest {kind} for {_cc(cc)}", warning)


def match_device(device: DetectedDevice, registry: Registry | None = None) -> DeviceMatch:
    """The profile for `device`, how it was chosen and, for a fallback, a warning that says so."""
    registry = registry or default_registry()
    candidates = [p for p in registry.all() if p.match.vendor == device.vendor]
    cc = device.compute_capability
    by_name = []
    for p in candidates:
        if p.abstract:
            continue
        hits = [pat for pat in p.match.names if name_matches(pat, device.name)]
        cc_ok = cc is None or p.match.compute_capability is None or p.match.compute_capability == cc
        if hits and cc_ok:
            by_name.append((max(len(h) for h in hits), p, hits[0]))
    if by_name:
        by_name.sort(key=lambda item: (-item[0], item[1].name))
        _, best, pattern = by_name[0]
        return DeviceMatch(device, best, "name", f"name {device.name!r} matches {pattern!r} and {_cc(cc)} agrees")
    by_cc = [p for p in candidates if not p.abstract and not p.match.names and cc is not None
             and p.match.compute_capability == cc]
    if by_cc:
        best = sorted(by_cc, key=lambda p: p.name)[0]
        return DeviceMatch(device, best, "compute_capability",
                           f"{_cc(cc)} matches and {best.name!r} declares no name patterns")
    if not candidates:
        return DeviceMatch(device, None, "none", f"no profile for vendor {device.vendor!r}")
    return _fallback(device, candidates, registry)


def specialize(profile: Capabilities, device: DetectedDevice) -> Capabilities:
    """The profile with what the live device reports about itself (its SM count) taking precedence."""
    if device.sms is None or device.sms == profile.limits.sms:
        return profile
    before = "unknown" if profile.limits.sms is None else str(profile.limits.sms)
    note = f"sms: {device.sms} as reported by the driver for {device.name!r} (profile declares {before})"
    return replace(profile, limits=replace(profile.limits, sms=device.sms), notes=profile.notes + (note,))
