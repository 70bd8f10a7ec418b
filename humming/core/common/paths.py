"""Path selection for schemes that quantize activations (W8A8, W4A8, W4A4, MX): which instruction family
multiplies which operand types on a device, chosen from the declared capabilities only.

Paths (see DESIGN.md):
  native                 the MMA takes both operands as stored (incl. block-scaled MMAs for NVFP4/MX)
  dequant-to-activation  weights widened exactly to the activation type in registers, then MMA
  legacy                 an older family because the newest declared one lacks the types (B300 INT8)
  upconvert              neither operand type has an MMA: both widened exactly to bf16/f16
Refusals raise UnsupportedOnDevice naming what is missing and what would work.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from humming import settings
from humming.errors import UnsupportedOnDevice

# newest family first; a family a profile does not declare is simply skipped
UNVERIFIED_ENV = "HUMMING_UNVERIFIED_KERNELS"


def unverified_enabled() -> bool:
    """HUMMING_UNVERIFIED_KERNELS: run kernels compiled for GPUs they never ran on (a deployment setting)."""
    return settings.flag(UNVERIFIED_ENV)


def unverified_note(caps, kernel: str) -> str:
    """What a plan says of a ``kernel`` ("tcgen05", "block-scaled") kernel compiled for the profile's target but never
    run on hardware."""
    return (f"{kernel} kernel generated and compiled for {caps.target.arch}, not yet validated on hardware: "
            f"set {UNVERIFIED_ENV}=1 to use it")


FAMILY_ORDER = ("tcgen05", "wgmma", "mma_sync")
# scheme format name -> MMA operand type name
_MMA_TYPE = {"int8": "s8", "uint8": "u8", "int4": "s4", "e4m3": "e4m3", "e5m2": "e5m2", "e2m1": "e2m1",
             "e2m3": "e2m3", "e3m2": "e3m2", "e3m4": "e3m4", "e0m3": "e0m3"}
# weight widenings that are exact: (weight type, activation type) -> the type the weight becomes
_EXACT_WIDENING = {("s4", "s8"): "s8", ("s4", "e4m3"): "e4m3", ("e2m1", "e4m3"): "e4m3"}
# (element format, block-scale format) pairs whose products are exact in a 16-bit float: bf16 has the
# exponent range of any ue8m0 scale; f16 holds e2m1 x ue4m3 (2**-10 .. 2688) but not 2**+-127 scales
_UPCONVERT_EXACT = {
    "bf16": {(e, s) for e in ("e2m1", "e2m3", "e3m2", "e4m3") for s in ("ue8m0", "ue4m3")},
    "f16": {("e2m1", "ue4m3")},
}
_HIDDEN = ("e3m4", "e0m3")


@dataclass(frozen=True)
class PathChoice:
    scheme: str
    path: str
    family: str
    instruction: object  # MmaInstruction
    a_type: str  # activation operand as the MMA sees it
    b_type: str  # weight operand as the MMA sees it
    reasons: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        ins = self.instruction
        kind = f" kind::{ins.kind}" if getattr(ins, "kind", None) else ""
        scale = f" scale {ins.scale_format}" if getattr(ins, "scale_format", None) else ""
        shape = "x".join(map(str, ins.shape))
        return f"{self.family}{kind} m{shape} {self.a_type}x{self.b_type}{scale}"


def _block_scaled(scheme) -> str | None:
    """The block-scale format when weights and activations share one block-scaled recipe (NVFP4, MX)."""
    ws, acts = scheme.weight_scale, scheme.act_scale
    if (ws.granularity == "group" and acts.mode == "dynamic_group" and ws.format == acts.format
            and ws.format in ("ue8m0", "ue4m3") and ws.group_size == acts.group_size):
        return ws.format
    return None


def _find(caps, a: str, b: str, scale_format: str | None = None, families: tuple[str, ...] = FAMILY_ORDER) -> list:
    """(family, form) per declared family, newest family first; within a family the form doing the most
    work per instruction (largest K, then M x N: m16n8k32 over m8n8k16, kind::mxf4 over kind::mxf8f6f4)."""
    found = []
    for family in families:
        forms = caps.find_mma(family=family, a_type=a, b_type=b)
        forms = [f for f in forms if (f.scale_format or None) == scale_format]
        if forms:
            best = max(forms, key=lambda f: (f.shape[2], f.shape[0] * f.shape[1]))
            found.append((family, best))
    return found


def _declared_types(caps) -> str:
    return ", ".join(sorted({i.a_type for i in caps.mma})) or "none"


def choose_path(caps, scheme, families: tuple[str, ...] = FAMILY_ORDER, block_scaled: bool = True) -> PathChoice:
    """The execution path for a quantized-activation scheme on a profile, or UnsupportedOnDevice.
    ``families`` restricts the instruction families considered (newest first); ``block_scaled=False`` skips a
    declared block-scaled mma.sync form (its kernel is not validated on hardware yet) and says so."""
    name = getattr(scheme, "name", str(scheme))
    act = _MMA_TYPE.get(scheme.act, scheme.act)
    weight = _MMA_TYPE.get(scheme.weight, scheme.weight)
    reasons: list[str] = []
    for fmt in (act, weight):
        if fmt in _HIDDEN:
            if fmt in caps.formats.hidden:
                raise UnsupportedOnDevice(
                    f"{caps.name} executes {fmt} on its tensor cores but PTX has no {fmt} type; reaching it needs "
                    f"SASS patching, which humming does not do (unverifiable); use e4m3/e2m1 schemes"
                )
            raise UnsupportedOnDevice(f"{caps.name} does not execute the hidden format {fmt} (not declared)")

    scale = _block_scaled(scheme)
    if scale:
        hits = _find(caps, act, weight, scale, families)
        if hits and not block_scaled and hits[0][0] == "mma_sync":
            family, ins = hits[0]
            reasons.append(f"block-scaled MMA declared: {family} kind::{ins.kind} {act}x{weight} with {scale} scales; "
                           + unverified_note(caps, "block-scaled"))
            hits = []
        elif hits:
            family, ins = hits[0]
            reasons.append(f"block-scaled MMA declared: {family} kind::{ins.kind} {act}x{weight} with {scale} "
                           f"scales per {scheme.weight_scale.group_size}")
            return PathChoice(name, "native", family, ins, act, weight, tuple(reasons))
        else:
            reasons.append(f"no block-scaled MMA for {act}x{weight} with {scale} scales is declared")
        for wide in ("bf16", "f16"):
            if (act, scale) in _UPCONVERT_EXACT[wide] and (weight, scale) in _UPCONVERT_EXACT[wide]:
                try:  # the 16-bit GEMM is the WnA16 kernel (mma.sync family)
                    ins, _ = choose_mma(caps, wide)
                except UnsupportedOnDevice:
                    continue
                reasons.append(f"upconvert: {act} and {weight} times {scale} block scales are exact in {wide}; "
                               f"the WnA16 mma_sync {wide} kernel, global scales in the fp32 epilogue")
                return PathChoice(name, "upconvert", "mma_sync", ins, wide, wide, tuple(reasons))
        raise UnsupportedOnDevice(
            f"{caps.name}: {'; '.join(reasons)}, and no 16-bit MMA holds {act}/{weight} exactly "
            f"(declared operand types: {_declared_types(caps)})"
        )

    b = weight if weight == act else _EXACT_WIDENING.get((weight, act))
    if b is None:
        raise UnsupportedOnDevice(
            f"{name}: {weight} weights do not widen exactly to {act} activations; no path"
        )
    if b != weight:
        reasons.append(f"dequant-to-activation: {weight} weights widened exactly to {b} in registers")
    hits = _find(caps, act, b, families=families)
    if not hits:
        raise UnsupportedOnDevice(
            f"{caps.name} declares no tensor-core instruction taking {act} x {b} "
            f"(declared operand types: {_declared_types(caps)}); "
            + (f"run its weights with 16-bit activations on this device: humming.schemes.get({name!r}, act=None) "
               f"(or w8a16-fp8)" if act.startswith("e") else "use a WnA16 scheme on this device")
        )
    family, ins = hits[0]
    # legacy is a hardware fact: the newest declared family lacks these operand types (not a missing generator)
    newest = next((f for f in FAMILY_ORDER if caps.find_mma(family=f)), family)
    best_declared = _find(caps, act, b)[0][0]
    path = "dequant-to-activation" if b != weight else "native"
    if best_declared != newest:
        path = "legacy"
        kind = "i8" if act in ("s8", "u8") else "f8f6f4" if act.startswith("e") else act
        missing = (f"tcgen05 kind::{kind} not available on {caps.target.arch}" if newest == "tcgen05"
                   else f"{newest} has no {act}x{b} form on {caps.target.arch}")
        reasons.append(f"{missing} -> legacy {best_declared} m{'x'.join(map(str, ins.shape))} {act}")
    else:
        reasons.append(f"{family} m{'x'.join(map(str, ins.shape))} {act}x{b} declared")
    if scheme.weight_scale.granularity == "block":
        bn, bk = scheme.weight_scale.block
        reasons.append(f"{bn}x{bk} weight blocks and per-{bk} activation groups rescaled per K block in fp32")
    return PathChoice(name, path, family, ins, act, b, tuple(reasons))


# k16 steps are spelled from the largest declared shape first
_K16_SHAPES = ((16, 8, 16), (16, 8, 8))


def choose_mma(caps, act: str) -> tuple[object, str]:
    """The mma.sync instruction used for one k16 step with act x act operands and fp32 accumulation."""
    found = caps.find_mma(family="mma_sync", a_type=act, b_type=act, acc_type="f32")
    by_shape = {tuple(i.shape): i for i in found}
    for shape in _K16_SHAPES:
        if shape in by_shape:
            how = "one instruction per k16 step" if shape[2] == 16 else "two m16n8k8 per k16 step"
            return by_shape[shape], f"mma.sync m{shape[0]}n{shape[1]}k{shape[2]} {act} declared: {how}"
    have = sorted({i.a_type for i in caps.find_mma(family="mma_sync")})
    alt = " use float16 activations" if act == "bf16" and "f16" in have else ""
    raise UnsupportedOnDevice(
        f"{caps.name} declares no mma.sync m16n8k16/m16n8k8 with {act} operands and fp32 accumulation "
        f"(declared mma.sync A types: {', '.join(have) or 'none'});{alt or ' no WnA16 path'}"
    )
