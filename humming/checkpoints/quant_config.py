"""A checkpoint's ``quantization_config`` (``config.json``, or ModelOpt's ``hf_quant_config.json``) read into what
the importers need per module: the layout, its options and the activation scheme the checkpoint declares.

======================  ==============================================================  ====================
``quant_method``        fields read                                                     layout
======================  ==============================================================  ====================
``compressed-tensors``  config_groups (targets, weights.num_bits / strategy / group_size /  ``compressed-tensors``
                        block_structure, input_activations), format, ignore
``gptq``                bits, group_size, sym, desc_act (g_idx in the tensors),           ``gptq`` / ``gptq_v2``
                        checkpoint_format ``gptq`` / ``gptq_v2``
``awq``                 bits (w_bit), group_size (q_group_size), zero_point, version      ``awq``
``modelopt``            quant_algo ``NVFP4`` / ``FP8``, exclude_modules                   ``modelopt``
``mxfp4`` (gpt-oss)     modules_to_not_convert                                          ``gpt-oss``
``fp8``                 weight_block_size (DeepSeek-V3), activation_scheme               ``fp8-block``
======================  ==============================================================  ====================

Anything these fields say that humming cannot represent (e.g. AWQ's GEMV packing, dynamic per-tensor FP8
activations) is a SchemeError naming the field and its value.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from humming.checkpoints.compressed_tensors import FORMATS
from humming.errors import SchemeError

__all__ = ["ModuleQuant", "QuantConfig", "parse_quant_config"]


@dataclass(frozen=True)
class ModuleQuant:
    """How one module's tensors import: ``layout`` and ``options`` for humming.checkpoints.import_tensors, and the
    activation preset (None: 16-bit activations, or what the tensors themselves imply, e.g. NVFP4's input scale)."""

    layout: str
    options: dict = field(default_factory=dict)
    activations: str | None = None


@dataclass(frozen=True)
class _Group:
    targets: tuple[str, ...]
    quant: ModuleQuant


@dataclass(frozen=True)
class QuantConfig:
    """The parsed quantization_config: ``method`` (its quant_method), the groups of modules it quantizes (targets
    and how), and the modules it leaves in 16 bits (``ignore``: names, ``re:`` regexes or ``*`` globs)."""

    method: str
    groups: tuple[_Group, ...]
    ignore: tuple[str, ...] = ()
    raw: dict = field(default_factory=dict)

    def ignored(self, module: str) -> bool:
        return any(_matches(pattern, module) for pattern in self.ignore)

    def for_module(self, module: str) -> ModuleQuant:
        """How the quantized module ``module`` imports (SchemeError when no group of the config targets it)."""
        for group in self.groups:
            if any(t in ("Linear", "*") or _matches(t, module) for t in group.targets):
                return group.quant
        raise SchemeError(f"{module}: its tensors are quantized but no config_groups entry of the {self.method} "
                          f"quantization_config targets it (targets: "
                          f"{', '.join(t for g in self.groups for t in g.targets)})")


def _matches(pattern: str, module: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*")
    return module == pattern or module.endswith("." + pattern) or module.startswith(pattern + ".")


def _field(cfg: dict, what: str, *names, default=None):
    for name in names:
        if name in cfg and cfg[name] is not None:
            return cfg[name]
    return default


def _unsupported(method: str, name: str, value, why: str) -> SchemeError:
    return SchemeError(f"quantization_config ({method}): {name}={value!r} {why}")


# ------------------------------------------------------------------------------------------------- compressed-tensors
def _ct_activations(acts: dict | None, weights: dict) -> str | None:
    """The activation preset of a compressed-tensors ``input_activations`` entry."""
    if not acts:
        return None
    kind, bits = acts.get("type", "int"), acts.get("num_bits")
    strategy, dynamic = acts.get("strategy"), acts.get("dynamic")
    if kind == "int" and bits == 8 and strategy == "token" and dynamic:
        return "w8a8-int8"
    if kind == "float" and bits == 8 and strategy == "token" and dynamic:
        return "w8a8-fp8"
    if kind == "float" and bits == 8 and strategy == "tensor" and not dynamic:
        return "w8a8-fp8-tensor"
    if kind == "float" and bits == 4 and strategy == "tensor_group":
        return None  # NVFP4 activations: the importer reads input_global_scale and takes w4a4-nvfp4
    if kind == "float" and strategy == "group" and acts.get("group_size") == 32 and bits in (4, 8):
        return "w4a4-mxfp4" if bits == 4 else "mxfp8"
    raise _unsupported("compressed-tensors", "input_activations", acts,
                       "is not an activation scheme humming runs (int8 / fp8 per token dynamic, fp8 per tensor "
                       "static, NVFP4, MX)")


def _ct_groups(cfg: dict) -> tuple[_Group, ...]:
    groups = []
    top_format = cfg.get("format")
    for name, group in (cfg.get("config_groups") or {}).items():
        weights = group.get("weights") or {}
        if not weights:
            raise _unsupported("compressed-tensors", f"config_groups.{name}.weights", weights,
                               "is empty: humming imports quantized weights")
        options: dict = {"num_bits": weights.get("num_bits")}
        strategy = weights.get("strategy")
        if strategy == "group":
            options["group_size"] = weights.get("group_size")
        if strategy == "block" and weights.get("block_structure"):
            options["block"] = tuple(weights["block_structure"])
        fmt = group.get("format") or top_format
        if fmt in ("sparse-bitmask", "sparse-24-bitmask", "marlin-24"):
            raise _unsupported("compressed-tensors", "format", fmt, "is a sparse format humming does not import")
        if fmt in FORMATS:  # (mixed-precision / dense at the top: each group names its own, or the tensors tell)
            options["format"] = fmt
        quant = ModuleQuant("compressed-tensors", options, _ct_activations(group.get("input_activations"), weights))
        groups.append(_Group(tuple(group.get("targets") or ("Linear",)), quant))
    if not groups:
        raise _unsupported("compressed-tensors", "config_groups", cfg.get("config_groups"), "holds no group")
    return tuple(groups)


# ------------------------------------------------------------------------------------------------- the other methods
def _gptq(cfg: dict) -> ModuleQuant:
    fmt = str(_field(cfg, "gptq", "checkpoint_format", default="gptq")).lower()
    if fmt not in ("gptq", "gptq_v2"):
        raise _unsupported("gptq", "checkpoint_format", fmt, "is not gptq or gptq_v2")
    options = {"bits": int(_field(cfg, "gptq", "bits", default=4)), "group_size": _field(cfg, "gptq", "group_size"),
               "sym": _field(cfg, "gptq", "sym")}
    if options["group_size"] == -1:
        options["group_size"] = None
    return ModuleQuant(fmt, options)


def _awq(cfg: dict) -> ModuleQuant:
    version = str(_field(cfg, "awq", "version", default="gemm")).lower()
    if version != "gemm":
        raise _unsupported("awq", "version", version, "packs weights for another kernel; humming reads the GEMM "
                           "packing (version 'gemm')")
    bits = int(_field(cfg, "awq", "bits", "w_bit", default=4))
    if bits != 4:
        raise _unsupported("awq", "bits", bits, "is not 4 (AWQ's GEMM packing is 4-bit)")
    return ModuleQuant("awq", {"group_size": _field(cfg, "awq", "group_size", "q_group_size")})


def _modelopt(cfg: dict) -> ModuleQuant:
    algo = str(_field(cfg, "modelopt", "quant_algo", default="")).upper()
    if algo not in ("NVFP4", "FP8"):
        raise _unsupported("modelopt", "quant_algo", algo, "is not NVFP4 or FP8")
    return ModuleQuant("modelopt", {"quant_algo": algo})


def _fp8(cfg: dict) -> ModuleQuant:
    block = cfg.get("weight_block_size")
    if not block:
        raise _unsupported("fp8", "weight_block_size", block, "is missing: humming reads the 128x128-block FP8 "
                           "layout (DeepSeek-V3's weight_scale_inv)")
    scheme = str(cfg.get("activation_scheme", "dynamic"))
    if scheme != "dynamic":
        raise _unsupported("fp8", "activation_scheme", scheme, "is not dynamic (per token group of 128)")
    return ModuleQuant("fp8-block", {"block": tuple(int(b) for b in block)}, "w8a8-fp8-block")


def parse_quant_config(cfg: dict | None) -> QuantConfig:
    """The QuantConfig of a ``quantization_config`` dict (SchemeError for a method or field humming cannot
    import)."""
    if not isinstance(cfg, dict) or not cfg:
        raise SchemeError("the model has no quantization_config: it is not a quantized checkpoint (quantize it with "
                          "humming.nn.quantize_model)")
    method = str(cfg.get("quant_method", "")).lower().replace("_", "-")
    if method == "compressed-tensors":
        return QuantConfig(method, _ct_groups(cfg), tuple(cfg.get("ignore") or ()), cfg)
    single = {"gptq": _gptq, "awq": _awq, "modelopt": _modelopt, "fp8": _fp8}.get(method)
    if single is not None:
        ignore = cfg.get("modules_to_not_convert") or cfg.get("exclude_modules") or ()
        return QuantConfig(method, (_Group(("*",), single(cfg)),), tuple(ignore), cfg)
    if method == "mxfp4":  # gpt-oss: the experts' MXFP4 blocks; the rest stays 16-bit
        return QuantConfig(method, (_Group(("*",), ModuleQuant("gpt-oss")),),
                           tuple(cfg.get("modules_to_not_convert") or ()), cfg)
    raise _unsupported(method or "?", "quant_method", cfg.get("quant_method"),
                       "is not one humming imports (compressed-tensors, gptq, awq, modelopt, mxfp4, fp8)")
