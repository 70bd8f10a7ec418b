"""The checks the public entry points (humming.plan, humming.gemm and friends, the MoE GEMMs, humming.nn.QuantLinear,
prepare / prepared) make on their arguments, on the host, once per call: problem sizes are positive ints that fit a
C int, activations are tensors with a feature dimension and a dtype the path takes, weights are QuantizedWeights,
and x, the weights, a bias and an output are on one device. Each failure is a ShapeError (DeviceMismatchError for
tensors on different devices) naming the argument, what was given and a fix that works.

What is checked when: the weights' device, x's dtype and the preparation arguments once per (weight, dtype,
device) (the first call; later calls find the prepared weight under x's dtype and device); a bias and an output on
every call (they may change from call to call). A non-contiguous or misaligned x or bias is copied (documented on
humming.gemm), not refused."""
from __future__ import annotations

import math
import operator

import torch

from humming.core.quant.quantize import QuantizedWeight
from humming.errors import DeviceMismatchError, ShapeError

__all__ = ["MAX_DIM", "dimension", "dimensions", "activation", "quantized_weight", "features_error", "rows",
           "bias", "bias_error", "kernel_activation", "reference_activation", "weight_device", "same_device",
           "prepare_args", "check_out", "KERNEL_DTYPES", "BIAS_DTYPES"]

#: The activation (and output) dtypes of the kernels; the CPU reference takes any float dtype.
KERNEL_DTYPES = (torch.float16, torch.bfloat16)
#: The dtypes a bias may have (the kernels read it as x's dtype: a copy where it differs).
BIAS_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

#: The largest M, N or K: the kernels take sizes (and M in particular) as 32-bit C ints.
MAX_DIM = 2**31 - 1

_ROLES = {"M": "rows of x (tokens)", "N": "output features (rows of the weight)",
          "K": "input features (columns of the weight)"}


def _suggest(value) -> str:
    """A whole-number spelling of ``value`` where it has an obvious one ('16', 16.0, 1.5 -> 2), else ''."""
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return ""
    if not math.isfinite(number) or number < 1:
        return ""
    return str(math.ceil(number))


def dimension(name: str, value) -> int:
    """``value`` as the problem size ``name`` ("M", "N" or "K"): an int (numpy and 0-d integer tensors too; bool,
    float, str and None refused) in [1, 2**31 - 1]. Raises ShapeError with a fix otherwise."""
    role = _ROLES.get(name, "elements")
    if isinstance(value, bool):
        raise ShapeError(f"{name} must be an int (the number of {role}), not the bool {value}")
    try:
        v = operator.index(value)
    except TypeError:
        hint = _suggest(value)
        fix = f"pass {name}={hint}" if hint else f"pass the number of {role} as an int"
        raise ShapeError(f"{name} must be an int (the number of {role}), got {value!r} "
                         f"({type(value).__name__}); {fix}") from None
    if v < 1:
        raise ShapeError(f"{name} must be at least 1 (the number of {role}), got {v}")
    if v > MAX_DIM:
        split = "split x into chunks of at most" if name == "M" else "split the weight into parts of at most"
        raise ShapeError(f"{name}={v} does not fit the kernels' 32-bit C int (at most {MAX_DIM}); {split} "
                         f"{MAX_DIM} {role} and call once per chunk")
    return v


def dimensions(m, n, k) -> tuple[int, int, int]:
    """(M, N, K) checked by ``dimension``."""
    return dimension("M", m), dimension("N", n), dimension("K", k)


def rows(m: int) -> None:
    """The check gemm makes on every call: x's row count fits the kernels' C int (one int comparison)."""
    if m > MAX_DIM:
        raise ShapeError(f"x has {m} rows (M) but the kernels take M as a 32-bit C int (at most {MAX_DIM}); split x "
                         f"into chunks of at most {MAX_DIM} rows and call once per chunk")


def _kind(value) -> str:
    kind = type(value)
    return "None" if value is None else f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")


def activation(x, where: str) -> None:
    """``x`` is a torch.Tensor with at least one dimension (the K features); a numpy array gets the conversion."""
    if not isinstance(x, torch.Tensor):
        fix = "torch.from_numpy(x)" if type(x).__module__ == "numpy" else "a torch.Tensor [..., K]"
        raise ShapeError(f"{where}: x must be a torch.Tensor [..., K], got {_kind(x)}; pass {fix}")
    if x.dim() == 0:
        raise ShapeError(f"{where}: x must have a feature dimension [..., K], got a 0-d tensor; pass x.reshape(1, -1) "
                         "for one token")


def features_error(x: torch.Tensor, k: int) -> ShapeError:
    """The error for an ``x`` whose last dimension is not the weight's K (0-d included)."""
    if x.dim() == 0:
        return ShapeError(f"x must have a feature dimension [..., K={k}], got a 0-d tensor; pass x.reshape(1, -1) "
                          "for one token")
    return ShapeError(f"x has {x.shape[-1]} input features but the weight expects K={k}")


def quantized_weight(qw, where: str) -> None:
    """``qw`` is a humming QuantizedWeight (what humming.quantize and humming.checkpoints return)."""
    if not isinstance(qw, QuantizedWeight):
        fix = ("quantize it first: humming.quantize(w, scheme)" if isinstance(qw, torch.Tensor)
               else "humming.quantize(w, scheme) or a weight from humming.checkpoints")
        raise ShapeError(f"{where} takes a humming QuantizedWeight, got {_kind(qw)}; {fix}")


def kernel_activation(x: torch.Tensor, where: str) -> None:
    """``x`` (on a GPU) is float16 or bfloat16, the types the kernels take."""
    if x.dtype not in KERNEL_DTYPES:
        fix = "x.half() or x.bfloat16()" if x.is_floating_point() else "x.half() (or x.bfloat16())"
        raise ShapeError(f"{where}: x is {x.dtype}; the GPU kernels take float16 or bfloat16 activations: pass {fix} "
                         "(CPU tensors run the reference in any float dtype)")


def reference_activation(x: torch.Tensor, where: str) -> None:
    """``x`` (on the CPU: the reference) is a float tensor."""
    if not x.is_floating_point():
        raise ShapeError(f"{where}: x must be a float tensor, got {x.dtype}; pass x.float() (or x.half() / "
                         "x.bfloat16() for the GPU kernels)")


def _move(t: str, device: torch.device) -> str:
    return f"{t}.to('{device}')"


def weight_device(qw, x: torch.Tensor, where: str, what: str = "the weight") -> None:
    """``qw``'s tensors and ``x`` on one device (checked once per preparation; MoE forms: per call). x on the CPU with
    the weights on a GPU would silently run the CPU reference, and the reverse would silently copy the weights."""
    dev = qw.packed.device
    if dev != x.device:
        if x.device.type == "cpu" and dev.type != "cpu":
            fix = (f"pass {_move('x', dev)} to run the kernel there, or move the weight to the CPU "
                   f"({_move('qw', x.device)}) to run the reference")
        elif dev.type == "cpu":
            fix = (f"move the weight once: qw = {_move('qw', x.device)} (a humming.nn module: module.to('{x.device}')"
                   f"), or pass {_move('x', dev)} to run the CPU reference")
        else:
            fix = f"pass {_move('x', dev)} or move the weight: qw = {_move('qw', x.device)}"
        raise DeviceMismatchError(f"{where}: x is on {x.device}, {what} on {dev}; the tensors of one call must be on "
                                  f"one device: {fix}")


def weight_tensors_device(qw, where: str) -> None:
    """Every tensor of ``qw`` on its packed codes' device (a weight assembled by hand may mix them)."""
    dev = qw.packed.device
    for name, t in qw._tensors().items():
        if t is not None and t.device != dev:
            raise DeviceMismatchError(f"{where}: the weight's {name} is on {t.device} but its packed codes are on "
                                      f"{dev}; move the whole weight with qw.to(device)")


def same_device(x: torch.Tensor, where: str, **tensors) -> None:
    """Every given tensor (None skipped) on x's device (a kernel would read another device's pointer)."""
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ShapeError(f"{where}: {name} must be a torch.Tensor on x's device ({x.device}), got {_kind(t)}")
        if t.device != x.device:
            raise DeviceMismatchError(f"{where}: {name} is on {t.device}, not on x's device ({x.device}); pass "
                                      f"{_move(name, x.device)}")


def bias(b, x: torch.Tensor, n: int, where: str) -> None:
    """The per-call check of a ``bias``: None or a 1-D float16 / bfloat16 / float32 tensor of N elements on x's device
    (a kernel reading a shorter one reads past its end). A non-contiguous bias is copied."""
    if b is not None and (not isinstance(b, torch.Tensor) or b.shape != (n,) or b.dtype not in BIAS_DTYPES
                          or b.device != x.device):
        raise bias_error(b, x, n, where)


def bias_error(b, x: torch.Tensor, n: int, where: str) -> ShapeError:
    """The error for a ``bias`` that ``bias`` refuses: what is wrong and how to fix it."""
    if not isinstance(b, torch.Tensor):
        fix = "torch.from_numpy(bias)" if type(b).__module__ == "numpy" else f"a torch.Tensor [{n}]"
        return ShapeError(f"{where}: bias must be a torch.Tensor [N={n}] or None, got {_kind(b)}; pass {fix}")
    if b.shape != (n,):
        fix = ("bias.reshape(-1)" if b.numel() == n else
               f"one value per output feature (the weight's rows); pad or slice the bias to {n} elements")
        return ShapeError(f"{where}: bias must be 1-D with N={n} elements (one per output feature), got shape "
                          f"{tuple(b.shape)}; pass {fix}")
    if b.dtype not in BIAS_DTYPES:
        return ShapeError(f"{where}: bias must be float16, bfloat16 or float32, got {b.dtype}; pass bias.to(x.dtype)")
    return DeviceMismatchError(f"{where}: bias is on {b.device}, not on x's device ({x.device}); pass "
                               f"{_move('bias', x.device)}")


def prepare_args(dtype, device, where: str) -> torch.device:
    """The (activation dtype, device) a weight is prepared for: float16 or bfloat16 and a device torch can parse."""
    if not isinstance(dtype, torch.dtype) or dtype not in KERNEL_DTYPES:
        raise ShapeError(f"{where}: dtype is the activations' type, torch.float16 or torch.bfloat16; got {dtype!r}")
    if isinstance(device, torch.device):
        return device
    try:
        return torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ShapeError(f"{where}: device must be a torch.device, a string such as 'cuda' or 'cuda:0', or a GPU "
                         f"index; got {device!r}") from None


def check_out(out: torch.Tensor, x: torch.Tensor, n: int, kernel_writes: bool = True) -> None:
    """The checks of an ``out=`` argument: a tensor of shape [*x.shape[:-1], N] with x's dtype and device and, where a
    kernel writes it (``kernel_writes``; under torch.compile the traced graph copies into it), contiguous (the
    kernels write whole rows), its start 16-byte aligned (16-byte stores), and sharing no memory with x (the kernels
    read x while they write). Raises ShapeError naming what is wrong (DeviceMismatchError for another device)."""
    if not isinstance(out, torch.Tensor):
        raise ShapeError(f"out must be a torch.Tensor, not {type(out).__name__}")
    want = (*x.shape[:-1], n)
    if out.shape != want:
        raise ShapeError(f"out has shape {tuple(out.shape)}; this GEMM writes {want} (x's leading dimensions x N)")
    if out.dtype != x.dtype:
        raise ShapeError(f"out is {out.dtype}; this GEMM writes x's dtype, {x.dtype}")
    # (CUDA x: device indices as ints, no objects; the CPU and other devices all say -1 there: compared in full)
    if (out.get_device() != x.get_device() or (x.get_device() < 0 and out.device != x.device)) if kernel_writes \
            else (out.device != x.device):
        raise DeviceMismatchError(f"out is on {out.device}, x on {x.device}: give an output on x's device")
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
