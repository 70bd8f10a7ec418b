"""Activation quantization on the GPU (``humming.actquant`` re-exports it): the kernels of ``humming.core.actquant.generator``, planned for a profile,
compiled once (NVRTC, cached) and launched on torch's current stream without host synchronisation.

    qa = quantize_activation_cuda(x, "w4a4-nvfp4")          # == humming.quantize_activation(x, ...) bit for bit
    qa.codes, qa.scales, qa.global_scale

CPU tensors (and dtypes without a kernel, e.g. float64) go to the reference ``humming.quantize_activation``.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import torch

from humming import settings
from humming.core.actquant.generator import DTYPES, WARPS, ActQuantPlan, actquant_source, choose_vec, plan_actquant
from humming.core.quant import formats
from humming.core.quant.quantize import QuantizedActivation, quantize_activation, scale_storage_dtype
from humming.core.quant.schemes import Scheme
from humming.core.quant.schemes import get as get_scheme
from humming.devices.current import live_arch, resolve_profile
from humming.errors import ShapeError, UnsupportedOnDevice

__all__ = ["quantize_activation_cuda", "plan_activation_quant", "activation_quant_source"]

_POISON = False  # tests set it: outputs are filled with garbage before each launch
_lock = threading.Lock()

# tensor_src of the kernels: where the per-tensor value (static scale or global scale) comes from
_FROM_AMAX, _FROM_POINTER, _FROM_VALUE = 0, 1, 2


@dataclass
class _Prepared:
    plan: ActQuantPlan
    kernel: object  # LoadedKernel
    amax_kernel: object | None


_prepared: dict[tuple, _Prepared] = {}
_schemes: dict[str, Scheme] = {}
_profiles: dict[tuple, tuple[object, str | None]] = {}
_sms: dict[int, int] = {}


def _as_scheme(scheme) -> Scheme:
    if isinstance(scheme, Scheme):
        return scheme
    sch = _schemes.get(scheme)
    if sch is None:
        sch = _schemes[scheme] = get_scheme(scheme)
    return sch


def _spelling(caps):
    """The backend's activation-quantization helpers for this profile: (act, scale_format, caps) -> CUDA C++ (the
    backend gets the activation format's data; every scale format's helper is defined)."""
    from humming.devices import get_backend

    backend = get_backend(caps)

    def spell(act: str, scale_format: str, caps_) -> str:
        formats.get(scale_format)  # (a clear error for an unknown name)
        return backend.helpers("actquant", fmt=formats.get(act), caps=caps_)

    return spell


def _resolve(profile, device_index: int):
    """(Capabilities, run_arch): run_arch compiles a named profile's source for the live GPU when they differ."""
    key = (profile, device_index, settings.raw("HUMMING_DEVICE_PROFILE"))  # Capabilities are hashable
    hit = _profiles.get(key)
    if hit is None:
        with torch.cuda.device(device_index):  # the profile and live target of x's device
            caps = resolve_profile(profile)
            live = live_arch()
        run_arch = live if live and live != caps.target.arch else None
        hit = _profiles[key] = (caps, run_arch)
    return hit


def plan_activation_quant(scheme, dtype: torch.dtype | str, k: int, profile=None, *,
                          byte_offset: int = 0) -> ActQuantPlan:
    """The plan for quantizing ``[..., k]`` activations of ``dtype`` with ``scheme`` on ``profile`` (default: the
    current device), with the reason for every choice, including how the element encoder is spelled."""
    caps = resolve_profile(profile)
    sch = _as_scheme(scheme)
    dt = DTYPES.get(dtype, dtype) if isinstance(dtype, torch.dtype) else dtype
    plan = plan_actquant(sch, dt, k, byte_offset=byte_offset, max_threads=caps.limits.max_threads_per_block or 1024)
    return _with_encoder_reason(plan, sch, caps)


def _with_encoder_reason(plan: ActQuantPlan, sch: Scheme, caps) -> ActQuantPlan:
    from dataclasses import replace

    from humming.devices import get_backend

    how = get_backend(caps).helpers("actquant_encoder", fmt=formats.get(sch.act), caps=caps)
    why = f"encoder on {caps.name}: {how}" if how else None
    return replace(plan, reasons=plan.reasons + ((why,) if why else ()))


def activation_quant_source(plan: ActQuantPlan, profile=None) -> str:
    """The generated CUDA C++ of a plan for a profile."""
    caps = resolve_profile(profile)
    return actquant_source(plan, _spelling(caps)(plan.act, plan.scale_format, caps))


def _prepare(caps, run_arch, sch: Scheme, dtype: str, k: int, vec: int, wide: str = "") -> _Prepared | None:
    """The compiled kernels for (profile, scheme's activation side, dtype, K for per-token, load width, 16-bit code
    values or bytes), or None when the planner has no kernel for the shape."""
    a = sch.act_scale
    key = (caps.name, caps.source, run_arch, sch.act, a.mode, a.format, a.group_size, a.global_scale, dtype,
           k if a.mode == "dynamic_token" else None, vec, wide)
    if key in _prepared:
        return _prepared[key]
    from humming.core.compile.compiler import compile_for_profile
    from humming.core.runtime.kernel import LoadedKernel
    from humming.devices import get_backend

    try:
        plan = plan_actquant(sch, dtype, k, vec=vec, max_threads=caps.limits.max_threads_per_block or 1024, wide=wide)
    except UnsupportedOnDevice:
        _prepared[key] = None
        return None
    source = actquant_source(plan, _spelling(caps)(plan.act, plan.scale_format, caps))
    cubin = compile_for_profile(source, plan.kernel_names, get_backend(caps), caps, run_arch)[0]
    prep = _Prepared(plan, LoadedKernel(cubin, plan.kernel_name, 0),
                     LoadedKernel(cubin, plan.amax_kernel_name, 0) if plan.needs_amax else None)
    with _lock:
        _prepared[key] = prep
    return prep


def _sm_count(device: int) -> int:
    n = _sms.get(device)
    if n is None:
        n = _sms[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return n


def _tensor_source(v, what: str, device: torch.device):
    """(kernel pointer tensor or None, value, tensor_src) of a given static/global scale, without a host sync:
    a device tensor is read by the kernel, a number or CPU tensor becomes a kernel argument."""
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ShapeError(f"{what} must hold one value, got shape {tuple(v.shape)}")
        if v.is_cuda:
            return v.detach().reshape(1).to(device=device, dtype=torch.float32), 0.0, _FROM_POINTER
        return None, float(v.detach().reshape(()).to(torch.float32)), _FROM_VALUE
    return None, float(torch.tensor(v, dtype=torch.float32)), _FROM_VALUE


def _check_out(out, shapes_dtypes) -> list[torch.Tensor | None]:
    got = list(out) + [None] * (3 - len(out))
    for t, (shape, dtype, name) in zip(got, shapes_dtypes):
        if shape is None:
            if t is not None:
                raise ShapeError(f"out: this scheme has no {name}")
            continue
        if t is None or tuple(t.shape) != shape or t.dtype != dtype or not t.is_cuda or not t.is_contiguous():
            raise ShapeError(f"out: {name} must be a contiguous CUDA {dtype} tensor of shape {list(shape)}")
    return got


_WIDE_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16"}


def _wide_name(sch: Scheme, codes_as: torch.dtype | None) -> str:
    if codes_as is None:
        return ""
    from humming.core.actquant.generator import WIDE_CODE_VALUES

    if codes_as not in _WIDE_NAMES or sch.act not in WIDE_CODE_VALUES:
        raise ShapeError(f"codes_as={codes_as}: {sch.act} codes are written as float16 or bfloat16 values only for "
                         f"{', '.join(WIDE_CODE_VALUES)} activations")
    return _WIDE_NAMES[codes_as]


def _widened(qa: QuantizedActivation, codes_as: torch.dtype | None) -> QuantizedActivation:
    """The reference's result with the codes replaced by their exact values in ``codes_as`` (when given)."""
    if codes_as is None or not isinstance(qa, QuantizedActivation):
        return qa
    from humming.core.routes.widened_ranges import CODE_DTYPES

    qa.codes = qa.codes.view(CODE_DTYPES[qa.format]).to(codes_as)
    return qa


def quantize_activation_cuda(x: torch.Tensor, scheme, *, scale=None, global_scale=None, profile=None,
                             out: tuple | None = None, codes_as: torch.dtype | None = None):
    """Quantize activations ``x [..., K]`` as ``scheme`` says; equal, bit for bit (codes, scales, global scale),
    to ``humming.quantize_activation(x, scheme, scale=..., global_scale=...)``.

    CUDA tensors of float16 / bfloat16 / float32 run the generated kernel on ``torch.cuda.current_stream()``
    (no host synchronisation; a device-tensor ``scale`` / ``global_scale`` is read by the kernel); anything
    else runs the reference. ``profile``: the profile whose instructions spell the kernel (default: the current
    device's). ``out``: optional ``(codes, scales, global_scale)`` tensors to write into (global_scale None
    unless the scheme is two-level). ``codes_as`` (torch.float16 / torch.bfloat16; int8, e4m3 and e5m2 activations):
    the returned ``codes`` hold each code's exact value in that type instead of its byte, written by the same kernel
    (the widened path of ``humming.core.routes.widened_ranges``).
    """
    sch = _as_scheme(scheme)
    wide = _wide_name(sch, codes_as)
    if sch.act is None:
        return x
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1:
        raise ShapeError(f"activations must be a float tensor [..., K], got {getattr(x, 'dtype', type(x))}")
    dtype = DTYPES.get(x.dtype)
    if not x.is_cuda or dtype is None or x.numel() == 0:
        if out is not None:
            raise ShapeError("out= is only supported for CUDA float16/bfloat16/float32 inputs")
        return _widened(quantize_activation(x, sch, scale=scale, global_scale=global_scale), codes_as)
    a = sch.act_scale
    k = x.shape[-1]
    if a.mode == "dynamic_group" and k % a.group_size:
        raise ShapeError(f"K={k} is not a multiple of the activation group size {a.group_size}")
    x = x.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    device = x.device.index if x.device.index is not None else torch.cuda.current_device()
    caps, run_arch = _resolve(profile, device)
    group = a.group_size if a.mode == "dynamic_group" else (k if a.mode == "dynamic_token" else None)
    vec = choose_vec(dtype, k, group, x.data_ptr() % 16)
    prep = _prepare(caps, run_arch, sch, dtype, k, vec, wide)
    if prep is None:  # no kernel plan (a per-token row too long for registers): the reference is exact too
        if out is not None:
            raise UnsupportedOnDevice(f"no activation-quantization kernel for K={k} ({sch})")
        return _widened(quantize_activation(x, sch, scale=scale, global_scale=global_scale), codes_as)
    plan = prep.plan

    lead = tuple(x.shape[:-1])
    sdt = scale_storage_dtype(a.format)
    scale_shape = () if a.mode == "static_tensor" else lead + ((1,) if a.mode == "dynamic_token" else (k // group,))
    gs_shape = () if a.global_scale else None
    code_dtype = {"": torch.uint8, "f16": torch.float16, "bf16": torch.bfloat16}[wide]
    if out is not None:
        codes, scales, gs = _check_out(out, [(tuple(x.shape), code_dtype, "codes"), (scale_shape, sdt, "scales"),
                                              (gs_shape, torch.float32, "global_scale")])
    else:
        codes = torch.empty(x.shape, dtype=code_dtype, device=x.device)
        scales = torch.empty(scale_shape, dtype=sdt, device=x.device)
        gs = torch.empty((), dtype=torch.float32, device=x.device) if a.global_scale else None
        if _POISON:
            codes.view(torch.uint8).fill_(0xFF)
            scales.reshape(-1).view(torch.uint8).fill_(0xFF)
            if gs is not None:
                gs.fill_(float("nan"))

    from humming.core.runtime.kernel import ptr

    stream = torch.cuda.current_stream(x.device).cuda_stream
    sms = _sm_count(device)
    tensor_ptr, tensor_value, tensor_src = None, 0.0, _FROM_AMAX
    given = scale if a.mode == "static_tensor" else (global_scale if a.global_scale else None)
    if given is not None:
        tensor_ptr, tensor_value, tensor_src = _tensor_source(given, "scale" if a.mode == "static_tensor"
                                                              else "global_scale", x.device)
    elif plan.needs_amax:
        tensor_ptr = torch.zeros(1, dtype=torch.float32, device=x.device)
        prep.amax_kernel.launch(device, (plan.amax_grid(x.numel(), sms), 1, 1), WARPS * 32, stream,
                                [ptr(x), ptr(tensor_ptr), ctypes.c_longlong(x.numel() // plan.vec)])
    args = [ptr(x), ptr(codes), ptr(scales), ptr(gs), ptr(tensor_ptr), ctypes.c_float(tensor_value),
            ctypes.c_int(tensor_src), ctypes.c_longlong(plan.count(x.numel()))]
    prep.kernel.launch(device, (plan.grid(x.numel(), sms), 1, 1), plan.threads, stream, args)
    return QuantizedActivation(codes, scales, gs, formats.get(sch.act).name, a.format, a.mode,
                               a.group_size if a.mode == "dynamic_group" else None, x.dtype)
