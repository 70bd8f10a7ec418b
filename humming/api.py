"""Public entry points: plan, compile and run quantized GEMMs for the current device or a named profile.

    plan = humming.plan("w4a16", m, n, k)           which kernel family, tiles and why (humming.core.registry)
    y = humming.gemm(x, qw)                          the kernel the same choice names, for x's M
    h = prepared(qw, dtype, device); gemm_prepared(x, h)     a weight kept prepared (humming.nn.QuantLinear)

A call flows: gemm -> the weight's prepared Layer (humming.core.runtime.layer) -> per M once: registry.select ->
the family's plan, its packed weights, its compiled kernel -> per call: the activations' step (quantized or not) and
one launch on torch's current stream.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import torch

from humming.core.path_table import path_table  # noqa: F401  (humming.device.info's table)
from humming.core.plan import Plan
from humming.core.problem import dense_problem, scheme_of
from humming.core.quant import arguments
from humming.core.quant.arguments import check_out  # noqa: F401  (re-exported: the out= checks)
from humming.core.quant.experts import dense_only
from humming.core.quant.group_checks import group_size_override
from humming.core.registry import select
from humming.core.runtime import compiled
from humming.core.runtime.launch import tma_boxes  # noqa: F401  (tools read the plans' tensor maps)
from humming.core.runtime.layer import LAYERS as _registry  # noqa: F401  (handles: indices into it)
from humming.core.runtime.layer import Layer, kept_prepared, register
from humming.devices.current import live_arch, resolve_profile  # noqa: F401  (re-exported)
from humming.errors import ShapeError  # noqa: F401  (re-exported)
from humming.options import resolve as resolve_options


def plan(scheme, m: int, n: int, k: int, profile=None, act: str = "f16", group_size: int | None = None,
         options=None) -> Plan:
    """The plan humming.gemm runs for C[M, N] = A[M, K] @ W[N, K]^T of a scheme on a profile (default: the current
    device): the kernel family the registry chooses, its tiles and the reason for each choice. ``act``: the 16-bit
    type of the activations and the output; ``options``: numerics (humming.GemmOptions). M, N and K are ints in
    [1, 2**31 - 1] and ``group_size`` a positive int or None (ShapeError / SchemeError naming the fix otherwise)."""
    m, n, k = arguments.dimensions(m, n, k)
    sch = scheme_of(scheme)
    group_size = group_size_override(group_size, sch, k)
    caps = resolve_profile(profile)
    if group_size is not None:
        sch = sch.with_(group_size=group_size)
    return select(dense_problem(sch, m, n, k, act, resolve_options(options)), caps).plan


def source(p: Plan, profile=None) -> str:
    """The generated CUDA C++ of a plan."""
    return compiled.source(p, resolve_profile(profile or p.profile))


def compile_plan(p: Plan, profile=None, run_arch: str | None = None):
    """Generate, compile (NVRTC, cached) and load the kernel of a plan: (LoadedKernel, CompiledModule or None).
    ``run_arch`` compiles it for another target (a profile emulated on the live GPU)."""
    return compiled.compile_plan(p, resolve_profile(profile or p.profile), run_arch)


def prepared(qw, dtype: torch.dtype, device, profile=None, options=None) -> int:
    """The handle of ``qw`` prepared for (activation dtype, device, profile, options): made once, kept on the
    weight. ``qw``: a dense QuantizedWeight whose N and K are multiples of 16 (others than multiples of 64 are padded to whole
    weight tiles here, once: humming.core.quant.padding);
    ``dtype``: torch.float16 or torch.bfloat16; ``device``: where the kernels run. A weight elsewhere is copied to
    ``device`` once and the copy kept with the handle (humming.gemm, finding no preparation for x's device,
    refuses x on another device than the weight). ShapeError naming the fix otherwise."""
    arguments.quantized_weight(qw, "humming.api.prepared")
    dense_only(qw, "humming.api.prepared")
    device = arguments.prepare_args(dtype, device, "humming.api.prepared")
    return kept_prepared(qw, "_humming_prepared", dtype, device, profile, options, lambda dt, dev: register(
        Layer(qw, dt, dev, resolve_profile(profile), resolve_options(options))))


def plan_for(handle: int, m: int) -> Plan:
    """The plan a prepared weight runs M with."""
    return _registry[handle].plan_for(m)


@torch.library.custom_op("humming::gemm", mutates_args=())
def _gemm_op(x: torch.Tensor, bias: torch.Tensor | None, gscale: torch.Tensor | None, handle: int) -> torch.Tensor:
    """One GEMM of the prepared weight ``handle`` as traced graphs call it (every scheme: quantized activations are
    quantized inside), in x's dtype."""
    y = _registry[handle].run(x, bias, gscale)
    return y if y.dtype == x.dtype else y.to(x.dtype)


@_gemm_op.register_fake
def _(x, bias, gscale, handle):
    return x.new_empty((x.shape[0], _registry[handle].n))


def gemm_prepared(x: torch.Tensor, handle: int, bias: torch.Tensor | None = None,
                  gscale: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """The hot path once a weight is prepared. Under torch.compile it goes through the ``humming::gemm`` custom op
    (every scheme), which traces. ``out``: where the result goes (``check_out``), returned.
    ``bias``: None or float16 / bfloat16 / float32 [N] on x's device (ShapeError / DeviceMismatchError otherwise)."""
    if bias is not None:
        arguments.bias(bias, x, _registry[handle].n, "humming.api.gemm_prepared")
    if out is not None:
        check_out(out, x, _registry[handle].n, kernel_writes=not torch.compiler.is_compiling())
    return _run(x, handle, bias, gscale, out)


def _run(x: torch.Tensor, handle: int, bias, gscale, out) -> torch.Tensor:
    """gemm_prepared with ``out`` already checked."""
    lay = _registry[handle]
    n = lay.n
    flat = x.dim() == 2  # the common case needs no reshape/view (each costs host time on every call)
    x2 = x if flat else x.reshape(-1, lay.k)
    m = x2.shape[0]
    if m > arguments.MAX_DIM:  # (the kernels take M as a C int)
        arguments.rows(m)
    if m == 0:  # no tokens (an empty batch in a server): nothing to launch
        return x.new_empty((*x.shape[:-1], n)) if out is None else out
    if torch.compiler.is_compiling():
        b = None if bias is None else bias.to(dtype=x.dtype)
        res = torch.ops.humming.gemm(x2.contiguous(), b, gscale, handle)
        if out is None:
            return res if flat else res.view(*x.shape[:-1], n)
        return out.copy_(res.view(out.shape))  # (the custom op is functional: the traced graph copies)
    y = lay.run(x2, bias, gscale, None if out is None else out if flat else out.view(-1, n))
    if out is not None:
        return out
    if y.dtype != x.dtype:  # (the routes' 16-bit type, where it is not x's)
        y = y.to(x.dtype)
    return y if flat else y.view(*x.shape[:-1], n)


def gemm(x: torch.Tensor, qw, bias: torch.Tensor | None = None, profile=None,
         out: torch.Tensor | None = None, options=None) -> torch.Tensor:
    """y = x @ dequantize(qw)^T (+ bias). CUDA tensors run the generated kernel for the current device (or the
    profile forced by HUMMING_DEVICE_PROFILE / ``profile``); CPU tensors run the reference. ``out``: a tensor of
    shape [*x.shape[:-1], N] with x's dtype and device, contiguous, 16-byte aligned and separate from x, that
    receives the result and is returned (ShapeError otherwise). ``options``: numerics (humming.GemmOptions).

    Checked on the host (humming.core.quant.arguments), each failure a ShapeError naming the fix: ``x`` a
    torch.Tensor [..., K] (float16 or bfloat16 for the kernels, any float for the reference) and ``qw`` a dense
    QuantizedWeight, both on one device (DeviceMismatchError otherwise: x on the CPU never silently runs the
    reference for GPU weights, nor is a CPU weight silently copied to x's GPU); in full on the first call for a
    (weight, dtype, device), by isinstance and shape on later ones. ``bias`` (every call): None or a 1-D float16 /
    bfloat16 / float32 tensor of N elements on x's device. A non-contiguous or misaligned x or bias is copied (the
    kernels read contiguous rows), not refused."""
    if not isinstance(x, torch.Tensor):
        arguments.activation(x, "humming.gemm")
    try:
        cache = qw.__dict__.get("_humming_prepared")
    except AttributeError:  # (not a QuantizedWeight: the checks below name it)
        cache = None
    handle = cache.get((x.dtype, x.device, profile, options)) if cache else None
    if handle is None:
        arguments.quantized_weight(qw, "humming.gemm")
        arguments.activation(x, "humming.gemm")
        dense_only(qw, "humming.gemm")
        n, k = qw.shape
        if x.shape[-1] != k:
            raise arguments.features_error(x, k)
        arguments.weight_device(qw, x, "humming.gemm")
        arguments.weight_tensors_device(qw, "humming.gemm")
        arguments.bias(bias, x, n, "humming.gemm")
        if out is not None:
            check_out(out, x, n)
        if not x.is_cuda:
            from humming.core.quant.reference import reference_gemm

            arguments.reference_activation(x, "humming.gemm")
            y = reference_gemm(x, qw, bias=bias)
            return y if out is None else out.copy_(y)
        arguments.kernel_activation(x, "humming.gemm")
        handle = prepared(qw, x.dtype, x.device, profile, options)
        cache = qw.__dict__["_humming_prepared"]
        cache[(x.dtype, x.device, profile, options)] = handle  # (x.device as given: the hot path's key)
        return _run(x, handle, bias, None, out)
    if x.shape[-1:] != qw.shape[1:]:  # (a 0-d x included)
        raise arguments.features_error(x, qw.shape[1])
    if bias is not None:
        arguments.bias(bias, x, qw.shape[0], "humming.gemm")
    if out is not None:
        check_out(out, x, qw.shape[0], kernel_writes=not torch.compiler.is_compiling())
    return _run(x, handle, bias, None, out)


def warmup(qw, dtype: torch.dtype, ms, device=None, profile=None, workers: int | None = None) -> list:
    """Plan every M in ``ms`` for a weight and compile the distinct kernels in parallel (NVRTC releases the GIL).
    Returns the CompiledModules (cache hits included). Each M is an int in [1, 2**31 - 1] (ShapeError otherwise)."""
    arguments.quantized_weight(qw, "humming.api.warmup")
    ms = [arguments.dimension("M", m) for m in ms]
    lay = _registry[prepared(qw, dtype, torch.device(device or "cuda"), profile)]
    unique: dict[str, Plan] = {}
    for m in ms:
        p = lay.plan_for(m)
        unique.setdefault(p.kernel_name, p)
    with ThreadPoolExecutor(max_workers=workers or min(16, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda p: compiled.compile_plan(p, lay.caps, lay.run_arch)[1], unique.values()))
    return [r for r in results if r is not None]  # vendor-compiled kernels carry no NVRTC module

