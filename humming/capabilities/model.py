"""The capability model: small frozen dataclasses built from a resolved YAML profile.

A capability that is False / absent means "not declared": either the hardware lacks it or it is not
confirmed. Planners must only use what is declared.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

Version = tuple[int, int]


@dataclass(frozen=True)
class MmaInstruction:
    """One tensor-core instruction form: family, shape (m, n, k) and operand types.

    For wgmma/tcgen05 `shape[1]` is the largest N and `n_values` lists every legal N.
    Block-scaled forms carry `scale_format` and the legal `scale_vec` sizes (scale factors per row
    and instruction: 1X, 2X, 4X). `min_nvrtc` is set when a form needs a newer compiler than the target.
    """

    family: str
    shape: tuple[int, int, int]
    a_type: str
    b_type: str
    acc_types: tuple[str, ...]
    kind: str | None = None
    scale_format: str | None = None
    scale_vec: tuple[int, ...] = ()
    extension: str | None = None
    n_values: tuple[int, ...] = ()
    min_nvrtc: Version | None = None

    @property
    def m(self) -> int:
        return self.shape[0]

    @property
    def n(self) -> int:
        return self.shape[1]

    @property
    def k(self) -> int:
        return self.shape[2]

    @property
    def block_scaled(self) -> bool:
        return self.scale_format is not None

    def describe(self) -> str:
        """e.g. 'mma_sync m16n8k32 s8 x s8 -> s32' or 'tcgen05 kind::mxf4 m128n256k64 e2m1 x e2m1 -> f32 (ue8m0 x2)'."""
        m, n, k = self.shape
        text = self.family
        if self.kind:
            text += f" kind::{self.kind}"
        if self.extension:
            text += f" [{self.extension}]"
        text += f" m{m}n{n}k{k} {self.a_type} x {self.b_type} -> {'/'.join(self.acc_types)}"
        if self.scale_format:
            text += f" ({self.scale_format} x{'/'.join(str(v) for v in self.scale_vec)})"
        return text


@dataclass(frozen=True)
class Target:
    """What the compiler is asked for. arch/compute_capability are None only in unverified profiles."""

    arch: str | None
    family: str | None
    compute_capability: Version | None
    min_nvrtc: Version | None
    compiler: str
    fallback_compiler: str | None = None


@dataclass(frozen=True)
class Memory:
    cp_async: bool = False
    ldmatrix: bool = False
    stmatrix: bool = False
    tma: bool = False
    mbarrier: bool = False
    setmaxnreg: bool = False
    griddepcontrol: bool = False  # programmatic dependent launch (griddepcontrol.wait / .launch_dependents)
    cluster_multicast: bool = False  # thread-block clusters: multicast tensor copies, mbarrier arrivals on a peer
    cluster_dsmem: bool = False  # thread-block clusters: distributed shared memory (mapa, st.shared::cluster) and
    #                              barrier.cluster (sm_90 and later)
    tmem_kb: int | None = None


@dataclass(frozen=True)
class Limits:
    """Per-device limits. smem_per_block_kb / max_threads_per_block / registers_per_thread are ints in
    every verified device profile (validated); None only in abstract or unverified profiles."""

    sms: int | None = None
    smem_per_block_kb: int | None = None
    max_threads_per_block: int | None = None
    registers_per_thread: int | None = None
    warp_size: int | None = None
    max_cluster_size: int | None = None  # blocks in one thread-block cluster (None: no limit beyond the planners')
    l2_mb: float | None = None
    memory_gb: float | None = None
    memory_tb_s: float | None = None
    peak_tflops: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Formats:
    hidden: tuple[str, ...] = ()


@dataclass(frozen=True)
class VendorExtension:
    """A vendor instruction or feature beyond the portable subset, e.g. ppu.mma.sync m16n16k16.
    `data` is free-form for the backend (e.g. {"b_channel_order": [0, 2, 4, 6, 1, 3, 5, 7]})."""

    name: str
    spelling: str | None = None
    description: str | None = None
    confirmed: bool = True
    data: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, key: str) -> Any:  # ext.b_channel_order reads ext.data["b_channel_order"]
        data = self.__dict__.get("data", {})
        if key in data:
            return data[key]
        raise AttributeError(f"vendor extension {self.__dict__.get('name')!r} has no field {key!r}")

    def __hash__(self) -> int:
        return hash((self.name, self.spelling))


@dataclass(frozen=True)
class MatchRule:
    """How a live device is recognised: vendor, compute capability and name patterns."""

    vendor: str
    compute_capability: Version | None
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Capabilities:
    name: str
    vendor: str
    backend: str
    target: Target
    mma: tuple[MmaInstruction, ...]
    memory: Memory
    limits: Limits
    formats: Formats
    match: MatchRule
    vendor_extensions: tuple[VendorExtension, ...] = ()
    verified: bool = True
    abstract: bool = False
    display_name: str | None = None
    lineage: tuple[str, ...] = ()  # this profile, then its parents (nearest first)
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    source: str = ""

    def __hash__(self) -> int:
        return hash((self.name, self.source, self.target, self.mma))

    # ---- queries a planner needs -------------------------------------------------------------
    def find_mma(
        self,
        family: str | None = None,
        a_type: str | None = None,
        b_type: str | None = None,
        acc_type: str | None = None,
        shape: tuple[int, int, int] | None = None,
        kind: str | None = None,
        scale_format: str | None = None,
    ) -> list[MmaInstruction]:
        """Declared instructions matching every given criterion (None = any). A wgmma/tcgen05 form
        matches `shape` when m and k are equal and n is one of its n_values."""
        found = []
        for ins in self.mma:
            if family is not None and ins.family != family:
                continue
            if a_type is not None and ins.a_type != a_type:
                continue
            if b_type is not None and ins.b_type != b_type:
                continue
            if acc_type is not None and acc_type not in ins.acc_types:
                continue
            if kind is not None and ins.kind != kind:
                continue
            if scale_format is not None and ins.scale_format != scale_format:
                continue
            if shape is not None and not _shape_fits(ins, tuple(shape)):
                continue
            found.append(ins)
        return found

    def has_tcgen05_kind(self, kind: str) -> bool:
        return any(ins.family == "tcgen05" and ins.kind == kind for ins in self.mma)

    def families(self) -> tuple[str, ...]:
        """Declared MMA families, in declaration order without repeats."""
        return tuple(dict.fromkeys(ins.family for ins in self.mma))

    def has_extension(self, name: str) -> bool:
        return any(ext.name == name for ext in self.vendor_extensions)

    def extension(self, name: str) -> VendorExtension | None:
        return next((ext for ext in self.vendor_extensions if ext.name == name), None)

    def missing(self) -> tuple[str, ...]:
        """Key paths a kernel would need but this profile leaves unknown (null)."""
        gaps = []
        if self.target.arch is None:
            gaps.append("target.arch")
        if self.target.compute_capability is None:
            gaps.append("target.compute_capability")
        for key in ("smem_per_block_kb", "max_threads_per_block", "registers_per_thread", "warp_size"):
            if getattr(self.limits, key) is None:
                gaps.append(f"limits.{key}")
        return tuple(gaps)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, dicts, str, numbers), suitable for JSON or YAML."""
        data = asdict(self)
        data["mma"] = [_instruction_dict(ins) for ins in self.mma]
        return _plain(data)


def _shape_fits(ins: MmaInstruction, shape: tuple[int, ...]) -> bool:
    if ins.n_values:
        return shape[0] == ins.m and shape[2] == ins.k and shape[1] in ins.n_values
    return shape == ins.shape


def _instruction_dict(ins: MmaInstruction) -> dict[str, Any]:
    data: dict[str, Any] = {"family": ins.family, "shape": list(ins.shape), "a_type": ins.a_type,
                            "b_type": ins.b_type, "acc_types": list(ins.acc_types)}
    for key in ("kind", "scale_format", "extension", "min_nvrtc"):
        if getattr(ins, key) is not None:
            data[key] = getattr(ins, key)
    if ins.scale_vec:
        data["scale_vec"] = list(ins.scale_vec)
    if ins.n_values:
        data["n_values"] = list(ins.n_values)
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
