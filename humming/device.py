"""What this machine's device is, which profile describes it and why: `humming.device.info()`.

    import humming
    print(humming.device.info())                        # the detected device (or "none")
    print(humming.device.info("nvidia-b300"))           # describe a profile without the device
    caps = humming.device.current_profile()             # what the planner uses

Profile choice, in order: HUMMING_DEVICE_PROFILE=<name> forces one; otherwise the detected device is
matched by vendor, compute capability and name; an unknown card falls back to the closest family
profile, with a warning that says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from humming import settings
from humming.capabilities import FORCE_ENV, Capabilities, DetectedDevice, get_profile, match_device, specialize
from humming.capabilities import summary as S
from humming.capabilities.registry import default_registry
from humming.devices.current import (  # noqa: F401  (re-exported: humming.device.current_profile, ...)
    HOW_TO_FORCE,
    NO_DEVICE,
    NO_DEVICE_WHY,
    current_device,
    current_profile,
    detect_devices,
)


@dataclass(frozen=True)
class DeviceInfo:
    detected: tuple[DetectedDevice, ...]
    device: DetectedDevice | None
    profile: Capabilities | None
    how: str            # "requested", "forced", "name", "compute_capability", "fallback", "none"
    reason: str
    warnings: tuple[str, ...] = ()
    paths: tuple[dict, ...] | None = None
    paths_note: str | None = None

    def summary(self) -> dict[str, Any]:
        caps = self.profile
        if caps is None:
            return {}
        return {
            "mma": S.describe_mma(caps),
            "memory": S.describe_memory(caps),
            "types": {k: list(v) for k, v in S.type_support(caps).items()},
            "legacy_paths": S.legacy_paths(caps),
            "hidden_formats": list(caps.formats.hidden),
            "missing": list(caps.missing()),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "detected": [d.to_dict() for d in self.detected],
            "device": self.device.to_dict() if self.device else None,
            "selection": {"how": self.how, "reason": self.reason},
            "profile": self.profile.to_dict() if self.profile else None,
            "summary": self.summary(),
            "paths": list(self.paths) if self.paths is not None else None,
            "paths_note": self.paths_note,
            "warnings": list(self.warnings),
        }

    def __str__(self) -> str:
        return "\n".join(_render(self))


def _render(info: DeviceInfo) -> list[str]:
    lines = ["humming device info"]
    if info.detected:
        lines += [f"  detected:  {d.describe()}" for d in info.detected]
    else:
        lines.append(f"  detected:  none ({NO_DEVICE_WHY})")
    caps = info.profile
    if caps is None:
        lines.append(f"  profile:   none: {info.reason}")
        lines.append(f"             {HOW_TO_FORCE}")
        return lines + [f"  warning:   {w}" for w in info.warnings]
    shown = f" ({caps.display_name})" if caps.display_name else ""
    lines.append(f"  profile:   {caps.name}{shown}: {info.how}: {info.reason}")
    flags = [w for w, on in (("abstract family profile", caps.abstract), ("UNVERIFIED", not caps.verified)) if on]
    if flags:
        lines.append(f"             ({', '.join(flags)})")
    lines.append(f"  lineage:   {' <- '.join(caps.lineage)}")
    lines.append(f"  source:    {caps.source}")
    t = caps.target
    cc = f"cc {t.compute_capability[0]}.{t.compute_capability[1]}" if t.compute_capability else "cc unknown"
    nvrtc = f" >= {t.min_nvrtc[0]}.{t.min_nvrtc[1]}" if t.min_nvrtc and t.compiler == "nvrtc" else ""
    family = f" (family {t.family})" if t.family else ""
    fallback = f", fallback {t.fallback_compiler}" if t.fallback_compiler else ""
    lines.append(f"  target:    {t.arch or 'unknown'}{family}, {cc}, compiler {t.compiler}{nvrtc}{fallback}")
    lines.append(f"  limits:    {_limits(caps)}")
    lines.append(f"  memory:    {S.describe_memory(caps)}")
    lines.append(f"  mma:       {S.describe_mma(caps)}")
    support = S.type_support(caps)
    lines.append("  types:     " + "; ".join(f"{k} {'/'.join(v) if v else '-'}" for k, v in support.items()))
    for text in S.legacy_paths(caps):
        lines.append(f"  legacy:    {text}")
    if caps.formats.hidden:
        lines.append(f"  hidden:    {', '.join(caps.formats.hidden)} (no PTX type)")
    for ext in caps.vendor_extensions:
        data = f" {ext.data}" if ext.data else ""
        lines.append(f"  extension: {ext.name}: {ext.spelling or ''}{data}")
    if caps.missing():
        lines.append(f"  unknown:   {', '.join(caps.missing())}")
    if caps.notes:
        lines.append("  notes:")
        lines += [f"    - {n}" for n in caps.notes]
    lines += _render_paths(info)
    return lines + [f"  warning:   {w}" for w in info.warnings]


def _limits(caps: Capabilities) -> str:
    lim = caps.limits

    def show(value: Any, unit: str) -> str:
        return f"{value}{unit}" if value is not None else f"?{unit}"

    parts = [show(lim.sms, " SMs"), show(lim.smem_per_block_kb, " KB smem/block"),
             show(lim.max_threads_per_block, " threads/block"), show(lim.registers_per_thread, " regs/thread")]
    if lim.memory_gb is not None:
        parts.append(f"{lim.memory_gb:g} GB")
    parts.append(show(lim.memory_tb_s, " TB/s"))
    if lim.peak_tflops:
        parts.append("peak " + ", ".join(f"{k} {v:g} TFLOPS" for k, v in lim.peak_tflops.items()))
    return ", ".join(parts)


def _render_paths(info: DeviceInfo) -> list[str]:
    if info.paths is None:
        return [f"  paths:     {info.paths_note}"]
    if not info.paths:
        return ["  paths:     (no schemes)"]
    rows = [(str(r.get("scheme", "")), str(r.get("family") or "-"), str(r.get("instruction") or "-"),
             str(r.get("reason", ""))) for r in info.paths]
    w0 = max(len(r[0]) for r in rows + [("scheme",)])
    w1 = max(len(r[1]) for r in rows + [("", "family")])
    w2 = max(len(r[2]) for r in rows + [("", "", "instruction")])
    out = ["  paths:", f"    {'scheme':<{w0}}  {'family':<{w1}}  {'instruction':<{w2}}  reason"]
    out += [f"    {a:<{w0}}  {b:<{w1}}  {c:<{w2}}  {d}" for a, b, c, d in rows]
    return out


def _paths(caps: Capabilities) -> tuple[tuple[dict, ...] | None, str | None]:
    try:
        from humming.core.path_table import path_table
    except ImportError:
        return None, "planner not available"
    try:
        return tuple(path_table(caps)), None
    except ImportError:
        return None, "planner not available"
    except Exception as exc:  # noqa: BLE001 - info() must describe the device even if the planner breaks
        return None, f"planner failed: {type(exc).__name__}: {exc}"


def info(profile: str | None = None) -> DeviceInfo:
    """Describe the detected device (or, with `profile`, the named profile) and how it was chosen."""
    default_registry()  # (a bad HUMMING_PROFILE_PATH is a ProfileError here, not a silent empty list)
    detected = detect_devices()
    device = current_device()
    notes: list[str] = []
    forced = settings.raw(FORCE_ENV)
    caps: Capabilities | None
    if profile is not None:
        caps, how, reason = get_profile(profile), "requested", "named by the caller"
    elif forced:
        caps, how, reason = get_profile(forced), "forced", f"forced by {FORCE_ENV}={forced}"
    elif device is not None:
        found = match_device(device)
        caps, how, reason = found.profile, found.how, found.reason
        if found.warning:
            notes.append(found.warning)
        if caps is not None:
            caps = specialize(caps, device)
    else:
        caps, how, reason = None, "none", NO_DEVICE
    if caps is not None and device is not None and how in ("requested", "forced"):
        live = match_device(device).profile
        if live is not None and live.name != caps.name:
            notes.append(f"the detected device {device.name!r} matches profile {live.name!r}, not {caps.name!r}")
    paths, paths_note = _paths(caps) if caps is not None else (None, "no profile")
    return DeviceInfo(detected=detected, device=device, profile=caps, how=how, reason=reason,
                      warnings=tuple(notes), paths=paths, paths_note=paths_note)


__all__ = ["DeviceInfo", "current_device", "current_profile", "detect_devices", "info"]
