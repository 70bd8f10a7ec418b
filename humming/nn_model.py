"""Whole models on humming layers: ``quantize_model`` (a 16-bit model quantized in place) and ``load_quantized`` (a
model's linear and mixture-of-experts modules replaced by humming ones holding a checkpoint's weights).

Mixture-of-experts modules are the fused experts of transformers models (an ``experts`` module with 3-D
``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I] called as ``experts(x, top_k_index, top_k_weights)``, as
Qwen3-MoE, Mixtral, DeepSeek and gpt-oss have them); they become a :class:`humming.nn.QuantMoE`, whose call is the
same. Checkpoints store such experts one linear per expert (``mlp.experts.{e}.gate_proj`` / ``up_proj`` /
``down_proj``, Mixtral's ``block_sparse_moe.experts.{e}.w1`` / ``w3`` / ``w2``) or stacked (gpt-oss's
``mlp.experts.gate_up_proj_blocks``); gate and up are joined into one weight (humming.core.quant.slicing.cat_rows)."""
from __future__ import annotations

import fnmatch
from collections.abc import Iterable

import torch

from humming.errors import SchemeError, ShapeError
from humming.nn_linear import QuantLinear
from humming.nn_moe import QuantMoE

__all__ = ["quantize_model", "load_quantized", "EXPERT_PROJECTIONS", "MODULE_RENAMES"]

# (gate, up, down) projection names of per-expert checkpoints
EXPERT_PROJECTIONS = (("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2"))
# checkpoint module names -> transformers' module names where they differ (Mixtral's MoE block is `mlp` in the model)
MODULE_RENAMES = ((".block_sparse_moe.", ".mlp."),)


def _skipped(name: str, skip: Iterable[str]) -> bool:
    return any(name == s or name.endswith("." + s) or fnmatch.fnmatchcase(name, s) for s in skip)


def _set_module(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def _is_fused_experts(module: torch.nn.Module) -> bool:
    up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    return isinstance(up, torch.Tensor) and isinstance(down, torch.Tensor) and up.dim() == 3 and down.dim() == 3


def _experts_kind(module: torch.nn.Module, config) -> dict:
    """QuantMoE's keywords for a transformers experts module: gpt-oss interleaves gate and up and clamps its
    SwiGLU; the others use silu(gate) * up."""
    if type(module).__name__.startswith("GptOss"):
        return {"activation": "swiglu_clamped", "interleaved": True,
                "swiglu_alpha": float(getattr(module, "alpha", 1.702)),
                "swiglu_limit": float(getattr(module, "limit", getattr(config, "swiglu_limit", 7.0)))}
    act = getattr(config, "hidden_act", "silu") if config is not None else "silu"
    if act not in ("silu", "swish"):
        raise SchemeError(f"{type(module).__name__}: hidden_act {act!r}; humming's MoE layer runs silu(gate) * up")
    return {"activation": "silu"}


def quantize_model(model: torch.nn.Module, scheme, *, skip: Iterable[str] = ("lm_head",), group_size=None,
                   experts: bool = True) -> torch.nn.Module:
    """Quantize ``model`` in place with ``scheme``: every ``torch.nn.Linear`` whose name is not in ``skip`` (names,
    name suffixes or globs) becomes a QuantLinear, and (``experts``) every fused experts module a QuantMoE.
    Returns the model."""
    from humming.core.quant.quantize import quantize

    skip = tuple(skip)
    config = getattr(model, "config", None)
    for name, module in list(model.named_modules()):
        if not name or _skipped(name, skip):
            continue
        if isinstance(module, torch.nn.Linear):
            _set_module(model, name, QuantLinear.from_linear(module, scheme, group_size=group_size))
        elif experts and _is_fused_experts(module):
            w13, w2 = module.gate_up_proj.detach(), module.down_proj.detach()
            kind = _experts_kind(module, config)
            if kind.get("interleaved"):  # gpt-oss keeps x @ W: [E, H, 2I] and [E, I, H]
                w13, w2 = w13.transpose(1, 2), w2.transpose(1, 2)
            layer = QuantMoE(quantize(w13.contiguous(), scheme, group_size=group_size),
                             quantize(w2.contiguous(), scheme, group_size=group_size),
                             w13_bias=_param(module, "gate_up_proj_bias"), w2_bias=_param(module, "down_proj_bias"),
                             **kind)
            _set_module(model, name, layer)
    return model


def _param(module, name: str) -> torch.Tensor | None:
    t = getattr(module, name, None)
    return None if t is None else t.detach()


def _module_name(model: torch.nn.Module, name: str) -> str:
    """The model's name for a checkpoint module name (MODULE_RENAMES), or SchemeError."""
    candidates = [name] + [name.replace(a, b) for a, b in MODULE_RENAMES if a in name]
    for candidate in candidates:
        try:
            model.get_submodule(candidate)
            return candidate
        except AttributeError:
            continue
    raise SchemeError(f"the checkpoint's module {name} has no counterpart in the model ({type(model).__name__}); "
                      f"is the model built from the checkpoint's config.json?")


def _rename(name: str) -> str:
    for a, b in MODULE_RENAMES:
        name = name.replace(a, b)
    return name


def load_quantized(model: torch.nn.Module, checkpoint, *, strict: bool = True) -> torch.nn.Module:
    """Replace ``model``'s linear and mixture-of-experts modules with humming ones holding the weights of
    ``checkpoint`` (a directory path or a humming.checkpoints.Checkpoint), and load the checkpoint's other tensors
    (embeddings, norms, routers, unquantized layers) into the model. ``strict``: every model parameter must come
    from the checkpoint (SchemeError naming the missing ones). Returns the model."""
    from humming.checkpoints.directory import Checkpoint, load_dir

    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_dir(checkpoint)
    config = getattr(model, "config", None)
    replaced: list[str] = []
    for name in ckpt.modules:
        target = _module_name(model, name)
        linear = model.get_submodule(target)
        if not isinstance(linear, torch.nn.Linear):
            raise SchemeError(f"{name}: the checkpoint quantizes it as a linear layer but the model's {target} is a "
                              f"{type(linear).__name__}")
        qw = ckpt[name]
        if tuple(qw.shape) != (linear.out_features, linear.in_features):
            raise ShapeError(f"{name}: the checkpoint's weight is {list(qw.shape)}, the model's linear "
                             f"[{linear.out_features}, {linear.in_features}]")
        bias = ckpt.tensor(name + ".bias") if qw.bias is None and name + ".bias" in ckpt.weight_map else None
        _set_module(model, target, QuantLinear.from_quantized(qw, bias))
        replaced.append(target)
    for container, projections in ckpt.experts.items():
        target = _module_name(model, container)
        names = next((p for p in EXPERT_PROJECTIONS if set(p) <= set(projections)), None)
        if names is None:
            raise SchemeError(f"{container}: expert projections {sorted(projections)}; humming joins "
                              f"{' / '.join('+'.join(p) for p in EXPERT_PROJECTIONS)}")
        gate, up, down = (ckpt[projections[p]] for p in names)
        from humming.core.quant.slicing import cat_rows

        layer = QuantMoE(cat_rows([gate, up], what=f"{container} gate+up"), down,
                         **_experts_kind(model.get_submodule(target), config))
        _set_module(model, target, layer)
        replaced.append(target)
    for container in sorted({s.rpartition(".")[0] for s in ckpt.stacked}):
        target = _module_name(model, container)
        stems = {s.rpartition(".")[2]: s for s in ckpt.stacked if s.rpartition(".")[0] == container}
        if set(stems) != {"gate_up_proj", "down_proj"}:
            raise SchemeError(f"{container}: stacked experts {sorted(stems)}; humming takes gate_up_proj and "
                              "down_proj")
        layer = QuantMoE(ckpt[stems["gate_up_proj"]], ckpt[stems["down_proj"]],
                         **_experts_kind(model.get_submodule(target), config))
        _set_module(model, target, layer)
        replaced.append(target)
    _load_plain(model, ckpt, replaced, strict)
    return model


def _load_plain(model: torch.nn.Module, ckpt, replaced: list[str], strict: bool) -> None:
    plain = {_rename(n): t for n, t in ckpt.plain_tensors().items()}
    own = model.state_dict()
    loadable = {n: t for n, t in plain.items() if n in own}
    model.load_state_dict(loadable, strict=False)
    if strict:
        quantized = tuple(r + "." for r in replaced)
        tied = {n for n in own if n.endswith("lm_head.weight")} if getattr(
            getattr(model, "config", None), "tie_word_embeddings", False) else set()
        missing = sorted(n for n in own if n not in loadable and not n.startswith(quantized) and n not in tied
                         and not n.endswith(("inv_freq", "original_inv_freq")))
        if missing:
            raise SchemeError(f"the checkpoint holds no tensor for {len(missing)} model parameter(s): "
                              f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''} (strict=False loads "
                              "the rest)")
