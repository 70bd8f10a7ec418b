"""Small helper kernels beside the GEMMs (MoE routing, the gated activation): one generated module per kind, compiled
once per (device profile, live target) on the profile's compile route and loaded once per device.

    ROUTING = HelperModule("routing", route_source, KERNEL_NAMES, build=lambda cubin, device: ...)
    loaded = ROUTING.on(device)        # what ``build`` made of the module for this device, or why there is none (str)

A device without them is not asked again; a source the compiler rejects is reported with one warning and the caller
falls back to torch ops (the reason is kept: ``on`` returns it).
"""
from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

import torch

from humming import settings
from humming.errors import CompileError, UnsupportedOnDevice

__all__ = ["HelperModule", "device_index"]


def device_index(t: torch.Tensor) -> int:
    """The CUDA device index of a tensor (the current device for a bare ``cuda``)."""
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


class HelperModule:
    """One module of helper kernels: ``source()`` gives its CUDA C++, ``kernel_names`` its entry points, ``build(cubin,
    device)`` what a device keeps of it (called in the device's context, so function handles are fetched there)."""

    def __init__(self, what: str, source: Callable[[], str], kernel_names: tuple[str, ...],
                 build: Callable[[bytes, int], object]):
        self.what, self.source, self.kernel_names, self.build = what, source, tuple(kernel_names), build
        self._lock = threading.Lock()
        self._devices: dict[tuple[int, str | None], object] = {}  # (device, forced profile) -> built or why not
        self._cubins: dict[tuple, bytes] = {}  # (profile, its source file, live target) -> the module

    def cubin(self, caps, run_arch: str | None) -> bytes:
        """The module for a profile, compiled for ``run_arch`` when the profile is emulated on another GPU."""
        key = (caps.name, caps.source, run_arch)
        hit = self._cubins.get(key)
        if hit is None:
            from humming.core.compile.compiler import compile_for_profile
            from humming.devices import get_backend

            hit = self._cubins[key] = compile_for_profile(self.source(), self.kernel_names, get_backend(caps), caps,
                                                          run_arch)[0]
        return hit

    def on(self, device: int) -> object:
        """What ``build`` made for ``device``, or a string saying why the device has none."""
        key = (device, settings.raw("HUMMING_DEVICE_PROFILE"))
        hit = self._devices.get(key)
        if hit is None:
            with self._lock:
                hit = self._devices.get(key)
                if hit is None:
                    hit = self._devices[key] = self._load(device)
        return hit

    def _load(self, device: int) -> object:
        from humming.devices.current import emulation_arch, resolve_profile

        try:
            with torch.cuda.device(device):
                caps = resolve_profile(None)
                return self.build(self.cubin(caps, emulation_arch(caps)), device)
        except UnsupportedOnDevice as exc:
            return f"no {self.what} kernel on cuda:{device}: {exc}"
        except CompileError as exc:  # the caller stays correct on torch ops; the reason is kept and shown
            why = f"the {self.what} kernels do not compile for cuda:{device}: {exc}"
            warnings.warn(why + f"; {self.what} runs on torch ops", stacklevel=4)
            return why
