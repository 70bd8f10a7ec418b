"""The one exception hierarchy of humming. Errors are part of the API: each message names the
violated constraint and, where there is one, a way out."""
from __future__ import annotations


class HummingError(Exception):
    """Base of every error humming raises on purpose."""


class ProfileError(HummingError, ValueError):
    """A device profile is malformed, inconsistent, or cannot be found."""


class SchemeError(HummingError, ValueError):
    """A quantization scheme, format or checkpoint is invalid or inconsistent."""


class ShapeError(HummingError, ValueError):
    """Tensor shapes, dtypes or strides do not meet a kernel's or a format's constraints."""


class DeviceMismatchError(ShapeError):
    """The tensors of one call are on different devices (x on the CPU with the weights on a GPU, a bias or an output
    on another device than x): a kernel would read another device's memory and the CPU reference would run where the
    caller expects the GPU. A ShapeError, so existing ``except ShapeError`` handlers keep catching it."""


class SettingsError(HummingError, ValueError):
    """A ``HUMMING_*`` environment setting cannot be parsed, or names something that cannot be used (a pinned NVRTC
    that does not load); the message names the variable, its value and what it takes."""


class UnsupportedOnDevice(HummingError):
    """The device (profile) offers no path for the request; the message says what was missing."""


class CompileError(HummingError):
    """NVRTC (or a vendor compiler) rejected generated source. Carries the log and where the source was saved."""

    def __init__(self, message: str, log: str = "", source_path: str | None = None):
        super().__init__(message)
        self.log = log
        self.source_path = source_path

    def __str__(self) -> str:  # the log is the useful part; keep it in the message
        text = super().__str__()
        if self.source_path:
            text += f"\n  source saved at: {self.source_path}"
        if self.log:
            text += "\n  compiler log:\n" + "\n".join("    " + line for line in self.log.strip().splitlines()[:60])
        return text


class LaunchError(HummingError):
    """A driver call to load or launch a kernel failed."""


__all__ = [
    "HummingError",
    "ProfileError",
    "SchemeError",
    "ShapeError",
    "DeviceMismatchError",
    "SettingsError",
    "UnsupportedOnDevice",
    "CompileError",
    "LaunchError",
]
