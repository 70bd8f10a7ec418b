"""A quantized weight prepared to run: what ``humming.gemm`` calls for one (weight, activation dtype, device, profile,
options). Per M it asks the registry which family runs the GEMM (once; the launch is kept), packs the weights the way
that family's kernels read them (once per layout: families reading the same layout share the tensors), compiles
the kernel and launches it on torch's current stream.

Layers are kept in ``LAYERS`` and named by their index there (a handle), which the ``humming::gemm`` custom op
takes as an argument."""
from __future__ import annotations

import threading

import torch

from humming.core.common.layout import act_name
from humming.core.problem import Problem, dense_problem
from humming.core.quant.padding import padded_weight
from humming.core.registry import family_of, select
from humming.core.runtime.compiled import compile_plan
from humming.core.runtime.inputs import STEPS, gathered, wna16_weights
from humming.core.runtime.launch import LaunchSpec
from humming.devices.current import emulation_arch
from humming.options import DEFAULT

_TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
POISON_OUTPUTS = False  # tests set it: outputs are filled with NaN before each launch

_lock = threading.Lock()
LAYERS: list[Layer] = []


class Layer:
    """One weight prepared for (dtype, device, profile, options); ``plans[m]`` may be set to force a plan for M
    (the tuner does), ``launches[m]`` holds what runs M."""

    def __init__(self, qw, dtype: torch.dtype, device: torch.device, caps, options=DEFAULT):
        self.n, self.k = qw.shape  # what the caller multiplies: x [M, K] -> [M, N]
        self.dtype, self.device, self.caps, self.options = dtype, device, caps, options
        self.scheme, self.act_order, self.act = qw.scheme, qw.g_idx is not None, act_name(dtype)
        shape = self.problem(1)  # (N and K multiples of 16, or a ShapeError before anything is packed)
        # N and K that are not whole 64 x 64 weight atoms: the weight padded once, here (humming.core.quant.padding)
        self.qw = padded_weight(qw, shape.n, shape.k).to(device)
        self.run_arch = emulation_arch(caps)  # the live GPU's target where the profile is emulated on it
        self.plans: dict[int, object] = {}
        self.launches: dict[int, LaunchSpec] = {}
        self.packed: dict[tuple, object] = {}
        self._weight_only = None

    # ---------------------------------------------------------------- planning
    def problem(self, m: int) -> Problem:
        return dense_problem(self.scheme, m, self.n, self.k, self.act, self.options, act_order=self.act_order)

    def choose(self, m: int) -> tuple[str, object]:
        """(how the activations reach the kernel, the plan) for M: a forced plan (WnA16 activations) or the
        registry's choice."""
        forced = self.plans.get(m)
        if forced is not None:
            return "x", forced
        sel = select(self.problem(m), self.caps)
        return sel.family.inputs, sel.plan

    def plan_for(self, m: int):
        return self.choose(m)[1]

    # ---------------------------------------------------------------- weights
    def weight_only(self):
        """The weights as a weight-only scheme (the routes that run quantized activations on the WnA16 kernels)."""
        if self._weight_only is None:
            self._weight_only = self.qw.with_scheme(self.scheme.with_(act=None)) if self.scheme.act else self.qw
        return self._weight_only

    def packed_for(self, plan, inputs: str):
        """The weights packed for the plan's kernel (shared by every plan with the same layout and dtype)."""
        key = (plan.layout, plan.act)
        packed = self.packed.get(key)
        if packed is None:
            qw = self.weight_only() if inputs in ("x", "codes16", "upconvert") else self.qw
            with _lock:
                packed = self.packed.get(key)
                if packed is None:
                    packed = self.packed[key] = family_of(plan).pack(qw, _TORCH[plan.act], plan.layout, self.caps)
        return packed

    # ---------------------------------------------------------------- launching
    def spec(self, m: int) -> LaunchSpec:
        spec = self.launches.get(m)
        if spec is None:
            inputs, plan = self.choose(m)
            packed = self.packed_for(plan, inputs)
            kernel, _ = compile_plan(plan, self.caps, self.run_arch)
            first = not self.launches
            spec = LaunchSpec(plan, inputs, packed, kernel, self.device, float(getattr(packed, "out_scale", 1.0)))
            self.launches[m] = spec
            if first and not self.scheme.act:  # the layer's other decode kernels compile in the background
                from humming.core.runtime.precompile import precompile_on_first_launch

                precompile_on_first_launch(self, plan)
        return spec

    def run(self, x2: torch.Tensor, bias: torch.Tensor | None = None, gscale: torch.Tensor | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
        """One GEMM of x2 [M, K] (M >= 1); ``out``: a checked [M, N] tensor of the output dtype, else a new one."""
        m = x2.shape[0]
        spec = self.launches.get(m) or self.spec(m)
        if spec.inputs == "x":  # the hot path: WnA16 activations as they are
            packed = spec.packed
            a = gathered(x2, packed)
            b = packed.bias if bias is None else bias.to(dtype=x2.dtype).contiguous()
            weights, out_dtype = wna16_weights(packed, b), x2.dtype
        else:
            a, weights, gscale, out_dtype = STEPS[spec.inputs](x2, self.scheme, self.caps, spec.packed, spec.plan, bias)
        if out is None or out.dtype != out_dtype:
            y = a.new_empty((m, self.n), dtype=out_dtype)
        else:
            y = out
        if POISON_OUTPUTS:
            y.fill_(float("nan"))
        spec.launch(a, y, weights, gscale)
        if out is not None and y is not out:
            out.copy_(y)
            return out
        return y


def kept_prepared(qw, slot: str, dtype: torch.dtype, device, profile, options, make):
    """What ``make(dtype, device)`` prepares of ``qw`` for (activation dtype, device, profile, options), made once
    and kept on the weight under ``slot`` (a CUDA device without an index is the current one)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    cache = qw.__dict__.setdefault(slot, {})
    key = (dtype, device, profile, options)
    kept = cache.get(key)
    if kept is None:
        act_name(dtype)  # (a clear error for an unsupported dtype)
        kept = cache[key] = make(dtype, device)
    return kept


def register(layer: Layer) -> int:
    """Keep a layer; returns its handle."""
    with _lock:
        LAYERS.append(layer)
        return len(LAYERS) - 1
