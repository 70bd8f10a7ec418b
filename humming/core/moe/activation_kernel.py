"""The gated activation between an MoE layer's two GEMMs in one kernel launch: ``h [rows, 2I]`` (f16 / bf16, the
gate+up GEMM's output) -> ``act(gate) * up`` ``[rows, I]`` in h's dtype, computed in fp32 and rounded once, as
:func:`~humming.core.moe.reference.reference_activation` followed by ``.to(h.dtype)`` (which it replaces on CUDA:
that is five torch kernels and an fp32 copy of h).

    a = gated_activation(h, "silu", interleaved=False)          # CUDA: one launch; CPU / other shapes: the torch ops

Each thread turns eight gate/up pairs into eight outputs with 16-byte loads, so I must be a multiple of 8 (every MoE
weight's N is a multiple of 16) and h 16-byte aligned; anything else runs the torch ops. Compiled once per (device
profile, live target) on the profile's compile route (:mod:`humming.core.runtime.helper_kernels`), launched on
torch's current stream (CUDA-graph capturable).
"""
from __future__ import annotations

import ctypes
import textwrap

import torch

from humming.core.moe.reference import ACTIVATIONS, reference_activation
from humming.core.runtime.helper_kernels import HelperModule, device_index
from humming.errors import ShapeError, UnsupportedOnDevice

__all__ = ["gated_activation", "gated_activation_cuda", "activation_source", "kernel_name", "fits"]

THREADS = 256
VEC = 8  # outputs per thread and step
_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}
_LAYOUTS = {False: "halves", True: "pairs"}  # gate = h[:, :I], up = h[:, I:]  /  gate = h[:, 0::2], up = h[:, 1::2]
_POISON = False  # tests set it: outputs are filled with garbage before each launch

# act(gate, up) in fp32; alpha and limit are kernel arguments (used by the clamped SwiGLU only)
_ACT_BODIES = {
    "silu": "return gate / (1.0f + expf(-gate)) * up;",
    "swiglu_clamped": ("const float g = fminf(gate, limit);\n"
                       "  const float u = fminf(fmaxf(up, -limit), limit);\n"
                       "  return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);"),
}
# how the eight (gate, up) pairs of outputs col..col+7 are read from the row
_LOADERS = {
    "halves": ("uint32_t g[4], u[4];  // gate at col, up at inter + col: 8 values each\n"
               "ld_b128(g, row + col);\n"
               "ld_b128(u, row + inter + col);\n"
               "for (int i = 0; i < 4; ++i) {\n"
               "  gate[2 * i] = LO(g[i]); gate[2 * i + 1] = HI(g[i]);\n"
               "  up[2 * i] = LO(u[i]); up[2 * i + 1] = HI(u[i]);\n"
               "}"),
    "pairs": ("uint32_t w[8];  // gate, up alternate from 2 * col: each word is one (gate, up) pair\n"
              "ld_b128(*reinterpret_cast<uint32_t(*)[4]>(w), row + 2 * col);\n"
              "ld_b128(*reinterpret_cast<uint32_t(*)[4]>(w + 4), row + 2 * col + 8);\n"
              "for (int i = 0; i < 8; ++i) { gate[i] = LO(w[i]); up[i] = HI(w[i]); }"),
}


def kernel_name(activation: str, interleaved: bool, dtype: torch.dtype) -> str:
    return f"humming_moe_{activation}_{_LAYOUTS[bool(interleaved)]}_{_DTYPES[dtype]}"


KERNEL_NAMES = tuple(kernel_name(a, il, dt) for a in ACTIVATIONS for il in _LAYOUTS for dt in _DTYPES)


def _kernel(activation: str, layout: str, dt: str) -> str:
    to_f32, round_to = ("f16_to_f32", "f32_to_f16_rn") if dt == "f16" else ("bf16_to_f32", "f32_to_bf16_rn")
    name = f"humming_moe_{activation}_{layout}_{dt}"
    return f"""
namespace {name}_ops {{  // act(gate, up) in fp32
__device__ __forceinline__ float act(float gate, float up, float alpha, float limit) {{
  {_ACT_BODIES[activation]}
}}
}}
extern "C" __global__ void __launch_bounds__({THREADS}) {name}(
    const uint16_t* __restrict__ h, uint16_t* __restrict__ out, long long rows, int inter, float alpha, float limit) {{
#define LO(word) {to_f32}((word) & 0xFFFFu)
#define HI(word) {to_f32}((word) >> 16)
  const long long per_row = inter / {VEC};
  const long long total = rows * per_row;
  for (long long v = blockIdx.x * (long long){THREADS} + threadIdx.x; v < total; v += (long long)gridDim.x * {THREADS}) {{
    const long long r = v / per_row;
    const int col = (int)(v - r * per_row) * {VEC};
    const uint16_t* row = h + r * 2 * inter;
    float gate[{VEC}], up[{VEC}];
{textwrap.indent(_LOADERS[layout], "    ")}
    uint32_t y[{VEC // 2}];
    for (int i = 0; i < {VEC // 2}; ++i) {{
      using {name}_ops::act;
      y[i] = {round_to}(act(gate[2 * i], up[2 * i], alpha, limit))
           | ({round_to}(act(gate[2 * i + 1], up[2 * i + 1], alpha, limit)) << 16);
    }}
    uint16_t* dst = out + r * inter + col;
    st_b64(dst, y[0], y[1]);
    st_b64(dst + 4, y[2], y[3]);
  }}
#undef LO
#undef HI
}}"""


def activation_source(caps=None) -> str:
    """The CUDA C++ of every gated-activation kernel (each activation x layout x dtype), the helpers spelled by the
    profile's backend (default: the current device's profile)."""
    from humming.devices import get_backend
    from humming.devices.current import resolve_profile

    caps = resolve_profile(caps)
    prelude = get_backend(caps).helpers("elementwise", caps=caps)
    kernels = [_kernel(a, layout, dt) for a in ACTIVATIONS for layout in _LAYOUTS.values() for dt in _DTYPES.values()]
    return "\n".join([f"// ===== humming generated kernels: the MoE gated activation ({len(kernels)} forms)", prelude,
                      *kernels])


def _build(cubin: bytes, device: int) -> dict[str, object]:
    from humming.core.runtime.kernel import LoadedKernel

    return {name: LoadedKernel(cubin, name, 0) for name in KERNEL_NAMES}


_MODULE = HelperModule("gated activation", lambda: activation_source(None), KERNEL_NAMES, _build)


def fits(h: torch.Tensor) -> bool:
    """Whether the kernel takes ``h`` as it is: CUDA, f16 / bf16, 2-D contiguous, I a multiple of 8, 16-byte aligned."""
    return (h.is_cuda and h.dtype in _DTYPES and h.dim() == 2 and h.is_contiguous() and h.shape[1] % (2 * VEC) == 0
            and h.data_ptr() % 16 == 0)


def gated_activation_cuda(h: torch.Tensor, activation: str = "silu", *, interleaved: bool = False,
                          alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """The activation of ``h [rows, 2I]`` in one launch (ShapeError where :func:`fits` says no; UnsupportedOnDevice
    where the device has no kernel)."""
    if activation not in ACTIVATIONS:
        raise ShapeError(f"activation {activation!r} is unknown; use one of {ACTIVATIONS}")
    if not fits(h):
        raise ShapeError(f"the activation kernel takes a contiguous 16-byte-aligned CUDA f16/bf16 [rows, 2I] with I a "
                         f"multiple of {VEC}, got {h.dtype} {list(h.shape)} on {h.device}")
    rows, inter = int(h.shape[0]), int(h.shape[1]) // 2
    out = torch.empty((rows, inter), dtype=h.dtype, device=h.device)
    if _POISON:
        out.fill_(-7777.0)
    if rows == 0 or inter == 0:
        return out
    device = device_index(h)
    kernels = _MODULE.on(device)
    if isinstance(kernels, str):
        raise UnsupportedOnDevice(kernels)
    from humming.core.runtime.launch import current_stream

    blocks = min(-(-rows * inter // (VEC * THREADS)), 1 << 20)  # the kernel strides over the rest
    args = [ctypes.c_void_p(h.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_longlong(rows),
            ctypes.c_int(inter), ctypes.c_float(alpha), ctypes.c_float(limit)]
    kernel = kernels[kernel_name(activation, interleaved, h.dtype)]
    if device == torch.cuda.current_device():
        kernel.launch(device, (blocks, 1, 1), THREADS, current_stream(device), args)
    else:  # the function handle is fetched in the current context
        with torch.cuda.device(device):
            kernel.launch(device, (blocks, 1, 1), THREADS, current_stream(device), args)
    return out


def gated_activation(h: torch.Tensor, activation: str = "silu", *, interleaved: bool = False,
                     alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """``reference_activation(h, ...).to(h.dtype)`` for ``h [rows, 2I]``: one kernel launch on CUDA where
    :func:`fits` and the device has the kernels, the torch ops otherwise."""
    if fits(h) and activation in ACTIVATIONS and isinstance(_MODULE.on(device_index(h)), dict):
        return gated_activation_cuda(h, activation, interleaved=interleaved, alpha=alpha, limit=limit)
    return reference_activation(h, activation, interleaved=interleaved, alpha=alpha, limit=limit).to(h.dtype)
