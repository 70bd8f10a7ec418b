"""Public entry points: plan, compile and run quantized GEMMs for the current device or a named profile."""
from __future__ import annotations

import contextlib
import contextvars
import math
import os
import threading
from dataclasses import dataclass, field

import torch

from humming import settings
from humming.core.common import act_widen as widen
from humming.core.common.layout import PackedWeight, act_name, layout_for, prepare
from humming.core.families.mma_wna16.generator import kernel_source
from humming.core.plan import Plan, plan_wna16
from humming.core.tuning import knobs
from humming.core.tuning.entries import choose_plan
from humming.errors import HummingError, SchemeError, ShapeError, UnsupportedOnDevice
from humming.options import DEFAULT as DEFAULT_OPTIONS
from humming.options import resolve as resolve_options

_lock = threading.Lock()
_POISON = False  # tests set it: outputs are filled with NaN before each launch
# numerics options of the call being served (gemm / plan set them for the call; humming.options.GemmOptions)
_options: contextvars.ContextVar = contextvars.ContextVar("humming_gemm_options", default=DEFAULT_OPTIONS)


def resolve_profile(profile=None):
    """A Capabilities object from a profile, a profile name, or (None) the current device."""
    if profile is None:
        from humming.device import current_profile

        return current_profile()
    if isinstance(profile, str):
        from humming.capabilities import get_profile

        return get_profile(profile)
    return profile


def _scheme(scheme):
    if isinstance(scheme, str):
        from humming.schemes import get

        return get(scheme)
    return scheme


@contextlib.contextmanager
def _using(options):
    """The call's numerics options (humming.options.GemmOptions) for the functions below it."""
    opts = resolve_options(options)
    if opts is _options.get():
        yield opts
        return
    token = _options.set(opts)
    try:
        yield opts
    finally:
        _options.reset(token)


def plan(scheme, m: int, n: int, k: int, profile=None, act: str = "f16", group_size: int | None = None,
         options=None) -> Plan:
    """Plan C[M, N] = A[M, K] @ W[N, K]^T for a scheme on a profile (default: the current device).
    ``act`` is the 16-bit type of the activations (and of the output). Schemes that quantize activations
    get the plan of the kernel that runs their path, or UnsupportedOnDevice saying which path is planned
    but not generated yet. ``options``: numerics (humming.GemmOptions)."""
    with _using(options):
        return _plan(scheme, m, n, k, profile, act, group_size)


def _plan(scheme, m: int, n: int, k: int, profile, act: str, group_size: int | None) -> Plan:
    caps = resolve_profile(profile)
    sch = _scheme(scheme)
    if group_size is not None:
        sch = sch.with_(group_size=group_size)
    if getattr(sch, "act", None):
        return _plan_quantized_act(caps, sch, m, n, k, act)
    if _wgmma_rs_eligible(caps, sch, m, n, k, act):  # M >= 513 (HUMMING_WGMMA_RS): weights as wgmma's register A
        from humming.core.tuning.entries import register_a_prefill_plan

        return register_a_prefill_plan(caps, layout_for(sch, n, k, act, caps=caps), m, act, scheme=sch.name)
    if _wgmma_wna16_eligible(caps, sch, m, n, k, act) and choose_plan(caps, layout_for(sch, n, k, act, caps=caps), m, act,
                                                                      scheme=sch.name).path != "wgmma-rs":
        # unless HUMMING_WGMMA_WNA16=0, and where the small register-A form does not take M: the plan that gemm runs
        from humming.core.families.wgmma_dequant.layout import wgmma_wna16_layout
        from humming.core.families.wgmma_dequant.planner import plan_wna16_wgmma

        return plan_wna16_wgmma(caps, wgmma_wna16_layout(sch, n, k, act), m, act, scheme=sch.name)
    tc = _tcgen05_wna16_eligible(caps, sch, m, n, k, act)  # Blackwell datacenter prefill: compiled, never run
    if tc:
        from humming.core.families.tcgen05.planner import unverified_enabled

        if unverified_enabled():
            from humming.core.families.tcgen05.planner import plan_wna16_tcgen05
            from humming.core.families.wgmma_dequant.layout import wgmma_wna16_layout

            return plan_wna16_tcgen05(caps, wgmma_wna16_layout(sch, n, k, act), m, act, scheme=sch.name)
    layout = layout_for(sch, n, k, act, caps=caps)
    p = choose_plan(caps, layout, m, act, scheme=sch.name)
    if tc:  # today's kernel runs it; the reason says which kernel would with the variable set
        from dataclasses import replace as _replace

        from humming.core.families.tcgen05.planner import wna16_unverified_note

        p = _replace(p, reasons=p.reasons + (wna16_unverified_note(caps),))
    return p


def _plan_quantized_act(caps, sch, m: int, n: int, k: int, act: str) -> Plan:
    from humming.core.common.layout import W4A8Layout, W8A8Layout
    from humming.core.common.paths import choose_path, runnable_path
    from humming.core.plan import plan_w8a8

    if widen.applies(caps, sch, m, n, k, _options.get().act_widen):  # 8-bit codes widened onto the WnA16 kernels
        return _plan_widened(caps, sch, m, n, k, act)
    ideal = choose_path(caps, sch)
    if ideal.family == "mma_sync" and ideal.path == "native" and getattr(ideal.instruction, "scale_format", None):
        # W4A4 NVFP4/MXFP4 on the block-scaled mma.sync kernel (sm_120a/121a): planned always; run only with
        # HUMMING_UNVERIFIED_KERNELS=1 (the plan's reasons say so)
        from humming.core.families.mma_blockscaled.layout import BlockScaledLayout, recipe_of
        from humming.core.families.mma_blockscaled.planner import plan_blockscaled

        return plan_blockscaled(caps, BlockScaledLayout(recipe_of(sch), n, k), m, act, ideal, scheme=sch.name)
    if ideal.family == "tcgen05":
        # W8A8 and W4A4 (NVFP4/MXFP4) on the tcgen05 kernels (Blackwell datacenter): planned always where they
        # apply; run only with HUMMING_UNVERIFIED_KERNELS=1 (the plan's reasons say so)
        from humming.core.families.tcgen05.planner import tcgen05_kernel

        which = tcgen05_kernel(ideal, sch, caps)
        if which == "w8a8" and n % 128 == 0 and k % 128 == 0:
            from humming.core.families.tcgen05.planner import plan_w8a8_tcgen05
            from humming.core.families.wgmma_8bit.layout import WgmmaW8A8Layout

            p = plan_w8a8_tcgen05(caps, WgmmaW8A8Layout(ideal.a_type, n, k, sch.weight_scale.granularity), m, act,
                                  scheme=sch.name)
            return Plan(**{**p.__dict__, "reasons": ideal.reasons + p.reasons})
        if which == "blockscaled" and n % 128 == 0 and k % 256 == 0:
            from humming.core.families.mma_blockscaled.layout import Tcgen05BlockScaledLayout, recipe_of
            from humming.core.families.tcgen05.planner import plan_blockscaled_tcgen05

            return plan_blockscaled_tcgen05(caps, Tcgen05BlockScaledLayout(recipe_of(sch), n, k), m, act, ideal,
                                            scheme=sch.name)
        if which == "w4a8" and n % 128 == 0 and k % 128 == 0:  # MXFP4 x FP8: kind::mxf8f6f4 e4m3 x e2m1
            from humming.core.families.mma_blockscaled.layout import Tcgen05BlockScaledLayout
            from humming.core.families.tcgen05.planner import plan_blockscaled_tcgen05

            return plan_blockscaled_tcgen05(caps, Tcgen05BlockScaledLayout("mxfp4", n, k, a_type="e4m3"), m, act,
                                            ideal, scheme=sch.name)
    choice = runnable_path(caps, sch)
    if choice.family == "tcgen05":  # HUMMING_UNVERIFIED_KERNELS=1 but the shape does not fit the tcgen05 tile
        choice = choose_path(caps, sch, families=("mma_sync",))
    if _runs_on_w8a8(choice, sch):
        if _wgmma_rs8_eligible(caps, choice, sch, m, n, k):  # HUMMING_WGMMA_W4A8_RS=1: int4 weights as register A
            from humming.core.families.register_a8.layout import WgmmaRs8Layout, rs8_group
            from humming.core.families.register_a8.planner import plan_w4a8_wgmma_rs

            layout = WgmmaRs8Layout(choice.a_type, n, k, rs8_group(sch, k), fast_accum=_rs8_fast_accum(choice),
                                    widen=_w4a8_widen(choice))
            p = plan_w4a8_wgmma_rs(caps, layout, m, act, scheme=sch.name)
            return Plan(**{**p.__dict__, "reasons": choose_path(caps, sch).reasons + p.reasons})
        if sch.weight in ("int4", "e2m1") and _wgmma_eligible(caps, choice, sch, m, n, k):  # W4A8 on wgmma
            from humming.core.families.wgmma_8bit.layout import WgmmaW4A8Layout, wgmma_w4a8_group
            from humming.core.families.wgmma_8bit.planner import plan_w4a8_wgmma

            layout = WgmmaW4A8Layout(choice.a_type, n, k, wgmma_w4a8_group(sch, k), weight_format=sch.weight)
            p = plan_w4a8_wgmma(caps, layout, m, act, scheme=sch.name)
            return Plan(**{**p.__dict__, "reasons": choose_path(caps, sch).reasons + p.reasons})
        if sch.weight in ("int4", "e2m1"):
            layout = W4A8Layout(choice.a_type, n, k, sch.weight_scale.group_size or k, weight_format=sch.weight,
                                widen=_w4a8_widen(choice, sch.weight))
        elif _wgmma_eligible(caps, choice, sch, m, n, k):  # unless HUMMING_WGMMA=0: the plan that gemm runs
            from humming.core.families.wgmma_8bit.layout import WgmmaW8A8Layout
            from humming.core.families.wgmma_8bit.planner import plan_w8a8_wgmma

            gran = sch.weight_scale.granularity
            layout = WgmmaW8A8Layout(choice.a_type, n, k, gran,
                                     fast_accum=_wgmma_fast_accum() and choice.a_type == "e4m3" and gran != "block")
            p = plan_w8a8_wgmma(caps, layout, m, act, scheme=sch.name)
            return Plan(**{**p.__dict__, "reasons": choose_path(caps, sch).reasons + p.reasons})
        else:
            layout = W8A8Layout(choice.a_type, n, k, sch.weight_scale.granularity)
        return plan_w8a8(caps, layout, m, act, choice, scheme=sch.name)
    if choice.path == "upconvert":
        p = choose_plan(caps, layout_for(sch.with_(act=None), n, k, choice.a_type, caps=caps), m, choice.a_type, scheme=sch.name)
        return Plan(**{**p.__dict__, "reasons": choice.reasons + p.reasons})
    raise UnsupportedOnDevice(
        f"{sch.name} on {caps.name}: planned path {choice.path} ({choice.describe()}); this kernel is not generated "
        f"yet, humming.reference_gemm runs the scheme"
    )


def source(p: Plan, profile=None) -> str:
    """The generated CUDA C++ of a plan."""
    from humming.devices import get_backend

    caps = resolve_profile(profile or p.profile)
    return kernel_source(p, get_backend(caps), caps)


# ---------------------------------------------------------------- compile
_compiled: dict[tuple[str, str], object] = {}
_compile_locks: dict[tuple, threading.Lock] = {}  # one per kernel: a kernel is compiled once per process


def live_arch() -> str | None:
    """The compile target of the GPU this process runs on (None without one)."""
    from humming.capabilities import match_device
    from humming.device import current_device

    dev = current_device()
    return None if dev is None else match_device(dev).profile.target.arch


def compile_plan(p: Plan, profile=None, run_arch: str | None = None):
    """Generate, compile (NVRTC, cached) and wrap the kernel of a plan. Returns (LoadedKernel, CompiledModule).

    ``run_arch`` compiles the plan's source for another target: used to *emulate* a profile on the live GPU
    (a kernel planned for the T4 profile, spelled with its instructions, compiled to run on an H200)."""
    caps = resolve_profile(profile or p.profile)
    key = (caps.name, p.kernel_name, run_arch)
    hit = _compiled.get(key)
    if hit is not None:
        return hit
    with _lock:
        kernel_lock = _compile_locks.setdefault(key, threading.Lock())
    with kernel_lock:  # a caller that needs a kernel being compiled (e.g. in the background) waits for that compile
        hit = _compiled.get(key)
        if hit is not None:
            return hit
        return _compile_plan_now(p, caps, key, run_arch)


def _compile_plan_now(p: Plan, caps, key: tuple, run_arch: str | None):
    from humming.core.compile.compiler import compile_cuda
    from humming.core.runtime.kernel import LoadedKernel
    from humming.devices import get_backend

    backend = get_backend(caps)
    route = backend.compile_route(caps)
    source = kernel_source(p, backend, caps)
    if route.compiler == "vendor_nvcc" and not run_arch:
        entry = (LoadedKernel(backend.compile_source(source, caps, route), p.kernel_name, p.smem_bytes), None)
    else:
        if route.compiler != "nvrtc" and not run_arch:
            raise UnsupportedOnDevice(f"{caps.name}: compile route {route.compiler} has no runner here ({route.reason})")
        module = compile_cuda(
            source, [p.kernel_name], run_arch or route.arch,
            options=route.options if route.compiler == "nvrtc" else (),
            min_nvrtc=None if run_arch else route.min_nvrtc,
        )
        entry = (LoadedKernel(module.cubin, p.kernel_name, p.smem_bytes), module)
    with _lock:
        _compiled[key] = entry
    return entry


# ---------------------------------------------------------------- run
@dataclass
class _Prepared:
    packed: PackedWeight
    caps: object
    plans: dict
    run_arch: str | None = None
    launches: dict = field(default_factory=dict)  # m -> _LaunchSpec
    plan_fn: object = None  # m -> Plan, for kernels other than WnA16
    scheme: str = ""  # the scheme's name: tuned entries of that scheme win over other schemes of the same layout
    row_twin: int | None = None  # the handle of the same weights whose plans take per-token scales (_row_scaled)
    wgmma_gate: tuple | None = None  # (wgmma_wna16.enabled, register_a.min_m), read on the first call with M >= 128


@dataclass
class _LaunchSpec:
    """Everything a launch for one M needs, computed once: the hot path only fills in three pointers."""

    plan: Plan
    kernel: object
    static_args: object  # runtime.ArgBlock with every parameter; tensor slots are rewritten per call
    keep: tuple = ()
    grid: tuple = ()  # plan.grid and plan.threads, read once
    threads: int = 0
    weights: tuple = ()  # the weight-side tensors whose pointers are in the slots (compared by identity)
    xmap: object = None  # runtime.TensorMap2D of the activations where the kernel reads them by TMA (slot 15)
    wmap: object = None  # ... of the weights (slot 16), encoded when the weight tensor changes
    pdl: bool = False  # launched with programmatic stream serialization (plan.pdl)
    cluster: tuple | None = None  # the thread-block cluster shape (plan.cluster_dims) or None
    fire: object = None  # runtime.LoadedKernel.launcher for this spec's device: launches on a given stream
    ws_stream: int | None = None  # the stream whose workspace the slots point at (split kernels; None: no workspace)

    def __post_init__(self):
        self.grid, self.threads, self.pdl = self.plan.grid, self.plan.threads, self.plan.pdl
        self.cluster = self.plan.cluster_dims


_registry: list[_Prepared] = []
# Split-K partials and tile counters, one pair per (device index, stream): GEMMs running at the same time on two
# streams must not share them (a counter summed by two launches; the stream-K form's finishing block would wait for
# a count it never sees). A CUDA graph keeps the workspace of the stream it was captured on.
_workspaces: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
# Workspaces replaced by larger ones stay allocated: a CUDA graph captured earlier holds their addresses.
_retired_workspaces: list[tuple[torch.Tensor, torch.Tensor]] = []


def _plan_widened(caps, sch, m: int, n: int, k: int, act: str) -> Plan:
    """The plan ``_gemm_widened`` runs: the weight-only plan of the 16-bit activation type, row-scaled for
    per-token activation scales."""
    from dataclasses import replace as _replace

    act16 = act_name(widen.act_dtype(caps, torch.bfloat16 if act == "bf16" else torch.float16))
    p = _plan(sch.with_(act=None), m, n, k, caps, act16, None)
    if p.path == "wgmma-dequant-smem":  # _gemm_widened keeps the mma.sync handle's plan there (no row scales)
        p = choose_plan(caps, layout_for(sch.with_(act=None), n, k, act16, caps=caps), m, act16, scheme=sch.name)
    return _replace(p, scheme=sch.name, row_scale=sch.act_scale.mode == "dynamic_token",
                    reasons=(widen.reason(caps, sch, m, n, k, _options.get().act_widen),) + p.reasons)


def _workspace(device: torch.device, floats: int, counters: int, stream: int | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The (partials, counters) workspace of ``stream`` (default: the current one) on ``device``, grown to at least
    ``floats`` and ``counters`` (counters zeroed when made; kernels leave them zero)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    key = (idx, _current_stream(idx) if stream is None else stream)
    ws, cnt = _workspaces.get(key, (None, None))
    if ws is None or ws.numel() < floats or cnt.numel() < counters:
        if ws is not None:
            _retired_workspaces.append((ws, cnt))
        floats = max(floats, 0 if ws is None else ws.numel(), 1 << 20)
        counters = max(counters, 0 if cnt is None else cnt.numel(), 1 << 14)
        ws = torch.empty(floats, dtype=torch.float32, device=device)
        cnt = torch.zeros(counters, dtype=torch.int32, device=device)  # counters reset themselves after use
        _workspaces[key] = (ws, cnt)
    return ws, cnt


def plan_for(handle: int, m: int) -> Plan:
    prep = _registry[handle]
    p = prep.plans.get(m)
    if p is None:
        if prep.plan_fn is not None:
            p = prep.plan_fn(m)
        else:
            p = choose_plan(prep.caps, prep.packed.layout, m, prep.packed.layout.decode.act, scheme=prep.scheme)
        prep.plans[m] = p
    return p


# kernel parameters: A B S Z CS BIAS C WS CNT M N K k_per_split out_scale GS
_PARAM_KINDS = "ppppppppp" + "iiii" + "f" + "p"
_WEIGHT_SLOTS = (1, 2, 3, 4, 5)  # B S Z CS BIAS: rewritten only when other tensor objects are passed
# (A, C and GS, slots 0, 6 and 14, are written on every call)


def _launch_spec(handle: int, m: int, device: torch.device) -> _LaunchSpec:
    from humming.core.runtime.kernel import ArgBlock

    prep = _registry[handle]
    spec = prep.launches.get(m)
    if spec is None:
        p = plan_for(handle, m)
        kernel, _ = compile_plan(p, prep.caps, prep.run_arch)
        if not prep.launches:  # first launch of this weight: its other bucket kernels compile in the background,
            from humming.aot import precompile_on_first_launch  # after this call's own (no compile competes with it)

            precompile_on_first_launch(handle, m, p)
        n, k = p.n, p.k
        grid = p.grid
        stream = _current_stream(device.index if device.index is not None else torch.cuda.current_device())
        ws, cnt = _workspace(device, p.workspace_floats, grid[0] * grid[1], stream)
        values = [0] * 7 + [ws.data_ptr(), cnt.data_ptr(), m, n, k, k // grid[2], prep.packed.out_scale, 0]
        x_box, w_box = tma_boxes(p)
        maps = [b for b in (x_box, w_box) if b is not None]
        spec = _LaunchSpec(p, kernel, ArgBlock(_PARAM_KINDS + "t" * len(maps), values + [None] * len(maps)))
        if maps:  # the kernel reads its operands through TMA tensor maps (its last parameters)
            from humming.core.runtime.kernel import TensorMap2D

            spec.xmap = TensorMap2D(*x_box)
            spec.wmap = TensorMap2D(*w_box) if w_box else None
        spec.keep = (ws, cnt)  # the workspace outlives the spec that points at it
        if p.workspace_floats:
            spec.ws_stream = stream
        prep.launches[m] = spec
    return spec


def tma_boxes(p: Plan) -> tuple[tuple | None, tuple | None]:
    """The TMA tensor maps the plan's kernel takes after its usual parameters, as TensorMap2D arguments (rows, cols,
    box rows, box cols, element bytes[, swizzle]): (activations or None, weights or None). The register-A kernels
    read the activations [M, K] so; the TMA W8A8 / W4A8 kernels also the weights [N, K] (or packed [N, K/2])."""
    t = p.tiles
    if p.path == "wgmma-rs" and t.bulk:
        return (p.m, p.k, t.bm, t.bk, 2), None
    if p.path == "wgmma-rs8" and t.bulk:  # activation codes [M, K] bytes
        return (p.m, p.k, t.bm, t.bk, 1), None
    if p.family == "wgmma" and p.is_8bit and t.bulk:
        if getattr(p.layout, "weight_bits", 8) == 4:  # packed 4-bit weights [N, K/2]: dense 64-byte box rows
            return (p.m, p.k, t.bm, t.bk, 1), (p.n, p.k // 2, t.bn, t.bk // 2, 1, 0)
        return (p.m, p.k, t.bm, t.bk, 1), (p.n, p.k, t.bn, t.bk, 1)
    return None, None


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(device: int) -> int:
    """The handle of torch's current stream on ``device`` (the raw accessor skips building a Stream object)."""
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(device).cuda_stream


def _launch(handle: int, x: torch.Tensor, qweight, scales, zeros, chan, bias, gscale=None,
            out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """One kernel launch for x's M; ``out``: a checked [M, N] output of the caller's (check_out) instead of a new one."""
    m = x.shape[0]
    spec = _registry[handle].launches.get(m) or _launch_spec(handle, m, x.device)
    # new_empty and get_device skip building and parsing torch.device objects (host time on every call)
    if out is None:
        out = x.new_empty((m, spec.plan.n)) if out_dtype is None else x.new_empty((m, spec.plan.n), dtype=out_dtype)
    if _POISON:
        out.fill_(float("nan"))
    device = x.get_device()
    stream = _current_stream(device)
    block = spec.static_args
    slots = block.slots
    with block.lock:  # the slots are shared by every call of this (weight, M); the driver copies them at launch
        if spec.ws_stream is not None and spec.ws_stream != stream:  # a split kernel on another stream: its workspace
            ws, cnt = _workspace(x.device, spec.plan.workspace_floats, spec.grid[0] * spec.grid[1], stream)
            slots[7].value, slots[8].value = ws.data_ptr(), cnt.data_ptr()  # (_workspaces keeps them allocated)
            spec.ws_stream = stream
        slots[0].value = x.data_ptr()
        slots[6].value = out.data_ptr()
        if spec.xmap is not None and spec.xmap.address != slots[0].value:
            spec.xmap.encode(slots[15], slots[0].value)
        slots[14].value = None if gscale is None else gscale.data_ptr()
        w = spec.weights  # the weight-side tensor objects of the last call (identity: they are kept alive here)
        if not (w and w[0] is qweight and w[1] is scales and w[2] is zeros and w[3] is chan and w[4] is bias):
            w = spec.weights = (qweight, scales, zeros, chan, bias)
            for slot, t in zip(_WEIGHT_SLOTS, w):
                slots[slot].value = None if t is None else t.data_ptr()
            if spec.wmap is not None:
                spec.wmap.encode(slots[16], slots[1].value)
        fire = spec.fire
        if fire is None:  # built once per (weight, M): grid, block, attributes and argument block are fixed
            fire = spec.fire = spec.kernel.launcher(device, spec.grid, spec.threads, block, spec.pdl, spec.cluster)
        fire(stream)
    return out


@torch.library.custom_op("humming::wna16_gemm", mutates_args=())
def _wna16_gemm_op(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor | None,
    zeros: torch.Tensor | None,
    chan: torch.Tensor | None,
    bias: torch.Tensor | None,
    gscale: torch.Tensor | None,
    handle: int,
) -> torch.Tensor:
    return _launch(handle, x, qweight, scales, zeros, chan, bias, gscale)


@_wna16_gemm_op.register_fake
def _(x, qweight, scales, zeros, chan, bias, gscale, handle):
    return x.new_empty((x.shape[0], _registry[handle].packed.layout.n))


def _register_planned(packed, caps, run_arch: str | None, planner, act: str, scheme: str, *extra) -> int:
    """Register a repacked weight whose plan for M is ``planner(caps, packed.layout, M, act, *extra, scheme=scheme)``
    (the kernels other than the mma.sync WnA16 ones, which plan through the tuning cache)."""
    def plan_fn(m: int):
        return planner(caps, packed.layout, m, act, *extra, scheme=scheme)

    return _register(packed, caps, run_arch, plan_fn)


def _register(packed, caps, run_arch: str | None, plan_fn=None, scheme: str = "") -> int:
    """Add a repacked weight to the registry (thread-safe); returns its handle."""
    with _lock:
        _registry.append(_Prepared(packed, caps, {}, run_arch, plan_fn=plan_fn, scheme=scheme))
        return len(_registry) - 1


def _emulation_arch(caps) -> str | None:
    """The live GPU's target when it is not the profile's own (the profile is emulated there), else None."""
    live = live_arch()
    return live if live and live != caps.target.arch else None


def prepared(qw, dtype: torch.dtype, device: torch.device, profile=None) -> int:
    """Repack (once per dtype and device) and register a QuantizedWeight; returns a handle."""
    cache = qw.__dict__.setdefault("_humming_prepared", {})
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (dtype, device, profile)
    handle = cache.get(key)
    if handle is None:
        caps = resolve_profile(profile)
        run_arch = _emulation_arch(caps)
        packed = prepare(qw.to(device), dtype, caps)
        handle = _register(packed, caps, run_arch, scheme=getattr(qw.scheme, "name", "") or "")
        cache[key] = handle
    return handle


def gemm_prepared(x: torch.Tensor, handle: int, bias: torch.Tensor | None = None,
                  gscale: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """The hot path once a weight is prepared: reshape, optional act-order gather, one kernel launch.
    Under torch.compile it goes through the ``humming::wna16_gemm`` custom op, which traces. ``out``: where the
    result goes (``humming.gemm``'s checks: shape [*x.shape[:-1], N], x's dtype and device, contiguous, 16-byte
    aligned, not overlapping x), returned; by default a new tensor."""
    if out is not None:
        check_out(out, x, _registry[handle].packed.layout.n, kernel_writes=not torch.compiler.is_compiling())
    return _gemm_prepared(x, handle, bias, gscale, out)


def _gemm_prepared(x: torch.Tensor, handle: int, bias: torch.Tensor | None, gscale: torch.Tensor | None,
                   out: torch.Tensor | None) -> torch.Tensor:
    """gemm_prepared with ``out`` already checked (check_out) by the caller."""
    packed = _registry[handle].packed
    n, k = packed.layout.n, packed.layout.k
    compiling = torch.compiler.is_compiling()
    flat = x.dim() == 2  # the common case needs no reshape/view (each costs host time on every call)
    x2 = x if flat else x.reshape(-1, k)
    if x2.shape[0] == 0:  # no tokens (an empty batch in a server): nothing to launch
        return x.new_empty((*x.shape[:-1], n)) if out is None else out
    if packed.perm is not None:
        x2 = x2.index_select(1, packed.perm)
    b = packed.bias if bias is None else bias.to(dtype=x.dtype).contiguous()
    if compiling:
        x2 = x2.contiguous()
        res = torch.ops.humming.wna16_gemm(x2, packed.qweight, packed.scales, packed.zeros, packed.channel_scale, b,
                                           gscale, handle)
        if out is None:
            return res if flat else res.view(*x.shape[:-1], n)
        return out.copy_(res.view(out.shape))  # (the custom op is functional: the traced graph copies)
    if x2.data_ptr() % 16 or not x2.is_contiguous():  # 16-byte rows for the vector and bulk copies
        x2 = x2.clone(memory_format=torch.contiguous_format)  # (contiguous() keeps a misaligned view)
    res = _launch(handle, x2, packed.qweight, packed.scales, packed.zeros, packed.channel_scale, b, gscale,
                  out=None if out is None else out if flat else out.view(-1, n))
    if out is not None:
        return out
    return res if flat else res.view(*x.shape[:-1], n)


def check_out(out: torch.Tensor, x: torch.Tensor, n: int, kernel_writes: bool = True) -> None:
    """The checks of an ``out=`` argument: a tensor of shape [*x.shape[:-1], N] with x's dtype and device and, where a
    kernel writes it (``kernel_writes``; under torch.compile the traced graph copies into it), contiguous (the
    kernels write whole rows), its start 16-byte aligned (16-byte stores), and sharing no memory with x (the kernels
    read x while they write). Raises ShapeError naming what is wrong."""
    if not isinstance(out, torch.Tensor):
        raise ShapeError(f"out must be a torch.Tensor, not {type(out).__name__}")
    want = (*x.shape[:-1], n)
    if out.shape != want:
        raise ShapeError(f"out has shape {tuple(out.shape)}; this GEMM writes {want} (x's leading dimensions x N)")
    if out.dtype != x.dtype:
        raise ShapeError(f"out is {out.dtype}; this GEMM writes x's dtype, {x.dtype}")
    if (out.get_device() != x.get_device()) if kernel_writes else (out.device != x.device):  # (ints: no objects)
        raise ShapeError(f"out is on {out.device}, x on {x.device}: give an output on x's device")
    if not kernel_writes:
        return
    if not out.is_contiguous() or out.data_ptr() % 16:
        raise ShapeError("out must be contiguous and start on a 16-byte boundary (the kernels store whole 16-byte "
                         "chunks of rows); e.g. torch.empty(..., device=x.device, dtype=x.dtype)")
    if out.numel() and x.numel():
        o0, x0 = out.data_ptr(), x.data_ptr()
        if o0 < x0 + x.numel() * x.element_size() and x0 < o0 + out.numel() * out.element_size():
            raise ShapeError("out shares memory with x (the kernels read x while they write out): give a separate "
                             "output")


def gemm(x: torch.Tensor, qw, bias: torch.Tensor | None = None, profile=None,
         out: torch.Tensor | None = None, options=None) -> torch.Tensor:
    """y = x @ dequantize(qw)^T (+ bias). CUDA tensors run the generated kernel for the current device
    (or the profile forced by HUMMING_DEVICE_PROFILE / ``profile``); CPU tensors run the reference.
    ``out``: a tensor of shape [*x.shape[:-1], N] with x's dtype and device, contiguous, 16-byte aligned and separate
    from x, that receives the result and is returned (ShapeError otherwise). The weight-only kernels write into it
    directly (no allocation per call); the quantized-activation and reference paths copy their result into it.
    ``options``: numerics of the quantized-activation schemes (humming.GemmOptions)."""
    if options is not None and getattr(qw.scheme, "act", None):
        with _using(options):
            return gemm(x, qw, bias, profile, out)
    cache = qw.__dict__.get("_humming_prepared")
    handle = cache.get((x.dtype, x.device, profile)) if cache else None
    if handle is None:
        n, k = qw.shape
        if x.shape[-1] != k:
            raise ShapeError(f"x has {x.shape[-1]} input features but the weight expects K={k}")
        if out is not None:
            check_out(out, x, n)
        if not x.is_cuda:
            from humming.core.quant.reference import reference_gemm

            y = reference_gemm(x, qw, bias=bias)
            return y if out is None else out.copy_(y)
        if getattr(qw.scheme, "act", None):
            y = _gemm_quantized_act(x, qw, bias, profile, out)
            return y if out is None or y is out else out.copy_(y)
        act_name(x.dtype)
        handle = prepared(qw, x.dtype, x.device, profile)
        return _gemm_prepared(x, _wna16_handle_for(x, qw, profile, handle), bias, None, out)  # (out checked above)
    elif x.shape[-1] != qw.shape[1]:
        raise ShapeError(f"x has {x.shape[-1]} input features but the weight expects K={qw.shape[1]}")
    handle = _wna16_handle_for(x, qw, profile, handle)
    return _gemm_prepared(x, handle, bias, None, None) if out is None else gemm_prepared(x, handle, bias, out=out)


def _wna16_handle_for(x: torch.Tensor, qw, profile, handle: int, row_scale: bool = False) -> int:
    """The WnA16 handle that runs x's M, from the mma.sync / stream handle ``handle`` (prepared weights): the
    register-A wgmma kernel from its threshold (M >= 1024 by default; HUMMING_WGMMA_RS=1: 128, =0: never); below it
    the handle's own plan (stream, tile, or a register-A form), else the dequant-smem wgmma kernel from M 128 where
    that plan is not register-A. ``row_scale``: only kernels that take per-token scales (not the dequant-smem one)."""
    if x.numel() < WGMMA_WNA16_MIN_M * qw.shape[1]:
        return handle
    prep = _registry[handle]
    gate = prep.wgmma_gate
    if gate is None:  # read once per prepared weight (knobs: humming.core.tuning.knobs)
        from humming.core.families.register_a.planner import min_m

        gate = prep.wgmma_gate = (bool(knobs.value("wgmma_wna16.enabled", prep.caps)), min_m(prep.caps))
    if not gate[0]:
        return handle
    lowest = gate[1]
    if lowest is not None and x.numel() >= lowest * qw.shape[1]:
        rs = _wna16_wgmma_rs_handle(x, qw, profile, handle)
        if rs != handle:
            return rs
    if row_scale or plan_for(handle, x.numel() // qw.shape[1]).path == "wgmma-rs":
        return handle
    return _wna16_wgmma_handle(x, qw, profile, handle)


_choices: dict = {}


def _gemm_quantized_act(x: torch.Tensor, qw, bias, profile, out: torch.Tensor | None = None) -> torch.Tensor:
    """Schemes that quantize activations, on the path ``runnable_path`` picks for the profile: the 8-bit kernels
    (W8A8/W4A8: mma.sync, wgmma at M >= 64 on sm_90a, tcgen05 only with HUMMING_UNVERIFIED_KERNELS=1), the
    block-scaled mma.sync kernel (sm_120a, only with HUMMING_UNVERIFIED_KERNELS=1), or *upconvert* (NVFP4/MX):
    activations quantized exactly as the reference does, widened to bf16/f16 without their global scale (exact),
    multiplied by the weight-only kernel of the same weights, global activation scale in the fp32 epilogue.
    128x128-block FP8 (w8a8-fp8-block) runs on the 8-bit kernels with its block scales applied per 128 of K.
    A planned path without a kernel raises UnsupportedOnDevice saying so. ``out`` (checked by the caller): the
    widened path writes into it where its output dtype is x's; the others return a new tensor (gemm copies)."""
    from humming.core.common.paths import runnable_path

    if x.numel() == 0:
        return x.new_empty((*x.shape[:-1], qw.shape[0]))
    caps = resolve_profile(profile)
    n, k = qw.shape
    if widen.applies(caps, qw.scheme, x.numel() // k, n, k, _options.get().act_widen):  # codes exact in 16 bits
        return _gemm_widened(x, qw, bias, caps, profile, out)
    key = (caps.name, str(qw.scheme))
    choice = _choices.get(key)
    if choice is None:  # planned once per (profile, scheme), not on every call
        choice = _choices[key] = runnable_path(caps, qw.scheme)
    if choice.family == "tcgen05" and not _tcgen05_runs(caps, qw, choice):  # (only with HUMMING_UNVERIFIED_KERNELS=1)
        from humming.core.common.paths import choose_path

        choice = choose_path(caps, qw.scheme, families=("mma_sync",))
    if choice.family == "tcgen05" and getattr(choice.instruction, "scale_format", None):
        return _gemm_blockscaled_tcgen05(x, qw, bias, caps)  # W4A4 NVFP4/MXFP4 (only with HUMMING_UNVERIFIED_KERNELS=1)
    if _runs_on_w8a8(choice, qw.scheme) or choice.family == "tcgen05":
        return _gemm_w8a8(x, qw, bias, caps, choice)
    if choice.path == "native" and choice.family == "mma_sync" and getattr(choice.instruction, "scale_format", None):
        out = _gemm_blockscaled(x, qw, bias, caps)  # only reached with HUMMING_UNVERIFIED_KERNELS=1
        if out is not None:
            return out
        from humming.core.common.paths import choose_path

        choice = choose_path(caps, qw.scheme, families=("mma_sync",), block_scaled=False)
    if choice.path != "upconvert":
        raise UnsupportedOnDevice(
            f"{qw.scheme.name} on {caps.name}: planned path {choice.path} ({choice.describe()}); this kernel is not "
            f"generated yet, humming.reference_gemm runs the scheme"
        )
    act_dtype = torch.bfloat16 if choice.a_type == "bf16" else torch.float16
    qa = _quantize_act(x, qw.scheme, caps)
    gscale = qa.global_scale
    if gscale is not None:
        qa.global_scale = None  # widen without it: code x block scale is exact in 16 bits
    x16 = qa.dequantize(act_dtype)
    if gscale is not None:
        gscale = gscale.to(device=x.device, dtype=torch.float32).reshape(1)
    weights = qw.with_scheme(qw.scheme.with_(act=None))
    cache = qw.__dict__.setdefault("_humming_weight_only", {})
    wq = cache.setdefault("qw", weights)
    handle = prepared(wq, act_dtype, x.device, profile)
    out = gemm_prepared(x16, handle, None if bias is None else bias.to(act_dtype), gscale)
    return out if out.dtype == x.dtype else out.to(x.dtype)


def _gemm_widened(x: torch.Tensor, qw, bias, caps, profile, out: torch.Tensor | None = None) -> torch.Tensor:
    """W8A8 / W4A8 with per-token or per-tensor activation scales on the weight-only kernels (humming.core.common.act_widen):
    activations quantized as the reference does, the codes widened exactly to f16/bf16, the per-token scales
    applied per output row in the fp32 epilogue (a row-scaled twin of the weight-only handle, same weights)."""
    n, k = qw.shape
    act16 = widen.act_dtype(caps, x.dtype)
    qa = _quantize_act(x.reshape(-1, k), qw.scheme, caps, codes_as=act16)  # one kernel: codes as 16-bit values
    x16 = qa.codes
    cache = qw.__dict__.setdefault("_humming_weight_only", {})
    wq = cache.setdefault("qw", qw.with_scheme(qw.scheme.with_(act=None)))
    handle = _wna16_handle_for(x16, wq, profile, prepared(wq, act16, x.device, profile), row_scale=True)
    values = qa.scale_values().to(device=x.device, dtype=torch.float32)
    if qa.mode == "dynamic_token":
        gscale = values.reshape(-1).contiguous()
        handle = _row_scaled(handle)
    else:
        gscale = values.reshape(1)
    direct = out if out is not None and act16 == x.dtype else None  # (x16 is [M, K]: out as [M, N])
    y = _gemm_prepared(x16, handle, None if bias is None else bias.to(act16), gscale,  # (out checked by gemm)
                       None if direct is None else direct.view(-1, n))
    if direct is not None:
        return direct
    y = y.view(*x.shape[:-1], n)
    return y if y.dtype == x.dtype else y.to(x.dtype)


def _row_scaled(handle: int) -> int:
    """The twin of a WnA16 handle whose kernels take per-token scales in GS (``Plan.row_scale``): the same prepared
    weights, plans of the original handle with row_scale set (created once, kept on the original)."""
    prep = _registry[handle]
    twin = prep.row_twin
    if twin is None:
        from dataclasses import replace as _replace

        from humming.core.families.mma_wna16.generator import row_scale_refusal

        def plan_fn(m: int, base: int = handle) -> Plan:
            p = plan_for(base, m)
            why = row_scale_refusal(p)
            if why:
                raise UnsupportedOnDevice(f"{p.scheme}: per-token output scales: {why}")
            return _replace(p, row_scale=True)

        twin = prep.row_twin = _register(prep.packed, prep.caps, prep.run_arch, plan_fn, scheme=prep.scheme)
    return twin


def _gemm_blockscaled(x: torch.Tensor, qw, bias, caps) -> torch.Tensor | None:
    """W4A4 NVFP4/MXFP4 on the block-scaled mma.sync kernel (compiled for sm_120a/121a, never run on hardware;
    reached only with HUMMING_UNVERIFIED_KERNELS=1). None when it does not apply (shape, act-order, another GPU):
    the caller runs the upconvert path."""
    from humming.core.families.mma_blockscaled.layout import STAGE_K, prepare_blockscaled
    from humming.core.families.mma_blockscaled.planner import plan_blockscaled

    n, k = qw.shape
    if n % 64 or k % STAGE_K or qw.g_idx is not None or live_arch() not in (None, caps.target.arch):
        return None
    return _run_blockscaled(x, qw, bias, caps, "blockscaled", prepare_blockscaled, plan_blockscaled)


def _run_blockscaled(x: torch.Tensor, qw, bias, caps, kind: str, prepare, planner) -> torch.Tensor:
    """The W4A4 NVFP4/MXFP4 block-scaled kernels (mma.sync and tcgen05): the weight prepared by ``prepare`` once per
    (kind, dtype, device, profile) and planned by ``planner``; the activations quantized as the reference does, their
    e2m1 codes packed, block scales as bytes, the global scale as a device scalar."""
    from humming.core.families.mma_blockscaled.layout import pack_e2m1

    n, k = qw.shape
    cache = qw.__dict__.setdefault("_humming_prepared", {})
    key = (kind, x.dtype, x.device, caps.name)
    handle = cache.get(key)
    if handle is None:
        packed = prepare(qw.to(x.device), x.dtype)
        handle = _register_planned(packed, caps, None, planner, act_name(x.dtype), qw.scheme.name)
        cache[key] = handle
    packed = _registry[handle].packed
    qa = _quantize_act(x.reshape(-1, k), qw.scheme, caps)
    codes = pack_e2m1(qa.codes).contiguous()  # [M, K/2]
    sa = qa.scales.view(torch.uint8).contiguous()  # [M, K/vec]
    gscale = None
    if qa.global_scale is not None:
        gscale = qa.global_scale.to(device=x.device, dtype=torch.float32).reshape(1)
    b = packed.bias if bias is None else bias.to(dtype=x.dtype).contiguous()
    if b is not None and b.data_ptr() % 4:
        b = b.clone()
    out = _launch(handle, codes, packed.qweight, sa, packed.scales, None, b, gscale, out_dtype=x.dtype)
    return out.view(*x.shape[:-1], n)


def _quantize_act(x: torch.Tensor, scheme, caps, codes_as: torch.dtype | None = None):
    """Activation quantization for the quantized-activation paths: the generated kernel (bit-exact with the
    reference by design), or the torch reference with the knob act_quant.kernel off; ``codes_as``: the codes as their
    exact 16-bit values (the widened path)."""
    if not knobs.value("act_quant.kernel", caps):
        from humming.actquant import _widened
        from humming.core.quant.quantize import quantize_activation

        return _widened(quantize_activation(x, scheme), codes_as)
    from humming.actquant import quantize_activation_cuda

    return quantize_activation_cuda(x, scheme, profile=caps, codes_as=codes_as)


def _runs_on_w8a8(choice, scheme) -> bool:
    """True when the 8-bit mma.sync kernel executes this path: both operands 8-bit as stored, per-channel
    or per-tensor weight scales, per-token or per-tensor activation scales; or 128x128 weight blocks with
    activation scales per 128 of K (w8a8-fp8-block)."""
    if choice.family != "mma_sync" or scheme.zero_point:
        return False
    if scheme.weight_scale.granularity == "block":
        from humming.core.common.layout import block_scales_reason

        return (choice.path in ("native", "legacy") and choice.a_type in ("s8", "e4m3")
                and choice.b_type == choice.a_type and scheme.weight in ("int8", "e4m3")
                and block_scales_reason(scheme) is None)
    if scheme.act_scale.mode not in ("dynamic_token", "static_tensor"):
        return False
    if scheme.weight in ("int4", "e2m1"):  # W4A8: widened exactly to s8 / e4m3 in registers, group scales
        return (choice.path in ("dequant-to-activation", "legacy") and choice.a_type == choice.b_type
                and choice.a_type in ("s8", "e4m3") and scheme.weight_scale.granularity in ("group", "channel"))
    return (choice.path in ("native", "legacy")  # W8A8: both operands as stored
            and choice.a_type in ("s8", "e4m3") and choice.b_type == choice.a_type
            and scheme.weight_scale.granularity in ("channel", "tensor"))


def _wgmma_fast_accum() -> bool:
    """GemmOptions.fast_accum of the call: e4m3 partial sums stay in the tensor core (no promotion)."""
    return _options.get().fast_accum


def _w4a8_widen(choice, weight: str = "int4") -> str:
    """The W4A8 kernels' int4 -> e4m3 widening (WgmmaRs8Layout.widen, W4A8Layout.widen): GemmOptions.w4a8_widen
    ("linear" by default, "prmt": the table widening); s8 activations and e2m1 weights have one ("linear")."""
    value = _options.get().w4a8_widen
    return value if (choice.a_type, weight) == ("e4m3", "int4") else "linear"


def _rs8_fast_accum(choice) -> bool:
    """The register-A W4A8 kernel's layout asks for e4m3 fast accumulation (int8: int32 sums, exact either way)."""
    return _wgmma_fast_accum() and choice.a_type == "e4m3"


def _wgmma_eligible(caps, choice, scheme, m: int, n: int, k: int) -> bool:
    """True when the wgmma 8-bit kernel runs this call: HUMMING_WGMMA not "0" (default on since the H200 run),
    8-bit weights as stored (per-channel/per-tensor or 128x128 block scales) or W4A8 weights (int4/e2m1 widened exactly, groups of
    32, 64 or a multiple of 128), a declared wgmma k32 form for the operand type, N % 128 == 0, K % 128 == 0
    and M >= 64."""
    if not knobs.value("wgmma_8bit.enabled", caps):
        return False
    from humming.core.families.wgmma_8bit.planner import wgmma_form

    if not (m >= 64 and n % 128 == 0 and k % 128 == 0 and choice.a_type == choice.b_type
            and wgmma_form(caps, choice.a_type) is not None):
        return False
    if scheme.weight in ("int4", "e2m1"):  # W4A8 (the path the 8-bit mma.sync kernel would run)
        from humming.core.families.wgmma_8bit.layout import wgmma_w4a8_group

        try:
            wgmma_w4a8_group(scheme, k)
        except UnsupportedOnDevice:
            return False
        return choice.path in ("dequant-to-activation", "legacy")
    return choice.path in ("native", "legacy")


WGMMA_WNA16_ENV = "HUMMING_WGMMA_WNA16"  # "0": WnA16 prefill (M >= 128) stays on the mma.sync tile kernel
WGMMA_WNA16_MIN_M = 128  # one full 128-row wgmma tile (planner_wgmma_wna16.MIN_M)


def _wgmma_wna16_eligible(caps, scheme, m: int, n: int, k: int, act: str) -> bool:
    """True when the wgmma WnA16 kernel runs this call: HUMMING_WGMMA_WNA16 not "0" (default on since the H200
    run), M >= 128, a scheme it decodes (signed int4, no zero points, group 32 / multiples of 64, channel or tensor
    scales), a declared wgmma k16 form for the activation type, cp.async, N % 128 == 0 and K % 64 == 0."""
    if m < WGMMA_WNA16_MIN_M or not knobs.value("wgmma_wna16.enabled", caps):
        return False
    from humming.core.families.wgmma_dequant.layout import supports
    from humming.core.families.wgmma_dequant.planner import wgmma_k16_form

    return (n % 128 == 0 and k % 64 == 0 and supports(scheme) is None and bool(caps.memory.cp_async)
            and wgmma_k16_form(caps, act) is not None)


def _wna16_wgmma_handle(x: torch.Tensor, qw, profile, fallback: int) -> int:
    """The prepared handle of the wgmma WnA16 kernel for (dtype, device, profile), or ``fallback`` (the mma.sync
    handle) when the kernel does not apply to this weight or this GPU; the decision is cached on the weight."""
    cache = qw.__dict__.setdefault("_humming_prepared", {})
    key = ("wna16-wgmma", x.dtype, x.device, profile)
    handle = cache.get(key)
    if handle is None:
        caps = resolve_profile(profile)
        n, k = qw.shape
        act = act_name(x.dtype)
        handle = -1
        if _wgmma_wna16_eligible(caps, qw.scheme, WGMMA_WNA16_MIN_M, n, k, act) and _wgmma_runs_here(caps):
            from humming.core.families.wgmma_dequant.layout import prepare_wgmma_wna16
            from humming.core.families.wgmma_dequant.planner import plan_wna16_wgmma

            packed = prepare_wgmma_wna16(qw.to(x.device), x.dtype)

            handle = _register_planned(packed, caps, None, plan_wna16_wgmma, act, qw.scheme.name)
        cache[key] = handle
    if handle < 0 and settings.flag("HUMMING_UNVERIFIED_KERNELS"):  # (no wgmma: Blackwell datacenter?)
        return _wna16_tcgen05_handle(x, qw, profile, fallback)
    return fallback if handle < 0 else handle


def _wgmma_rs_eligible(caps, scheme, m: int, n: int, k: int, act: str) -> bool:
    """True when the register-A wgmma WnA16 kernel takes this call: M >= 513 (HUMMING_WGMMA_RS=1: M >= 128; =0: never;
    HUMMING_WGMMA_WNA16=0 keeps the mma.sync kernels), a declared wgmma
    k16 form for the activation type, cp.async, and a layout it runs (int4 codes, integer or no zero points, scale
    and zero groups multiples of 64 or per channel, N % 128 == 0, K % 64 == 0; planner_wgmma_rs.layout_refusal)."""
    from humming.core.families.register_a import planner as rs

    lowest = rs.min_m(caps)
    if lowest is None or m < lowest or not knobs.value("wgmma_wna16.enabled", caps) or not caps.memory.cp_async:
        return False
    from humming.core.families.wgmma_dequant.planner import wgmma_k16_form

    if wgmma_k16_form(caps, act) is None:
        return False
    try:
        lay = layout_for(scheme, n, k, act, caps=caps)
    except HummingError:
        return False
    return not rs.layout_refusal(lay) and (rs.forced(caps) or not rs.default_refusal(lay))


def _wna16_wgmma_rs_handle(x: torch.Tensor, qw, profile, fallback: int) -> int:
    """A handle of the register-A wgmma kernel sharing the prepared weights of ``fallback`` (the mma.sync / stream
    handle: the same PackedWeight, no second copy), or ``fallback`` when the kernel does not apply to this weight or
    this GPU; the decision is cached on the weight."""
    cache = qw.__dict__.setdefault("_humming_prepared", {})
    key = ("wna16-wgmma-rs", x.dtype, x.device, profile)
    handle = cache.get(key)
    if handle is None:
        from humming.core.families.register_a import planner as rs
        from humming.core.tuning.entries import register_a_prefill_plan, runs_register_a_prefill

        caps = resolve_profile(profile)
        packed = _registry[fallback].packed
        handle = -1
        if runs_register_a_prefill(caps, packed.layout, rs.min_m(caps) or rs.MIN_M):  # (the tuner and aot ask the same)
            handle = _register_planned(packed, caps, None, register_a_prefill_plan, act_name(x.dtype), qw.scheme.name)
        cache[key] = handle
    return fallback if handle < 0 else handle


def _tcgen05_wna16_eligible(caps, scheme, m: int, n: int, k: int, act: str) -> bool:
    """True when the tcgen05 WnA16 kernel (compiled, never run) takes this call: M >= 128, the schemes the wgmma
    WnA16 kernel decodes (signed int4, no zero points, group 32 / multiples of 64, channel or tensor scales), a
    declared tcgen05 kind::f16 form for the activation type, cp.async and Tensor Memory, N % 128 == 0, K % 64 == 0."""
    if m < WGMMA_WNA16_MIN_M or n % 128 or k % 64 or not caps.memory.cp_async or not caps.memory.tmem_kb:
        return False
    from humming.core.families.tcgen05.planner import tcgen05_f16_form
    from humming.core.families.wgmma_dequant.layout import supports

    return supports(scheme) is None and tcgen05_f16_form(caps, act) is not None


def _wna16_tcgen05_handle(x: torch.Tensor, qw, profile, fallback: int) -> int:
    """The prepared handle of the tcgen05 WnA16 kernel (reached only with HUMMING_UNVERIFIED_KERNELS=1), or
    ``fallback`` when it does not apply to this weight or this GPU; the decision is cached on the weight."""
    cache = qw.__dict__.setdefault("_humming_prepared", {})
    key = ("wna16-tcgen05", x.dtype, x.device, profile)
    handle = cache.get(key)
    if handle is None:
        caps = resolve_profile(profile)
        n, k = qw.shape
        act = act_name(x.dtype)
        handle = -1
        if _tcgen05_wna16_eligible(caps, qw.scheme, WGMMA_WNA16_MIN_M, n, k, act) and _wgmma_runs_here(caps):
            from humming.core.families.tcgen05.planner import plan_wna16_tcgen05
            from humming.core.families.wgmma_dequant.layout import prepare_wgmma_wna16

            packed = prepare_wgmma_wna16(qw.to(x.device), x.dtype)  # the wgmma WnA16 kernel's weights

            handle = _register_planned(packed, caps, None, plan_wna16_tcgen05, act, qw.scheme.name)
        cache[key] = handle
    return fallback if handle < 0 else handle


_wgmma_here: dict[str, bool] = {}


def _wgmma_runs_here(caps) -> bool:
    """wgmma kernels run only on the profile's own target (a forced profile emulated on another GPU keeps the
    mma.sync kernel, which compiles for the live GPU)."""
    ok = _wgmma_here.get(caps.name)
    if ok is None:
        ok = _wgmma_here[caps.name] = live_arch() in (None, caps.target.arch)
    return ok


def _tcgen05_runs(caps, qw, choice=None) -> bool:
    """A tcgen05 kernel runs this weight: N a multiple of 128, K of 128 (W8A8) or 256 (W4A4 block-scaled), no
    act-order, and the live GPU is the profile's own target (a forced profile emulated on another GPU keeps the
    mma.sync or upconvert path)."""
    n, k = qw.shape
    kk = 256 if getattr(getattr(choice, "instruction", None), "scale_format", None) else 128
    return n % 128 == 0 and k % kk == 0 and qw.g_idx is None and _wgmma_runs_here(caps)


def _gemm_blockscaled_tcgen05(x: torch.Tensor, qw, bias, caps) -> torch.Tensor:
    """W4A4 NVFP4/MXFP4 on the tcgen05 block-scaled kernel (compiled for sm_100a/103a/107a/110a, never run on
    hardware; reached only with HUMMING_UNVERIFIED_KERNELS=1 and a weight ``_tcgen05_runs`` accepts)."""
    from humming.core.families.mma_blockscaled.layout import prepare_blockscaled_tcgen05
    from humming.core.families.tcgen05.planner import plan_blockscaled_tcgen05

    return _run_blockscaled(x, qw, bias, caps, "blockscaled-tcgen05", prepare_blockscaled_tcgen05,
                            plan_blockscaled_tcgen05)


def _w8a8_tcgen05_handle(x: torch.Tensor, qw, caps, choice) -> int:
    """The prepared handle of the tcgen05 8-bit kernel: weights as stored [N, K] (the wgmma kernel's layout); for
    W4A8 MXFP4 x FP8 the block-scaled kernel's (packed e2m1 [N, K/2], ue8m0 scales in tcgen05.cp blocks)."""
    from humming.core.families.tcgen05.planner import plan_w8a8_tcgen05
    from humming.core.families.wgmma_8bit.layout import prepare_w8a8_wgmma

    cache = qw.__dict__.setdefault("_humming_prepared", {})
    key = ("w8a8-tcgen05", x.dtype, x.device, caps.name)
    handle = cache.get(key)
    if handle is None and qw.scheme.weight == "e2m1":  # W4A8 MXFP4 x FP8 (kind::mxf8f6f4)
        from humming.core.families.mma_blockscaled.layout import prepare_blockscaled_tcgen05
        from humming.core.families.tcgen05.planner import plan_blockscaled_tcgen05

        packed = prepare_blockscaled_tcgen05(qw.to(x.device), x.dtype)
        act = act_name(x.dtype)

        handle = cache[key] = _register_planned(packed, caps, None, plan_blockscaled_tcgen05, act, qw.scheme.name)
    if handle is None:
        packed = prepare_w8a8_wgmma(qw.to(x.device), x.dtype, choice.a_type)
        act = act_name(x.dtype)

        handle = _register_planned(packed, caps, None, plan_w8a8_tcgen05, act, qw.scheme.name)
        cache[key] = handle
    return handle


def _w8a8_wgmma_handle(x: torch.Tensor, qw, caps, choice) -> int:
    """The prepared handle of the wgmma 8-bit kernel for (dtype, device, profile): weights as stored [N, K]
    (W8A8) or packed 4-bit rows [N, K/2] widened in shared memory (W4A8)."""
    from humming.core.families.wgmma_8bit.layout import prepare_w4a8_wgmma, prepare_w8a8_wgmma
    from humming.core.families.wgmma_8bit.planner import plan_w4a8_wgmma, plan_w8a8_wgmma

    cache = qw.__dict__.setdefault("_humming_prepared", {})
    w4 = qw.scheme.weight in ("int4", "e2m1")  # W4A8 here: no fast-accumulation variant (the register-A kernel has one)
    fast = _wgmma_fast_accum() and not w4 and qw.scheme.weight_scale.granularity != "block"  # (blocks: promoted)
    key = ("w8a8-wgmma", x.dtype, x.device, caps.name) + (("fast_accum",) if fast else ())
    handle = cache.get(key)
    if handle is None:
        if w4:
            packed = prepare_w4a8_wgmma(qw.to(x.device), x.dtype, choice.a_type)
        else:
            packed = prepare_w8a8_wgmma(qw.to(x.device), x.dtype, choice.a_type, fast_accum=fast)
        run_arch = _emulation_arch(caps)
        act = act_name(x.dtype)
        planner = plan_w4a8_wgmma if w4 else plan_w8a8_wgmma

        handle = _register_planned(packed, caps, run_arch, planner, act, qw.scheme.name)
        cache[key] = handle
    return handle


def _wgmma_rs8_eligible(caps, choice, scheme, m: int, n: int, k: int) -> bool:
    """True when the register-A wgmma W4A8 kernel runs this call: M >= 128 (HUMMING_WGMMA_W4A8_RS=0: never), the
    wgmma W4A8 kernel would run it, signed int4 weights with group-128 or per-channel scales
    (layout_wgmma_rs8)."""
    from humming.core.families.register_a8 import planner as rs8

    lowest = rs8.min_m(caps)
    if lowest is None or m < lowest or scheme.weight != "int4":
        return False
    if not _wgmma_eligible(caps, choice, scheme, m, n, k):
        return False
    from humming.core.families.register_a8.layout import rs8_refusal
    from humming.core.families.wgmma_8bit.planner import wgmma_form

    form = wgmma_form(caps, choice.a_type)
    return form is not None and rs8.BT in form.n_values and not rs8_refusal(scheme, n, k, choice.a_type)


def _w4a8_wgmma_rs_handle(x: torch.Tensor, qw, caps, choice) -> int:
    """The prepared handle of the register-A wgmma W4A8 kernel (layout_wgmma_rs8) for (dtype, device, profile)."""
    from humming.core.families.register_a8.layout import prepare_w4a8_rs
    from humming.core.families.register_a8.planner import plan_w4a8_wgmma_rs

    cache = qw.__dict__.setdefault("_humming_prepared", {})
    fast, widen = _rs8_fast_accum(choice), _w4a8_widen(choice)
    key = (("w4a8-wgmma-rs8", x.dtype, x.device, caps.name) + (("fast_accum",) if fast else ())
           + (("prmt",) if widen == "prmt" else ()))
    handle = cache.get(key)
    if handle is None:
        packed = prepare_w4a8_rs(qw.to(x.device), x.dtype, choice.a_type, fast_accum=fast, widen=widen)
        act = act_name(x.dtype)

        handle = _register_planned(packed, caps, _emulation_arch(caps), plan_w4a8_wgmma_rs, act, qw.scheme.name)
        cache[key] = handle
    return handle


def _gemm_w8a8(x: torch.Tensor, qw, bias, caps, choice) -> torch.Tensor:
    """W8A8 on the 8-bit mma.sync kernel (or, unless HUMMING_WGMMA=0, at M >= 64 on a profile declaring wgmma,
    the wgmma kernel): activations quantized as the reference does (per token or per tensor), then
    int8 x int8 -> int32 or e4m3 x e4m3 -> fp32, scales and bias in the fp32 epilogue."""
    from humming.core.common.layout import prepare_w4a8, prepare_w8a8
    from humming.core.plan import plan_w8a8

    n, k = qw.shape
    cache = qw.__dict__.setdefault("_humming_prepared", {})
    widen = _w4a8_widen(choice, qw.scheme.weight)
    key = ("w8a8", x.dtype, x.device, caps.name) + (("prmt",) if widen == "prmt" else ())
    handle = cache.get(key)
    if choice.family == "tcgen05":  # compiled, never validated: reached only with HUMMING_UNVERIFIED_KERNELS=1
        handle = _w8a8_tcgen05_handle(x, qw, caps, choice)
    elif (qw.g_idx is None and _wgmma_rs8_eligible(caps, choice, qw.scheme, x.numel() // k, n, k)
          and _wgmma_runs_here(caps)):
        handle = _w4a8_wgmma_rs_handle(x, qw, caps, choice)
    elif _wgmma_eligible(caps, choice, qw.scheme, x.numel() // k, n, k) and _wgmma_runs_here(caps):
        handle = _w8a8_wgmma_handle(x, qw, caps, choice)
    elif handle is None:
        if qw.scheme.weight in ("int4", "e2m1"):
            packed = prepare_w4a8(qw.to(x.device), x.dtype, choice.a_type, widen=widen)
        else:
            packed = prepare_w8a8(qw.to(x.device), x.dtype, choice.a_type)
        run_arch = _emulation_arch(caps)
        act = act_name(x.dtype)

        handle = _register_planned(packed, caps, run_arch, plan_w8a8, act, qw.scheme.name, choice)
        cache[key] = handle
    packed = _registry[handle].packed
    x2 = x.reshape(-1, k)
    if getattr(packed, "perm", None) is not None:  # act-order weights: gather the activations to match
        x2 = x2.index_select(1, packed.perm)
    qa = _quantize_act(x2, qw.scheme, caps)
    codes = qa.codes.contiguous()
    token_scale = gscale = None
    if qa.mode == "dynamic_token":
        token_scale = qa.scale_values().reshape(-1).to(torch.float32).contiguous()
    elif qa.mode == "dynamic_group" and qw.scheme.weight_scale.granularity == "block":
        token_scale = qa.scale_values().reshape(-1, k // qa.group_size).to(torch.float32).contiguous()  # [M, K/128]
    elif qa.mode == "static_tensor":
        gscale = qa.scale_values().reshape(1).to(device=x.device, dtype=torch.float32)
    else:
        raise UnsupportedOnDevice(f"{qw.scheme.name}: {qa.mode} activation scales are not supported by the 8-bit kernel")
    b = packed.bias if bias is None else bias.to(dtype=x.dtype).contiguous()
    if b is not None and b.data_ptr() % 4:  # the epilogues read the biases of two columns as one 32-bit load
        b = b.clone()
    group_scales = getattr(packed, "scales", None)  # W4A8: the fp32 group-scale table; blocks: [N/128, K/128]
    out = _launch(handle, codes, packed.qweight, token_scale, group_scales, packed.channel_scale, b, gscale,
                  out_dtype=x.dtype)
    return out.view(*x.shape[:-1], n)


# ---------------------------------------------------------------- path table (humming.device.info)
def path_table(caps, m: int = 16, n: int = 4096, k: int = 4096) -> list[dict]:
    """For each preset scheme: the instruction family this profile would use, or why it is refused."""
    from humming import schemes

    rows = []
    for name in schemes.names():
        sch = schemes.get(name)
        row = {"scheme": name}
        try:
            if getattr(sch, "act", None):
                from humming.core.common.paths import choose_path, runnable_path

                widened = () if widen.refusal(sch, n, k) else widen.m_ranges(caps, sch, n, k, _options.get().act_widen)
                if widened is None and widen.native_refusal(caps, sch):  # no native path: widening is the path
                    act = "f16" if caps.find_mma(family="mma_sync", a_type="f16") else "bf16"
                    p = plan_wna16(caps, layout_for(sch.with_(act=None), n, k, act, caps=caps), m, act, scheme=name)
                    shape = "x".join(map(str, p.instruction.shape))
                    row.update(family=p.family, instruction=f"mma.sync m{shape} {act}", path="widened",
                               reason=widen.reason(caps, sch, m, n, k) + " [executes on the WnA16 kernel]")
                    rows.append(row)
                    continue
                choice = runnable_path(caps, sch)
                ideal = choose_path(caps, sch)
                if (ideal.path == "native" and ideal.family == "mma_sync"
                        and getattr(ideal.instruction, "scale_format", None)):
                    from humming.core.families.mma_blockscaled.planner import unverified_enabled, unverified_note

                    status = ("executes on the block-scaled mma_sync kernel (unverified)" if unverified_enabled()
                              else unverified_note(caps) + "; meanwhile runs " + choice.describe() + " (upconvert)")
                    row.update(family=ideal.family, instruction=ideal.describe(), path=ideal.path,
                               reason=f"{ideal.reasons[-1]} [{status}]")
                    rows.append(row)
                    continue
                reason = choice.reasons[-1]
                if choice.family == "tcgen05":
                    status = "executes on the tcgen05 kernel (unverified)"
                    from humming.core.families.tcgen05.planner import tcgen05_kernel

                    if tcgen05_kernel(choice, sch, caps) == "w4a8":
                        status = ("executes on the tcgen05 block-scaled kernel as kind::mxf8f6f4 e4m3 x e2m1, the weights' "
                                  "ue8m0 scales in the MMA (unverified)")
                elif choice.path == "upconvert":
                    status = "executes on the WnA16 kernel"
                elif _runs_on_w8a8(choice, sch):
                    status = "executes on the 8-bit mma_sync kernel"
                    if _wgmma_eligible(caps, choice, sch, max(m, 1024), n, k):  # prefill: the wgmma kernel
                        reason = ideal.reasons[-1]
                        status = (f"M < 64 executes on the 8-bit mma_sync kernel ({choice.describe()}), "
                                  f"M >= 64 on the wgmma kernel ({ideal.describe()})")
                else:
                    status = "kernel not generated yet"
                if widened != ():
                    status = (f"{widen.describe_ranges(widened)}: {sch.act} codes widened onto the WnA16 kernel "
                              f"(GemmOptions.act_widen); otherwise {status}")
                row.update(family=choice.family, instruction=choice.describe(), path=choice.path,
                           reason=f"{reason} [{status}]")
                rows.append(row)
                continue
            act = "f16" if caps.find_mma(family="mma_sync", a_type="f16") else "bf16"
            gs = sch.weight_scale.group_size
            kk = k if not gs else max(k, gs) // gs * gs
            p = plan_wna16(caps, layout_for(sch, n, math.lcm(kk, 64), act, caps=caps), m, act, scheme=name)
            shape = "x".join(map(str, p.instruction.shape))
            reason = p.reasons[0]
            if _wgmma_wna16_eligible(caps, sch, max(m, WGMMA_WNA16_MIN_M), n, k, act):
                reason += f"; M >= {WGMMA_WNA16_MIN_M}: the wgmma kernel (int4 dequantized into shared memory)"
            elif _tcgen05_wna16_eligible(caps, sch, max(m, WGMMA_WNA16_MIN_M), n, k, act):
                from humming.core.families.tcgen05.planner import unverified_enabled, wna16_unverified_note

                reason += (f"; M >= {WGMMA_WNA16_MIN_M}: the tcgen05 kernel (int4 dequantized into shared memory, "
                           f"unverified)" if unverified_enabled() else "; " + wna16_unverified_note(caps))
            row.update(family=p.family, instruction=f"mma.sync m{shape} {act}", reason=reason)
        except (UnsupportedOnDevice, SchemeError, ShapeError) as exc:
            row.update(family=None, instruction=None, reason=str(exc))
        rows.append(row)
    return rows


# ---------------------------------------------------------------- ahead-of-time builds
def warmup(qw, dtype: torch.dtype, ms, device=None, profile=None, workers: int | None = None) -> list:
    """Plan every M in ``ms`` for a weight and compile the distinct kernels in parallel (NVRTC releases the GIL).
    Returns the CompiledModules (cache hits included)."""
    from concurrent.futures import ThreadPoolExecutor

    device = torch.device(device or "cuda")
    handle = prepared(qw, dtype, device, profile)
    prep = _registry[handle]
    unique: dict[str, Plan] = {}
    for m in ms:
        p = plan_for(handle, int(m))
        unique.setdefault(p.kernel_name, p)
    with ThreadPoolExecutor(max_workers=workers or min(16, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda p: compile_plan(p, prep.caps, prep.run_arch)[1], unique.values()))
    results = [r for r in results if r is not None]  # vendor-compiled kernels carry no NVRTC module
    return results
