"""The words a device profile may use. Anything else in a profile is a ProfileError.

This is the schema's vocabulary, not device knowledge: which device or target has which of these
lives in YAML (device_profiles/ and its _targets.yaml).
"""
from __future__ import annotations

# Operand element types of tensor-core instructions (PTX spellings where PTX has one).
# e3m4 (FP8) and e0m3 (FP4, sign-magnitude 0..7) are the "hidden" formats: no PTX type.
ELEMENT_TYPES: tuple[str, ...] = (
    "f16", "bf16", "tf32",
    "e4m3", "e5m2", "e3m2", "e2m3", "e2m1",
    "s8", "u8", "s4", "u4", "b1",
    "e3m4", "e0m3",
)
HIDDEN_FORMATS: tuple[str, ...] = ("e3m4", "e0m3")
ACCUMULATOR_TYPES: tuple[str, ...] = ("f16", "f32", "s32")
SCALE_FORMATS: tuple[str, ...] = ("ue8m0", "ue4m3")

# Instruction families, newest generation first (used to say "the newest family lacks X").
MMA_FAMILIES: tuple[str, ...] = ("tcgen05", "wgmma", "ppu_mma", "mma_sync")
TCGEN05_KINDS: tuple[str, ...] = ("f16", "tf32", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4")
MMA_SYNC_KINDS: tuple[str, ...] = ("f8f6f4", "mxf8f6f4", "mxf4", "mxf4nvf4")

MEMORY_FEATURES: tuple[str, ...] = ("cp_async", "ldmatrix", "stmatrix", "tma", "mbarrier", "setmaxnreg", "griddepcontrol",
                                     "cluster_multicast", "cluster_dsmem")
# "tmem" is the target-rule word for a non-null memory.tmem_kb.
TARGET_MEMORY_WORDS: tuple[str, ...] = MEMORY_FEATURES + ("tmem",)

BACKENDS: tuple[str, ...] = ("nvidia", "thead_ppu")
COMPILERS: tuple[str, ...] = ("nvrtc", "vendor_nvcc")

# Operand classes used by summaries ("does this device have INT8 tensor cores?").
TYPE_CLASSES: dict[str, tuple[str, ...]] = {
    "f16": ("f16",),
    "bf16": ("bf16",),
    "tf32": ("tf32",),
    "fp8": ("e4m3", "e5m2"),
    "fp6": ("e3m2", "e2m3"),
    "fp4": ("e2m1",),
    "int8": ("s8", "u8"),
    "int4": ("s4", "u4"),
    "int1": ("b1",),
}


def known(words: tuple[str, ...] | list[str]) -> str:
    """'(known: a, b, c)' for error messages."""
    return "(known: " + ", ".join(words) + ")"

# The tcgen05 kind that would carry each operand class (for "why is this a legacy path" messages).
TCGEN05_KIND_FOR_CLASS: dict[str, str] = {
    "f16": "f16", "bf16": "f16", "tf32": "tf32", "fp8": "f8f6f4", "fp6": "f8f6f4", "fp4": "f8f6f4", "int8": "i8",
}
