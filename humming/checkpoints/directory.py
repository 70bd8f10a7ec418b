"""A quantized model directory as a lazy mapping of module names to QuantizedWeights: ``load_dir(path)``.

The directory holds ``config.json`` (its ``quantization_config``; ModelOpt exports may keep theirs in
``hf_quant_config.json``) and safetensors shards, listed by ``model.safetensors.index.json`` where there are several.
Nothing is read until asked: ``ckpt[name]`` reads only that module's tensors from the shards that hold them and
imports them with the layout, options and activation scheme the config declares
(humming.checkpoints.quant_config).

Names: a quantized linear module by its prefix (``model.layers.0.self_attn.q_proj``); a mixture-of-experts projection
stored one linear per expert by its template with ``{e}`` (``model.layers.0.mlp.experts.{e}.gate_proj``), imported
expert-stacked; experts stored stacked already (gpt-oss's ``..._blocks``) by their prefix
(``model.layers.0.mlp.experts.gate_up_proj``). ``ckpt.tensor(name)`` reads one plain tensor, ``ckpt.plain_tensors()``
every tensor outside the quantized modules (embeddings, norms, routers, unquantized layers)."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping

import torch

from humming.checkpoints.experts import name_pattern
from humming.checkpoints.quant_config import QuantConfig, parse_quant_config
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import HummingError, SchemeError

__all__ = ["Checkpoint", "load_dir"]

INDEX = "model.safetensors.index.json"
# the tensor of a quantized linear module that marks it as one (the module is the name without it)
_MARKERS = ("qweight", "weight_packed", "weight_scale_inv", "weight_scale")
_STACKED_MARKER = "_blocks"  # gpt-oss: <prefix>_blocks / _scales / _bias, experts stacked
_EXPERT = re.compile(r"^(?P<container>.+\.experts)\.(?P<e>\d+)\.(?P<proj>[^{}]+)$")


class Checkpoint(Mapping):
    """A quantized checkpoint directory (see the module docstring). ``config``: config.json as a dict;
    ``quant``: its parsed quantization_config; ``modules``: the dense quantized modules; ``experts``: per experts
    container (``model.layers.0.mlp.experts``) its projections' templates; ``stacked``: experts stored stacked."""

    def __init__(self, path: str | os.PathLike, device: str | torch.device = "cpu"):
        self.path = os.fspath(path)
        self.device = torch.device(device)
        if not os.path.isdir(self.path):
            raise SchemeError(f"checkpoint directory {self.path} does not exist (or is not a directory)")
        self.config = _read_json(os.path.join(self.path, "config.json"), required=True)
        quant = self.config.get("quantization_config")
        if not quant and os.path.exists(os.path.join(self.path, "hf_quant_config.json")):
            ho = _read_json(os.path.join(self.path, "hf_quant_config.json"), required=True)
            quant = dict(ho.get("quantization", {}), quant_method="modelopt")
        self.quant: QuantConfig = parse_quant_config(quant)
        self.weight_map = _weight_map(self.path)
        self.modules, self.experts, self.stacked, self._owned = _quantized_modules(self.weight_map)
        self._handles: dict[str, object] = {}

    # ---------------------------------------------------------------------------------------------- the mapping
    def __iter__(self) -> Iterator[str]:
        yield from self.modules
        for projections in self.experts.values():
            yield from projections.values()
        yield from self.stacked

    def __len__(self) -> int:
        return len(self.modules) + sum(len(p) for p in self.experts.values()) + len(self.stacked)

    def __contains__(self, name) -> bool:
        return name in self.modules or name in self.stacked or \
            any(name in p.values() for p in self.experts.values())

    def __getitem__(self, name: str) -> QuantizedWeight:
        from humming.checkpoints import import_experts, import_tensors

        if name not in self:
            raise KeyError(f"{name} is not a quantized module of {self.path} (modules: {_some(list(self))})")
        example = name.replace("{e}", "0")
        quant = self.quant.for_module(example)
        try:
            if "{e}" in name:
                pattern = name_pattern(name)
                tensors = self._read([n for n in self.weight_map if pattern.match(n)])
                return import_experts(tensors, name, quant.layout, activations=quant.activations, **quant.options)
            layout = "gpt-oss" if name in self.stacked else quant.layout
            tensors = self._read(self._owned[name])
            return import_tensors(tensors, name, layout, activations=quant.activations,
                                  **(quant.options if layout == quant.layout else {}))
        except HummingError as exc:
            raise type(exc)(f"{name} ({self.quant.method} checkpoint {self.path}): {exc}") from None

    # ---------------------------------------------------------------------------------------------- plain tensors
    def tensor(self, name: str) -> torch.Tensor:
        if name not in self.weight_map:
            raise KeyError(f"no tensor {name} in {self.path}")
        return self._read([name])[name]

    def plain_tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor that belongs to no quantized module (a quantized module's bias is its own)."""
        owned = {n for names in self._owned.values() for n in names}
        return self._read([n for n in self.weight_map if n not in owned])

    def _read(self, names: list[str]) -> dict[str, torch.Tensor]:
        from safetensors import safe_open

        by_file: dict[str, list[str]] = {}
        for n in names:
            by_file.setdefault(self.weight_map[n], []).append(n)
        out: dict[str, torch.Tensor] = {}
        for file, wanted in by_file.items():
            with safe_open(os.path.join(self.path, file), framework="pt", device=str(self.device)) as fh:
                for n in wanted:
                    out[n] = fh.get_tensor(n)
        return out

    def __repr__(self) -> str:
        return (f"Checkpoint({self.path!r}, {self.quant.method}: {len(self.modules)} quantized modules, "
                f"{sum(len(p) for p in self.experts.values())} expert projections, {len(self.stacked)} stacked)")


def load_dir(path: str | os.PathLike, device: str | torch.device = "cpu") -> Checkpoint:
    """The quantized checkpoint directory ``path`` as a lazy mapping of module names to QuantizedWeights (see the
    module docstring); ``device``: where tensors are read to."""
    return Checkpoint(path, device)


# ------------------------------------------------------------------------------------------------- reading
def _read_json(path: str, required: bool) -> dict:
    if not os.path.exists(path):
        if required:
            raise SchemeError(f"{path} is missing: a checkpoint directory needs its config.json")
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise SchemeError(f"{path} is not readable JSON: {exc}") from None


def _weight_map(path: str) -> dict[str, str]:
    """Tensor name -> shard file, from the index where there is one, else from the files' headers."""
    index = os.path.join(path, INDEX)
    if os.path.exists(index):
        weight_map = _read_json(index, required=True).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise SchemeError(f"{index} has no weight_map")
        missing = sorted({f for f in weight_map.values() if not os.path.exists(os.path.join(path, f))})
        if missing:
            raise SchemeError(f"{index} names shards that are missing: {', '.join(missing)}")
        return dict(weight_map)
    from safetensors import safe_open

    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise SchemeError(f"no .safetensors file in {path}")
    out: dict[str, str] = {}
    for f in files:
        with safe_open(os.path.join(path, f), framework="pt") as fh:
            out.update({n: f for n in fh.keys()})
    return out


def _quantized_modules(weight_map: Mapping[str, str]):
    """(dense quantized modules, {experts container: {projection: template}}, stacked-experts prefixes, {module or
    stacked prefix: its tensor names})."""
    by_module: dict[str, list[str]] = {}
    for name in weight_map:
        module, _, _ = name.rpartition(".")
        by_module.setdefault(module, []).append(name)
    quantized: dict[str, list[str]] = {}
    stacked: list[str] = []
    for module, names in by_module.items():
        leaves = {n.rpartition(".")[2] for n in names}
        if any(m in leaves for m in _MARKERS):
            quantized[module] = names
        for leaf in leaves:
            if leaf.endswith(_STACKED_MARKER):
                stem = f"{module}.{leaf[:-len(_STACKED_MARKER)]}"
                stacked.append(stem)
                quantized[stem] = [n for n in names if n.rpartition(".")[2].startswith(stem.rpartition(".")[2] + "_")]
    experts: dict[str, dict[str, str]] = {}
    dense = []
    for module in sorted(quantized):
        m = _EXPERT.match(module)
        if m and module not in stacked:
            experts.setdefault(m["container"], {})[m["proj"]] = f"{m['container']}.{{e}}.{m['proj']}"
        elif module not in stacked:
            dense.append(module)
    return dense, experts, sorted(stacked), quantized


def _some(names: list[str], n: int = 8) -> str:
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "") if names else "none"
