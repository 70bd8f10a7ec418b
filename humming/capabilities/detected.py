"""A device as a detector saw it: pure data, so matching can be tested on synthetic devices."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DetectedDevice:
    vendor: str                                   # "nvidia", "thead", ...
    name: str                                     # as the driver reports it, e.g. "NVIDIA H200"
    compute_capability: tuple[int, int] | None    # None when the detector could not ask a driver
    sms: int | None = None
    index: int = 0
    source: str = ""                              # how it was found, e.g. "cuda driver", "/dev/alixpu0"

    def describe(self) -> str:
        cc = "cc ?" if self.compute_capability is None else "cc {}.{}".format(*self.compute_capability)
        sms = f", {self.sms} SMs" if self.sms else ""
        return f"#{self.index} {self.name} ({self.vendor}, {cc}{sms}; via {self.source})"

    def to_dict(self) -> dict:
        return {
            "vendor": self.vendor,
            "name": self.name,
            "compute_capability": list(self.compute_capability) if self.compute_capability else None,
            "sms": self.sms,
            "index": self.index,
            "source": self.source,
        }
