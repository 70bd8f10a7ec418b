"""Expert-stacked weights prepared to run: what ``humming.moe_gemm`` / ``grouped_gemm`` / ``masked_gemm`` call for one
(weight, activation dtype, device, profile). Per (tokens, top_k) it asks the MoE registry for a plan once; it packs
the experts once per layout, compiles the kernel and launches it on torch's current stream with a routing's tensors
(humming.core.moe.routing), with no host synchronisation.

Kernel parameters: the tile kernel's (A B S Z CS BIAS C WS CNT M N K k_per_split out_scale GS), then SORTED
EXPERT_IDS NPAD TOPK_W ES num_slots a_div KA n_out b_stride s_stride z_stride raster
(humming.core.families.moe_wna16.generator); a 1-D grid of token tiles x channel tiles."""
from __future__ import annotations

import threading

import torch

from humming.core.common.layout import act_name
from humming.core.families.moe_wna16.activations import activation_step, quantized_input
from humming.core.moe.permute_kernel import permuted_rows
from humming.core.problem import Problem
from humming.core.registry import family_of, select
from humming.core.routes import widened_ranges as act_widen
from humming.core.runtime import layer as dense_layer
from humming.core.runtime.compiled import compile_plan
from humming.core.runtime.kernel import ArgBlock
from humming.core.runtime.launch import current_stream, workspace
from humming.core.tuning import knobs
from humming.devices.current import emulation_arch
from humming.errors import ShapeError, UnsupportedOnDevice
from humming.options import DEFAULT

KINDS = "ppppppppp" + "iiii" + "f" + "p" + "ppppp" + "iiiiiiii"
_A, _C, _WS, _CNT, _GS, _SORTED, _EXPERTS, _NPAD, _TOPK_W, _NUM_SLOTS, _A_DIV = 0, 6, 7, 8, 14, 15, 16, 17, 18, 20, 21

_lock = threading.Lock()


def per_slot_scales(gscale: torch.Tensor | None, plan, a_div: int) -> torch.Tensor | None:
    """The GS operand once each slot has its own permuted row (act-order experts): per-token scales repeated for the
    ``a_div`` slots of each token; a per-tensor scale as it is. The plan says which (one token's per-token scales
    are one value too)."""
    if gscale is None or not (plan.row_scale or family_of(plan).inputs == "codes8"):
        return gscale
    return gscale.repeat_interleave(a_div)


class MoeLayer:
    """One stacked weight prepared for (dtype, device, profile, options)."""

    def __init__(self, qw, dtype: torch.dtype, device: torch.device, caps, options=DEFAULT):
        self.qw = qw.to(device)
        self.scheme = qw.scheme
        self.n, self.k = qw.shape
        self.experts = qw.num_experts
        self.act_order = qw.natural_order().g_idx is not None  # (each slot's row permuted before the GEMM)
        self.dtype, self.device, self.caps, self.options = dtype, device, caps, options
        self.step, _ = activation_step(self.scheme, self.n, self.k)
        self.kernel_dtype = dtype if self.step in ("x", "rescaled") else act_widen.act_dtype(caps, dtype)
        self.act = act_name(self.kernel_dtype)
        self.input_scale = None
        if self.step != "x" and qw.input_scale is not None:  # static per-tensor scales: one for all experts
            scales = qw.input_scale.reshape(-1)
            if not bool((scales == scales[0]).all()):
                raise UnsupportedOnDevice(f"{self.scheme.name}: the experts carry different static activation "
                                          f"scales; the MoE kernels quantize the activations once for all experts")
            self.input_scale = scales[0]
        self.run_arch = emulation_arch(caps)
        self.plans: dict[tuple[int, int], object] = {}
        self.packed: dict[tuple, object] = {}
        self.launches: dict[tuple, tuple] = {}

    def problem(self, tokens: int, top_k: int, form: str = "indexed") -> Problem:
        return Problem(self.scheme, tokens, self.n, self.k, self.act, self.options, form=form, experts=self.experts,
                       top_k=top_k, act_order=self.act_order)

    def plan_for(self, tokens: int, top_k: int):
        """The plan (M = tokens) a GEMM of ``tokens`` tokens, each to ``top_k`` experts, runs."""
        key = (tokens, top_k)
        p = self.plans.get(key)
        if p is None:
            p = self.plans[key] = select(self.problem(tokens, top_k), self.caps).plan
        return p

    def packed_for(self, plan):
        key = (plan.layout, plan.act)
        packed = self.packed.get(key)
        if packed is None:
            with _lock:
                packed = self.packed.get(key)
                if packed is None:
                    packed = self.packed[key] = family_of(plan).pack(self.qw, self.kernel_dtype, plan.layout,
                                                                     self.caps)
        return packed

    def _spec(self, plan, capacity: int):
        """(launcher, argument block, grid) for a routing of ``capacity`` entries, built once."""
        key = (plan.kernel_name, capacity)
        spec = self.launches.get(key)
        if spec is None:
            w = self.packed_for(plan)
            kernel, _ = compile_plan(plan, self.caps, self.run_arch)
            lay, t = w.layout, plan.tiles
            values = [0, w.qweight.data_ptr(), *(0 if x is None else x.data_ptr()
                                                 for x in (w.scales, w.zeros, w.channel_scale, w.bias)),
                      0, 0, 0, capacity, lay.n, lay.k, lay.k // plan.splits, 1.0, 0,
                      0, 0, 0, 0, w.expert_scale.data_ptr(),
                      0, 1, self.k, self.n, w.stride(w.qweight), w.stride(w.scales), w.stride(w.zeros),
                      int(knobs.value("moe.raster", self.caps))]
            args = ArgBlock(KINDS, values)
            # (channel tiles rounded up: the MoE register-A form's last one may be half past N)
            grid = (capacity // t.bm * -(-lay.n // t.bn), 1, plan.splits)
            device = self.device.index if self.device.index is not None else torch.cuda.current_device()
            fire = kernel.launcher(device, grid, plan.threads, args) if grid[0] else None
            spec = self.launches[key] = (fire, args, w)
        return spec

    def activations(self, x: torch.Tensor, plan=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the kernel's A operand, its GS operand) for activations x [rows, K]: x itself, or x quantized once as
        the scheme says and changed exactly to 16 bits (humming.core.families.moe_wna16.activations), or, for a
        kernel of 8-bit activation codes (its family's inputs "codes8"), the codes and their per-token scales."""
        if plan is not None and family_of(plan).inputs == "codes8":
            from humming.core.runtime.inputs import quantize

            qa = quantize(x, self.scheme, self.caps)
            return qa.codes.contiguous(), qa.scale_values().to(device=x.device, dtype=torch.float32).reshape(-1)
        if self.step == "x":
            return x, None
        return quantized_input(x, self.scheme, self.caps, self.step, self.input_scale)

    def run(self, a: torch.Tensor, routing, out: torch.Tensor, plan, a_div: int,
            topk_weights: torch.Tensor | None = None, every_row: bool = True,
            gscale: torch.Tensor | None = None) -> torch.Tensor:
        """One launch: rows of ``a`` (row = slot // a_div) through ``routing`` into rows of ``out`` [slots, N] (of
        the kernel's 16-bit type); ``gscale``: the GS operand (``activations``). ``every_row``: the routing reaches
        every row of ``out`` (else the caller zeroed it: tests poison only outputs the kernel must write in full)."""
        if routing.block_m != plan.tiles.bm:
            raise ShapeError(f"the routing's block_m is {routing.block_m}; this plan's token tile is {plan.tiles.bm} "
                             f"(route with humming.moe.route(..., block_m=humming.moe.block_m(...)))")
        if routing.num_experts != self.experts:
            raise ShapeError(f"the routing is over {routing.num_experts} experts; the weight has {self.experts}")
        fire, args, w = self._spec(plan, routing.capacity)
        if w.perm is not None and fire is not None:  # act-order experts: each slot's row in its expert's order
            a = permuted_rows(a, routing, w.perm, a_div)
            gscale = per_slot_scales(gscale, plan, a_div)
            a_div = 1
        ws = cnt = None
        if plan.splits > 1 and fire is not None:  # split-K partials and tile counters of the current stream
            tiles = routing.capacity // plan.tiles.bm * -(-plan.layout.n // plan.tiles.bn)
            ws, cnt = workspace(self.device, tiles * plan.splits * plan.tiles.bm * plan.tiles.bn, tiles)
        if dense_layer.POISON_OUTPUTS and every_row:
            out.fill_(float("nan"))
        if fire is None:
            return out
        slots = args.slots
        with args.lock:
            if ws is not None:
                slots[_WS].value, slots[_CNT].value = ws.data_ptr(), cnt.data_ptr()
            slots[_A].value = a.data_ptr()
            slots[_C].value = out.data_ptr()
            slots[_SORTED].value = routing.sorted_ids.data_ptr()
            slots[_EXPERTS].value = routing.expert_ids.data_ptr()
            slots[_NPAD].value = routing.num_padded.data_ptr()
            slots[_TOPK_W].value = None if topk_weights is None else topk_weights.data_ptr()
            slots[_GS].value = None if gscale is None else gscale.data_ptr()
            slots[_NUM_SLOTS].value = routing.num_slots
            slots[_A_DIV].value = a_div
            fire(current_stream(a.get_device()))
        return out
