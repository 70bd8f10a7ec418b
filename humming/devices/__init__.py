"""Device backends, looked up by the ``backend`` field of a profile."""
from __future__ import annotations

import importlib

from humming.errors import UnsupportedOnDevice

_BACKENDS = {
    "nvidia": ("humming.devices.nvidia.backend", "NvidiaBackend"),
    "thead_ppu": ("humming.devices.thead_ppu.backend", "PPUBackend"),
}
_instances: dict[str, object] = {}


def get_backend(caps):
    """The backend that spells instructions for a profile (by its ``backend`` field)."""
    name = caps.backend
    if name not in _instances:
        if name not in _BACKENDS:
            raise UnsupportedOnDevice(
                f"profile {caps.name} names backend {name!r}; known backends: {', '.join(sorted(_BACKENDS))}"
            )
        module, cls = _BACKENDS[name]
        _instances[name] = getattr(importlib.import_module(module), cls)()
    backend = _instances[name]
    if not backend.supports(caps):
        raise UnsupportedOnDevice(f"backend {name} does not support profile {caps.name}")
    return backend
