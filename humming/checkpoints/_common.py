"""Shared helpers of the checkpoint importers: key lookup, dtype/shape checks with clear messages, schemes."""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.core.quant import schemes
from humming.core.quant.schemes import Scheme
from humming.errors import SchemeError, ShapeError

FLOAT_SCALE_FORMATS = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}


def key(prefix: str, name: str, sep: str = ".") -> str:
    if not prefix:
        return name
    return prefix + name if prefix.endswith((".", "_")) else prefix + sep + name


def lookup(tensors: Mapping[str, torch.Tensor], prefix: str, name: str, layout: str, *, required: bool = True,
           seps: tuple[str, ...] = (".",)) -> torch.Tensor | None:
    """``tensors[prefix.name]`` (trying each separator), or a SchemeError naming what is there."""
    for sep in seps:
        k = key(prefix, name, sep)
        if k in tensors:
            return tensors[k]
    if not required:
        return None
    near = sorted(k for k in tensors if k.startswith(prefix))[:12] if prefix else sorted(tensors)[:12]
    raise SchemeError(
        f"{layout} checkpoint: tensor {key(prefix, name, seps[0])!r} is missing"
        + (f" (tensors under this prefix: {', '.join(near)})" if near else " (no tensor has this prefix)")
    )


def check_dtype(t: torch.Tensor, allowed: tuple[torch.dtype, ...], what: str, layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise ShapeError(f"{layout}: {what} must be a tensor, got {type(t).__name__}")
    if t.dtype not in allowed:
        names = " or ".join(str(d).replace("torch.", "") for d in allowed)
        raise ShapeError(f"{layout}: {what} must be {names}, got {str(t.dtype).replace('torch.', '')}")


def check_shape(t: torch.Tensor, shape: tuple[int, ...], what: str, layout: str, why: str = "") -> None:
    if tuple(t.shape) != tuple(shape):
        extra = f" ({why})" if why else ""
        raise ShapeError(f"{layout}: {what} must have shape {list(shape)}{extra}, got {list(t.shape)}")


def check_ndim(t: torch.Tensor, ndim: int, what: str, layout: str, layout_hint: str) -> None:
    if t.dim() != ndim:
        raise ShapeError(f"{layout}: {what} must be {ndim}-D {layout_hint}, got shape {list(t.shape)}")


def check_nvfp4_pair(codes: torch.Tensor, scales: torch.Tensor, codes_name: str, scales_name: str, layout: str,
                     codes_hint: str) -> tuple[int, int]:
    """NVFP4 weights: uint8 [N, K/2] (two e2m1 codes a byte) and float8_e4m3fn [N, K/16]; returns (N, K)."""
    check_dtype(codes, (torch.uint8,), codes_name, layout)
    check_ndim(codes, 2, codes_name, layout, codes_hint)
    n, half_k = codes.shape
    k = 2 * half_k
    check_dtype(scales, (torch.float8_e4m3fn,), scales_name, layout)
    check_shape(scales, (n, k // 16), scales_name, layout, "one e4m3 scale per 16 weights")
    return n, k


def scale_format(t: torch.Tensor, what: str, layout: str) -> str:
    check_dtype(t, tuple(FLOAT_SCALE_FORMATS), what, layout)
    return FLOAT_SCALE_FORMATS[t.dtype]


def infer_group(k: int, g_count: int, group_size: int | None, layout: str) -> int | None:
    """Group size from K and the number of scale rows (None: one scale per channel)."""
    if group_size is not None and group_size in (-1, 0):
        group_size = None
    if group_size is None:
        if g_count == 1:
            return None
        if k % g_count:
            raise ShapeError(f"{layout}: cannot infer the group size: K={k} is not a multiple of the {g_count} "
                             f"scale groups; pass group_size=")
        return k // g_count
    if -(-k // group_size) != g_count:
        raise ShapeError(f"{layout}: group_size={group_size} and K={k} give {-(-k // group_size)} groups, "
                         f"but the scales have {g_count}")
    return group_size


def nontrivial_g_idx(g_idx: torch.Tensor | None, k: int, group: int | None, n_groups: int,
                     layout: str) -> torch.Tensor | None:
    """Validated int32 g_idx, or None when it is the natural order (k // group)."""
    if g_idx is None:
        return None
    check_dtype(g_idx, (torch.int32, torch.int64, torch.int16), "g_idx", layout)
    check_shape(g_idx, (k,), "g_idx", layout, "one group index per input column")
    g = g_idx.to(torch.int64)
    if k and (int(g.min()) < 0 or int(g.max()) >= n_groups):
        raise ShapeError(f"{layout}: g_idx values must lie in [0, {n_groups}), got [{int(g.min())}, {int(g.max())}]")
    natural = torch.arange(k, device=g.device) // group if group else torch.zeros(k, dtype=torch.int64,
                                                                                   device=g.device)
    if torch.equal(g, natural):
        return None
    if group is None:
        raise ShapeError(f"{layout}: a per-channel weight cannot have a non-trivial g_idx")
    return g.to(torch.int32).contiguous()


_PRESET_ORDER = ["w4a16", "w4a16-zp", "w8a16", "w8a16-zp", "w3a16", "w2a16", "w2a16-zp", "w1a16", "w4a16-fp4",
                 "w8a16-fp8", "w4a16-nvfp4", "w4a16-mxfp4", "mxint4", "w8a8-fp8-tensor", "w8a8-fp8-block", "mxfp8",
                 "mxfp6", "mxfp6-e3m2"]


def make_scheme(weight: str, *, group: int | None, scale_fmt: str, zero_point: str | None = None,
                global_scale: bool = False, act_order: bool = False, block: tuple[int, int] | None = None,
                granularity: str | None = None) -> Scheme:
    """A weight-only scheme with these fields, named after the closest preset (for a readable str())."""
    gran = granularity or ("block" if block else ("group" if group else "channel"))
    fields = dict(weight=weight, granularity=gran, group_size=group if gran == "group" else None,
                  block=block if gran == "block" else None, scale_format=scale_fmt, global_scale=global_scale,
                  zero_point=zero_point, act=None, act_scale="none", act_group_size=None, act_scale_format="f32",
                  act_global_scale=False, act_order=act_order)
    base = "custom"
    for name in _PRESET_ORDER:
        p = schemes.get(name)
        if p.weight == weight and p.zero_point == zero_point and p.weight_scale.format == scale_fmt:
            base = name
            break
    flat = schemes.get(base).to_flat()
    flat.update(fields)
    flat["name"] = base
    return Scheme.from_flat(flat)
