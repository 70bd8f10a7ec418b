"""The backend contract: what a device backend must provide to the core kernel generator.

The core generator writes kernel bodies in terms of *named device helpers* (``mma_m16n8k16``,
``ldmatrix_x4``, ``copy_16_async``, ``dequant_pair`` ...). A backend supplies the definitions of
those helpers, spelled in the instructions its profile declares: ``prelude(request)`` for the mma.sync
kernels, ``helpers(name, request, **params)`` for every other named group (a kernel family's prelude, or a
group added to one), ``data(name, **params)`` for spelling data a generator reads (lookup words, instruction
descriptors). The generator never writes an ``asm`` statement itself and imports no vendor module; every
hardware instruction comes from here.

Backends are looked up by the profile's ``backend`` field (see ``humming.devices.get_backend``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CompileRoute:
    """How sources for a profile become binaries: which compiler, for which target, with which flags."""

    compiler: str  # "nvrtc" | "vendor_nvcc"
    arch: str  # e.g. "sm_90a"
    min_nvrtc: tuple[int, int] | None = None
    options: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class HelperRequest:
    """What the generator needs spelled for one kernel.

    mma: the MmaInstruction the planner chose (its shape decides how a 16x8x16 step is spelled);
    act: activation element type ("f16" | "bf16"); weight: a WeightDecode describing the codes.
    caps: the profile's Capabilities, for backends whose spellings depend on declared data (vendor
    extensions and their layout data); None when the caller does not pass it (portable spelling only).
    """

    mma: Any
    act: str
    weight: Any
    async_copy: bool
    extras: tuple[str, ...] = field(default_factory=tuple)
    caps: Any = None


class Backend(ABC):
    """A device backend. Subclasses are stateless; one instance serves every profile it supports."""

    name: str = "abstract"

    @abstractmethod
    def supports(self, caps: Any) -> bool:
        """True when this backend can spell instructions for the profile."""

    @abstractmethod
    def compile_route(self, caps: Any) -> CompileRoute:
        """Which compiler and target to use for this profile, and why."""

    @abstractmethod
    def prelude(self, request: HelperRequest) -> str:
        """CUDA C++ source defining every device helper the generated kernel calls."""

    def helpers(self, name: str, request: HelperRequest | None = None, **params) -> str:
        """A named group of helpers beyond ``prelude`` that a generator asks for, spelled for this backend's devices:
        CUDA C++ (or, for a name ending in ``_encoder``, the one-line description of how it is spelled). A backend that
        has no such group raises UnsupportedOnDevice naming it.

        Two kinds of group. A kernel's prelude, in place of ``prelude(request)``: ``request`` is the kernel's
        HelperRequest and ``params`` the kernel's options (``n``: the wgmma N; ``scale_vec``; ``acc``; the register-A
        forms' ``tensor_copy``, ``producer``, ``cluster``, ``streamk`` ...): "stream_bulk", "blockscaled",
        "wgmma_k32", "wgmma_wna16", "wgmma_w4a8", "wgmma_ws", "wgmma_rs", "wgmma_rs8", "tcgen05", "tcgen05_wna16",
        "tcgen05_blockscaled". A group added to a prelude, spelled from the profile (``caps=``) alone: "tensor_copy"
        (``mbarriers``), "cluster_dsmem", "cluster_multicast", "grid_dependency", "stmatrix", "e4m3_of_labels", and the
        activation-quantization kernel's "actquant" (``fmt``: the activation format's data, a
        humming.formats Format; ``caps``) and "actquant_encoder" (the same), and "elementwise" (conversions and global
        loads / stores for the kernels between the GEMMs, e.g. the MoE gated activation)."""
        from humming.errors import UnsupportedOnDevice

        raise UnsupportedOnDevice(f"backend {self.name} spells no helper group {name!r}")

    def data(self, name: str, **params) -> Any:
        """Spelling data a generator reads to write code (not code itself): "rs8_widen_tables" (the register-A W4A8
        widening's lookup words and their labels), "tcgen05_idesc" / "tcgen05_idesc_block_scaled" (a tcgen05.mma
        instruction descriptor for ``params``). A backend that has no such datum raises UnsupportedOnDevice naming
        it."""
        from humming.errors import UnsupportedOnDevice

        raise UnsupportedOnDevice(f"backend {self.name} has no spelling data {name!r}")

    def describe(self) -> str:
        return self.name
