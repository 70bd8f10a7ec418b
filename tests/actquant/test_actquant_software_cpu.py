"""CPU: the portable (asm-free) part of the activation-quantization prelude -- the software element encoders,
the scale conversions -- and the generated scale functions are compiled for the host with g++ and checked bit
for bit against the reference: every element encoder on all f16 values at many scales plus random f32 bits,
and the scale/codes pipeline of every mode on fresh data (the kernels' loads and indexing are checked on the GPU).
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
import torch

from humming.core.actquant import generator as actquant
from humming.core.quant import formats
from humming.core.quant.quantize import quantize_activation
from humming.core.quant.schemes import get as get_scheme
from humming.devices.nvidia.actquant_spelling import software_source

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not found (compiles the software helpers for the host)")

# what the asm helpers of the GPU prelude do, in host C++ (IEEE single arithmetic on x86-64 SSE)
HOST = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
#define __device__
#define __forceinline__ inline
static inline uint32_t f32_bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static inline float bits_f32(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }
static inline float div_rn(float a, float b) { volatile float r = a / b; return r; }
static inline float mul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline int f32_to_int_rn(float a) {
  if (a != a) return 0;
  if (a >= 2147483648.0f) return 2147483647;
  if (a <= -2147483648.0f) return (-2147483647 - 1);
  return (int)std::nearbyint(a);
}
static inline float f16_to_f32(uint32_t h) { uint16_t s = (uint16_t)h; _Float16 f; std::memcpy(&f, &s, 2); return (float)f; }
static inline uint32_t f32_to_f16_rn(float x) { _Float16 f = (_Float16)x; uint16_t s; std::memcpy(&s, &f, 2); return s; }
static inline float bf16_to_f32(uint32_t h) { return bits_f32((h & 0xFFFFu) << 16); }
"""

EXPORTS = r"""
extern "C" void h_encode(const float* q, long n, uint8_t* out) {
  for (long i = 0; i + 1 < n; i += 2) { uint32_t e = aq_encode2(q[i], q[i + 1]); out[i] = e & 0xFF; out[i + 1] = e >> 8; }
  if (n & 1) out[n - 1] = aq_encode2(q[n - 1], 0.0f) & 0xFF;
}
"""


def _build(tmp_path_factory, name: str, source: str):
    d = tmp_path_factory.mktemp(name)
    src, lib = d / f"{name}.cpp", d / f"{name}.so"
    src.write_text(source)
    res = subprocess.run([GXX, "-O1", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-o", str(lib), str(src)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    return ctypes.CDLL(str(lib))


def _encode(lib, q: torch.Tensor) -> torch.Tensor:
    q = q.to(torch.float32).contiguous().reshape(-1)
    out = torch.empty(q.numel(), dtype=torch.uint8)
    lib.h_encode(ctypes.c_void_p(q.data_ptr()), ctypes.c_long(q.numel()), ctypes.c_void_p(out.data_ptr()))
    return out


def _probe_values() -> torch.Tensor:
    """Every f16 value at many binade shifts (ties, subnormals, overflow of every small format), specials,
    and random f32 bit patterns."""
    h = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    h = h[torch.isfinite(h)]
    parts = [h * 2.0**e for e in (-30, -20, -12, -8, -4, -1, 0, 3, 8, 12)]
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (400000,), generator=g, dtype=torch.int64).to(torch.int32)
    parts.append(bits.view(torch.float32))
    parts.append(torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 2.0**-149, -(2.0**-149),
                               3.4028234663852886e38]))
    return torch.cat(parts)


ELEMENT_FORMATS = ["int8", "int4", "ternary", "e4m3", "e5m2", "e2m1", "e2m3", "e3m2", "e3m4", "e0m3"]


@pytest.mark.parametrize("fmt", ELEMENT_FORMATS)
def test_software_element_encoder_is_bit_exact(tmp_path_factory, fmt):
    lib = _build(tmp_path_factory, f"enc_{fmt}", HOST + software_source(formats.get(fmt)) + EXPORTS)
    x = _probe_values()
    got = _encode(lib, x)
    want = formats.get(fmt).encode(x, saturate=True)
    bad = (got != want).nonzero().flatten()
    assert bad.numel() == 0, [(float(x[i]), int(got[i]), int(want[i])) for i in bad[:8]]


SCALE_EXPORTS = r"""
extern "C" void h_scales(const float* x, long n, uint32_t* ue8m0, uint32_t* ue4m3, uint32_t* bf16, float* ue8v,
                         float* ue4v) {
  for (long i = 0; i < n; ++i) {
    ue8m0[i] = f32_to_ue8m0_rp_sat(x[i]); ue8v[i] = ue8m0_to_f32(ue8m0[i]);
    ue4m3[i] = f32_to_ue4m3_rn_sat(x[i]); ue4v[i] = ue4m3_to_f32(ue4m3[i]);
    bf16[i] = f32_to_bf16_rn(x[i]);
  }
}
"""


def test_scale_conversions_are_bit_exact(tmp_path_factory):
    lib = _build(tmp_path_factory, "scales", HOST + software_source(formats.get("e4m3")) + SCALE_EXPORTS)
    x = _probe_values()
    x = x[(x > 0) & torch.isfinite(x)]
    x = torch.cat([x, torch.tensor([float("inf"), 2.0**-127, 2.0**-127 * 1.5, 2.0**-126, 2.0**127, 2.0**127 * 1.25])])
    n = x.numel()
    outs = [torch.empty(n, dtype=torch.int32) for _ in range(3)] + [torch.empty(n) for _ in range(2)]
    lib.h_scales(ctypes.c_void_p(x.data_ptr()), ctypes.c_long(n), *[ctypes.c_void_p(t.data_ptr()) for t in outs])
    ue8, ue4, bf, ue8v, ue4v = outs
    f8, f4 = formats.get("ue8m0"), formats.get("ue4m3")
    want8 = f8.encode(x, saturate=True, rounding="ceil").to(torch.int32)
    assert torch.equal(ue8, want8)
    assert torch.equal(ue8v, f8.decode(want8.to(torch.uint8)))
    want4 = f4.encode(x, saturate=True).to(torch.int32)
    assert torch.equal(ue4, want4)
    assert torch.equal(ue4v, f4.decode(want4.to(torch.uint8)))
    finite = x < 3.3e38
    want_bf = x[finite].to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    assert torch.equal(bf[finite], want_bf)


# ---- the whole numeric pipeline of a group, with the generated aq_scale functions
SCHEMES = ["w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w8a8-fp8-block", "w4a4-nvfp4", "w4a4-mxfp4", "mxfp8",
           "mxfp6", "w4a8-int8[act_scale_format=f16]", "w8a8-fp8[act_scale_format=bf16]",
           "w4a4-nvfp4[act_group_size=32]", "w8a8-int8[act_scale=static_tensor,act_scale_format=f16]"]


def _pipeline_lib(tmp_path_factory, scheme, tag):
    sch = get_scheme(scheme)
    plan = actquant.plan_actquant(sch, "f16", 256)
    elem_max = float(torch.tensor(float(formats.get(sch.act).max), dtype=torch.float32))
    if plan.mode == "static_tensor":
        scale = actquant._static_scale_function(plan) + r"""
extern "C" float h_scale(float s_raw, float gs, uint32_t* stored) { (void)gs; return aq_scale_static(s_raw, *stored); }
"""
    else:
        scale = actquant._scale_function(plan, elem_max) + r"""
extern "C" float h_scale(float amax, float gs, uint32_t* stored) { return aq_scale(amax, gs, *stored); }
"""
    tensor = ""
    if plan.needs_amax:
        # the kernels' per-tensor value (tensor_src 0: from the amax; 2: given)
        body = actquant._tensor_value(plan, elem_max)
        tensor = ("extern \"C\" float h_tensor(float tensor_value, int tensor_src, const float* tensor_ptr) {\n"
                  + body + "\n  return tval;\n}\n")
    lib = _build(tmp_path_factory, f"pipe_{tag}", HOST + software_source(formats.get(sch.act)) + EXPORTS + scale + tensor)
    lib.h_scale.restype = ctypes.c_float
    lib.h_scale.argtypes = [ctypes.c_float, ctypes.c_float, ctypes.POINTER(ctypes.c_uint32)]
    if plan.needs_amax:
        lib.h_tensor.restype = ctypes.c_float
        lib.h_tensor.argtypes = [ctypes.c_float, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    return sch, plan, lib


def _fresh(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp(torch.randn(shape[0], 1, generator=g) * 3)
    x[0] = 0.0                                                   # an all-zero row
    if shape[0] > 2:
        x[1, ::7] *= 300.0                                       # outliers
        x[2] = torch.tensor([0.5, 1.5, 2.5, -0.25, 3.5, 5.0, -6.0, 448.0] * (shape[1] // 8))  # ties
    if shape[0] > 3:
        x[3] *= 1e-6                                             # tiny values
    return x.to(dtype)


def _emulate(sch, plan, lib, x, scale=None, global_scale=None):
    """The kernels' arithmetic, step by step, with the host-compiled helpers: (codes, stored scale bits, gs)."""
    xf = x.float()
    a = sch.act_scale
    k = x.shape[-1]

    def scale_of(v, gs):
        st = ctypes.c_uint32()
        val = lib.h_scale(float(v), float(gs), ctypes.byref(st))
        return val, st.value

    t_amax = ctypes.c_float(float(xf.abs().amax()))
    if plan.mode == "static_tensor":
        if scale is None:
            sraw = lib.h_tensor(0.0, 0, ctypes.byref(t_amax))
        else:
            sraw = lib.h_tensor(float(torch.tensor(scale, dtype=torch.float32)), 2, None)
        s, st = scale_of(sraw, 1.0)
        return _encode(lib, xf / torch.tensor(s)).reshape(x.shape), [st], None
    g = a.group_size if plan.mode == "dynamic_group" else k
    xg = xf.reshape(-1, g)
    gs = 1.0
    if plan.needs_amax:
        if global_scale is None:
            gs = lib.h_tensor(0.0, 0, ctypes.byref(t_amax))
        else:
            gs = lib.h_tensor(float(torch.tensor(global_scale, dtype=torch.float32)), 2, None)
    amax = xg.abs().amax(-1)
    vals, stored = zip(*(scale_of(v, gs) for v in amax.tolist()))
    s = torch.tensor(vals, dtype=torch.float32)
    denom = s * torch.tensor(gs, dtype=torch.float32) if a.global_scale else s
    codes = _encode(lib, xg / denom[:, None]).reshape(x.shape)
    return codes, list(stored), (gs if a.global_scale else None)


def _stored_bits(t: torch.Tensor) -> list[int]:
    """The stored scales as unsigned integers of their element size."""
    n = t.element_size()
    view = {4: torch.int32, 2: torch.int16, 1: torch.uint8}[n]
    return [v & ((1 << (8 * n)) - 1) for v in t.reshape(-1).view(view).tolist()]


def _check(scheme, sch, plan, lib, x, **kw):
    ref = quantize_activation(x, sch, **kw)
    codes, stored, gs = _emulate(sch, plan, lib, x, **kw)
    assert torch.equal(codes, ref.codes), (scheme, (codes != ref.codes).nonzero()[:5])
    assert stored == _stored_bits(ref.scales), (scheme, stored[:8], _stored_bits(ref.scales)[:8])
    if gs is not None:
        assert torch.equal(torch.tensor(gs, dtype=torch.float32).view(torch.int32), ref.global_scale.view(torch.int32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_scale_and_code_pipeline_matches_reference(tmp_path_factory, scheme, dtype):
    tag = "".join(c if c.isalnum() else "_" for c in scheme) + str(dtype)[-4:]
    sch, plan, lib = _pipeline_lib(tmp_path_factory, scheme, tag)
    for seed, shape in ((1, (7, 256)), (2, (33, 512))):
        _check(scheme, sch, plan, lib, _fresh(shape, dtype, seed))


@pytest.mark.parametrize("scheme,kw", [("w8a8-fp8-tensor", {"scale": 0.037}), ("w8a8-fp8-tensor", {"scale": -2.0}),
                                       ("w4a4-nvfp4", {"global_scale": 0.0123}),
                                       ("w4a4-nvfp4", {"global_scale": 0.0})])
def test_given_static_and_global_scales(tmp_path_factory, scheme, kw):
    tag = "given_" + "".join(c if c.isalnum() else "_" for c in scheme)
    sch, plan, lib = _pipeline_lib(tmp_path_factory, scheme, tag)
    _check(scheme, sch, plan, lib, _fresh((9, 256), torch.bfloat16, 5), **kw)
