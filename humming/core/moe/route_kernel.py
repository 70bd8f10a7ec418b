"""MoE routing on the GPU in one kernel launch: the kernels of :mod:`humming.core.moe.route_source`, compiled once per
target (NVRTC, disk-cached) and launched on torch's current stream with no host synchronisation, so a routing
captures in a CUDA graph.

    r = route_cuda(topk_ids, num_experts, block_m, expert_map=None)    # == route(...) of the torch ops, exactly
    r = routing_from_offsets_cuda(expert_offsets, num_rows, block_m)
    r = routing_from_counts_cuda(counts, capacity_per_expert, block_m)

:func:`~humming.core.moe.routing.route`, :func:`~humming.core.moe.routing.routing_from_offsets` and
:func:`~humming.core.moe.routing.routing_from_counts` call these for CUDA tensors whose sizes the one-block kernels
take (:func:`fits_route`, :func:`fits_layout`) on a device with a kernel (:func:`available`), and the torch ops
otherwise. Called directly, sizes beyond the kernels raise :class:`RoutingKernelLimit`.

The kernels are compiled for the live GPU's target (the device profile's compile route, as for every kernel), once
per (profile, live target); int32 and int64 inputs each have their own kernel, so nothing is converted first. A
device's first routing call loads every kernel of the module, so a CUDA graph captured after any one warm-up call may
use every form.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from humming.core.moe.route_source import (
    KERNEL_NAMES,
    MAX_EXPERTS,
    THREADS,
    layout_kernel_name,
    route_kernel_name,
    route_source,
)
from humming.core.moe.routing_base import (
    Routing,
    capacity,
    check_block_m,
    check_count,
    check_int_tensor,
    check_size,
    route_arguments,
)
from humming.core.runtime.helper_kernels import HelperModule, device_index
from humming.errors import ShapeError, UnsupportedOnDevice

__all__ = [
    "RoutingKernelLimit",
    "MAX_ROUTE_SLOTS",
    "MAX_LAYOUT_CAPACITY",
    "fits_route",
    "fits_layout",
    "available",
    "route_cuda",
    "routing_from_offsets_cuda",
    "routing_from_counts_cuda",
]

MAX_ROUTE_SLOTS = 1 << 17  # one block walks the slots THREADS at a time: 16384 tokens x top-8 is 128 chunks
MAX_LAYOUT_CAPACITY = 1 << 24  # the grouped forms write each position once (a binary search each)

_POISON = False  # tests set it: outputs are filled with garbage before each launch
_BITS = {torch.int32: 32, torch.int64: 64}
_ROUTE_ARGS = "ppii" + "iiii" + "ppp"  # ids map has_map num_global | slots experts block_m capacity | outputs
_LAYOUT_ARGS = "p" + "iiii" + "ppp"  # input | experts rows-or-per-expert block_m capacity | outputs


class RoutingKernelLimit(ShapeError):
    """The sizes are beyond what the one-block routing kernels take (the torch ops route them instead)."""


def fits_route(num_slots: int, num_experts: int) -> bool:
    """Whether :func:`route_cuda` takes ``num_slots`` slots over ``num_experts`` local experts."""
    return num_slots <= MAX_ROUTE_SLOTS and num_experts <= MAX_EXPERTS


def fits_layout(cap: int, num_experts: int) -> bool:
    """Whether the grouped forms take a routing of ``cap`` entries (:func:`~humming.core.moe.routing.capacity`) over
    ``num_experts`` experts."""
    return cap <= MAX_LAYOUT_CAPACITY and num_experts <= MAX_EXPERTS


# ------------------------------------------------------------------------------------------------- kernels
class _Kernels:
    """The routing kernels of one device: a launcher per kernel, each with its own argument block (the driver copies
    the arguments at launch, so the block is rewritten under its lock for every call)."""

    def __init__(self, cubin: bytes, device: int):
        from humming.core.runtime.kernel import ArgBlock, LoadedKernel

        self.device = device
        self.launches: dict[str, tuple[object, Callable[[int], None]]] = {}
        for name in KERNEL_NAMES:
            kinds = _ROUTE_ARGS if name.startswith("humming_moe_route_") else _LAYOUT_ARGS
            args = ArgBlock(kinds, [0] * len(kinds))
            self.launches[name] = (args, LoadedKernel(cubin, name, 0).launcher(device, (1, 1, 1), THREADS, args))

    def launch(self, name: str, values: list) -> None:
        """Launch kernel ``name`` with ``values`` (pointers as integers or None, ints) on the current stream."""
        from humming.core.runtime.launch import current_stream

        args, fire = self.launches[name]
        with args.lock:
            for slot, value in zip(args.slots, values):
                slot.value = value
            fire(current_stream(self.device))


_MODULE = HelperModule("routing", route_source, KERNEL_NAMES, _Kernels)


def _kernels(device: int) -> _Kernels | str:
    """The kernels of ``device``, or why it has none (:func:`route_cuda` and the grouped forms then raise
    UnsupportedOnDevice with the reason, and routing runs on the torch ops)."""
    return _MODULE.on(device)


def available(device: torch.device | int) -> bool:
    """Whether the routing kernels run on this CUDA device (compiles them on the first call)."""
    index = device if isinstance(device, int) else (device.index if device.index is not None
                                                    else torch.cuda.current_device())
    return isinstance(_kernels(index), _Kernels)


def _launch(device: int, name: str, values: list) -> None:
    kernels = _kernels(device)
    if isinstance(kernels, str):
        raise UnsupportedOnDevice(kernels)
    if device == torch.cuda.current_device():
        kernels.launch(name, values)
    else:  # the kernel's function handle is fetched in the current context
        with torch.cuda.device(device):
            kernels.launch(name, values)


def _outputs(cap: int, block_m: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    sorted_ids = torch.empty(cap, dtype=torch.int32, device=device)
    expert_ids = torch.empty(cap // block_m, dtype=torch.int32, device=device)
    num_padded = torch.empty(1, dtype=torch.int32, device=device)
    if _POISON:
        for t in (sorted_ids, expert_ids, num_padded):
            t.fill_(-7777)
    return sorted_ids, expert_ids, num_padded


def _cuda_input(t: torch.Tensor, what: str) -> torch.Tensor:
    if not t.is_cuda:
        raise ShapeError(f"{what} must be a CUDA tensor for the routing kernel, got one on {t.device}")
    return t if t.is_contiguous() else t.contiguous()


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None or t.numel() == 0 else t.data_ptr()


# ------------------------------------------------------------------------------------------------- the forms
def route_cuda(topk_ids: torch.Tensor, num_experts: int, block_m: int, expert_map: torch.Tensor | None = None
               ) -> Routing:
    """:func:`~humming.core.moe.routing.route` in one kernel launch: the same routing (stable within an expert) for
    CUDA ``topk_ids [T, top_k]`` and ``expert_map`` (int32 or int64, each). Raises :class:`RoutingKernelLimit`
    beyond :data:`MAX_ROUTE_SLOTS` slots or :data:`~humming.core.moe.route_source.MAX_EXPERTS` experts and
    UnsupportedOnDevice where the device has no kernel."""
    num_tokens, top_k, num_slots, cap = route_arguments(topk_ids, num_experts, block_m, expert_map)
    if not fits_route(num_slots, num_experts):
        raise RoutingKernelLimit(f"the routing kernel takes up to {MAX_ROUTE_SLOTS} slots and {MAX_EXPERTS} experts, "
                                 f"got {num_slots} slots and {num_experts} experts; route() uses the torch ops there")
    return launch_route(topk_ids, num_experts, block_m, expert_map, cap)


def launch_route(topk_ids: torch.Tensor, num_experts: int, block_m: int, expert_map: torch.Tensor | None,
                 cap: int) -> Routing:
    """The routing kernel's launch for arguments already checked (``route_arguments``; ``cap`` their capacity) and
    sizes that fit it."""
    num_tokens, top_k = (int(d) for d in topk_ids.shape)
    num_slots = num_tokens * top_k
    ids = _cuda_input(topk_ids, "topk_ids")
    emap = None if expert_map is None else _cuda_input(expert_map, "expert_map")
    sorted_ids, expert_ids, num_padded = _outputs(cap, block_m, ids.device)
    name = route_kernel_name(_BITS[ids.dtype], _BITS[emap.dtype] if emap is not None else 32)
    _launch(device_index(ids), name, [
        _ptr(ids), _ptr(emap), int(emap is not None), 0 if emap is None else int(emap.shape[0]),
        num_slots, num_experts, block_m, cap,
        _ptr(sorted_ids), _ptr(expert_ids), num_padded.data_ptr(),
    ])
    return Routing(sorted_ids, expert_ids, num_padded, block_m, num_tokens, top_k, num_experts)


def _layout(form: str, src: torch.Tensor, num_experts: int, size: int, num_rows: int, block_m: int) -> Routing:
    """One launch of a grouped-form kernel: ``size`` is num_rows (offsets) or capacity_per_expert (counts)."""
    cap = capacity(num_rows, num_experts, block_m)
    check_size(num_rows, cap)
    if not fits_layout(cap, num_experts):
        raise RoutingKernelLimit(f"the grouped routing kernels take up to {MAX_LAYOUT_CAPACITY} entries and "
                                 f"{MAX_EXPERTS} experts, got {cap} entries and {num_experts} experts; the torch ops "
                                 f"route them instead")
    src = _cuda_input(src, "expert_offsets" if form == "offsets" else "counts")
    sorted_ids, expert_ids, num_padded = _outputs(cap, block_m, src.device)
    _launch(device_index(src), layout_kernel_name(form, _BITS[src.dtype]), [
        _ptr(src), num_experts, size, block_m, cap, _ptr(sorted_ids), _ptr(expert_ids), num_padded.data_ptr(),
    ])
    return Routing(sorted_ids, expert_ids, num_padded, block_m, num_rows, 1, num_experts)


def routing_from_offsets_cuda(expert_offsets: torch.Tensor, num_rows: int, block_m: int) -> Routing:
    """:func:`~humming.core.moe.routing.routing_from_offsets` in one kernel launch (CUDA offsets, int32 or int64)."""
    check_int_tensor(expert_offsets, "expert_offsets", 1, "[num_experts + 1]")
    check_count(num_rows, "num_rows", 0)
    check_block_m(block_m)
    num_experts = int(expert_offsets.shape[0]) - 1
    if num_experts < 1:
        raise ShapeError(f"expert_offsets must be [num_experts + 1] with at least one expert, "
                         f"got shape {tuple(expert_offsets.shape)}")
    return _layout("offsets", expert_offsets, num_experts, num_rows, num_rows, block_m)


def routing_from_counts_cuda(counts: torch.Tensor, capacity_per_expert: int, block_m: int) -> Routing:
    """:func:`~humming.core.moe.routing.routing_from_counts` in one kernel launch (CUDA counts, int32 or int64)."""
    check_int_tensor(counts, "counts", 1, "[num_experts]")
    check_count(capacity_per_expert, "capacity_per_expert", 0)
    check_block_m(block_m)
    num_experts = int(counts.shape[0])
    if num_experts < 1:
        raise ShapeError("counts must name at least one expert, got shape (0,)")
    return _layout("counts", counts, num_experts, capacity_per_expert, num_experts * capacity_per_expert, block_m)
