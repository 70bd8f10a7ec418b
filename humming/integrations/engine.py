"""humming as an inference engine's quantized linear and mixture-of-experts backend, in the engine's terms: the
checkpoint's quantization_config decides whether humming can run a model (``can_implement``); per layer the
engine hands over the checkpoint's tensors as its loader reads them (``load_weight``), calls
``process_weights_after_loading`` once (the tensors are imported, split for this rank, repacked for the kernels and
the checkpoint layout freed) and then ``apply`` per forward.

    method = LinearMethod(hf_config["quantization_config"], "model.layers.0.self_attn.o_proj", tp_rank=r, tp_size=w,
                          parallel="row")
    method.create_weights(layer)
    for name, tensor in shard_tensors:           # the checkpoint's tensors of this module, full (unsplit)
        method.load_weight(layer, name, tensor)
    method.process_weights_after_loading(layer)
    y = method.apply(layer, x, bias)             # then all-reduce over the tensor-parallel group

    moe = MoEMethod(hf_config["quantization_config"], "model.layers.0.mlp.experts", num_experts=E, ep_rank=r,
                    ep_size=w)
    moe.load_weight(layer, "qweight", tensor, expert_id=e, shard_id="w1")   # w1 gate, w3 up, w2 down
    ...
    y = moe.apply(layer, x, topk_weights, topk_ids)

``layer`` is any object that takes attributes (the engine's torch module). The tensors are the checkpoint's, full;
the methods split them for ``tp_rank`` / ``ep_rank``. Everything runs on the tensors' device: CUDA runs humming's
kernels, CPU the reference. What was run: docs/models.md."""
from __future__ import annotations

import torch

from humming.checkpoints.quant_config import ModuleQuant, QuantConfig, parse_quant_config
from humming.errors import HummingError, SchemeError, ShapeError

__all__ = ["can_implement", "LinearMethod", "MoEMethod", "SHARD_IDS"]

SHARD_IDS = {"w1": "gate", "w3": "up", "w2": "down"}  # the engines' names of an expert's projections


def can_implement(quantization_config: dict, profile=None) -> tuple[bool, str]:
    """(whether humming runs checkpoints with this quantization_config on the device (or ``profile``), why not /
    what it will run)."""
    from humming.devices.current import resolve_profile

    try:
        quant = parse_quant_config(quantization_config)
        caps = resolve_profile(profile)
    except HummingError as exc:
        return False, str(exc)
    kinds = sorted({f"{g.quant.layout}" + (f" with {g.quant.activations} activations" if g.quant.activations else "")
                    for g in quant.groups})
    return True, f"{quant.method} checkpoint ({', '.join(kinds)}) on {caps.name}"


def _config(quantization_config) -> QuantConfig:
    return quantization_config if isinstance(quantization_config, QuantConfig) else \
        parse_quant_config(quantization_config)


def _leaf(name: str, prefix: str) -> str:
    """A checkpoint tensor's name below the module (``model...o_proj.qweight`` or ``qweight`` -> ``qweight``)."""
    return name[len(prefix) + 1:] if prefix and name.startswith(prefix + ".") else name


def _loaded(layer, attr: str, prefix: str) -> dict:
    """The checkpoint tensors load_weight put on ``layer`` (SchemeError where there are none)."""
    tensors = getattr(layer, attr, None)
    if not tensors:
        raise SchemeError(f"{prefix}: no checkpoint tensor was loaded (load_weight) before "
                          f"process_weights_after_loading")
    return tensors


class LinearMethod:
    """One quantized linear layer (module ``prefix`` of the checkpoint), split ``parallel`` ("column": the output
    features; "row": the input features; None: whole) over ``tp_size`` ranks."""

    def __init__(self, quantization_config, prefix: str, *, tp_rank: int = 0, tp_size: int = 1,
                 parallel: str | None = None):
        self.quant = _config(quantization_config)
        self.prefix = prefix
        self.module: ModuleQuant = self.quant.for_module(prefix)
        if tp_size > 1 and parallel is None:
            raise ShapeError(f"{prefix}: tp_size {tp_size} needs parallel='column' or 'row'")
        self.tp_rank, self.tp_size, self.parallel = tp_rank, tp_size, parallel

    def create_weights(self, layer) -> None:
        layer.humming_tensors = {}

    def load_weight(self, layer, name: str, tensor: torch.Tensor) -> None:
        """One checkpoint tensor of this module (its full name or the part after the module's)."""
        layer.humming_tensors[_leaf(name, self.prefix)] = tensor

    def process_weights_after_loading(self, layer) -> None:
        """Import the tensors once, keep this rank's part, prepare it for the kernels of the tensors' device and
        free the checkpoint layout."""
        from humming.checkpoints import import_tensors
        from humming.core.quant.sharding import shard_linear

        tensors = _loaded(layer, "humming_tensors", self.prefix)
        m = self.module
        try:
            qw = import_tensors(tensors, "", m.layout, activations=m.activations, **m.options)
        except HummingError as exc:
            raise type(exc)(f"{self.prefix}: {exc}") from None
        if self.tp_size > 1:
            qw = shard_linear(qw, self.tp_rank, self.tp_size, self.parallel)
        layer.humming_weight = qw
        del layer.humming_tensors

    def apply(self, layer, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """y = x @ W^T (+ bias, and the checkpoint's own bias where this rank keeps it)."""
        from humming.api import gemm

        qw = layer.humming_weight
        if bias is None and qw.bias is not None:
            bias = qw.bias
        return gemm(x, qw, bias=bias)


class MoEMethod:
    """One mixture-of-experts layer whose experts the checkpoint stores one linear per expert under ``prefix``
    (``model.layers.0.mlp.experts``), ``num_experts`` of them; split over ``tp_size`` ranks by the intermediate size
    or over ``ep_size`` ranks by experts; ``activation`` as humming.nn.QuantMoE takes it."""

    def __init__(self, quantization_config, prefix: str, num_experts: int, *, activation: str = "silu",
                 tp_rank: int = 0, tp_size: int = 1, ep_rank: int = 0, ep_size: int = 1):
        self.quant = _config(quantization_config)
        self.prefix, self.num_experts, self.activation = prefix, int(num_experts), activation
        self.module: ModuleQuant = self.quant.for_module(f"{prefix}.0.gate_proj")
        if tp_size > 1 and ep_size > 1:
            raise ShapeError(f"{prefix}: split by tensor parallelism or by experts, not both")
        self.tp_rank, self.tp_size, self.ep_rank, self.ep_size = tp_rank, tp_size, ep_rank, ep_size
        if not 0 <= ep_rank < max(ep_size, 1):
            raise ShapeError(f"{prefix}: ep_rank {ep_rank} is outside [0, {ep_size})")
        if self.num_experts % max(ep_size, 1):
            raise ShapeError(f"{prefix}: expert parallelism splits {self.num_experts} experts over {ep_size} ranks; "
                             f"the number of experts must be a multiple of the world size")
        part = self.num_experts // max(ep_size, 1)
        # this rank's experts: the only ones whose tensors are kept (the others' are dropped as they are loaded)
        self.local_experts = range(ep_rank * part, (ep_rank + 1) * part)

    def create_weights(self, layer) -> None:
        layer.humming_expert_tensors = {}

    def load_weight(self, layer, name: str, tensor: torch.Tensor, expert_id: int, shard_id: str) -> None:
        """One checkpoint tensor (``name``: e.g. ``qweight`` or its full name) of expert ``expert_id``'s projection
        ``shard_id`` ("w1" gate, "w3" up, "w2" down). With expert parallelism, another rank's expert's tensor is
        dropped here (this rank never holds more than its own experts)."""
        if shard_id not in SHARD_IDS:
            raise ShapeError(f"{self.prefix}: shard_id must be one of {sorted(SHARD_IDS)}, got {shard_id!r}")
        if not 0 <= int(expert_id) < self.num_experts:
            raise ShapeError(f"{self.prefix}: expert_id {expert_id} is outside [0, {self.num_experts})")
        if int(expert_id) not in self.local_experts:
            return
        leaf = name.rpartition(".")[2] if "." in name else name
        layer.humming_expert_tensors[f"{int(expert_id)}.{SHARD_IDS[shard_id]}.{leaf}"] = tensor

    def process_weights_after_loading(self, layer) -> None:
        from humming.checkpoints import import_experts
        from humming.core.quant.slicing import cat_rows
        from humming.nn_moe import QuantMoE

        tensors = _loaded(layer, "humming_expert_tensors", self.prefix)
        m = self.module
        local = list(self.local_experts)
        try:
            gate, up, down = (import_experts(tensors, f"{{e}}.{proj}", m.layout, experts=local,
                                             activations=m.activations, **m.options) for proj in ("gate", "up", "down"))
        except HummingError as exc:
            raise type(exc)(f"{self.prefix}: {exc}") from None
        expert_map = None
        if self.ep_size > 1:  # global id -> this rank's local id (-1: another rank's expert)
            expert_map = torch.full((self.num_experts,), -1, dtype=torch.int32, device=gate.device)
            expert_map[local[0]:local[-1] + 1] = torch.arange(len(local), dtype=torch.int32, device=gate.device)
        layer_moe = QuantMoE(cat_rows([gate, up], what=f"{self.prefix} gate+up"), down, activation=self.activation,
                             expert_map=expert_map)
        if self.tp_size > 1:
            layer_moe = layer_moe.shard_tensor_parallel(self.tp_rank, self.tp_size)
        layer.humming_moe = layer_moe
        del layer.humming_expert_tensors

    def apply(self, layer, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        """This rank's part of the layer's output [T, H] (sum over the ranks: the layer's output)."""
        return layer.humming_moe(x, topk_ids, topk_weights)
