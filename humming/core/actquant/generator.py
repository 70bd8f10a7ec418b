"""Generates activation-quantization kernels: x [..., K] (f16 / bf16 / f32) -> the codes, scales and global
scale of a :class:`~humming.core.quant.quantize.QuantizedActivation`, bit for bit what
:func:`humming.core.quant.quantize.quantize_activation` computes.

One kernel per (mode, activation format, scale format, two-level or not, input dtype, load width), plus K for
per-token scaling, whose rows live in registers:

* ``dynamic_group`` (NVFP4 per 16, MX per 32, block-FP8 per 128, ...): the tensor is a flat sequence of
  groups (no group straddles a row). A group is held by ``LPG`` lanes of a warp (a power of two), each with
  ``VPL`` 16-byte loads; the group's amax is a butterfly over those lanes; a warp takes ``32 / LPG`` groups.
* ``dynamic_token``: a row is a group of K. Rows of at most 128 loads use the warp layout above (several rows
  per warp when K is small); longer rows get one block each with a block-wide amax.
* ``static_tensor``: elementwise with one scale, read from a device pointer or a kernel argument.
* Two-level schemes (NVFP4's fp32 global scale) and static scales calibrated on x need the amax of the whole
  tensor first: a separate amax kernel of the same module folds it into one word with an atomic max, and the
  quantization kernel turns it into the global (or static) scale; block 0 writes that scale out.

Numerics, exactly as the reference: amax in fp32 (a NaN propagates: the max is taken on the bits of |x|,
where NaN is above infinity); ``s_raw = amax / fmt.max`` (IEEE division), two-level: ``/ gs`` with
``gs = amax(x) / (fmt.max * scale_fmt.max)``, 1 when not > 0; the scale is rounded to its format (f16/bf16 up,
ue4m3 to nearest even and never 0, ue8m0 up to a power of two, f32 exact), a scale that is not > 0 is 1;
codes ``encode(x / (s [* gs]))`` with round to nearest even and satfinite.

The kernel body only calls named helpers (loads, stores, conversions, the element encoders ``aq_encode2`` and
``aq_encode2_finite``); their spelling comes from the device backend (its helper group "actquant",
``backend.helpers("actquant", act=..., scale_format=..., caps=...)``), which picks a hardware conversion where the
profile declares one and a bit-exact software one elsewhere. Dynamic
scales divide through one reciprocal per row or group (``AQ_DIVISOR``), rounded exactly as the reference's division.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from humming.core.quant import formats
from humming.core.quant.schemes import Scheme
from humming.errors import SchemeError, ShapeError, UnsupportedOnDevice

__all__ = ["ActQuantPlan", "plan_actquant", "actquant_source", "DTYPES"]

DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
_ELSIZE = {"f16": 2, "bf16": 2, "f32": 4}
_SCALE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "ue4m3": 1, "ue8m0": 1}

WARPS = 8  # warps per block of the warp-layout and elementwise kernels
ROW_LOADS_IN_WARP = 128  # dynamic_token rows of at most this many loads use the warp layout
BLOCK_LOADS_PER_THREAD = 4  # block-per-row kernels aim at this many loads per thread
MAX_LOADS_PER_THREAD = 8  # beyond this a row does not fit in registers without spilling (refused)
ELEMENTWISE_UNROLL = 4  # loads in flight per thread in the elementwise and amax kernels


# The value of a code byte c as an fp32 expression (every one is exact in f16 and in bf16): int8 sign-extended; e4m3
# moved into f16's fields (exponent bias 15 instead of 7, so x 2^8; e4m3 subnormals become f16 subnormals); e5m2
# is the top byte of an f16.
WIDE_CODE_VALUES = {
    "int8": "(float)((int)(c << 24) >> 24)",
    "e4m3": "f16_to_f32(((c & 0x7Fu) << 7) | ((c & 0x80u) << 8)) * 256.0f",
    "e5m2": "f16_to_f32(c << 8)",
}


def _f32(v: float) -> float:
    """v rounded to float32 the way the reference does (torch.tensor(v, dtype=float32))."""
    return float(torch.tensor(v, dtype=torch.float32))


def _f32_expr(v: float) -> str:
    """A C expression of an exact float32 constant (bits, so that no literal rounding is involved)."""
    bits = int(torch.tensor(v, dtype=torch.float32).view(torch.int32)) & 0xFFFFFFFF
    return f"bits_f32(0x{bits:08X}u) /* {v:g} */"


@dataclass(frozen=True)
class ActQuantPlan:
    """How activations of one scheme are quantized on the device, and why.

    layout: "warp" (groups or short rows held by LPG lanes), "block" (one row per block) or "elementwise".
    vec: elements per load (16 bytes where K and the pointer allow).
    """

    mode: str
    act: str
    scale_format: str
    group: int | None  # elements sharing a scale (the group size, or K for per-token)
    global_scale: bool
    dtype: str
    k: int
    vec: int
    layout: str
    threads: int
    lanes_per_group: int = 0
    loads_per_lane: int = 0
    needs_amax: bool = False
    reasons: tuple[str, ...] = field(default=())
    wide: str = ""  # "f16" / "bf16": the codes are written as their exact 16-bit values (humming.core.routes.widened_ranges)

    # ---- derived -----------------------------------------------------------------------------------
    @property
    def loads_per_group(self) -> int:
        return (self.group or 0) // self.vec

    @property
    def groups_per_warp(self) -> int:
        return 32 // self.lanes_per_group if self.lanes_per_group else 0

    @property
    def kernel_name(self) -> str:
        mode = {"static_tensor": "tensor", "dynamic_token": "token", "dynamic_group": f"group{self.group}"}[self.mode]
        gs = "_gs" if self.global_scale else ""
        k = f"_k{self.k}" if self.mode == "dynamic_token" else ""
        wide = f"_to{self.wide}" if self.wide else ""
        return f"humming_aq_{mode}_{self.act}_{self.scale_format}{gs}_{self.dtype}{k}_v{self.vec}{wide}"

    @property
    def amax_kernel_name(self) -> str | None:
        return f"humming_aq_amax_{self.dtype}_v{self.vec}" if self.needs_amax else None

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return (self.kernel_name,) + ((self.amax_kernel_name,) if self.needs_amax else ())

    def count(self, numel: int) -> int:
        """The kernel's work count for a tensor of ``numel`` elements: groups, rows or loads."""
        if self.layout == "elementwise":
            return numel // self.vec
        return numel // self.group

    def grid(self, numel: int, sms: int) -> int:
        n = self.count(numel)
        if self.layout == "warp":
            return max(1, math.ceil(n / (WARPS * self.groups_per_warp)))
        if self.layout == "block":
            return max(1, n)
        return max(1, min(math.ceil(n / (self.threads * ELEMENTWISE_UNROLL)), 8 * sms))

    def amax_grid(self, numel: int, sms: int) -> int:
        n = numel // self.vec
        return max(1, min(math.ceil(n / (WARPS * 32 * ELEMENTWISE_UNROLL)), 4 * sms))

    def summary(self) -> str:
        where = {"warp": f"{self.lanes_per_group} lanes x {self.loads_per_lane} loads per group of {self.group}",
                 "block": f"one block of {self.threads} threads per row of {self.k}, "
                          f"{self.loads_per_lane} loads per thread",
                 "elementwise": f"elementwise, {self.threads} threads per block"}[self.layout]
        two = " + global scale" if self.global_scale else ""
        wide = f"; codes written as exact {self.wide} values" if self.wide else ""
        return (f"{self.mode} {self.act} with {self.scale_format} scales{two} from {self.dtype}; {where}; "
                f"{self.vec * _ELSIZE[self.dtype]}-byte loads{wide}")

    def explain(self) -> str:
        return "\n".join([self.summary(), *("  - " + r for r in self.reasons)])


def _pow2_divisor(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


def choose_vec(dtype: str, k: int, group: int | None, byte_offset: int = 0) -> int:
    """Elements per load: 16 bytes when K (and the group) is a multiple of it and the data is aligned."""
    el = _ELSIZE[dtype]
    vec = 16 // el
    while vec > 1 and (k % vec or (group and group % vec) or byte_offset % (vec * el)):
        vec //= 2
    return vec


def plan_actquant(scheme: Scheme, dtype: str, k: int, *, vec: int | None = None, max_threads: int = 1024,
                  byte_offset: int = 0, wide: str = "") -> ActQuantPlan:
    """Plan the activation quantization of ``scheme`` for inputs ``[..., k]`` of ``dtype`` ("f16", "bf16",
    "f32"). ``vec`` forces the load width; ``byte_offset`` is the input pointer's offset from 16-byte alignment;
    ``wide`` ("f16" / "bf16") writes each code as its exact 16-bit value instead of its byte."""
    if scheme.act is None:
        raise SchemeError(f"scheme {scheme} has 16-bit activations; nothing to quantize")
    if dtype not in _ELSIZE:
        raise ShapeError(f"activation dtype {dtype!r} is not supported; use f16, bf16 or f32")
    if k <= 0:
        raise ShapeError(f"K must be positive, got {k}")
    fmt = formats.get(scheme.act)
    a = scheme.act_scale
    if wide and (wide not in ("f16", "bf16") or fmt.name not in WIDE_CODE_VALUES):
        raise UnsupportedOnDevice(f"{fmt.name} codes are not written as {wide} values (int8, e4m3 and e5m2 codes "
                                  "are, into f16 or bf16)")
    if a.mode not in ("static_tensor", "dynamic_token", "dynamic_group"):
        raise SchemeError(f"activation scale mode {a.mode!r} has no kernel")
    group = a.group_size if a.mode == "dynamic_group" else (k if a.mode == "dynamic_token" else None)
    if a.mode == "dynamic_group" and k % group:
        raise ShapeError(f"K={k} is not a multiple of the activation group size {group}")
    if vec is None:
        vec = choose_vec(dtype, k, group, byte_offset)
    reasons = [f"{vec}-element loads ({vec * _ELSIZE[dtype]} bytes): "
               + ("K and the pointer allow 16 bytes" if vec * _ELSIZE[dtype] == 16 else
                  "the widest that divides K, the group and the pointer alignment")]
    needs_amax = a.mode == "static_tensor" or a.global_scale
    if needs_amax:
        reasons.append("a tensor-wide amax first (static scale or global scale computed from x, unless given): "
                       "a separate amax kernel, one atomic max per block")
    lpg = lpl = 0
    if a.mode == "static_tensor":
        layout, threads = "elementwise", 32 * WARPS
        reasons.append(f"static per-tensor scale: elementwise, {ELEMENTWISE_UNROLL} loads in flight per thread")
    else:
        loads = group // vec
        lpg = _pow2_divisor(loads, 32)
        lpl = loads // lpg
        if a.mode == "dynamic_group" or (loads <= ROW_LOADS_IN_WARP and lpl <= 8):
            layout, threads = "warp", 32 * WARPS
            what = "group" if a.mode == "dynamic_group" else "row"
            reasons.append(f"one {what} per {lpg} lanes ({lpl} loads each), amax by a {lpg}-lane butterfly, "
                           f"{32 // lpg} {what}s per warp")
        else:
            layout = "block"
            threads = min(max_threads, max(64, 32 * math.ceil(loads / BLOCK_LOADS_PER_THREAD / 32)))
            lpl = math.ceil(loads / threads)
            lpg = 0
            if lpl > MAX_LOADS_PER_THREAD:
                raise UnsupportedOnDevice(
                    f"per-token quantization of rows of K={k} needs {lpl} loads per thread in a block of "
                    f"{threads} threads (at most {MAX_LOADS_PER_THREAD} are held in registers); use per-group "
                    f"activation scales or split K")
            reasons.append(f"one block of {threads} threads per row ({loads} loads, {lpl} per thread), "
                           f"block-wide amax")
    if wide:
        reasons.append(f"codes written as their {wide} values (exact): the weight-only kernels take them directly")
    return ActQuantPlan(a.mode, fmt.name, a.format, group, bool(a.global_scale), dtype, k, vec, layout, threads,
                        lpg, lpl, needs_amax, tuple(reasons), wide)


# ------------------------------------------------------------------------------------------- source
def _words(dtype: str, vec: int) -> int:
    return max(1, vec * _ELSIZE[dtype] // 4)


def _vector_functions(p: ActQuantPlan) -> str:
    """Per (dtype, VEC) helpers of the kernel bodies: load one vector, fold its |x| into a max, encode and store it.
    A vector is VEC elements held in WORDS u32 registers (two 16-bit elements per word, low half first)."""
    v, dt, el = p.vec, p.dtype, _ELSIZE[p.dtype]
    words = _words(dt, v)
    nbytes = v * el
    load = {16: "ld_b128(w, p);", 8: "ld_b64(w, p);", 4: "w[0] = ld_b32(p);", 2: "w[0] = ld_b16(p);"}[nbytes]
    if dt == "f32":
        unpack = "  #pragma unroll\n  for (int i = 0; i < aq::VEC; ++i) f[i] = bits_f32(w[i]);"
        fold = "  #pragma unroll\n  for (int i = 0; i < aq::VEC; ++i) m = umax(m, w[i] & 0x7FFFFFFFu);"
    elif v == 1:
        unpack = f"  f[0] = {dt}_to_f32(w[0]);"
        fold = "  m = umax(m, w[0] & 0x7FFFu);"
    else:
        unpack = (f"  #pragma unroll\n  for (int i = 0; i < aq::WORDS; ++i) {{ f[2 * i] = {dt}_to_f32(w[i]); "
                  f"f[2 * i + 1] = {dt}_to_f32(w[i] >> 16); }}")
        fold = ("  #pragma unroll\n  for (int i = 0; i < aq::WORDS; ++i) m = umax(m, umax(w[i] & 0x7FFFu, "
                "(w[i] >> 16) & 0x7FFFu));")
    if v == 1:
        store = "  st_b8(d, aq_encode2_as<FAST>(q[0], 0.0f) & 0xFFu);"
    else:
        pairs = "\n".join(["  uint32_t c[aq::VEC / 2];", "  #pragma unroll",
                           "  for (int i = 0; i < aq::VEC / 2; ++i) c[i] = aq_encode2_as<FAST>(q[2 * i], q[2 * i + 1]);"])
        st = {2: "st_b16(d, c[0]);", 4: "st_b32(d, c[0] | (c[1] << 16));",
              8: "st_b64(d, c[0] | (c[1] << 16), c[2] | (c[3] << 16));"}[v]
        store = pairs + "\n  " + st
    to_f32 = {"f32": "bits_f32(m)", "f16": "f16_to_f32(m)", "bf16": "bf16_to_f32(m)"}[dt]
    code_t, what = "unsigned char", "one byte per element"
    if p.wide:
        code_t, what, store = "uint16_t", f"one exact {p.wide} value per element", _wide_store(p)
    return f"""// ---- one vector: {v} {dt} elements ({nbytes} bytes) in {words} registers
__device__ __forceinline__ void load_vec(uint32_t (&w)[aq::WORDS], const unsigned char* p) {{ {load} }}
// |x| folded into a running max of magnitude bits (monotonic in |x|; a NaN is above infinity, so it wins)
__device__ __forceinline__ uint32_t fold_abs_max(uint32_t m, const uint32_t (&w)[aq::WORDS]) {{
{fold}
  return m;
}}
__device__ __forceinline__ float abs_max_value(uint32_t m) {{ return {to_f32}; }}
// codes of x / denom (rounded as IEEE division, as the reference), {what}, in one store; FAST: the divisor's fast
// form, whose group holds no NaN (so neither do the quotients: the encoder's NaN check is skipped)
template <bool FAST>
__device__ __forceinline__ uint32_t aq_encode2_as(float lo, float hi) {{ return FAST ? aq_encode2_finite(lo, hi) : aq_encode2(lo, hi); }}
template <bool FAST>
__device__ __forceinline__ void encode_store_as({code_t}* d, const uint32_t (&w)[aq::WORDS], const aq_divisor& denom) {{
  float f[aq::VEC], q[aq::VEC];
{unpack}
  #pragma unroll
  for (int i = 0; i < aq::VEC; ++i) q[i] = FAST ? aq_divide_fast(f[i], denom) : div_rn(f[i], denom.d);
{store}
}}
__device__ __forceinline__ void encode_store({code_t}* d, const uint32_t (&w)[aq::WORDS], const aq_divisor& denom) {{
  if (denom.fast) encode_store_as<true>(d, w, denom);
  else encode_store_as<false>(d, w, denom);
}}
"""


def _round_scale(sf: str) -> str:
    """C statements: ``s`` (> 0) rounded to scale format ``sf``; sets ``stored`` and returns the value."""
    if sf == "ue8m0":
        return """
  stored = f32_to_ue8m0_rp_sat(s);               // the next power of two up (cvt.rp), saturating
  return ue8m0_to_f32(stored);"""
    if sf == "f32":
        return """
  stored = f32_bits(s);
  return s;"""
    if sf in ("f16", "bf16"):
        top = _f32(float(formats.get(sf).max))
        inf_bits = "0x7C00u" if sf == "f16" else "0x7F80u"
        return f"""
  const float c = s < {_f32_expr(top)} ? s : {_f32_expr(top)};
  uint32_t h = f32_to_{sf}_rn(c);
  if ({sf}_to_f32(h) < c && h < {inf_bits}) h += 1u;   // round up: no element clips, tiny scales stay > 0
  stored = h;
  return {sf}_to_f32(h);"""
    if sf == "ue4m3":
        return """
  uint32_t c = f32_to_ue4m3_rn_sat(s);           // nearest even, saturating at 448
  if (c == 0u) c = 1u;                           // never 0: the smallest subnormal instead
  stored = c;
  return ue4m3_to_f32(c);"""
    raise SchemeError(f"no kernel for {sf} activation scales")  # pragma: no cover - schemes validate


def _scale_function(p: ActQuantPlan, elem_max: float) -> str:
    """aq_scale(amax, gs, &stored): the scale of a group from its amax (and the global scale): its value, used
    for the codes, and its stored bits."""
    sf = p.scale_format
    em = _f32_expr(elem_max)
    if sf == "ue8m0":  # 2^ceil(log2(amax / fmt.max)); the reference does not fold a global scale into it
        raw = f"""
  float s = div_rn(amax, {em});
  s = s > 0.0f ? s : 1.0f;                       // an all-zero (or NaN) group gets scale 1"""
    else:
        fold = "\n  s = div_rn(s, gs);" if p.global_scale else ""
        raw = f"""
  float s = div_rn(amax, {em});{fold}
  s = s > 0.0f ? s : 1.0f;                       // zero or NaN -> 1"""
    return (f"// the reference's rules for {sf} scales\n"
            f"__device__ __forceinline__ float aq_scale(float amax, float gs, uint32_t& stored) {{"
            f"{raw}{_round_scale(sf)}\n}}\n")


def _static_scale_function(p: ActQuantPlan) -> str:
    """aq_scale_static(s_raw, &stored): a per-tensor s_raw (amax / fmt.max, or the given scale) rounded."""
    return (f"// the reference's rules for a {p.scale_format} per-tensor scale\n"
            f"__device__ __forceinline__ float aq_scale_static(float s_raw, uint32_t& stored) {{\n"
            f"  const float s = s_raw > 0.0f ? s_raw : 1.0f;   // zero, negative or NaN -> 1"
            f"{_round_scale(p.scale_format)}\n}}\n")


def _store_scale(p: ActQuantPlan, ptr: str, index: str) -> str:
    n = _SCALE_BYTES[p.scale_format]
    st = {4: "st_b32", 2: "st_b16", 1: "st_b8"}[n]
    return f"{st}((unsigned char*)({ptr}) + ({index}) * {n}, stored);"


def _tensor_value(p: ActQuantPlan, elem_max: float) -> str:
    """C statements defining ``float tval``: the static scale's s_raw, or the global scale gs."""
    if p.mode == "static_tensor":
        conv = f"div_rn(t, {_f32_expr(elem_max)})"
        what = "s_raw of the static scale: amax(x) / fmt.max, or the given scale"
    else:
        sf_max = float(formats.get(p.scale_format).max)
        conv = f"div_rn(t, {_f32_expr(_f32(elem_max * sf_max))})"
        what = "the global scale: amax(x) / (fmt.max * scale_fmt.max), or the given one; 1 unless > 0"
    fix = "" if p.mode == "static_tensor" else "\n  tval = tval > 0.0f ? tval : 1.0f;"
    return f"""  // {what}
  // (tensor_src 0: *tensor_ptr is the amax kernel's result; 1: *tensor_ptr is given; 2: tensor_value is given)
  const float t = tensor_src == 2 ? tensor_value : *tensor_ptr;
  float tval = tensor_src == 0 ? {conv} : t;{fix}"""


def _code_type(p: ActQuantPlan) -> str:
    """The element type of the codes the kernel writes: bytes, or the exact 16-bit values of wide codes."""
    return "uint16_t" if p.wide else "unsigned char"


def _signature(p: ActQuantPlan) -> str:
    return f"""const void* __restrict__ x, {_code_type(p)}* __restrict__ codes, void* __restrict__ scales,
    float* __restrict__ gs_out, const float* __restrict__ tensor_ptr, float tensor_value, int tensor_src,
    long long count"""


def _wide_store(p: ActQuantPlan) -> str:
    """encode_store's tail for wide codes: the code bytes of c[] (two per word) as exact f16/bf16 values, stored."""
    pack = "f32_to_f16_rn" if p.wide == "f16" else "f32_to_bf16_rn"
    if p.vec == 1:
        return f"  const uint32_t c = aq_encode2_as<FAST>(q[0], 0.0f) & 0xFFu;\n  st_b16(d, {pack}(aq_code_value(c)));"
    lines = ["  uint32_t c[aq::VEC / 2], o[aq::VEC / 2];  // code pairs; value pairs (low half first)", "  #pragma unroll",
             "  for (int i = 0; i < aq::VEC / 2; ++i) {",
             "    c[i] = aq_encode2_as<FAST>(q[2 * i], q[2 * i + 1]);",
             f"    o[i] = {pack}(aq_code_value(c[i] & 0xFFu)) | ({pack}(aq_code_value((c[i] >> 8) & 0xFFu)) << 16);",
             "  }"]
    st = {2: "st_b32(d, o[0]);", 4: "st_b64(d, o[0], o[1]);",
          8: "st_b64(d, o[0], o[1]);\n  st_b64(d + 4, o[2], o[3]);"}[p.vec]
    return "\n".join(lines) + "\n  " + st


def _warp_kernel(p: ActQuantPlan, elem_max: float) -> str:
    el = _ELSIZE[p.dtype]
    gs_setup = ""
    gs_arg = "1.0f"
    if p.global_scale:
        gs_setup = _tensor_value(p, elem_max) + """
  const float gs = tval;
  if (blockIdx.x == 0 && threadIdx.x == 0) st_b32(gs_out, f32_bits(gs));
"""
        gs_arg = "gs"
    denom = "mul_rn(s, gs)" if p.global_scale else "s"
    what = "group" if p.mode == "dynamic_group" else "row"
    return f"""
// {p.summary()}
// count = number of {what}s; {what} g covers elements [g * GROUP, (g + 1) * GROUP) of the flat tensor
extern "C" __global__ void __launch_bounds__(aq::THREADS) {p.kernel_name}(
    {_signature(p)}) {{
  aq_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / aq::LPG, li = lane % aq::LPG;   // which {what} of the warp, which lane of the {what}
  const long long g = ((long long)blockIdx.x * aq::WARPS + warp) * aq::GPW + sub;
  const bool active = g < count;
{gs_setup}
  // loads j = 0 .. VPL-1 of this lane: vector j * LPG + li of the {what} (the LPG lanes read contiguously)
  const unsigned char* src = (const unsigned char*)x + g * (long long)(aq::GROUP * {el});
  uint32_t w[aq::VPL][aq::WORDS];
  #pragma unroll
  for (int j = 0; j < aq::VPL; ++j) {{
    #pragma unroll
    for (int i = 0; i < aq::WORDS; ++i) w[j][i] = 0u;
    if (active) load_vec(w[j], src + (j * aq::LPG + li) * {p.vec * el});
  }}
  uint32_t m = 0u;                                     // max |x| bits of this lane
  #pragma unroll
  for (int j = 0; j < aq::VPL; ++j) m = fold_abs_max(m, w[j]);
  #pragma unroll
  for (int o = aq::LPG / 2; o > 0; o >>= 1) m = umax(m, shfl_xor_u32(m, o));
  const float amax = abs_max_value(m);

  uint32_t stored;
  const float s = aq_scale(amax, {gs_arg}, stored);
  const aq_divisor denom = aq_make_divisor({denom}, aq_finite(amax));
  if (!active) return;
  if (li == 0) {_store_scale(p, "scales", "g")}
  {_code_type(p)}* dst = codes + g * (long long)aq::GROUP;
  #pragma unroll
  for (int j = 0; j < aq::VPL; ++j) {{
    encode_store(dst + (j * aq::LPG + li) * aq::VEC, w[j], denom);
  }}
}}
"""


def _block_kernel(p: ActQuantPlan, elem_max: float) -> str:
    el = _ELSIZE[p.dtype]
    loads = p.k // p.vec
    return f"""
// {p.summary()}
// count = number of rows; block b quantizes row b; thread t holds loads t, t + THREADS, ...
extern "C" __global__ void __launch_bounds__(aq::THREADS) {p.kernel_name}(
    {_signature(p)}) {{
  aq_launch_dependents();
  __shared__ uint32_t warp_max[aq::THREADS / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long row = blockIdx.x;
  const unsigned char* src = (const unsigned char*)x + row * (long long)(aq::K * {el});
  uint32_t w[aq::VPL][aq::WORDS];
  uint32_t m = 0u;
  #pragma unroll
  for (int j = 0; j < aq::VPL; ++j) {{
    #pragma unroll
    for (int i = 0; i < aq::WORDS; ++i) w[j][i] = 0u;
    const int v = j * aq::THREADS + tid;
    if (v < {loads}) load_vec(w[j], src + v * {p.vec * el});
  }}
  #pragma unroll
  for (int j = 0; j < aq::VPL; ++j) m = fold_abs_max(m, w[j]);
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = umax(m, shfl_xor_u32(m, o));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  #pragma unroll
  for (int i = 0; i < aq::THREADS / 32; ++i) m = umax(m, warp_max[i]);
  const float amax = abs_max_value(m);

  uint32_t stored;
  const float s = aq_scale(amax, 1.0f, stored);
  if (tid == 0) {_store_scale(p, "scales", "row")}
  {_code_type(p)}* dst = codes + row * (long long)aq::K;
  const aq_divisor denom = aq_make_divisor(s, aq_finite(amax));
  #pragma unroll
  for (int j = 0; j < aq::VPL; ++j) {{
    const int v = j * aq::THREADS + tid;
    if (v < {loads}) {{
      encode_store(dst + v * aq::VEC, w[j], denom);
    }}
  }}
}}
"""


def _elementwise_kernel(p: ActQuantPlan, elem_max: float) -> str:
    el = _ELSIZE[p.dtype]
    return f"""
// {p.summary()}
// count = number of {p.vec}-element loads; grid-stride, UNROLL loads in flight per thread
extern "C" __global__ void __launch_bounds__(aq::THREADS) {p.kernel_name}(
    {_signature(p)}) {{
  aq_launch_dependents();
{_tensor_value(p, elem_max)}
  uint32_t stored;
  const float s = aq_scale_static(tval, stored);
  if (blockIdx.x == 0 && threadIdx.x == 0) {_store_scale(p, "scales", "0")}
  const aq_divisor denom = aq_make_divisor(s, false);   // a static scale bounds nothing: divide
  const long long step = (long long)gridDim.x * aq::THREADS * aq::UNROLL;
  for (long long base = (long long)blockIdx.x * aq::THREADS * aq::UNROLL; base < count; base += step) {{
    uint32_t w[aq::UNROLL][aq::WORDS];
    #pragma unroll
    for (int u = 0; u < aq::UNROLL; ++u) {{
      const long long v = base + u * aq::THREADS + threadIdx.x;
      if (v < count) load_vec(w[u], (const unsigned char*)x + v * {p.vec * el});
    }}
    #pragma unroll
    for (int u = 0; u < aq::UNROLL; ++u) {{
      const long long v = base + u * aq::THREADS + threadIdx.x;
      if (v < count) {{
        encode_store(codes + v * aq::VEC, w[u], denom);
      }}
    }}
  }}
}}
"""


def _amax_kernel(p: ActQuantPlan) -> str:
    el = _ELSIZE[p.dtype]
    return f"""
// amax(|x|) of the whole tensor as fp32 bits, folded into *amax_out (zeroed by the caller) with one atomic
// max per block; the max is taken on magnitude bits, so a NaN wins as it does in the reference
extern "C" __global__ void __launch_bounds__(aq::WARPS * 32) {p.amax_kernel_name}(
    const void* __restrict__ x, uint32_t* __restrict__ amax_out, long long count) {{
  __shared__ uint32_t warp_max[aq::WARPS];
  uint32_t m = 0u;
  const long long step = (long long)gridDim.x * aq::WARPS * 32 * aq::UNROLL;
  for (long long base = (long long)blockIdx.x * aq::WARPS * 32 * aq::UNROLL; base < count; base += step) {{
    uint32_t w[aq::UNROLL][aq::WORDS];
    #pragma unroll
    for (int u = 0; u < aq::UNROLL; ++u) {{
      #pragma unroll
      for (int i = 0; i < aq::WORDS; ++i) w[u][i] = 0u;
      const long long v = base + u * aq::WARPS * 32 + threadIdx.x;
      if (v < count) load_vec(w[u], (const unsigned char*)x + v * {p.vec * el});
    }}
    #pragma unroll
    for (int u = 0; u < aq::UNROLL; ++u) m = fold_abs_max(m, w[u]);
  }}
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = umax(m, shfl_xor_u32(m, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {{
    #pragma unroll
    for (int i = 1; i < aq::WARPS; ++i) m = umax(m, warp_max[i]);
    red_max_u32(amax_out, f32_bits(abs_max_value(m)));
  }}
}}
"""


# Division by one denominator shared by a token row or group, rounded exactly as IEEE division (the reference's
# x / s): one reciprocal per row instead of one division per element.
AQ_DIVISOR = """// x / d for one d shared by many x (aq_divide_fast), rounded exactly as IEEE division: r = RN(1 / d), q = RN(x r),
// the exact remainder e = x - q d (one FMA), then RN(q + e r) = RN(x / d) by Markstein's theorem (r within half an
// ulp of 1 / d, q within one ulp of x / d) while d and 1 / d are normal. The dynamic scales keep |x / d| near the
// format's maximum, and a quotient in the subnormal range encodes to zero either way. Otherwise (fast false: a
// non-finite amax, an extreme d, a static scale) the division itself.
struct aq_divisor { float d, r; bool fast; };
// no infinity among the x (an infinite x over a finite d would give inf - inf in the correction): the group's amax
__device__ __forceinline__ bool aq_finite(float amax) { return (f32_bits(amax) & 0x7FFFFFFFu) < 0x7F800000u; }
__device__ __forceinline__ aq_divisor aq_make_divisor(float d, bool allow_fast) {
  const uint32_t e = (f32_bits(d) >> 23) & 0xFFu;   // biased exponent: 2..253 keeps d and 1 / d normal and finite
  aq_divisor v;
  v.d = d;
  v.fast = allow_fast && e >= 2u && e <= 253u;
  v.r = v.fast ? rcp_rn(d) : 0.0f;
  return v;
}
__device__ __forceinline__ float aq_divide_fast(float x, const aq_divisor& v) {
  const float q = mul_rn(x, v.r);
  const float e = -fma_rn(q, v.d, -x);   // x - q d, written so that x = -0 keeps its sign (e = -0, q + e r = -0)
  return fma_rn(e, v.r, q);
}"""


def actquant_source(p: ActQuantPlan, prelude: str) -> str:
    """The CUDA C++ module of a plan: the backend's helper definitions (``prelude``), then the kernels."""
    fmt = formats.get(p.act)
    elem_max = _f32(float(fmt.max))
    consts = [f"constexpr int VEC = {p.vec};       // elements per load",
              f"constexpr int THREADS = {p.threads};",
              f"constexpr int WARPS = {WARPS};      // warps per block of the amax kernel and the warp layout",
              f"constexpr int UNROLL = {ELEMENTWISE_UNROLL};     // loads in flight per thread (elementwise, amax)"]
    if p.layout == "warp":
        consts += [f"constexpr int GROUP = {p.group};   // elements per scale",
                   f"constexpr int LPG = {p.lanes_per_group};      // lanes per group",
                   f"constexpr int VPL = {p.loads_per_lane};      // loads per lane",
                   f"constexpr int GPW = {p.groups_per_warp};      // groups per warp"]
    elif p.layout == "block":
        consts += [f"constexpr int K = {p.k};", f"constexpr int VPL = {p.loads_per_lane};      // loads per thread"]
    parts = [f"// ===== humming generated kernels: {', '.join(p.kernel_names)}",
             f"// {p.summary()}",
             prelude,
             "__device__ __forceinline__ uint32_t umax(uint32_t a, uint32_t b) { return a > b ? a : b; }",
             "namespace aq {\n" + "\n".join(consts) + f"\nconstexpr int WORDS = {_words(p.dtype, p.vec)};"
             "       // registers per vector\n}", AQ_DIVISOR, _vector_functions(p)]
    if p.wide:
        parts.insert(-1, "// the exact value of code byte c\n__device__ __forceinline__ float aq_code_value(uint32_t c) "
                         f"{{ return {WIDE_CODE_VALUES[p.act]}; }}")
    if p.mode == "static_tensor":
        kernel = _elementwise_kernel(p, elem_max)
        parts += [_static_scale_function(p)]
    elif p.layout == "warp":
        kernel = _warp_kernel(p, elem_max)
        parts += [_scale_function(p, elem_max)]
    else:
        kernel = _block_kernel(p, elem_max)
        parts += [_scale_function(p, elem_max)]
    parts.append(kernel)
    if p.needs_amax:
        parts.append(_amax_kernel(p))
    return "\n".join(parts)
