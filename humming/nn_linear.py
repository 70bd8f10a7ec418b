"""humming.nn.QuantLinear: a linear layer on a humming QuantizedWeight."""
from __future__ import annotations

import torch

from humming.core.quant import arguments
from humming.core.quant.experts import dense_only
from humming.errors import DeviceMismatchError, ShapeError
from humming.moe_ops import WEIGHTS
from humming.moe_ops import handle as weight_handle


@torch.library.custom_op("humming::reference_gemm", mutates_args=())
def _reference_op(x: torch.Tensor, bias: torch.Tensor | None, weight: int) -> torch.Tensor:
    """The reference GEMM of the weight with handle ``weight`` (humming.moe_ops), as traced CPU graphs call it where
    the activations are quantized (the weight-only reference traces as torch operations)."""
    from humming.core.quant.reference import reference_gemm

    return reference_gemm(x, WEIGHTS[weight], bias=bias).to(x.dtype)


@_reference_op.register_fake
def _(x, bias, weight):
    return x.new_empty((*x.shape[:-1], WEIGHTS[weight].shape[0]))


def _reference(x: torch.Tensor, layer, bias: torch.Tensor | None) -> torch.Tensor:
    """The CPU reference under torch.compile."""
    if not getattr(layer.qweight.scheme, "act", None):
        from humming.core.quant.reference import reference_gemm

        return reference_gemm(x, layer.qweight, bias=bias)
    h = getattr(layer, "_reference_handle", None)
    if h is None:
        raise RuntimeError("QuantLinear: run the layer once eagerly on the CPU before torch.compile (quantized "
                           "activations trace through a custom op whose weight handle that call makes)")
    return torch.ops.humming.reference_gemm(x, bias, h)


class QuantLinear(torch.nn.Module):
    """A linear layer whose weight is a humming QuantizedWeight: y = x @ W^T + b.

    CUDA inputs run the generated kernel for the current device (traceable by torch.compile through the
    ``humming::gemm`` custom op, every scheme); CPU inputs run the reference (traced as torch operations). The
    weight must be a dense QuantizedWeight, the bias None or a float16 / bfloat16 / float32 tensor [out_features] on the weight's device, and the input a
    torch.Tensor [..., in_features] on the weight's device (ShapeError / DeviceMismatchError naming the fix
    otherwise; ``module.to(device)`` moves the weight and the bias together)."""

    def __init__(self, qweight, bias: torch.Tensor | None = None):
        super().__init__()
        arguments.quantized_weight(qweight, "QuantLinear")
        dense_only(qweight, "QuantLinear")
        if bias is not None and not isinstance(bias, torch.Tensor):
            raise ShapeError(f"QuantLinear: bias must be a torch.Tensor or None, got {type(bias).__name__}")
        self.qweight = qweight
        self.out_features, self.in_features = qweight.shape
        if bias is not None and bias.shape != (self.out_features,):
            raise ShapeError(f"bias must have shape ({self.out_features},), got {tuple(bias.shape)}")
        if bias is not None and bias.dtype not in arguments.BIAS_DTYPES:
            raise ShapeError(f"QuantLinear: bias must be float16, bfloat16 or float32, got {bias.dtype}; pass "
                             "bias.float()")
        if bias is not None and bias.device != qweight.packed.device:
            dev = qweight.packed.device
            raise DeviceMismatchError(f"QuantLinear: bias is on {bias.device}, the weight on {dev}; pass "
                                      f"bias.to('{dev}') (module.to(device) then moves both)")
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, scheme, **quantize_kwargs) -> QuantLinear:
        """Quantize an nn.Linear with a scheme (a Scheme or a preset name such as 'w4a16')."""
        from humming.core.quant.quantize import quantize

        if not isinstance(linear, torch.nn.Linear):
            raise ShapeError(f"QuantLinear.from_linear takes a torch.nn.Linear, got {type(linear).__name__}; for a "
                             "weight tensor use QuantLinear(humming.quantize(w, scheme), bias)")
        qw = quantize(linear.weight.detach(), scheme, **quantize_kwargs)
        return cls(qw, linear.bias)

    @classmethod
    def from_quantized(cls, qweight, bias: torch.Tensor | None = None) -> QuantLinear:
        """Wrap an imported checkpoint (see humming.checkpoints) or any QuantizedWeight."""
        return cls(qweight, bias if bias is not None else qweight.bias)

    def _apply(self, fn, recurse=True):  # .cuda() / .to() move the quantized tensors too
        super()._apply(fn, recurse)
        probe = fn(torch.empty(0, device=self.qweight.packed.device))
        if probe.device != self.qweight.packed.device:
            self.qweight = self.qweight.to(probe.device)
        return self

    def prepare(self, dtype: torch.dtype, device: torch.device | str = "cuda") -> int:
        """Repack the weight for the kernels of this device and activation dtype (done on first use anyway;
        call it before torch.compile if the module has not run eagerly)."""
        from humming.api import prepared

        device = arguments.prepare_args(dtype, device, "QuantLinear.prepare")
        self._handle = prepared(self.qweight, dtype, device)
        self._handle_key = (dtype, device.type)
        return self._handle

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from humming.api import gemm, gemm_prepared

        if not isinstance(x, torch.Tensor):
            arguments.activation(x, "QuantLinear")
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if torch.compiler.is_compiling():
            if not x.is_cuda:  # the reference
                return _reference(x, self, bias)
            handle = getattr(self, "_handle", None)
            if handle is None:
                raise RuntimeError("QuantLinear: call .prepare(dtype, device) (or run once eagerly) before torch.compile")
            return gemm_prepared(x, handle, bias)
        if not x.is_cuda and getattr(self.qweight.scheme, "act", None):
            self._reference_handle = weight_handle(self.qweight)  # (for a later torch.compile on the CPU)
        if x.is_cuda and getattr(self, "_handle_key", None) != (x.dtype, "cuda"):
            arguments.weight_device(self.qweight, x, "QuantLinear", "the layer's weight")  # (before a copy)
            self.prepare(x.dtype, x.device)
        return gemm(x, self.qweight, bias=bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, scheme={self.qweight.scheme}"
