"""Launching a planned kernel: the argument block every GEMM kernel takes, filled once per (weight, M) and
rewritten per call only where pointers change; split-K workspaces per (device, stream); TMA tensor maps.

Kernel parameters, in order: A B S Z CS BIAS C WS CNT M N K k_per_split out_scale GS, then the TMA tensor maps the
plan's kernel reads (activations, weights). What A, S, Z, CS and GS hold depends on how the activations reach the
kernel (humming.core.runtime.inputs)."""
from __future__ import annotations

import torch

from humming.core.runtime.kernel import ArgBlock, TensorMap2D

PARAM_KINDS = "ppppppppp" + "iiii" + "f" + "p"
WEIGHT_SLOTS = (1, 2, 3, 4, 5)  # B S Z CS BIAS: rewritten only when other tensor objects are passed
# (A, C and GS, slots 0, 6 and 14, are written on every call)

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

# Split-K partials and tile counters, one pair per (device index, stream): GEMMs running at the same time on two
# streams must not share them (a counter summed by two launches; the stream-K form's finishing block would wait for
# a count it never sees). A CUDA graph keeps the workspace of the stream it was captured on.
workspaces: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
# Workspaces replaced by larger ones stay allocated: a CUDA graph captured earlier holds their addresses.
retired_workspaces: list[tuple[torch.Tensor, torch.Tensor]] = []


def current_stream(device: int) -> int:
    """The handle of torch's current stream on ``device`` (the raw accessor skips building a Stream object)."""
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(device).cuda_stream


def workspace(device: torch.device, floats: int, counters: int, stream: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The (partials, counters) workspace of ``stream`` (default: the current one) on ``device``, grown to at least
    ``floats`` and ``counters`` (counters zeroed when made; kernels leave them zero)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    key = (idx, current_stream(idx) if stream is None else stream)
    ws, cnt = workspaces.get(key, (None, None))
    if ws is None or ws.numel() < floats or cnt.numel() < counters:
        if ws is not None:
            retired_workspaces.append((ws, cnt))
        floats = max(floats, 0 if ws is None else ws.numel(), 1 << 20)
        counters = max(counters, 0 if cnt is None else cnt.numel(), 1 << 14)
        ws = torch.empty(floats, dtype=torch.float32, device=device)
        cnt = torch.zeros(counters, dtype=torch.int32, device=device)  # counters reset themselves after use
        workspaces[key] = (ws, cnt)
    return ws, cnt


def tma_boxes(p) -> tuple[tuple | None, tuple | None]:
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


class LaunchSpec:
    """Everything a launch for one M needs, computed once: the hot path only fills in a few pointers."""

    __slots__ = ("plan", "inputs", "packed", "kernel", "args", "keep", "grid", "threads", "weights", "xmap", "wmap",
                 "pdl", "cluster", "fire", "ws_stream")

    def __init__(self, plan, inputs: str, packed, kernel, device: torch.device, out_scale: float):
        self.plan, self.inputs, self.packed, self.kernel = plan, inputs, packed, kernel
        self.grid, self.threads, self.pdl, self.cluster = plan.grid, plan.threads, plan.pdl, plan.cluster_dims
        stream = current_stream(device.index if device.index is not None else torch.cuda.current_device())
        ws, cnt = workspace(device, plan.workspace_floats, self.grid[0] * self.grid[1], stream)
        values = [0] * 7 + [ws.data_ptr(), cnt.data_ptr(), plan.m, plan.n, plan.k, plan.k // self.grid[2],
                            out_scale, 0]
        x_box, w_box = tma_boxes(plan)
        maps = [b for b in (x_box, w_box) if b is not None]
        self.args = ArgBlock(PARAM_KINDS + "t" * len(maps), values + [None] * len(maps))
        self.xmap = TensorMap2D(*x_box) if x_box else None
        self.wmap = TensorMap2D(*w_box) if w_box else None
        self.keep = (ws, cnt)  # the workspace outlives the spec that points at it
        self.ws_stream = stream if plan.workspace_floats else None
        self.weights = ()
        self.fire = None

    def launch(self, a: torch.Tensor, out: torch.Tensor, weights: tuple, gscale: torch.Tensor | None) -> None:
        """One launch on the current stream: ``a`` the kernel's A operand [M, ...], ``out`` [M, N], ``weights`` the
        (B, S, Z, CS, BIAS) tensors (or None), ``gscale`` the GS operand."""
        device = a.get_device()
        stream = current_stream(device)
        block = self.args
        slots = block.slots
        with block.lock:  # the slots are shared by every call of this (weight, M); the driver copies them at launch
            if self.ws_stream is not None and self.ws_stream != stream:  # a split kernel on another stream
                ws, cnt = workspace(a.device, self.plan.workspace_floats, self.grid[0] * self.grid[1], stream)
                slots[7].value, slots[8].value = ws.data_ptr(), cnt.data_ptr()  # (workspaces keeps them allocated)
                self.ws_stream = stream
            slots[0].value = a.data_ptr()
            slots[6].value = out.data_ptr()
            if self.xmap is not None and self.xmap.address != slots[0].value:
                self.xmap.encode(slots[15], slots[0].value)
            slots[14].value = None if gscale is None else gscale.data_ptr()
            w = self.weights  # the weight-side tensor objects of the last call (identity: they are kept alive here)
            if not (w and w[0] is weights[0] and w[1] is weights[1] and w[2] is weights[2] and w[3] is weights[3]
                    and w[4] is weights[4]):
                w = self.weights = weights
                for slot, t in zip(WEIGHT_SLOTS, w):
                    slots[slot].value = None if t is None else t.data_ptr()
                if self.wmap is not None:
                    self.wmap.encode(slots[16], slots[1].value)
            fire = self.fire
            if fire is None:  # built once per (weight, M): grid, block, attributes and argument block are fixed
                fire = self.fire = self.kernel.launcher(device, self.grid, self.threads, block, self.pdl, self.cluster)
            fire(stream)
